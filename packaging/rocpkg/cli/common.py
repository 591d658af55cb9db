"""What every rocpkg subcommand module shares (cli.py and cli_build.py both import it,
never each other): the error line, the plan options and loading a plan from them,
interactive detection and the size format."""
from __future__ import annotations

import argparse
import os
import sys

from rocpkg.formats.registry import DEFAULT as DEFAULT_FORMATS, NAMES as FORMAT_NAMES
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import printable


def print_error(where: str, what: str) -> None:
    """One `error:` line per problem, whatever it names: control characters (a newline in a
    package or file name, CR, ESC) written as \\xNN, so no name can forge a line."""
    print(printable(f"error: {where}: {what}" if where else f"error: {what}"), file=sys.stderr)


def add_verbosity_options(p: argparse.ArgumentParser, top: bool) -> None:
    """-v/-q, accepted before the command (`rocpkg -q build`) and after it (`rocpkg build -q`):
    a command's own parser must not reset what the top level set, so its default is SUPPRESS."""
    g = p.add_mutually_exclusive_group()
    default = 0 if top else argparse.SUPPRESS
    g.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=default,
                   help="say more: every package as it is written or found up to date, the plan's notes")
    g.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=default,
                   help="only the command's result, warnings and errors: no progress, no summary")


def verbosity(args) -> int:
    """-1 quiet, 0 normal, 1 verbose."""
    return getattr(args, "verbosity", 0)


def add_plan_options(p: argparse.ArgumentParser, artifacts_required: bool = True) -> None:
    """The options every plan-based command shares, so one command line moves between them."""
    p.add_argument("-c", "--config", default=None, help="package.json (default: the bundled one)")
    p.add_argument("-a", "--artifacts", required=artifacts_required, help="artifacts directory")
    p.add_argument("--version", dest="pkg_version", help="release version (overrides settings.version)")
    p.add_argument("--release", help="package release (overrides settings.release)")
    p.add_argument("--targets", help="comma-separated targets to package (default: all found)")
    p.add_argument("--formats", default=None,
                   help=f"comma-separated formats: {','.join(FORMAT_NAMES)} (default: {','.join(DEFAULT_FORMATS)}; "
                        f"verify OUT: every format OUT holds)")
    p.add_argument("--install-prefix", default=None, metavar="DIR",
                   help="install prefix, {abi} and {version} expanded (overrides settings.prefix; TheRock's "
                        "list-form package.json has no settings: default /opt/rocm/core-{abi})")
    p.add_argument("--build-variant", default=None, metavar="release|asan",
                   help="which build of the stack the artifacts are (TheRock's --build-variant): asan names every "
                        "package and the prefix with -asan (amdrocm-core-asan7.1, /opt/rocm/core-asan-7.1) so that "
                        "it installs beside the normal release (overrides settings.build_variant)")
    p.add_argument("--unknown-keys", choices=("error", "warn"), default=None,
                   help="an unknown package.json key is an error (default) or a warning "
                        "(overrides settings.unknown_keys)")
    p.add_argument("--no-debug-packages", action="store_true",
                   help="make no -dbgsym / -debuginfo packages from the artifacts' dbg components "
                        "(sets settings.debug_packages to false)")
    p.add_argument("--kpack-lookup", choices=("fallthrough", "strict"), default=None,
                   help="check kernels as this runtime finds them: fallthrough (the runtime ROCm ships) or "
                        "strict (before the fall-through); overrides settings.kpack_lookup and, for verify "
                        "OUT, what the release's record says")


def add_subset_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pkg-names", action="extend", nargs="+", default=None, metavar="NAME",
                   help="only these packages (TheRock's --pkg-names): package.json definitions (all their "
                        "packages) or package names, space- or comma-separated")
    p.add_argument("--with-deps", action="store_true",
                   help="with --pkg-names: also every package they depend on inside the release")


def selected_packages(args, plan) -> set[tuple[str, str]] | None:
    """(format, name) of the packages --pkg-names picks; None when it is not given."""
    if not args.pkg_names:
        if args.with_deps:
            raise RocpkgInputError(("--with-deps", "only applies with --pkg-names"))
        return None
    from rocpkg.plan.subset import select

    names = [n for arg in args.pkg_names for n in split_list(arg) or []]
    if not names:
        raise RocpkgInputError(("--pkg-names", "no package name given"))
    return select(plan, names, closure=args.with_deps)


def split_list(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def formats(args) -> list[str]:
    """The formats --formats names, checked; not given: the registry's default ones, and
    for a built tree to verify (OUT) every registered format (verify reads those it holds)."""
    if args.formats is None:
        return list(FORMAT_NAMES if getattr(args, "out", None) else DEFAULT_FORMATS)
    chosen = split_list(args.formats) or []
    bad = [f for f in chosen if f not in FORMAT_NAMES]
    if bad or not chosen:
        raise RocpkgInputError(("--formats", f"expected one or more of {', '.join(FORMAT_NAMES)}, got {args.formats!r}"))
    twice = sorted({f for f in chosen if chosen.count(f) > 1})
    if twice:
        raise RocpkgInputError(("--formats", f"{', '.join(twice)} given more than once in {args.formats!r}: "
                                             f"name each format once"))
    return chosen


def load_config_of(args):
    """package.json of -c, with --unknown-keys, --install-prefix, --build-variant,
    --kpack-lookup, --no-debug-packages and --channel applied."""
    from rocpkg.inputs.config import load_config

    config = load_config(args.config, unknown_keys=getattr(args, "unknown_keys", None))
    prefix = getattr(args, "install_prefix", None)
    if prefix is not None:
        from rocpkg.inputs.config_strings import prefix_problem

        problem = prefix_problem(prefix, getattr(args, "pkg_version", None) or config.settings["version"])
        if problem:
            raise RocpkgInputError(("--install-prefix", problem))
        config.settings["prefix"] = prefix
    variant = getattr(args, "build_variant", None)
    if variant is not None:
        from rocpkg.inputs.config import build_variant_problem

        if build_variant_problem(variant):
            raise RocpkgInputError(("--build-variant", build_variant_problem(variant)))
        config.settings["build_variant"] = variant
    if getattr(args, "kpack_lookup", None):
        config.settings["kpack_lookup"] = args.kpack_lookup
    if getattr(args, "no_debug_packages", False):
        config.settings["debug_packages"] = False
    from rocpkg.cli.channels import apply_channel

    apply_channel(args, config)        # plan, build and verify -a: --channel's version
    for line in config.warnings:
        print(f"warning: {line}", file=sys.stderr)
    return config


def load_plan(args, config=None, *, embedded_objects: bool = True, starmap_async=None):
    """The plan of the plan options (config: load_config_of(args) when already loaded);
    embedded_objects, starmap_async: catalog.scan's (False for build: those findings only
    warn; the build's workers)."""
    from rocpkg.inputs.catalog import scan
    from rocpkg.plan.make import make_plan

    check_artifacts_dir(args.artifacts)
    config = config or load_config_of(args)
    catalog = scan(args.artifacts, config.settings["families"], embedded_objects=embedded_objects,
                   starmap_async=starmap_async)
    if not catalog.dirs:
        raise RocpkgInputError((args.artifacts, "no artifact directories (<name>_<component>_<suffix>) in it"))
    return make_plan(config, catalog, version=args.pkg_version, release=args.release,
                     targets=split_list(args.targets), formats=formats(args))


def check_artifacts_dir(path: str) -> None:
    """-a names a directory: say what it is otherwise, before any scan."""
    if not os.path.lexists(path):
        raise RocpkgInputError((path, "artifacts directory not found"))
    if not os.path.isdir(path):
        raise RocpkgInputError((path, "not a directory (-a names the artifacts directory)"))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 release`, `2 releases`: a count with its noun in the right number (plural:
    the plural when it is not noun + "s")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def human_bytes(n: float) -> str:
    """1536 -> "1.5 KiB": the size format of every rocpkg table and progress line."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def interactive(stream=None) -> bool:
    """A progress bar on a terminal; plain lines in CI and in logs."""
    stream = stream or sys.stderr
    return stream.isatty() and not os.environ.get("CI")


def warn_if_unsigned(signer) -> None:
    """The client snippets of an unsigned repository turn signature checks off: say so."""
    if signer is None:
        print("warning: unsigned repository: rocm.list says trusted=yes and rocm.repo gpgcheck=0", file=sys.stderr)


def print_snippets(snippets: dict, signer) -> None:
    """The client snippets a re-index wrote, and who signed it."""
    if snippets:
        print(f"repositories: {', '.join(snippets.values())}"
              + (f", signed by {signer.fingerprint}" if signer else ", unsigned"))
        warn_if_unsigned(signer)


def print_json(doc: dict) -> None:
    """A command's --json document on stdout (its "schema" names it, README lists them);
    warnings and progress stay on stderr."""
    import json

    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


ALIKE_SHOWN = 4     # a cause with this many problems or more is said once, with a count


def alike(a: str, b: str) -> bool:
    """Whether two problem texts say one cause of different things: as many words, at
    least six, differing in a few of them (the names, versions, paths they are about)."""
    x, y = a.split(), b.split()
    if len(x) != len(y) or len(x) < 6:
        return False
    return sum(1 for p, q in zip(x, y) if p != q) <= max(2, len(x) // 6)


def print_problems(problems, verbosity_level: int = 0) -> None:
    """The `error:` lines of a refusal: each problem once; of problems that say one cause
    (alike) ALIKE_SHOWN or more times, the first and a count ("... and 201 more like it"),
    every one with -v."""
    groups: list[list[tuple[str, str]]] = []
    for problem in problems:
        group = next((g for g in groups if alike(g[0][1], problem[1])), None)
        if group is None:
            groups.append([problem])
        else:
            group.append(problem)
    for group in groups:
        if len(group) < ALIKE_SHOWN or verbosity_level > 0:
            for where, what in group:
                print_error(where, what)
        else:
            print_error(*group[0])
            print_error("", f"... and {len(group) - 1} more like it (-v shows every one)")


def shortened(names, verbosity_level: int = 0, shown: int = 6) -> str:
    """A list of names as one line says it: all of them with -v or when few, else the first
    few and how many more ("gfx900, gfx906, ... and 18 more")."""
    names = list(names)
    if verbosity_level > 0 or len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown - 1])}, ... and {len(names) - shown + 1} more (-v lists all)"


class Activity:
    """Progress of a long command on a terminal: one transient rich line on stderr (a
    spinner, what is being done, what update() last said, the time taken), gone when
    the command ends. Nothing at all in a pipe, in CI, under -q or -v (whose lines it
    would garble): captured output never holds it."""

    def __init__(self, label: str, args=None):
        self.label = label
        self.on = interactive() and verbosity(args) == 0
        self.bar = None

    def __enter__(self) -> "Activity":
        if self.on:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[detail]}"),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=None, detail="")
        return self

    def update(self, detail: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, detail=detail)

    def __exit__(self, *exc) -> bool:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        return False
