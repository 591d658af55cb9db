"""`rocpkg` command line: the only place that prints or exits.

Each subcommand is a `_cmd_<name>(args) -> int` handler registered in `build_parser()`.
Library code raises RocpkgInputError (or kpack.errors.KpackFormatError) for bad input;
main() turns those into `error: <where>: <what>` lines and exit status 2.
"""
from __future__ import annotations

import argparse
import os
import sys

from rocpkg.errors import RocpkgInputError


def _err(where: str, what: str) -> None:
    print(f"error: {where}: {what}" if where else f"error: {what}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocpkg", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _register_commands(sub)
    return parser


def _register_commands(sub) -> None:
    """Subcommand parsers; each sets `func` to its handler."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except RocpkgInputError as exc:
        for where, what in exc.problems:
            _err(where, what)
        return 2
    except KeyboardInterrupt:
        _err("", "interrupted")
        return 130
    except Exception as exc:  # kpack format errors are input errors too
        from kpack.errors import KpackFormatError

        if isinstance(exc, KpackFormatError):
            _err("", str(exc))
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
