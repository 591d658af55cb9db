"""Build a release: write every package of a plan into OUT, in parallel, incrementally,
optionally one shard of it, and record what was written in OUT/manifest.json.

Layout written (DESIGN §3):
    OUT/deb/pool/main/<name>_<ver>_<arch>.deb       OUT/control/<name>.control
    OUT/rpm/<arch>/<name>-<ver>-<rel>.<arch>.rpm    OUT/control/<name>.spec
    OUT/manifest.json                               (a shard: OUT/manifest.d/shard-I-of-N.json)
    OUT/.rocpkg/state/<format>.jsonl                what each output was built from (rocpkg.state)

Why it is shaped this way:
- packages are independent, so they are built by a process pool (`jobs`), biggest
  first, but the small ones right after each worker's first (`start_order`: the parent
  records them while the big ones are written, not all at the end); each writer also
  compresses with zstd worker threads, given where the work is (`zstd_threads`): at
  least cores / jobs, and a package holding a large share of the work left when it
  starts gets that share of the cores, so the last big package is not left alone on one
  core while the others idle. zstd's output never depends on the
  thread count (rocpkg.compression), so neither -j nor the machine changes a byte.
- the plan is made once, whole, before any package is handed out; the checks a release
  must pass (rocpkg.gate) run while the packages are written into a staging area; they
  are moved into place once the checks have passed and the set of host ELFs handed to
  the writers has been searched (rocpkg.outdir, _HostVerdict).
- a package is rebuilt only when its fingerprint changes: the whole PackageSpec, the
  encoding options, the signing key, rocpkg's own writer code and templates, and every
  source file's (path, size, mtime_ns, inode). Its state is recorded after the
  package is in place, so a build killed at any point and run again finishes the rest; writers write
  atomically, so the result is byte-identical to an uninterrupted build.
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
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kpack.loader import FALLTHROUGH
from rocpkg import gate
from rocpkg import compression
from rocpkg.compression import DEB_THREADS, ZSTD_MAX_THREADS, usable_cores
from rocpkg import model as m
from rocpkg import releases
from rocpkg.version_order import out_version_order_refusals
from rocpkg.errors import RocpkgInputError
from rocpkg.manifest_schema import MAX_DATE, check_manifest, read_parts
from rocpkg.outfiles import read_json
from rocpkg.state import StateJournal, read_states, rewrite_states
from rocpkg.schedule import assign_shards, parse_shard, shard_weight, start_order, zstd_threads  # noqa: F401 (API)
from rocpkg.fingerprint import package_fingerprint
from rocpkg.host_code import HostScan
from rocpkg.streams import AtomicOutput
from rocpkg.journal import Change, recover
from rocpkg.outdir import LOCK_FILE, MANIFEST_PARTS, OutLock, Staging  # noqa: F401 (API)
from rocpkg.workers import Workers
# one package, in a worker (rocpkg.packing): the names this module has always used
from rocpkg.packing import PackageOutcome  # noqa: F401 (API)
from rocpkg.packing import Task as _Task, Written as _Written, build_one as _build_one
from rocpkg.packing import code_fingerprint_of as _code_fingerprint_of, outcome as _outcome, package_dir as _package_dir

MANIFEST_SCHEMA = "rocpkg-manifest/1"
# Default SOURCE_DATE_EPOCH: 2024-01-01T00:00:00Z plus one minute per version step.
EPOCH_BASE = 1704067200
# An APT suite is a directory name under dists/ and a Release field: no separators, no dots first
_SUITE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


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
    def concurrency(self) -> str:
        """What ran at once, as the summary line says it: `4 jobs x 1-8 threads`."""
        low, high = self.thread_range
        return f"{self.jobs} jobs x {low if low == high else f'{low}-{high}'} threads"

    @property
    def rebuilt(self) -> list[PackageOutcome]:
        return [p for p in self.packages if p.rebuilt]

    @property
    def bytes_in(self) -> int:
        return sum(p.payload for p in self.packages)

    @property
    def bytes_out(self) -> int:
        return sum(p.size for p in self.packages)


# ---- settings-derived defaults -----------------------------------------------------


def default_source_date_epoch(settings: dict) -> int:
    """The SOURCE_DATE_EPOCH used when the environment sets none: 2024-01-01 UTC plus one
    minute per version step (major*10000 + minor*100 + patch, then the release's leading
    number), so a release always gets the same dates and later versions later ones."""
    nums = [int(x) if x.isdigit() else 0 for x in (settings["version"].split(".") + ["0", "0"])[:3]]
    steps = nums[0] * 10000 + nums[1] * 100 + nums[2]
    release = re.match(r"\d*", str(settings.get("release", ""))).group()
    return EPOCH_BASE + 60 * steps + int(release[:6] or 0)


def published_source_date_epoch(out_dir: str, environ=None) -> int | None:
    """SOURCE_DATE_EPOCH for indexing OUT: the environment's, else the build's default for
    the release its manifest names, so that re-indexing gives the same bytes; None when
    neither is known."""
    settings, dated = None, None
    parts = os.path.join(out_dir, MANIFEST_PARTS)
    candidates = [os.path.join(out_dir, "manifest.json")] + \
        (sorted(os.path.join(parts, n) for n in os.listdir(parts)) if os.path.isdir(parts) else [])
    for path in candidates:  # the whole release's manifest, or any shard's part of it
        try:
            doc = check_manifest(read_json(out_dir, os.path.relpath(path, out_dir).replace(os.sep, "/")), path)
            settings = {"version": str(doc["version"]), "release": str(doc["release"])}
            # the newest date a recorded release was built with (rocpkg.releases)
            dated = max((int(r.get("date") or 0) for r in doc.get("releases", [])), default=0) or None
            break
        except (OSError, ValueError, KeyError, TypeError, RocpkgInputError):
            continue            # the commands that read it whole refuse it, naming the field
    value = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if value or settings:
        return source_date_epoch(settings or {"version": "0"}, environ, default=dated)
    return None


def source_date_epoch(settings: dict, environ=None, default: int | None = None) -> int:
    """SOURCE_DATE_EPOCH from the environment, else `default` (the inputs' date,
    releases.inputs_date), else default_source_date_epoch()."""
    value = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if value:
        if not value.isdigit() or len(value) > 10 or int(value) > MAX_DATE:
            raise RocpkgInputError(("SOURCE_DATE_EPOCH", f"must be a number of seconds from 0 to {MAX_DATE} "
                                                         f"(what rpm's 32-bit dates hold), got {value[:40]!r}"))
        return int(value)
    if default is not None and not 0 <= default <= MAX_DATE:
        raise RocpkgInputError(("SOURCE_DATE_EPOCH", f"unset, and the inputs' date ({default}, the newest time of "
                                f"the package list and the artifact manifests) is outside 0 to {MAX_DATE}, what "
                                f"rpm's 32-bit dates hold: set SOURCE_DATE_EPOCH"))
    return default if default is not None else default_source_date_epoch(settings)


# ---- fingerprints and state --------------------------------------------------------


def _control_path(out_dir: str, spec: m.PackageSpec | PackageOutcome) -> str:
    return os.path.join(out_dir, "control", f"{spec.name}.{'control' if spec.format == 'deb' else 'spec'}")


def _recorded_states(out_dir: str, formats) -> dict[str, dict[str, dict]]:
    """Per format, name -> the state OUT recorded for it (rocpkg.state): one read each."""
    return {fmt: read_states(out_dir, fmt) for fmt in formats}


def _up_to_date(spec: m.PackageSpec, out_dir: str, fingerprint_of,
                states: dict[str, dict[str, dict]]) -> PackageOutcome | None:
    """The recorded outcome when state, output file and control file all still match.
    fingerprint_of(spec) is called only for a package that has all three: a new
    release's packages have no state, and its first write waits for no fingerprint."""
    state = states[spec.format].get(spec.name)
    if state is None:
        return None
    try:
        st = os.stat(os.path.join(_package_dir(out_dir, spec), spec.filename))
        if not os.path.isfile(_control_path(out_dir, spec)):
            return None
    except OSError:
        return None
    if (state.get("fingerprint") != fingerprint_of(spec) or state.get("size") != st.st_size
            or state.get("mtime_ns") != st.st_mtime_ns or state.get("ino") != st.st_ino):
        return None
    return _outcome(spec, state["size"], state["sha256"], rebuilt=False)


def _write_atomic(path: str, data: bytes) -> None:
    with AtomicOutput(path) as fh:
        fh.write(data)


def _record(out_dir: str, journal: StateJournal, written: _Written, metadata_in_place: bool = False) -> None:
    """The rendered metadata and the state of a package now in place (the state last: a
    package counts as finished once its state is recorded). metadata_in_place: its
    metadata was staged (_stage_metadata) and moved in with it."""
    if not metadata_in_place:
        _write_atomic(_control_path(out_dir, written.outcome), written.metadata.encode("utf-8"))
    journal.record(written.outcome.format, written.outcome.name, written.state)


def _staged_metadata(written: _Written) -> str:
    return written.staged + ".metadata"


def _stage_metadata(written: _Written) -> None:
    """Write a package's rendered metadata beside it in the staging area while it waits for
    the host search's verdict: the verdict often comes with the build's last package, and
    the packages that waited for it (most of a release's) are then moved one at a time,
    the workers idle, where creating each control file would be most of the work. Moved into
    place with the package (Staging.commit); gone with the staging area if the build is
    refused, so it needs no temporary name of its own."""
    with open(_staged_metadata(written), "wb") as fh:
        fh.write(written.metadata.encode("utf-8"))


# ---- the release -------------------------------------------------------------------


def _plan_digest(specs: list[m.PackageSpec]) -> str:
    """Identifies the package set (names, versions, payload sizes, relations: nothing that
    depends on where a runner keeps its artifacts), so that manifest parts of different
    plans never merge."""
    lines = sorted(json.dumps([s.format, s.filename, s.payload_size, s.depends]) for s in specs)
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
    manifest.json; signer: a rocpkg.sign.Signer that signs every RPM's header; only: the
    (format, name) pairs to write (rocpkg.subset.select), None for all; deep_check:
    decode every kernel of every packed archive before writing (gate.refusals); workers:
    a rocpkg.workers.Workers already running (the caller's, which planned on it), else
    the build forks its own.
    The checks of rocpkg.gate run over the plan while the packages are written into a
    staging area (rocpkg.outdir); every host ELF the plan's search hands to the writers is
    searched for device code by the writer that packs it first (_search_in_writers). The
    packages move into place only when the set of those files has been searched, every
    check has passed and every package is staged (_HostVerdict): a problem whose check is
    not in `allow` raises RocpkgInputError and the staged packages go (OUT as it was);
    allowed ones are recorded with the release in the manifest (rocpkg.releases) and in
    result.allowed. `config` decides which relation names are external (as for verify).
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
    build = f"{os.getpid()}-{time.time_ns()}"   # this build, for _code_fingerprint_of

    def fingerprint_of(spec: m.PackageSpec) -> str:
        """A package with state (asked once each; the code's fingerprint only when the
        first is). A written package's is the worker's (_build_one)."""
        return package_fingerprint(spec, options, _code_fingerprint_of(build), signer_id)

    # One set of worker processes: they write the packages into the staging area and,
    # behind each one's first package, check the archives and search the host ELFs
    # (Workers.unordered_with_checks), while this process runs verify's checks; the
    # packages are moved into place only once every check has passed (rocpkg.outdir).
    with contextlib.nullcontext(workers) if workers else Workers(max(1, min(jobs or cores, len(chosen))),
                                                                 chosen) as workers:
        with Staging(out_dir, formats) as staging:
            try:
                releases.read_manifest(out_dir)     # a damaged manifest is refused before a byte is written
                states = _recorded_states(out_dir, formats)
                every = [s for fmt in formats for s in plan.packages[fmt]]
                archives = gate.archive_checks(plan, formats, whole_kernels=deep_check,
                                               starmap_async=workers.starmap_async)
                order = sorted(chosen, key=lambda s: (-s.payload_size, s.format, s.name))
                stale, recorded = [], []
                for spec in order:
                    # a stale package's fingerprint is taken while it is written (_build_one)
                    outcome = _up_to_date(spec, out_dir, fingerprint_of, states)
                    if outcome is not None:
                        recorded.append(outcome)
                    else:
                        stale.append(spec)
                # published bytes never change under one name-version-release (rocpkg.releases)
                planned = [releases.Planned(s.format, s.name, s.version, s.release, s.arch,
                                            _outcome(s, 0, "", True).file) for s in stale]
                conflicts = releases.conflicting_rebuilds(out_dir, planned)
                if conflicts:
                    stale = []
                result = BuildResult(out_dir, "", shard=shard)
                tasks = _tasks(stale, options, signer, staging, result, jobs or cores, cores, build)
                tasks, searched = _search_in_writers(plan, tasks)
                if workers.pool is None or len(tasks) <= 1:
                    answers = (_build_one(task) for task in tasks)     # after the checks
                else:
                    answers = workers.unordered_with_checks(_build_one, _started_in_order(tasks, workers.size))

                def check() -> None:
                    result.allowed = gate.enforce(gate.refusals(plan, formats, config=config, archives=archives)
                                                  + out_version_order_refusals(out_dir, plan.settings), allow)

                check()     # the host ELFs the writers search count as clean until they report
                if conflicts:
                    raise RocpkgInputError(*conflicts)
                verdict = _HostVerdict(searched, plan.host_search, check) if searched else None
                outcomes, problems = _collect(out_dir, order, recorded, answers, staging,
                                              lambda: StateJournal(out_dir, shard, formats), progress, verdict)
            except BaseException:
                workers.stop()  # before the staging area and this run's temporaries are removed
                raise
            if problems:
                raise RocpkgInputError(*problems)

            _remember_digests(out_dir, outcomes)
            specs_version = plan.settings["version"], plan.settings["release"]
            entries = [o.manifest_entry() for o in outcomes]
            record = releases.ReleaseRecord(*specs_version, targets=tuple(plan.targets), formats=tuple(formats),
                                            allowed=tuple(r.to_dict() for r in result.allowed), plan=_plan_digest(every),
                                            date=options.source_date_epoch,
                                            kpack_lookup=plan.settings.get("kpack_lookup", FALLTHROUGH),
                                            channel=plan.settings.get("channel", ""), epoch=plan.settings["epoch"])
            if shard is None:
                # the release joins the earlier ones in manifest.json (rocpkg.releases)
                result.manifest = releases.write_release(out_dir, record, entries)
                # the whole release is in manifest.json now; parts of an earlier split are stale
                shutil.rmtree(os.path.join(out_dir, MANIFEST_PARTS), ignore_errors=True)
                for fmt in formats:     # one line per name: the journals do not grow with the builds
                    rewrite_states(out_dir, fmt, read_states(out_dir, fmt))
            else:
                result.manifest = manifest_part_path(out_dir, shard)
                data = _manifest_bytes(_plan_digest(every), *specs_version, entries, shard, record)
                _write_atomic(result.manifest, data)
    result.packages = sorted(outcomes, key=lambda o: (o.format, o.name))
    result.seconds = time.perf_counter() - started
    return result


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


def _started_in_order(tasks: list[_Task], workers: int) -> list[_Task]:
    """`tasks` (largest first) in the order they start (schedule.start_order): one per
    worker first, then the small ones, then the rest."""
    return [tasks[i] for i in start_order([t.spec.payload_size for t in tasks], workers)]


def _tasks(stale: list[m.PackageSpec], options: m.BuildOptions, signer, staging: Staging,
           result: BuildResult, jobs: int, cores: int, build: str) -> list[_Task]:
    """One task per stale package, each with its zstd threads and the build's id; the
    result learns the jobs and threads (what the summary prints)."""
    jobs = max(1, min(jobs, len(stale) or 1))
    # threads never change a byte (rocpkg.compression), so they are chosen for what is left to do
    if options.threads:
        threads = [options.threads] * len(stale)
    else:
        threads = zstd_threads([s.payload_size for s in stale], cores, jobs, ZSTD_MAX_THREADS)
    # a .deb's one zstd frame has one thread, its md5s another (compression.DEB)
    threads = [min(n, DEB_THREADS) if s.format == "deb" else n for s, n in zip(stale, threads)]
    result.jobs = jobs
    result.thread_range = (min(threads, default=1), max(threads, default=1))
    result.threads = result.thread_range[1]
    return [_Task(spec, staging.out_dir, dataclasses.replace(options, threads=n), signer,
                  staging.dir(spec.format), build) for spec, n in zip(stale, threads)]


def _first_packers(tasks: list[_Task], searched) -> list[frozenset]:
    """For each task, the files of `searched` it is the first of the tasks to pack: each
    file is searched by one writer (of a library's .deb and .rpm, the first)."""
    taken: set[str] = set()
    mine = []
    for task in tasks:
        files = frozenset(fe.source for fe in task.spec.files
                          if fe.type == m.FILE and fe.source in searched and fe.source not in taken)
        taken |= files
        mine.append(files)
    return mine


def _search_in_writers(plan, tasks: list[_Task]) -> tuple[list[_Task], set[str]]:
    """Each host ELF the tasks write is searched for device code by the writer of the
    first task that packs it, as it reads the file anyway (rocpkg.host_code); the plan's
    other host ELFs are searched by reading them. The tasks, and the set of files their
    writers search (the verdict waits for each of them)."""
    search = getattr(plan, "host_search", None)
    if search is None:
        return tasks, set()
    streamed = search.hand_out({fe.source for t in tasks for fe in t.spec.files if fe.type == m.FILE})
    mine = _first_packers(tasks, streamed)
    searched = set().union(*mine)
    return [dataclasses.replace(t, host_scan=HostScan(files, search.embedded_objects)) if files else t
            for t, files in zip(tasks, mine)], searched


class _HostVerdict:
    """The build's checks once every host ELF handed to the writers has been searched:
    until then no package is moved into place (a package with device code in a host ELF
    refuses the whole build, and OUT must stay as it was). `pending` is the set of files
    not yet searched; each searching writer's answer names the files it searched
    (Written.searched) and what it found."""

    def __init__(self, pending: set[str], host_search, check):
        self.pending, self.host_search, self.check = set(pending), host_search, check
        self.carries = False    # a writer found device code: the checks run again

    def take(self, answer) -> bool:
        """Take an answer; True once every file is searched (RocpkgInputError: refused)."""
        if isinstance(answer, _Written) and answer.searched:
            if answer.host_code:
                self.carries = self.host_search.record(answer.host_code) or self.carries
            self.pending -= answer.searched
        if self.pending:
            return False
        self.close()
        return True

    def close(self) -> None:
        """The checks again with what the writers found, when they found device code (also
        when a searching package failed: its refusals are reported with its problem)."""
        if self.carries:
            self.check()


def _collect(out_dir: str, order: list[m.PackageSpec], recorded: list[PackageOutcome], answers,
             staging: Staging, open_journal, progress,
             verdict: _HostVerdict | None = None) -> tuple[list[PackageOutcome], list[tuple[str, str]]]:
    """Once the checks have passed: move each written package into place and record it,
    as the workers finish them, reporting progress; the outcomes and the problems.
    verdict: the checks that wait for the writers' search of the host ELFs; until it is
    in, the packages written are counted but wait in the staging area, and the state
    journal (open_journal) is opened only before the first is moved (a refusal leaves
    OUT as it was; a journal that cannot be opened fails the build before any move)."""
    total_bytes = sum(s.payload_size for s in order)
    outcomes: list[PackageOutcome] = []
    problems: list[tuple[str, str]] = []
    waiting: list[_Written] = []
    done_bytes = 0
    journal = None

    def report(outcome: PackageOutcome | None) -> None:
        if progress is not None:
            progress(BuildProgress(len(outcomes), len(order), done_bytes, total_bytes, outcome))

    def move(written: _Written, metadata_staged: bool = False) -> None:
        nonlocal journal
        if journal is None:
            journal = open_journal()
        staging.commit(written.staged, os.path.join(out_dir, written.outcome.file))
        if metadata_staged:
            staging.commit(_staged_metadata(written), _control_path(out_dir, written.outcome))
        _record(out_dir, journal, written, metadata_in_place=metadata_staged)

    try:
        report(None)
        for answer in itertools.chain(recorded, answers):
            if isinstance(answer, list):
                problems.extend(answer)
                continue
            if isinstance(answer, _Written):
                if verdict is None:
                    move(answer)
                else:
                    waiting.append(answer)
                    _stage_metadata(answer)
                    if verdict.take(answer):
                        verdict = None
                        for written in waiting:
                            move(written, metadata_staged=True)
                        waiting = []
                answer = answer.outcome
            outcomes.append(answer)
            done_bytes += answer.payload
            report(answer)
        if verdict is not None:
            # a package whose writer searches host ELFs failed: their verdict is unknown, so
            # nothing moves into OUT; the build stops on that package's problem
            if not problems:
                raise AssertionError("a package searching host ELFs gave no answer")
            try:
                verdict.close()
            except RocpkgInputError as refused:
                problems.extend(refused.problems)
        return outcomes, problems
    finally:
        if journal is not None:
            journal.close()


def _remember_digests(out_dir: str, outcomes: list[PackageOutcome]) -> None:
    """Hand the sha256 each writer took to the repository indexers' digest cache
    (createrepo_c's model: hash while writing, never read a file twice)."""
    from rocpkg.digest_cache import DigestCache

    for fmt, root in (("deb", os.path.join(out_dir, "deb")), ("rpm", os.path.join(out_dir, "rpm"))):
        built = [o for o in outcomes if o.format == fmt]
        if not built:
            continue
        cache = DigestCache(out_dir, fmt)
        for outcome in built:
            path = os.path.join(out_dir, outcome.file)
            cache.remember(path, os.path.relpath(path, root).replace(os.sep, "/"), outcome.sha256)
        cache.save(prune=False)


def assemble_manifest(out_dir: str | os.PathLike) -> str | None:
    """Join OUT/manifest.d/shard-*-of-N.json (N runners' trees copied into one OUT) into
    OUT/manifest.json, the same file an unsharded build writes. Refuses a missing shard
    or parts of different plans or dates. Returns the path, or None when there are no parts."""
    out_dir = os.fspath(out_dir)
    parts_dir = os.path.join(out_dir, MANIFEST_PARTS)
    docs = read_parts(out_dir)
    if not docs:
        return None
    problems = []
    first = docs[0][1]
    count = first["shard"][1]
    def date(doc: dict):
        return (doc.get("release_record") or {}).get("date")

    for name, doc in docs:
        if (doc["plan"], doc["version"], doc["release"], doc["shard"][1]) != \
                (first["plan"], first["version"], first["release"], count):
            problems.append((name, f"built from another plan or split than {docs[0][0]}"))
        elif date(doc) != date(first):
            problems.append((name, f"dated {date(doc)} (SOURCE_DATE_EPOCH), {docs[0][0]} {date(first)}: "
                                   f"set the same SOURCE_DATE_EPOCH on every runner"))
    have = {doc["shard"][0] for _, doc in docs}
    for index in range(1, count + 1):
        if index not in have:
            problems.append((parts_dir, f"shard {index} of {count} is missing"))
    if problems:
        raise RocpkgInputError(*problems)
    entries = [e for _, doc in docs for e in doc["packages"]]
    record = releases.ReleaseRecord.from_dict(first.get("release_record") or first)   # (older parts: none)
    allowed = tuple(a for _, doc in docs for a in doc.get("release_record", {}).get("allowed", []))
    return releases.write_release(out_dir, dataclasses.replace(record, files=(), allowed=allowed), entries)


def publish_repositories(out_dir: str, *, suite: str, signer=None, source_date_epoch: int | None = None,
                         base_url: str | None = None) -> tuple[dict[str, str], str | None]:
    """Index (and with a signer, sign) what OUT holds: OUT/deb/pool as an APT repository,
    OUT/rpm as a DNF one; write the client snippets; bring manifest.json in line (RPM
    headers signed in place changed their bytes). Holds the OUT lock. Returns
    ({"deb": rocm.list, "rpm": rocm.repo} for the formats present, the manifest's path)."""
    from rocpkg import repo_apt, repo_dnf

    if not os.path.isdir(out_dir):  # checked before the lock: nothing is created for a missing OUT
        raise RocpkgInputError((out_dir, "no such directory: build a release into it first"))
    if not _SUITE_RE.fullmatch(suite):
        raise RocpkgInputError(("--suite", f"{suite!r} is not a suite name (letters, digits, '.', '_', '-'; "
                                          "it becomes a directory under deb/dists/)"))
    from rocpkg.integrity import unrecorded_packages
    from rocpkg.preflight import url_problem

    if base_url is not None and (problem := url_problem(base_url, ("http", "https", "file"), path=True)):
        raise RocpkgInputError(("--base-url", problem))

    foreign = unrecorded_packages(out_dir)      # indexing a file no build of rocpkg wrote would vouch for it
    if foreign:
        raise RocpkgInputError(*foreign)
    base = base_url.rstrip("/") if base_url else None
    snippets: dict[str, str] = {}
    # one journaled change (rocpkg.journal): indexes, signatures and snippets all new, or all as they were
    with Change(out_dir, "repo", {"suite": suite, "signed": signer is not None}):
        if os.path.isdir(os.path.join(out_dir, "deb", "pool")):
            repo_apt.publish_apt(out_dir, suite=suite, signer=signer, source_date_epoch=source_date_epoch)
            snippets["deb"] = repo_apt.write_client_snippet(out_dir, suite=suite, base_url=base and f"{base}/deb")
        if os.path.isdir(os.path.join(out_dir, "rpm")):
            repo_dnf.publish_dnf(out_dir, signer=signer, source_date_epoch=source_date_epoch,
                                 sign_packages=signer is not None)
            snippets["rpm"] = repo_dnf.write_client_snippet(out_dir, base_url=base and f"{base}/rpm",
                                                            gpgkey_url=base and f"{base}/rocm.asc")
        if not snippets:
            raise RocpkgInputError((out_dir, "no deb/pool or rpm directory to index"))
        manifest = sync_manifest(out_dir)  # joins shards' manifest parts; rehashes RPMs signed just now
    return snippets, manifest


def sync_manifest(out_dir: str | os.PathLike) -> str | None:
    """Bring OUT/manifest.json in line with the files under OUT: join the shard parts when
    they are newer than it (assemble_manifest), then rehash every package whose file is
    no longer the one recorded — an RPM whose header `rocpkg repo --sign-key` signed in
    place, a tree merged by copying — and record the new file in its state, so that the
    next build keeps it. Returns the manifest's path, None when OUT has none."""
    out_dir = os.fspath(out_dir)
    path = os.path.join(out_dir, "manifest.json")
    parts_dir = os.path.join(out_dir, MANIFEST_PARTS)
    if os.path.isdir(parts_dir):
        newest = max((os.stat(os.path.join(parts_dir, n)).st_mtime_ns for n in os.listdir(parts_dir)), default=0)
        if not os.path.exists(path) or os.stat(path).st_mtime_ns < newest:
            assemble_manifest(out_dir)
    doc = read_json(out_dir, "manifest.json", "manifest")
    if doc is None:
        return None
    check_manifest(doc, path)
    from rocpkg.digest_cache import DigestCache

    changed, caches = False, {}
    states = _recorded_states(out_dir, ("deb", "rpm"))
    restated: set[str] = set()
    for entry in doc["packages"]:
        file_path = os.path.join(out_dir, entry["file"])
        state = states[entry["format"]].get(entry["name"])
        if state is not None and state.get("file") != entry["file"]:
            state = None        # the state is of this name's package in a newer release
        st = os.stat(file_path)
        seen = (st.st_size, st.st_mtime_ns, st.st_ino)
        if state is not None and (state["size"], state["mtime_ns"], state["ino"]) == seen \
                and state["sha256"] == entry["sha256"]:
            continue
        # the indexers have just hashed every package: earlier releases' are read from their cache
        fmt_root, _, key = entry["file"].partition("/")
        cache = caches.get(fmt_root) or caches.setdefault(fmt_root, DigestCache(out_dir, fmt_root))
        sha256, size = cache.sha256(file_path, key)
        if (size, sha256) != (entry["size"], entry["sha256"]):
            entry["size"], entry["sha256"] = size, sha256
            changed = True
        if state is not None:
            state.update(size=size, sha256=sha256, mtime_ns=st.st_mtime_ns, ino=st.st_ino)
            restated.add(entry["format"])
    for fmt in sorted(restated):
        rewrite_states(out_dir, fmt, states[fmt])
    if changed:
        _write_atomic(path, json.dumps(doc, indent=1).encode() + b"\n")
    return path
