"""Command-line handlers of `rocpkg build`, `rocpkg demo` and `rocpkg detect`: part of
the CLI (they print), kept in their own module so that cli.py stays small and shared.
cli._register_commands calls register().
"""
from __future__ import annotations

import os
import sys
import time

from kpack import targets as kt

from rocpkg.formats import compression, registry
from rocpkg.cli.common import (add_plan_options, add_subset_options, counted, formats,
                               human_bytes, interactive, load_config_of,
                               load_plan, print_json, print_snippets,
                               selected_packages, verbosity, warn_if_unsigned)
from rocpkg.cli.channels import add_channel_options, date_of_args, release_of_args
from rocpkg.cli.signing import add_signing_options, signer_of_args
from rocpkg.errors import RocpkgInputError


class ProgressDisplay:
    """The build's progress callback: a rich bar (bytes, packages, current package) on a
    terminal, else one line per package written (up-to-date ones are only counted)."""

    def __init__(self, label: str = "building", verbosity: int = 0):
        self.label = label
        self.verbosity = verbosity
        self.rich = interactive() and verbosity == 0
        self.bar = None
        self.task = None
        self.started = time.perf_counter()

    def __call__(self, event) -> None:
        if self.verbosity < 0:
            return
        if self.rich:
            self._rich(event)
        elif event.last is None:
            print(f"{self.label} {counted(event.total, 'package')} ({human_bytes(event.bytes_total)} of payload)",
                  file=sys.stderr, flush=True)
        elif event.last.rebuilt:
            p = event.last
            print(f"[{event.done}/{event.total}] {p.format} {p.name}: {human_bytes(p.payload)} -> {human_bytes(p.size)} "
                  f"in {p.seconds:.2f} s", file=sys.stderr, flush=True)
        elif self.verbosity > 0:
            p = event.last
            print(f"[{event.done}/{event.total}] {p.format} {p.name}: up to date", file=sys.stderr, flush=True)

    def _rich(self, event) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        if self.bar is None:
            # the bar runs over payload bytes: they, not package counts, take the time
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24),
                                DownloadColumn(binary_units=True), TextColumn("{task.fields[packages]}"),
                                TimeRemainingColumn(), TextColumn("{task.fields[current]}"),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=max(event.bytes_total, 1), packages="", current="")
        current = ""
        if event.last is not None:
            current = f"{event.last.format} {event.last.name}" + ("" if event.last.rebuilt else " (up to date)")
        self.bar.update(self.task, completed=event.bytes_done, packages=f"{event.done}/{event.total}",
                        current=current)
        if event.done == event.total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


BUILD_SCHEMA = "rocpkg-build/1"
_COUNTS = ("built", "up_to_date", "bytes_in", "bytes_out")


def build_summary(result) -> dict:
    """What the summary table shows, as data (`build --json`, schema rocpkg-build/1)."""
    rows: dict[tuple[str, str], dict] = {}
    for p in result.packages:
        row = rows.setdefault((p.format, p.kind), {"format": p.format, "kind": p.kind, **dict.fromkeys(_COUNTS, 0)})
        row["built" if p.rebuilt else "up_to_date"] += 1
        row["bytes_in"] += p.payload
        row["bytes_out"] += p.size
    rows_list = [rows[k] for k in sorted(rows)]
    rebuilt_in = sum(p.payload for p in result.packages if p.rebuilt)
    return {
        "schema": BUILD_SCHEMA, "out": result.out_dir, "manifest": result.manifest,
        "rows": rows_list,
        "totals": {k: sum(r[k] for r in rows_list) for k in _COUNTS},
        "seconds": round(result.seconds, 3), "jobs": result.jobs, "threads": result.threads,
        "written_ahead": 0,     # schema rocpkg-build/1 keeps its fields: nothing is written before the plan
        "shard": list(result.shard) if result.shard else None,
        "payload_rate": round(rebuilt_in / result.seconds) if result.seconds and rebuilt_in else 0,
        "packages": [{"format": p.format, "name": p.name, "kind": p.kind, "file": p.file, "rebuilt": p.rebuilt,
                      "bytes_in": p.payload, "bytes_out": p.size, "sha256": p.sha256,
                      "seconds": round(p.seconds, 3)} for p in result.packages],
        "allowed": [r.to_dict() for r in result.allowed],
    }


def print_summary(result, stream=None) -> None:
    """Packages per format and kind, built and up to date, bytes in and out, time."""
    stream = stream or sys.stdout
    doc = build_summary(result)
    table = [("format", "kind", "built", "up to date", "bytes in", "bytes out")]
    for r in doc["rows"] + [{"format": "all", "kind": "", **doc["totals"]}]:
        table.append((r["format"], r["kind"], str(r["built"]), str(r["up_to_date"]), human_bytes(r["bytes_in"]),
                      human_bytes(r["bytes_out"])))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for i, r in enumerate(table):
        cells = [c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))]
        print("  ".join(cells).rstrip(), file=stream)
        if i == 0 or i == len(table) - 2:
            print("  ".join("-" * w for w in widths), file=stream)
    shard = f", shard {result.shard[0]}/{result.shard[1]}" if result.shard else ""
    # the rate of what was written (up-to-date packages cost nothing), in a unit that fits
    rate = f"{human_bytes(doc['payload_rate'])}/s of payload" if doc["payload_rate"] else "nothing rewritten"
    low, high = result.thread_range
    threads = counted(high, "thread") if low == high else f"{low}-{high} threads"
    print(f"{counted(len(result.packages), 'package')} in {result.seconds:.1f} s ({rate}) "
          f"with {counted(result.jobs, 'job')} x {threads}{shard}; manifest {result.manifest}", file=stream)


def _cmd_build(args) -> int:
    from rocpkg.formats.compression import usable_cores
    from rocpkg.builder.schedule import parse_shard
    from rocpkg.builder.workers import Workers

    shard = parse_shard(args.shard) if args.shard else None
    if shard and args.repo:
        raise RocpkgInputError(("--repo", "a shard is part of a release: merge the shards' OUT trees, "
                                         "then run `rocpkg repo OUT` (docs/sharding.md)"))
    check_jobs(args)
    settings = None
    if args.repo:       # OUT's recorded URL, suite and key, unless given (rocpkg.cli.repo_settings)
        from rocpkg.cli.repo_settings import use_settings

        settings = use_settings(args, args.output, default_suite=None)
    _check_output(args)
    # what the plan imports, before the fork: the workers need most of it too (the kpack
    # readers) and so inherit it
    from rocpkg.inputs import host_code  # noqa: F401
    from rocpkg.plan import make as plan  # noqa: F401

    # the workers first: they load the writers while the plan is made, and the plan's
    # walk of the artifacts runs on them (catalog.scan's starmap_async)
    with Workers(args.jobs or usable_cores(), formats=formats(args)) as workers:
        return _build(args, shard, workers, settings)


def _build(args, shard, workers, settings=None) -> int:
    import dataclasses

    from rocpkg.builder import run as b
    from rocpkg.store.dates import source_date_epoch
    from rocpkg.repo.lifecycle import index_recorded
    from rocpkg.model import BuildOptions
    from rocpkg.store.releases import inputs_date

    config = load_config_of(args)
    release_of_args(args, config, formats(args))   # version-order refused before the artifacts are read
    plan = load_plan(args, config, embedded_objects=False, starmap_async=workers.starmap_async)
    only = selected_packages(args, plan)
    _print_plan_notes(args, plan)
    # the release's date: SOURCE_DATE_EPOCH, else --date's (a channel build), else the inputs'
    sde = source_date_epoch(plan.settings, default=date_of_args(args) or inputs_date(args.config, args.artifacts))
    options = BuildOptions(source_date_epoch=sde, **_compression(args, plan.settings))
    signer = signer_of_args(args, sde)
    display = ProgressDisplay(verbosity=verbosity(args))
    try:
        result = b.build_release(plan, args.output, formats=formats(args), options=options, jobs=args.jobs,
                                 shard=shard, progress=display, signer=signer, allow=args.allow or (), only=only,
                                 deep_check=args.deep_check, workers=workers)
    finally:
        display.close()
    summary = build_summary(result)
    if not args.json and verbosity(args) >= 0:
        print_summary(result)
    for refusal in result.allowed:
        where, what = refusal.as_problem()
        print(f"allowed: {where}: {what}", file=sys.stderr)
    if args.repo:
        used = dataclasses.replace(settings.used, suite=args.suite or plan.settings["suite"])
        snippets, _ = index_recorded(args.output, used, signer=signer, source_date_epoch=sde)
        dataclasses.replace(settings, used=used).say(args)
        summary["repositories"] = sorted(snippets.values())
        if args.json or verbosity(args) < 0:
            warn_if_unsigned(signer)
        else:
            print_snippets(snippets, signer)
    elif not shard:
        from rocpkg.verify.integrity import stale_index_problems

        stale = stale_index_problems(args.output)
        if stale:
            print(f"warning: {args.output}: the repository indexes are stale ({counted(len(stale), 'package')} "
                  f"missing from them or differing): run `rocpkg repo {args.output}`", file=sys.stderr)
    if args.json:
        print_json(summary)
    return 0


def _print_plan_notes(args, plan) -> None:
    for line in plan.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in plan.info if verbosity(args) > 0 else ():
        print(f"info: {line}", file=sys.stderr)


def _compression(args, settings) -> dict:
    """BuildOptions' compression and level: the options over the settings, the level checked
    against the kind (zstd 1-19, xz 0-9, gzip 1-9): an out-of-range level is refused, never
    clamped or run (zstd at 99 would take ten times as long for nothing)."""
    kind = args.compression or settings["compression"]
    level = args.level if args.level is not None else settings["compression_level"]
    problem = compression.level_problem(kind, level)
    if problem:
        where = "--level" if args.level is not None else "--compression"
        hint = "" if args.level is not None else " (settings.compression_level; give --level)"
        raise RocpkgInputError((where, problem + hint))
    return {"compression": kind, "compression_level": level}


def _install_instructions(result) -> list[str]:
    out = result.out_dir
    families = result.plan.families
    aliases = {fam: _alias_name(fam, result.plan.settings, result.plan.abi) for fam in families}
    width = max((len(registry.get(fmt).install_name(n)) for fmt in result.snippets for n in aliases.values()),
                default=0)
    lines = ["", f"Repositories are in {out}. To install from them on this machine:"]
    for fmt, snippet in result.snippets.items():
        form = registry.get(fmt)
        title, *setup = form.repo.client_setup(out, suite=result.suite, snippet=snippet, keyring=result.keyring)
        lines += ["", f"  {title}", *(f"    {line}" for line in setup)]
        for fam in families:
            lines.append(f"    sudo {form.install_command.format(f'{form.install_name(aliases[fam]):<{width}}')}  "
                         f"# {', '.join(families[fam])}")
    lines += ["", "  Which one is yours: rocpkg detect"]
    return lines


MAX_JOBS = 256


def check_jobs(args) -> None:
    """-j from 1 to MAX_JOBS; more than 4 per core is taken as 4 per core (workers beyond
    that only wait on each other)."""
    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        raise RocpkgInputError(("-j", f"expected a number of jobs from 1 to {MAX_JOBS}, got {args.jobs}"))
    if args.jobs is not None:
        args.jobs = min(args.jobs, 4 * (os.cpu_count() or 1))


def _check_output(args) -> None:
    """-o neither the artifacts directory nor inside it (the build would write into its input);
    with --repo, OUT's source lines' URL one that clients read (rocpkg.repo.urls)."""
    from rocpkg.repo.urls import repository_url

    if args.repo:
        repository_url(os.path.abspath(args.output), args.base_url)
    out, artifacts = os.path.realpath(args.output), os.path.realpath(args.artifacts)
    if out == artifacts or out.startswith(artifacts.rstrip(os.sep) + os.sep):
        where = "the artifacts directory" if out == artifacts else "inside the artifacts directory"
        raise RocpkgInputError(("-o", f"{args.output} is {where} {args.artifacts}: write OUT elsewhere"))


def _cmd_demo(args) -> int:
    from rocpkg.cli.demo import run_demo

    check_jobs(args)
    started = time.perf_counter()
    display = ProgressDisplay("building demo release:", verbosity=verbosity(args))
    try:
        result = run_demo(args.out, jobs=args.jobs, progress=display)
    finally:
        display.close()
    quiet = verbosity(args) < 0         # -q: the verdict and the problems only
    if not quiet:
        print_summary(result.build)
        for name, seconds in result.steps:
            print(f"  {name}: {seconds:.1f} s")
        if result.key_fingerprint:
            print(f"signed with throwaway demo key {result.key_fingerprint} (GnuPG home {result.gnupg_home})")
        else:
            print("unsigned: gpg is not installed")
    if result.verify is not None:
        problems = getattr(result.verify, "problems", None)
        ok = getattr(result.verify, "ok", not problems)
        print(f"verify: {'ok' if ok else 'PROBLEMS'}")
        for problem in problems or []:
            print(f"  {problem.line() if hasattr(problem, 'line') else problem}")
    if not quiet:
        print(f"demo done in {time.perf_counter() - started:.1f} s")
        print("\n".join(_install_instructions(result)))
    return 0 if result.verify is None or getattr(result.verify, "ok", True) else 1


def _alias_name(family: str, settings: dict, abi: str) -> str:
    """The plan's name of a family's alias package (rocm-gfx110X; a variant build's
    rocm-asan-gfx110X): each format installs it by its Format.install_name."""
    from rocpkg.plan.naming import alias_name, build_variant

    return alias_name(settings["naming"]["alias"], family, abi, build_variant(settings))


def _cmd_detect(args) -> int:
    from rocpkg.inputs import detect

    config = load_config_of(args)
    settings = config.settings
    gpus = detect.detect_gpus(args.sysfs, settings["families"])
    if not gpus and not args.json:
        print(f"no AMD GPU found (no KFD GPU node under {args.sysfs}/class/kfd/kfd/topology/nodes)")
        return 0
    # what can really be installed: the packages of a built tree or of a plan, if given
    available, abi, source, built_for = None, "", "", {}
    if args.repo:
        available, version = detect.packages_in_tree(args.repo)
        abi, source = ".".join(version.split(".")[:2]), f"the repository {args.repo}"
        built_for = detect.built_for_in_tree(args.repo)
    elif args.artifacts:
        plan = load_plan(args, config)
        available, abi, source = detect.packages_in_plan(plan), plan.abi, f"the plan of {args.artifacts}"
        built_for = detect.built_for_in_plan(plan)
    # the formats a user can install from: the tree's or the plan's, else the default ones
    shown = [(fmt, form) for fmt, form in registry.REGISTERED.items()
             if (fmt in available if available is not None else form.default_build)]
    found = []
    for gpu in gpus:
        row = {"node": gpu.node, "target": gpu.target, "name": gpu.name or "", "family": gpu.family, "install": []}
        found.append(row)
        if gpu.family is not None:
            alias = _alias_name(gpu.family, settings, abi)
            row["install"] = [{"format": fmt, "package": form.install_name(alias),
                               "command": form.install_command.format(form.install_name(alias))}
                              for fmt, form in shown if available is None or alias.lower() in available.get(fmt, ())]
            if not row["install"] and available is not None:    # no family alias: a package built for the target
                row["install"] = [{"format": fmt, "package": name, "command": form.install_command.format(name)}
                                  for fmt, form in shown
                                  if (name := detect.installable_for(gpu.target, built_for.get(fmt, {})))]
            if not row["install"]:
                row["served"] = sorted(f for f in settings["families"] or kt.FAMILIES
                                       if any(_alias_name(f, settings, abi).lower() in names
                                              for names in available.values()))
    if args.json:
        print_json({"schema": "rocpkg-detect/1", "checked_against": source or None, "gpus": found})
        return 0
    for row in found:
        name = f" ({row['name']})" if row["name"] and row["name"] != row["target"] else ""
        if row["family"] is None:
            print(f"node {row['node']}: {row['target']}{name}: in no family of this release's table, no package for it")
            continue
        print(f"node {row['node']}: {row['target']}{name}, family {row['family']}")
        for item in row["install"]:
            print(f"  {item['command']}")
        if "served" in row:
            print(f"  {source} has no package for {row['family']} (it serves: {', '.join(row['served']) or 'no family'})")
    if available is None and verbosity(args) >= 0:
        print("note: names not checked against a repository: give --repo OUT or -a ARTIFACTS", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("build", help="build every package of the plan into OUT (deb pool, rpm dirs, manifest)")
    add_plan_options(p)
    add_subset_options(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output tree")
    p.add_argument("-j", "--jobs", type=int, default=None, help="packages built at once (default: CPU count)")
    p.add_argument("--shard", default=None, metavar="I/N", help="build only part I of N (size-balanced, "
                                                                "deterministic), for N CI runners")
    p.add_argument("--compression", choices=compression.KINDS, default=None,
                   help="payload compression (default: settings.compression)")
    p.add_argument("--level", type=int, default=None,
                   help="compression level: zstd 1-19, xz 0-9, gzip 1-9 (default: settings.compression_level)")
    p.add_argument("--json", action="store_true", help="the summary as JSON on stdout (schema rocpkg-build/1)")
    p.add_argument("--repo", action="store_true", help="then index the APT and DNF repositories under OUT")
    p.add_argument("--suite", default=None, help="with --repo: APT suite (default: what OUT recorded, else "
                                                 "settings.suite)")
    p.add_argument("--base-url", default=None, help="with --repo: URL OUT is served at, for rocm.list/rocm.repo "
                                                    "(default: the URL OUT recorded, else file://OUT)")
    add_signing_options(p, what="the RPM headers (and, with --repo, the repositories)")
    p.add_argument("--allow", action="append", default=None, metavar="CHECK",
                   help="build even though check CHECK fails (repeatable); recorded in manifest.json. "
                        "Checks: see `rocpkg verify` and README 'What build refuses'")
    add_channel_options(p)
    p.add_argument("--deep-check", action="store_true",
                   help="decompress every kernel of every packed kpack archive before writing (as `kpack verify`); "
                        "by default each kernel's frame is checked by its headers and its code object by its ELF header")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("demo", help="sample artifacts + build + signed repositories, and how to install")
    p.add_argument("out", metavar="OUT", help="directory for the sample artifacts, packages and repositories")
    p.add_argument("-j", "--jobs", type=int, default=None, help="packages built at once (default: CPU count)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("detect", help="this machine's GPU targets and the package to install for each")
    p.add_argument("--sysfs", default="/sys", metavar="ROOT", help="sysfs root (default /sys)")
    p.add_argument("--repo", default=None, metavar="OUT", help="suggest only packages this built tree has "
                                                                "(its manifest.json)")
    add_plan_options(p, artifacts_required=False)
    p.add_argument("--json", action="store_true", help="the GPUs found and what to install, as JSON "
                                                       "(schema rocpkg-detect/1)")
    p.set_defaults(func=_cmd_detect)
