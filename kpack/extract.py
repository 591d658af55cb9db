"""Writing an archive's kernels under a directory (`kpack extract`), whole or not at all.

The directory the user names may be a symlink (the user named it); nothing below it is
ever followed: every directory component of a member's path is opened with O_NOFOLLOW
relative to its parent's descriptor, so a symlink planted where a member's directory
belongs (`DIR/lib -> /elsewhere`) is refused, never written through. Only directories
and regular files are created. Every member's path is checked before anything is
written; the kernels are then streamed into a private staging directory inside DIR
(flat, one file per kernel) and renamed into place only when all of them decompressed
to their declared sizes, so a refused or bad archive leaves DIR as it was.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from typing import Iterable, Iterator

from kpack.format import file_kind

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ExtractRefused(Exception):
    """A member that cannot be written where it belongs without following a symlink or
    replacing something that is not a file (str: `<path>: <why>`)."""


def _lstat_mode(parent: int, name: str) -> int | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def check_members(output: str, members: list[str]) -> None:
    """Refuse (ExtractRefused naming the path) a member whose directories are not
    directories below output (a symlink, a file, a FIFO), whose own path is a directory,
    or that is both a file and another member's directory. Nothing is created."""
    files = set(members)
    for member in members:
        parts = member.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in files:
                raise ExtractRefused(f"{os.path.join(output, member)}: {'/'.join(parts[:depth])} is both a kernel "
                                     f"and a directory of another kernel")
    if not os.path.isdir(output):
        return
    root = os.open(output, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for member in members:
            with _Walk(output, root, member, create=False) as (parent, name):
                mode = None if parent is None else _lstat_mode(parent, name)
                if mode is not None and stat.S_ISDIR(mode):
                    raise ExtractRefused(f"{os.path.join(output, member)}: is a directory where a kernel belongs")
    finally:
        os.close(root)


class _Walk:
    """(descriptor of a member's directory, its file name), each directory below the
    root opened without following a symlink; create: missing ones are made, else the
    descriptor is None from the first missing one on."""

    def __init__(self, output: str, root: int, member: str, create: bool):
        self.output, self.root, self.parts, self.create = output, root, member.split("/"), create
        self.fd: int | None = None

    def __enter__(self) -> tuple[int | None, str]:
        fd = os.dup(self.root)
        for depth, part in enumerate(self.parts[:-1], 1):
            try:
                if self.create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return None, self.parts[-1]
            except OSError as exc:
                mode = _lstat_mode(fd, part)
                os.close(fd)
                where = os.path.join(self.output, *self.parts[:depth])
                if mode is not None and (stat.S_ISLNK(mode) or exc.errno in (errno.ELOOP, errno.ENOTDIR)):
                    never = " (kpack never writes through one)" if stat.S_ISLNK(mode) else ""
                    raise ExtractRefused(f"{where}: is {file_kind(mode)} where a directory belongs{never}") from None
                raise
            os.close(fd)
            fd = nxt
        self.fd = fd
        return fd, self.parts[-1]

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)


def write_members(output: str, members: list[str], contents: Iterable[Iterator[bytes]]) -> None:
    """Write each member (a '/'-separated path below output, checked by check_members)
    from its chunks, as the module doc says."""
    check_members(output, members)
    os.makedirs(output, exist_ok=True)
    root = os.open(output, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        staging_name = os.path.basename(tempfile.mkdtemp(prefix=".kpack-extract-", dir=output))
        staging = os.open(staging_name, DIR_FLAGS, dir_fd=root)
        try:
            for index, chunks in enumerate(contents):
                fd = os.open(str(index), FILE_FLAGS, 0o644, dir_fd=staging)
                with os.fdopen(fd, "wb") as out:
                    for chunk in chunks:
                        out.write(chunk)
            for index, member in enumerate(members):
                with _Walk(output, root, member, create=True) as (parent, name):
                    os.replace(str(index), name, src_dir_fd=staging, dst_dir_fd=parent)
        finally:
            for name in os.listdir(staging):
                os.unlink(name, dir_fd=staging)
            os.close(staging)
            os.rmdir(staging_name, dir_fd=root)
    finally:
        os.close(root)
