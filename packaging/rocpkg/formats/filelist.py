"""The one normalised file list every writer packs (nfpm's files/files.go): install
paths checked once with one rule, duplicates and system directories refused, parents
added where a format needs them, and the sources a writer reads (PackageSources).

Every problem of a package is reported at once, each naming the package and the path."""
from __future__ import annotations

import os
import posixpath
import stat
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.streams import SourceFile
from rocpkg.model import DIR, FILE, SYMLINK, FileEntry

# Directories that belong to the base system (Debian's base-files, Fedora's filesystem
# package): never owned by a package built here.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt",
    "/root", "/run", "/sbin", "/srv", "/tmp", "/usr", "/usr/bin", "/usr/include",
    "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/sbin", "/usr/share",
    "/usr/share/doc", "/usr/share/man", "/usr/src", "/var", "/etc/ld.so.conf.d",
})


# Base-system directories that no Debian package lists (`dpkg -S /opt` finds nothing on
# Debian 12): a .deb that listed one would make dpkg delete it, when empty, with the last
# package listing it. Every base system has them, so a .deb leaves them out.
UNLISTED_BASE_DIRS = frozenset({"/opt"})


def sort_key(path: str) -> bytes:
    """Both formats order files bytewise by path (parents before children)."""
    return path.encode("utf-8", "surrogateescape")


def path_problem(path: str) -> str | None:
    """Why no package format can hold this install path, or None."""
    if not path.startswith("/") or path != "/" and path.endswith("/"):
        return "must be an absolute path without a trailing slash"
    if "\n" in path or "\0" in path or "\r" in path:
        return "a file name that tar and dpkg can't hold (newline or NUL in it)"
    if posixpath.normpath(path) != path and path != "/":
        return "not a normalised path ('.', '..' or '//' in it)"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "a file name that is not valid UTF-8, which tar's GNU headers can't carry"
    return None


def _entry_problem(entry: FileEntry) -> str | None:
    problem = path_problem(entry.path)
    if problem:
        return problem
    if entry.type not in (FILE, DIR, SYMLINK):
        return f"unknown entry type {entry.type!r}"
    if entry.type == SYMLINK and (not entry.link_target or "\n" in entry.link_target
                                  or "\0" in entry.link_target):
        return f"symlink target {entry.link_target!r} can't be stored"
    if entry.type == FILE and not entry.source:
        return "a file without a source path"
    if entry.type == DIR and entry.path in SYSTEM_DIRS:
        return "a system directory must not be owned by a package"
    return None


def checked_files(owner: str, files: Iterable[FileEntry]) -> list[FileEntry]:
    """The planned entries sorted bytewise by path, after refusing what a package
    manager would mis-install: bad paths, unknown types, empty symlinks, files without
    a source, duplicates, owned system directories, a parent that is not a directory."""
    problems: list[tuple[str, str]] = []
    entries: dict[str, FileEntry] = {}
    for entry in files:
        problem = _entry_problem(entry)
        if problem is None and entry.path in entries:
            problem = "listed twice"
        if problem:
            problems.append((f"{owner}: {entry.path}", problem))
        else:
            entries[entry.path] = entry
    problems += _parent_problems(owner, entries)
    if problems:
        raise RocpkgInputError(*problems)
    return [entries[p] for p in sorted(entries, key=sort_key)]


def _parent(path: str) -> str:
    """posixpath.dirname of a normalised absolute path (what the entries hold once
    checked), at a small part of its cost: it is called for every entry of the tree."""
    cut = path.rfind("/")
    return "" if cut < 0 else path[:cut] or "/"


def _parent_problems(owner: str, entries: dict[str, FileEntry]) -> list[tuple[str, str]]:
    """Each path whose nearest ancestor that is an entry is not a directory. An ancestor
    found fine (with all of its own) is not walked again: a package's files share their
    directories, and walking every file's whole chain was most of a small package's tree."""
    problems = []
    fine: set[str] = set()
    for path in entries:
        parent = _parent(path)
        chain = []
        while parent not in ("/", "") and parent not in fine:
            existing = entries.get(parent)
            if existing is not None and existing.type != DIR:
                problems.append((f"{owner}: {path}", f"its parent {parent} is not a directory"))
                break
            chain.append(parent)
            parent = _parent(parent)
        else:
            fine.update(chain)
    return problems


def with_parents(owner: str, files: Iterable[FileEntry]) -> list[FileEntry]:
    """The entries plus every missing ancestor (a 0755 root directory, "/" and
    UNLISTED_BASE_DIRS excluded), sorted bytewise: what dpkg needs, parents first.
    files: entries whose paths checked_files passed (normalised, absolute) and generated
    ones of the same kind."""
    entries = {e.path: e for e in files}
    problems = _parent_problems(owner, entries)
    if problems:
        raise RocpkgInputError(*problems)
    for path in list(entries):
        parent = _parent(path)
        while parent not in ("/", "") and parent not in entries:
            if parent not in UNLISTED_BASE_DIRS:
                entries[parent] = FileEntry(parent, DIR, 0o755)
            parent = _parent(parent)
    return [entries[p] for p in sorted(entries, key=sort_key)]


class PackageSources:
    """The source files of one package as its writer reads them: each opened once, by
    open(), as a SourceFile (which refuses a file that is not the planned one: vanished,
    replaced, resized, unreadable), and what each was when opened recorded, in order:
    (source, size, mtime_ns, inode), the identities the build records
    (BuiltPackage.sources) before a byte of it is read. A writer runs inside checked():
    when a source is refused, every bad source of the package is reported at once."""

    def __init__(self, owner: str, files: Sequence[FileEntry]):
        self.owner = owner
        self.files = files
        self.found: list[tuple[str, int, int, int]] = []

    def open(self, entry: FileEntry, size: int | None = None) -> SourceFile:
        """entry's source, opened for its one read (size: the bytes planned, entry.size
        by default)."""
        source = SourceFile(f"{self.owner}: {entry.path}", entry.source, entry.size if size is None else size,
                            entry.patches, entry.identity)
        self.found.append(source.found)
        return source

    @contextmanager
    def checked(self) -> Iterator["PackageSources"]:
        """A refused source is reported with every other bad source of the package
        (source_problems)."""
        try:
            yield self
        except RocpkgInputError as exc:
            named = {where for where, _ in exc.problems}
            others = [problem for problem in source_problems(self.owner, self.files) if problem[0] not in named]
            if others:
                raise RocpkgInputError(*exc.problems, *others) from None
            raise


def source_problems(owner: str, files: Iterable[FileEntry]) -> list[tuple[str, str]]:
    """(where, what) for each regular file whose source is not a regular file of its
    planned size."""
    problems = []
    for entry in files:
        if entry.type != FILE:
            continue
        try:
            info = os.stat(entry.source)
        except FileNotFoundError:
            why = "the source file is missing (vanished since planning?)"
        except OSError as exc:
            why = f"the source file can't be read: {exc.strerror or exc}"
        else:
            if not stat.S_ISREG(info.st_mode):
                why = "the source is not a regular file"
            elif info.st_size != entry.size:
                why = (f"the source file has {info.st_size} bytes, planned {entry.size} "
                       f"(changed since planning?)")
            else:
                continue
        problems.append((f"{owner}: {entry.path}", f"{why} ({entry.source})"))
    return problems
