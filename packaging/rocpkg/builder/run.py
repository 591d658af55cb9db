"""Build a release: write every package of a plan into OUT, in parallel, incrementally,
optionally one shard of it, and record what was written in OUT/manifest.json.

Layout written (README: Layout):
    OUT/deb/pool/main/<name>_<ver>_<arch>.deb       OUT/control/<name>.control
    OUT/rpm/<arch>/<name>-<ver>-<rel>.<arch>.rpm    OUT/control/<name>.spec
    OUT/manifest.json                               (a shard: OUT/manifest.d/shard-I-of-N.json)
    OUT/.rocpkg/state/<format>.jsonl                what each output was built from (rocpkg.store.state)

Why it is shaped this way:
- packages are independent, so they are built by a process pool (`jobs`), biggest
  first, but the small ones right after each worker's first (`start_order`: the parent
  records them while the big ones are written, not all at the end); each writer also
  compresses with zstd worker threads, given where the work is (`zstd_threads`): at
  least cores / jobs, and a package holding a large share of the work left when it
  starts gets that share of the cores, so the last big package is not left alone on one
  core while the others idle. zstd's output never depends on the
  thread count (rocpkg.formats.compression), so neither -j nor the machine changes a byte.
- the plan is made once, whole, before any package is handed out: plain data, the
  search of the host ELFs for device code included (rocpkg.inputs.host_code, run on the
  workers while the planner works). The checks a release must pass (rocpkg.builder.gate:
  verify's checks of the plan, each packed archive's structure, the version order against
  the releases in OUT) run once, on it, the archives' on the workers while verify's run
  here; a refusal leaves OUT as it was, as nothing has been written yet.
- then each package is written into the staging area until it is whole (an RPM signed
  there too), and moved into place as soon as its writer returns, its control file and
  its state after it (rocpkg.store.outdir, rocpkg.store.state): a package counts as finished
  once its state is recorded, so a build killed at any point keeps every package it
  finished, and run again writes only the rest. Writers write atomically and packages are
  independent, so the result is byte-identical to an uninterrupted build.
- a package is rebuilt only when its fingerprint changes: the whole PackageSpec, the
  encoding options, the signing key, rocpkg's own writer code and templates, and every
  source file's (path, size, mtime_ns, inode).
- a shard is a deterministic, size-balanced part of the plan computed from the plan
  alone, so N CI runners agree on it without talking; their OUT trees have disjoint
  files and can be merged by copying into one tree, then `assemble_manifest()` joins
  the manifest parts (docs/sharding.md).

Library code: no printing; progress goes to an optional callback.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kpack.loader import FALLTHROUGH
from rocpkg.builder import gate
from rocpkg.formats import compression
from rocpkg.formats.compression import ZSTD_MAX_THREADS, usable_cores
from rocpkg.formats.registry import file_name, get as get_format
from rocpkg import model as m
from rocpkg.store import releases
from rocpkg.builder.version_order import out_version_order_refusals
from rocpkg.errors import RocpkgInputError
from rocpkg.store.state import StateJournal, read_states, recorded_states, rewrite_states
from rocpkg.builder.schedule import assign_shards, start_order, zstd_threads
from rocpkg.builder.fingerprint import package_fingerprint
from rocpkg.formats.streams import write_atomic
from rocpkg.store.journal import recover
from rocpkg.plan.naming import build_variant
from rocpkg.store.outdir import MANIFEST_PARTS, Staging
from rocpkg.builder.workers import Workers
from rocpkg.builder import packing      # one package, as a worker writes it
from rocpkg.builder.packing import PackageOutcome, Task, Written

MANIFEST_SCHEMA = "rocpkg-manifest/1"


# ---- results ----------------------------------------------------------------------


@dataclass(frozen=True)
class BuildProgress:
    """Passed to the progress callback: once before the first package (last=None), then
    after each package, built or found up to date."""

    done: int
    total: int
    bytes_done: int             # payload bytes of the packages done
    bytes_total: int
    last: PackageOutcome | None


@dataclass
class BuildResult:
    out_dir: str
    manifest: str               # path of manifest.json or of this shard's part
    packages: list[PackageOutcome] = field(default_factory=list)
    shard: tuple[int, int] | None = None
    jobs: int = 1
    threads: int = 1            # the most zstd workers any package got
    thread_range: tuple[int, int] = (1, 1)   # fewest and most zstd workers per package
    seconds: float = 0.0
    allowed: list = field(default_factory=list)   # gate.Refusal the maintainer allowed

    @property
    def rebuilt(self) -> list[PackageOutcome]:
        return [p for p in self.packages if p.rebuilt]

    @property
    def bytes_in(self) -> int:
        return sum(p.payload for p in self.packages)

    @property
    def bytes_out(self) -> int:
        return sum(p.size for p in self.packages)


# ---- fingerprints and state --------------------------------------------------------


def _control_path(out_dir: str, spec: m.PackageSpec | PackageOutcome) -> str:
    return os.path.join(out_dir, "control", f"{spec.name}.{get_format(spec.format).metadata_suffix}")


def _up_to_date(spec: m.PackageSpec, out_dir: str, fingerprint_of,
                states: dict[str, dict[str, dict]]) -> PackageOutcome | None:
    """The recorded outcome when state, output file and control file all still match.
    fingerprint_of(spec) is called only for a package that has all three: a new
    release's packages have no state, and its first write waits for no fingerprint."""
    state = states[spec.format].get(spec.name)
    if state is None:
        return None
    try:
        st = os.stat(os.path.join(packing.package_dir(out_dir, spec), file_name(spec)))
        if not os.path.isfile(_control_path(out_dir, spec)):
            return None
    except OSError:
        return None
    if (state.get("fingerprint") != fingerprint_of(spec) or state.get("size") != st.st_size
            or state.get("mtime_ns") != st.st_mtime_ns or state.get("ino") != st.st_ino):
        return None
    return packing.outcome(spec, state["size"], state["sha256"], rebuilt=False)


def _publish(out_dir: str, staging: Staging, journal: StateJournal, written: Written) -> None:
    """Move a written package into place, then write its rendered metadata, then record
    its state (the last: a package counts as finished once its state is recorded; killed
    before, the next build writes it again)."""
    staging.commit(written.staged, os.path.join(out_dir, written.outcome.file))
    write_atomic(_control_path(out_dir, written.outcome), written.metadata.encode("utf-8"))
    journal.record(written.outcome.format, written.outcome.name, written.state)


# ---- the release -------------------------------------------------------------------


def _plan_digest(specs: list[m.PackageSpec]) -> str:
    """Identifies the package set (names, versions, payload sizes, relations: nothing that
    depends on where a runner keeps its artifacts), so that manifest parts of different
    plans never merge."""
    lines = sorted(json.dumps([s.format, file_name(s), s.payload_size, s.depends]) for s in specs)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _manifest_bytes(plan_digest: str, version: str, release: str, entries: list[dict],
                    shard: tuple[int, int] | None = None, record=None) -> bytes:
    doc = {"schema": MANIFEST_SCHEMA, "version": version, "release": release, "plan": plan_digest}
    if shard:
        doc["shard"] = list(shard)
    if record is not None:      # a shard's part: what assemble_manifest records for the release
        doc["release_record"] = record.to_dict()
    doc["packages"] = sorted(entries, key=lambda e: (e["format"], e["name"]))
    return json.dumps(doc, indent=1).encode() + b"\n"


def manifest_part_path(out_dir: str, shard: tuple[int, int]) -> str:
    return os.path.join(out_dir, MANIFEST_PARTS, f"shard-{shard[0]}-of-{shard[1]}.json")


def build_release(plan, out_dir: str | os.PathLike, *, formats: Iterable[str] | None = None,
                  options: m.BuildOptions, jobs: int | None = None, shard: tuple[int, int] | None = None,
                  progress: Callable[[BuildProgress], None] | None = None, signer=None,
                  allow: Iterable[str] = (), config=None, only=None, deep_check: bool = False,
                  workers: Workers | None = None) -> BuildResult:
    """Build the plan's packages of `formats` (default: all planned) into out_dir.

    jobs: worker processes (default: the cores this process may run on); shard: (I, N), 1-based, builds only
    part I of N (see assign_shards) and writes manifest.d/shard-I-of-N.json instead of
    manifest.json; signer: a rocpkg.formats.sign.Signer that signs every RPM's header; only: the
    (format, name) pairs to write (rocpkg.plan.subset.select), None for all; deep_check:
    decode every kernel of every packed archive before writing (gate.refusals); workers:
    a rocpkg.builder.workers.Workers already running (the caller's, which planned on it), else
    the build forks its own.
    The checks of rocpkg.builder.gate run once over the plan before any package is written:
    a problem whose check is not in `allow` raises RocpkgInputError with OUT as it was;
    allowed ones are recorded with the release in the manifest (rocpkg.store.releases) and
    in result.allowed. `config` decides which relation names are external (as for verify).
    Each package is then written into the staging area and moved into place, its state
    recorded, as soon as its writer returns (_publish).
    Raises RocpkgInputError with every package's problems after building the others.
    """
    started = time.perf_counter()
    compression.keep_frame_buffers()  # before the workers fork: they inherit it
    out_dir = os.path.abspath(os.fspath(out_dir))
    recover(out_dir, sweep=False)   # an interrupted change of OUT is undone before the build adds to it
    formats = list(formats or plan.packages)
    chosen = _chosen(plan, formats, shard, only)
    cores = usable_cores()
    allow = gate.check_allow(allow)
    signer_id = signer.fingerprint if signer is not None else ""
    build = f"{os.getpid()}-{time.time_ns()}"   # this build, for packing.code_fingerprint_of

    def fingerprint_of(spec: m.PackageSpec) -> str:
        """A package with state (asked once each; the code's fingerprint only when the
        first is). A written package's is the worker's (packing.build_one)."""
        return package_fingerprint(spec, options, packing.code_fingerprint_of(build), signer_id)

    # One set of worker processes: they check the archives while this process runs
    # verify's checks, then write the packages into the staging area, each moved into
    # place as soon as it is written (rocpkg.store.outdir).
    with contextlib.nullcontext(workers) if workers else Workers(max(1, min(jobs or cores, len(chosen))),
                                                                 chosen) as workers:
        with Staging(out_dir, formats) as staging:
            try:
                records = releases.read_recorded(out_dir)   # a damaged manifest is refused before a byte is written
                archives = gate.archive_checks(plan, formats, whole_kernels=deep_check,
                                               starmap_async=workers.starmap_async)
                states = recorded_states(out_dir, formats)
                order = sorted(chosen, key=lambda s: (-s.payload_size, s.format, s.name))
                stale, recorded, conflicts = _stale_and_recorded(out_dir, order, fingerprint_of, states, plan.settings,
                                                                    records.owned)
                result = BuildResult(out_dir, "", shard=shard)
                result.allowed = gate.enforce(gate.refusals(plan, formats, config=config, archives=archives)
                                              + out_version_order_refusals(records, plan.settings, formats), allow)
                if conflicts:
                    raise RocpkgInputError(*conflicts)
                tasks = _tasks(stale, options, signer, staging, result, jobs or cores, cores, build)
                outcomes, problems = _collect(out_dir, order, recorded, _answers(workers, tasks), staging,
                                              lambda: StateJournal(out_dir, shard, formats), progress)
            except BaseException:
                workers.stop()  # before the staging area and this run's temporaries are removed
                raise
            if problems:
                raise RocpkgInputError(*problems)

            result.manifest = _record_release(out_dir, plan, formats, options, shard, outcomes, result.allowed)
    result.packages = sorted(outcomes, key=lambda o: (o.format, o.name))
    result.seconds = time.perf_counter() - started
    return result


def _stale_and_recorded(out_dir: str, order: list[m.PackageSpec], fingerprint_of, states, settings: dict, owned):
    """(the packages to write, the outcomes of those up to date, the conflicts): a stale
    package's fingerprint is taken while it is written (packing.build_one); published bytes
    never change under one name-version-release, and a package's name and file belong to one
    release and build variant of OUT (rocpkg.store.releases), so a conflict leaves nothing to write.
    owned: the package files each release of OUT owns (rocpkg.store.releases.Recorded)."""
    stale, recorded = [], []
    for spec in order:
        outcome = _up_to_date(spec, out_dir, fingerprint_of, states)
        if outcome is not None:
            recorded.append(outcome)
        else:
            stale.append(spec)
    writes = {id(s) for s in stale}
    planned = [releases.Planned(s.format, s.name, s.version, s.release, s.arch,
                                packing.outcome(s, 0, "", True).file, rewrite=id(s) in writes) for s in order]
    new = releases.ReleaseRecord(settings["version"], settings["release"], variant=build_variant(settings))
    conflicts = releases.name_clashes(out_dir, planned, new, owned) + releases.conflicting_rebuilds(out_dir, planned)
    return ([] if conflicts else stale), recorded, conflicts


def _record_release(out_dir: str, plan, formats: list[str], options: m.BuildOptions, shard, outcomes,
                    allowed) -> str:
    """The release in manifest.json (a shard: its part in manifest.d/), the state journals
    rewritten one line per name; returns the manifest's path."""
    every = [s for fmt in formats for s in plan.packages[fmt]]
    specs_version = plan.settings["version"], plan.settings["release"]
    entries = [o.manifest_entry() for o in outcomes]
    record = releases.ReleaseRecord(*specs_version, targets=tuple(plan.targets), formats=tuple(formats),
                                    allowed=tuple(r.to_dict() for r in allowed), plan=_plan_digest(every),
                                    date=options.source_date_epoch,
                                    kpack_lookup=plan.settings.get("kpack_lookup", FALLTHROUGH),
                                    channel=plan.settings.get("channel", ""), epoch=plan.settings["epoch"],
                                    variant=build_variant(plan.settings))
    if shard is None:
        # the release joins the earlier ones in manifest.json (rocpkg.store.releases)
        manifest = releases.write_release(out_dir, record, entries)
        # the whole release is in manifest.json now; parts of an earlier split are stale
        shutil.rmtree(os.path.join(out_dir, MANIFEST_PARTS), ignore_errors=True)
        for fmt in formats:     # one line per name: the journals do not grow with the builds
            rewrite_states(out_dir, fmt, read_states(out_dir, fmt))
    else:
        manifest = manifest_part_path(out_dir, shard)
        data = _manifest_bytes(_plan_digest(every), *specs_version, entries, shard, record)
        write_atomic(manifest, data)
    return manifest


def _chosen(plan, formats: list[str], shard: tuple[int, int] | None, only) -> list[m.PackageSpec]:
    """The plan's packages this build writes: of `formats`, of the shard, of `only`."""
    missing = [f for f in formats if f not in plan.packages]
    if missing:
        raise RocpkgInputError(("--formats", f"the plan has no {', '.join(missing)} packages"))
    chosen = [s for fmt in formats for s in plan.packages[fmt]]
    if shard is not None:
        index, count = shard
        if not 1 <= index <= count:
            raise RocpkgInputError(("--shard", f"expected 1 <= I <= N, got {index}/{count}"))
        chosen = assign_shards(chosen, count)[index - 1]
    if only is not None:
        chosen = [s for s in chosen if (s.format, s.name) in only]
    return chosen


def _answers(workers: Workers, tasks: list[Task]):
    """The workers' answers for `tasks` as they finish (written here, after the checks,
    without worker processes or for a single task)."""
    if workers.pool is None or len(tasks) <= 1:
        return (packing.build_one(task) for task in tasks)
    return workers.unordered(packing.build_one, _started_in_order(tasks, workers.size))


def _started_in_order(tasks: list[Task], workers: int) -> list[Task]:
    """`tasks` (largest first) in the order they start (schedule.start_order): one per
    worker first, then the small ones, then the rest."""
    return [tasks[i] for i in start_order([t.spec.payload_size for t in tasks], workers)]


def _tasks(stale: list[m.PackageSpec], options: m.BuildOptions, signer, staging: Staging,
           result: BuildResult, jobs: int, cores: int, build: str) -> list[Task]:
    """One task per stale package, each with its zstd threads and the build's id; the
    result learns the jobs and threads (what the summary prints)."""
    jobs = max(1, min(jobs, len(stale) or 1))
    # threads never change a byte (rocpkg.formats.compression), so they are chosen for what is left to do
    if options.threads:
        threads = [options.threads] * len(stale)
    else:
        threads = zstd_threads([s.payload_size for s in stale], cores, jobs, ZSTD_MAX_THREADS)
    # a format may cap a package's threads (a .deb's one zstd frame has one, its md5s another)
    threads = [min(n, get_format(s.format).writer_threads or n) for s, n in zip(stale, threads)]
    result.jobs = jobs
    result.thread_range = (min(threads, default=1), max(threads, default=1))
    result.threads = result.thread_range[1]
    return [Task(spec, staging.out_dir, dataclasses.replace(options, threads=n), signer,
                  staging.dir(spec.format), build) for spec, n in zip(stale, threads)]


def _collect(out_dir: str, order: list[m.PackageSpec], recorded: list[PackageOutcome], answers,
             staging: Staging, open_journal, progress) -> tuple[list[PackageOutcome], list[tuple[str, str]]]:
    """Once the checks have passed: publish each written package (_publish) as the workers
    finish them, reporting progress; the outcomes and the problems. The state journal
    (open_journal) is opened before the first package is moved: a build none of whose
    packages is written leaves no journal, and one that cannot be opened fails the build
    before any move (OUT as it was)."""
    total_bytes = sum(s.payload_size for s in order)
    outcomes: list[PackageOutcome] = []
    problems: list[tuple[str, str]] = []
    done_bytes = 0
    journal = None

    def report(outcome: PackageOutcome | None) -> None:
        if progress is not None:
            progress(BuildProgress(len(outcomes), len(order), done_bytes, total_bytes, outcome))

    try:
        report(None)
        for answer in itertools.chain(recorded, answers):
            if isinstance(answer, list):
                problems.extend(answer)
                continue
            if isinstance(answer, Written):
                journal = journal or open_journal()
                _publish(out_dir, staging, journal, answer)
                answer = answer.outcome
            outcomes.append(answer)
            done_bytes += answer.payload
            report(answer)
        return outcomes, problems
    finally:
        if journal is not None:
            journal.close()
