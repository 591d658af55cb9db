"""What every rocpkg subcommand module shares (cli.py and cli_build.py both import it,
never each other): the error line, the plan options and loading a plan from them,
interactive detection and the size format."""
from __future__ import annotations

import argparse
import os
import sys

from rocpkg.errors import RocpkgInputError


def print_error(where: str, what: str) -> None:
    print(f"error: {where}: {what}" if where else f"error: {what}", file=sys.stderr)


def add_plan_options(p: argparse.ArgumentParser, artifacts_required: bool = True) -> None:
    """The options every plan-based command shares, so one command line moves between them."""
    p.add_argument("-c", "--config", default=None, help="package.json (default: the bundled one)")
    p.add_argument("-a", "--artifacts", required=artifacts_required, help="artifacts directory")
    p.add_argument("--version", dest="pkg_version", help="release version (overrides settings.version)")
    p.add_argument("--release", help="package release (overrides settings.release)")
    p.add_argument("--targets", help="comma-separated targets to package (default: all found)")
    p.add_argument("--formats", default="deb,rpm", help="comma-separated formats: deb,rpm")


def split_list(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def formats(args) -> list[str]:
    chosen = split_list(args.formats) or []
    bad = [f for f in chosen if f not in ("deb", "rpm")]
    if bad or not chosen:
        raise RocpkgInputError("--formats", f"expected deb, rpm or both, got {args.formats!r}")
    return chosen


def load_plan(args):
    from rocpkg.catalog import scan
    from rocpkg.config import load_config
    from rocpkg.plan import make_plan

    config = load_config(args.config)
    catalog = scan(args.artifacts, config.settings["families"])
    return make_plan(config, catalog, version=args.pkg_version, release=args.release,
                     targets=split_list(args.targets), formats=formats(args))


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
