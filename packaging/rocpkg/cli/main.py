"""`rocpkg` command line: the only place that prints or exits.

Each subcommand is a `_cmd_<name>(args) -> int` handler registered in `build_parser()`.
Library code raises RocpkgInputError (or kpack.errors.KpackFormatError) for bad input;
main() turns those into `error: <where>: <what>` lines and exit status 2; a worker process
that ended while it held work (RocpkgWorkerLost) into one line and exit status 1.
"""
from __future__ import annotations

import argparse
import os
import sys

import rocpkg
from rocpkg.cli.channels import add_channel_options
from rocpkg.cli.signing import add_signing_options
from rocpkg.cli.common import (Activity, add_plan_options, add_subset_options, add_verbosity_options, counted, formats, human_bytes,
                               load_config_of, load_plan, print_error, print_json, print_problems, selected_packages,
                               shortened, split_list, verbosity, warn_if_unsigned)
from rocpkg.errors import RocpkgInputError, RocpkgWorkerLost
from rocpkg.formats.preflight import printable

EPILOG = ("Exit status: 0 done, 2 bad input (one `error: <where>: <what>` line per problem), 1 a failure "
          "of rocpkg itself. `rocpkg COMMAND --help` shows a command's options; each command's --version "
          "is the release version it packages, `rocpkg --version` the tool's own.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocpkg", description=rocpkg.__doc__.strip(), epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"rocpkg {rocpkg.__version__}",
                        help="show rocpkg's own version and exit")
    add_verbosity_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _register_commands(sub)
    from rocpkg.cli.examples import add_examples

    add_examples(sub.choices)
    parser.set_defaults(root_parser=parser)    # `rocpkg completion` and `rocpkg man` are generated from it
    for command in sub.choices.values():  # `rocpkg build -q` as well as `rocpkg -q build`
        add_verbosity_options(command, top=False)
    return parser


def _cmd_plan(args) -> int:
    from rocpkg.plan.dump import plan_to_dict, plan_to_dot

    if args.no_files and not args.json:
        raise RocpkgInputError(("--no-files", "only applies to --json output"))
    plan = load_plan(args)
    chosen = selected_packages(args, plan)
    if chosen is not None:
        from rocpkg.plan.subset import restrict

        plan = restrict(plan, chosen)
    if args.json:
        print_json(plan_to_dict(plan, with_files=not args.no_files))
        return 0
    if args.dot:
        sys.stdout.write(plan_to_dot(plan, formats(args)[0]))
        return 0
    for fmt, specs in plan.packages.items():
        rows = [("package", "kind", "target/family", "files", "bytes", "depends")]
        for s in specs:
            files = sum(1 for f in s.files if f.type != "dir")
            rows.append((s.name, s.kind, s.target or s.family, str(files), human_bytes(s.payload_size),
                         ", ".join(s.depends)))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        print(f"== {fmt}: {counted(len(specs), 'package')}, version {plan.settings['version']}-"
              f"{plan.settings['release']}, targets {shortened(plan.targets, verbosity(args)) or '-'}")
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
        print()
    for fam, members in plan.families.items():
        print(f"family {fam}: {', '.join(members)}")
    for line in plan.info if verbosity(args) >= 0 else ():
        print(f"info: {line}")
    for line in plan.warnings:
        print(f"warning: {line}", file=sys.stderr)
    return 0


def _cmd_sample_artifacts(args) -> int:
    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    config = load_config(args.config)
    summary = make_sample_artifacts(args.dir, config, targets=split_list(args.targets), layout=args.layout,
                                    size_mb=args.size_mb, seed=args.seed, clean=args.clean,
                                    overlays=args.xnack_overlays)
    print(f"{summary.root}: {counted(len(summary.dirs), 'artifact dir')}, {counted(summary.files, 'file')}, "
          f"{human_bytes(summary.bytes)}, targets {', '.join(summary.targets)} ({summary.layout} layout)")
    return 0


def _cmd_repo(args) -> int:
    """Index (and with a key, sign) each format's tree in OUT, and write the client snippets."""
    from rocpkg.cli.signing import signer_of_args
    from rocpkg.cli.repo_settings import use_settings
    from rocpkg.formats.registry import REGISTERED
    from rocpkg.store.dates import published_source_date_epoch
    from rocpkg.repo.lifecycle import index_recorded

    out = args.out
    settings = use_settings(args, out)      # what OUT recorded, unless given (rocpkg.store.settings)
    sde = published_source_date_epoch(out)
    signer = signer_of_args(args, sde)
    with Activity(f"indexing {out}", args):
        snippets, manifest = index_recorded(out, settings.used, signer=signer, source_date_epoch=sde)
    settings.say(args)
    if args.json:
        print_json({"schema": "rocpkg-repo/1", "out": os.path.abspath(out), "suite": args.suite,
                    "signed_by": signer.fingerprint if signer else None,
                    "snippets": {k: os.path.abspath(v) for k, v in snippets.items() if k in REGISTERED},
                    "setup": {k[:-len("-setup")]: os.path.abspath(v) for k, v in snippets.items()
                              if k.endswith("-setup")},
                    "manifest": manifest and os.path.abspath(manifest)})
        warn_if_unsigned(signer)
        return 0
    if verbosity(args) < 0:        # -q: the warnings only
        warn_if_unsigned(signer)
        return 0
    signed = f", signed by {signer.fingerprint}" if signer else ", unsigned"
    for name, form in REGISTERED.items():
        if name in snippets:
            print(f"{form.repo.summary(out, args.suite)}{signed}")
    for name in REGISTERED:
        if f"{name}-setup" in snippets:
            print(f"setup package ({name}): {snippets[f'{name}-setup']}")
    if args.base_url and signer is None:
        print("setup packages: none (an unsigned repository gets none; give --sign-key)")
    if manifest:
        print(f"manifest: {manifest}")
    warn_if_unsigned(signer)
    return 0


def _cmd_verify(args) -> int:
    """Verify a built OUT tree, or the plan of -c/-a before building; exit 2 on any problem."""
    from rocpkg.verify.run import verify_plan, verify_tree

    if args.out:
        if args.artifacts or args.config:
            raise RocpkgInputError(("verify", "give either OUT (a built tree) or -c/-a (a plan), not both"))
        if args.channel or args.date is not None or args.number is not None:
            raise RocpkgInputError(("--channel", "applies to the plan of -c/-a; a built release records its channel"))
        from rocpkg.builder.version_order import out_order_problems
        from rocpkg.verify.integrity import check_integrity

        from rocpkg.cli.build import check_jobs
        from rocpkg.verify.keys import signature_key

        check_jobs(args)
        with Activity(f"verifying {args.out}", args) as activity:
            report = verify_tree(args.out, formats=formats(args), release=args.release, lookup=args.kpack_lookup,
                                 jobs=args.jobs or 0)
            activity.update("packages read; hashing files and checking indexes")
            keyring, signatures, unchecked = signature_key(args.out, args.keyring)   # OUT's own key unless given
            report.problems += unchecked + check_integrity(args.out, keyring=keyring, formats=formats(args),
                                                           jobs=args.jobs)
            report.problems += out_order_problems(args.out)    # releases that apt or dnf would not upgrade to
    elif args.artifacts:
        config = load_config_of(args)
        report = verify_plan(load_plan(args, config), config)
        signatures = None
    else:
        raise RocpkgInputError(("verify", "give OUT (a built tree) or -a ARTIFACTS (a plan)"))
    if args.json:
        doc = report.to_dict()
        if signatures is not None:
            doc["signatures"] = signatures
        print_json(doc)
    elif verbosity(args) < 0:     # -q: the verdict only
        print("OK: no problem found" if report.ok else f"FAILED: {counted(len(report.problems), 'problem')}")
    else:
        _print_verify_summary(report, signatures, verbosity(args))
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for problem in report.problems:
        print(printable(problem.line()), file=sys.stderr)
    return 2 if report.problems else 0


def _signature_line(signatures: dict) -> str:
    if not signatures["checked"]:
        return "unsigned: signatures not checked" if not signatures["signed"] else \
            "signatures not checked: no key (give --keyring)"
    whose = "OUT's own key" if signatures["own_key"] else "the key"
    return f"signatures checked against {whose} {signatures['keyring']} " \
           f"({', '.join(signatures['fingerprints']) or 'no key gpg can read'})"


def _print_verify_summary(report, signatures: dict | None = None, verbose: int = 0) -> None:
    print(f"verify {report.source}: {', '.join(report.formats)}")
    for fmt in report.formats:
        c = report.counts.get(fmt, {})
        ids = "; ".join(f"{t}: {', '.join(v)}" for t, v in report.targets.get(fmt, {}).items()) or "-"
        mine = sum(1 for p in report.problems if p.format == fmt)
        releases = report.releases.get(fmt, [])     # the counts are sums over these
        which = f"release {releases[0]}: " if len(releases) == 1 else \
            f"{len(releases)} releases ({shortened(releases, verbose, shown=4)}): " if releases else ""
        print(f"== {fmt}: {which}{counted(c.get('packages', 0), 'package')}, "
              f"{counted(c.get('host_binaries', 0), 'host binary', 'host binaries')} with kernels, "
              f"{counted(c.get('archives', 0), 'archive')}, {counted(c.get('lookups', 0), 'archive lookup')}, "
              f"{counted(c.get('kernels_checked', 0), 'kernel')} checked, {counted(mine, 'problem')}")
        print(f"  target IDs: {ids}")
        mine = [c for c in report.closures if c.format == fmt]
        print(f"  {counted(len(mine), 'meta-package closure')} computed; per family alias:")
        for closure in mine:
            if closure.kind == "alias":
                of = f", release {closure.release}" if len(releases) > 1 else ""
                print(f"  {closure.family} <- {closure.root} ({counted(len(closure.packages), 'package')}{of})")
                for target, names in closure.devices.items():
                    print(f"      {target}: {', '.join(names)}")
        print(f"  external: {', '.join(report.externals.get(fmt, [])) or '-'}")
    if signatures is not None:
        print(_signature_line(signatures))
    ok = "OK: no problem found" + ("" if signatures is None or signatures["checked"] else
                                    " (unsigned: signatures not checked)")
    print(ok if report.ok else f"FAILED: {counted(len(report.problems), 'problem')}")


def _register_commands(sub) -> None:
    """Subcommand parsers; each sets `func` to its handler."""
    p = sub.add_parser("plan", help="show the package set and its relations")
    add_plan_options(p)
    add_channel_options(p)
    add_subset_options(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="machine-readable plan (schema rocpkg-plan/1)")
    g.add_argument("--dot", action="store_true", help="Graphviz graph of the first format's relations")
    p.add_argument("--no-files", action="store_true", help="with --json: leave out the file lists")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("sample-artifacts", help="synthesise an artifacts tree for a package.json")
    p.add_argument("dir", help="directory to create the artifacts in")
    p.add_argument("-c", "--config", default=None, help="package.json (default: the bundled one)")
    p.add_argument("--targets", default=None, help="comma-separated targets (default gfx942,gfx1100,gfx1101); a bare target also gets its xnack+ build, a feature build (gfx90a:xnack-) named alone gets no bare one")
    p.add_argument("--xnack-overlays", action="store_true",
                   help="feature builds (gfx90a:xnack-) hold one kernel per binary over the bare build's archive")
    p.add_argument("--layout", choices=("split", "recombined"), default="split",
                   help="one artifact dir per target (split, default) or per family (recombined)")
    p.add_argument("--size-mb", type=float, default=1.0, help="approximate payload size")
    p.add_argument("--seed", type=int, default=0, help="random seed of the synthetic payload (default 0)")
    p.add_argument("--clean", action="store_true", help="replace DIR if it is not empty")
    p.set_defaults(func=_cmd_sample_artifacts)

    p = sub.add_parser("repo", help="index and sign the repositories under OUT (APT, DNF, pacman)")
    p.add_argument("out", metavar="OUT", help="a tree written by `rocpkg build`")
    add_signing_options(p)
    p.add_argument("--suite", default=None, help="APT suite, pacman database name (default: what OUT recorded, "
                                                 "else stable)")
    p.add_argument("--base-url", default=None, help="URL OUT is served at, for the client snippets (default: the "
                                                    "URL OUT recorded, else file://OUT); OUT remembers it")
    p.add_argument("--unsigned", action="store_true", help="index without signing and forget the signing key OUT "
                                                           "recorded")
    p.add_argument("--json", action="store_true", help="the snippets, setup packages and signer as JSON "
                                                       "(schema rocpkg-repo/1)")
    p.set_defaults(func=_cmd_repo)

    p = sub.add_parser("verify", help="prove every host binary finds its kernels, before or after building")
    p.add_argument("out", metavar="OUT", nargs="?", help="a built tree (deb/pool/main, rpm/<arch>) to read back")
    add_plan_options(p, artifacts_required=False)
    add_channel_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable report (schema rocpkg-verify/1)")
    p.add_argument("--keyring", default=None, help="with OUT: public key file (rocm.gpg or rocm.asc) the index "
                                                   "signatures must verify against")
    p.add_argument("-j", "--jobs", type=int, default=None, help="with OUT: packages read at once (default: CPU count)")
    p.set_defaults(func=_cmd_verify)

    from rocpkg.cli import build as cli_build  # build, demo, detect

    cli_build.register(sub)
    from rocpkg.cli import repo as cli_repo  # prune, promote, publish

    cli_repo.register(sub)
    from rocpkg.cli import contents as cli_contents, shell as cli_shell  # ls, show, diff, rm; completion, man

    cli_contents.register(sub)
    cli_shell.register(sub)


# the trees each command reads or writes, by argument name: repaired before it runs
TREES = {"build": ("output",), "repo": ("out",), "verify": ("out",), "prune": ("out",),
         "promote": ("src", "dst"), "publish": ("out",), "export": ("out",),
         "ls": ("out",), "show": ("out",), "diff": ("out",), "rm": ("out",)}


def _repair_trees(args) -> None:
    """Before a command runs: an interrupted change of each tree it touches is rolled
    back, the temporaries of dead runs swept (rocpkg.store.journal.recover), one line each on
    stderr (stdout may be JSON)."""
    from rocpkg.store.journal import recover

    for name in TREES.get(args.command, ()):
        tree = getattr(args, name, None)
        for done in recover(tree, sweep=args.command != "build") if tree else ():
            if done.action == "swept":
                print(f"repaired: {tree}: removed {counted(done.swept, 'temporary', 'temporaries')} of killed rocpkg "
                      f"runs", file=sys.stderr)
            else:
                print(f"repaired: {tree}: rolled back an interrupted rocpkg {done.command} (pid {done.pid}): "
                      f"{counted(done.restored, 'file')} put back, {done.removed} removed; the tree is as it was "
                      f"before that command, run it again", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if hasattr(args, "formats"):
            formats(args)       # a bad --formats is refused before any command starts
        _repair_trees(args)
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here when the output fits the buffer
        return status
    except RocpkgInputError as exc:
        print_problems(exc.problems, verbosity(args))
        return 2
    except BrokenPipeError:  # `rocpkg plan | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path that cannot be read, created or written (EACCES, ENOSPC, EIO)
        where = exc.filename or getattr(args, "output", None) or getattr(args, "out", None) or ""
        print_error(str(where), exc.strerror or str(exc))
        return 2
    except KeyboardInterrupt:
        print_error("", "interrupted")
        return 130
    except RocpkgWorkerLost as exc:
        print_error("", str(exc))
        return 1
    except Exception as exc:  # kpack format errors are input errors too
        from kpack.errors import KpackFormatError

        if isinstance(exc, KpackFormatError):
            print_error("", str(exc))
            return 2
        raise


def entry() -> None:
    """The `rocpkg` command: main(), then the process ends without the interpreter's
    teardown (freeing every module and object one by one, on a process whose work is
    done, would add to the tail of every build). Safe because
    everything rocpkg writes goes through `with` blocks (AtomicOutput, the state journal,
    the OUT lock) and the worker pool is joined before main returns; what is left is
    the standard streams, flushed here. An exception still takes the normal way out."""
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader that left (`rocpkg plan | head`)
            pass
    os._exit(status)


if __name__ == "__main__":
    entry()
