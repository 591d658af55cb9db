"""What every format's Reader (rocpkg.formats.plugin.Reader) shares: the package files of
a directory, and one way to turn what went wrong while reading a package into the
RocpkgInputError a Reader raises."""
from __future__ import annotations

import os

from rocpkg.errors import RocpkgInputError


def files_below(top: str, suffix: str, depth: int | None = None, skip: tuple[str, ...] = ()) -> list[str]:
    """The files under `top` whose names end with `suffix`, directories walked in name
    order: at any depth (None), or exactly `depth` directories below top (0: top's own
    files); directories named in `skip` are not entered. [] when top is no directory."""
    if not os.path.isdir(top):
        return []
    found = []
    for root, dirs, files in os.walk(top):
        level = 0 if root == top else os.path.relpath(root, top).count(os.sep) + 1
        dirs[:] = sorted(d for d in dirs if d not in skip and (depth is None or level < depth))
        if depth is None or level == depth:
            found += [os.path.join(root, f) for f in sorted(files) if f.endswith(suffix)]
    return found


def why(exc: BaseException) -> str:
    """What an exception says of a package: a RocpkgInputError's `what`s, joined, or the
    exception's text (its type's name when it has none)."""
    if isinstance(exc, RocpkgInputError):
        return "; ".join(what for _, what in exc.problems)
    return str(exc) or type(exc).__name__


def unreadable(path: str, exc: BaseException, part: str = "") -> RocpkgInputError:
    """The RocpkgInputError a Reader raises for a package it could not read: where the
    package file, what `part: why` (or why alone)."""
    return RocpkgInputError((path, f"{part}: {why(exc)}" if part else why(exc)))
