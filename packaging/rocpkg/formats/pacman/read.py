"""Reading a `.pkg.tar.{zst,xz,gz}` back, for verify and the repository database: streamed,
bounded and safe against a hostile file (no symlink followed to open it, metadata members
of bounded size, member names inside the root, only files, directories and symlinks).

read_pacman_info() reads only the metadata members that precede the files (.BUILDINFO,
.INSTALL, .MTREE, .PKGINFO: the head of the stream); read_pacman() reads the whole
package, hands each regular file's bytes to a visitor, and checks the payload against
the .MTREE (every entry present, of its type, mode, size, link and digests) and the
.MTREE against the payload."""
from __future__ import annotations

import hashlib
import io
import lzma
import os
import stat
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Callable

import zstandard

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.compression import open_decompressor
from rocpkg.formats.pacman import mtree, tar
from rocpkg.formats.streams import CHUNK
from rocpkg.model import DIR, FILE, SYMLINK

MAX_TEXT = 1 << 20              # .PKGINFO, .BUILDINFO, .INSTALL
MAX_MTREE = 16 << 20            # the gzip'd .MTREE as stored
MAX_MTREE_TEXT = 128 << 20      # and inflated: some 500,000 files
META = (".PKGINFO", ".BUILDINFO", ".INSTALL", ".MTREE")
_MAGIC = ((b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b", "gzip"))
_KINDS = {tar.REG: FILE, tar.DIR: DIR, tar.SYM: SYMLINK}
_MTREE_KINDS = {FILE: "file", DIR: "dir", SYMLINK: "link"}


@dataclass(frozen=True)
class PacmanFile:
    """One payload member: absolute install path, FILE/DIR/SYMLINK, permission bits, size,
    link target, mtime."""

    path: str
    type: str
    mode: int
    size: int = 0
    link: str = ""
    mtime: int = 0


@dataclass
class PacmanPackage:
    """What a package holds. info: the .PKGINFO's keys -> values in order (`depend` has one
    per relation); files: the payload's members in order (read_pacman; from the .MTREE
    for read_pacman_info)."""

    path: str
    pkginfo: str
    info: dict[str, list[str]]
    buildinfo: str = ""
    install: str = ""
    mtree: list[mtree.MtreeEntry] = field(default_factory=list)
    files: list[PacmanFile] = field(default_factory=list)

    def first(self, key: str, default: str = "") -> str:
        """A .PKGINFO key's first value."""
        values = self.info.get(key)
        return values[0] if values else default


def parse_pkginfo(text: str, where: str) -> dict[str, list[str]]:
    """`key = value` lines (comments and blank lines skipped), as pacman reads them."""
    info: dict[str, list[str]] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        if not equals or not key.strip():
            raise RocpkgInputError((where, f".PKGINFO line {number} is not `key = value`: {line[:80]!r}"))
        info.setdefault(key.strip(), []).append(value.strip())
    for key in ("pkgname", "pkgver", "arch"):
        if not info.get(key):
            raise RocpkgInputError((where, f".PKGINFO has no {key}"))
    return info


def _open(path: str) -> BinaryIO:
    """The package file, never through a symlink, a regular file only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise RocpkgInputError((path, f"can't be opened: {exc.strerror}")) from None
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise RocpkgInputError((path, "not a regular file"))
    return handle


def _decompressed(handle: BinaryIO, path: str):
    head = handle.read(6)
    handle.seek(0)
    kind = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
    if kind is None:
        raise RocpkgInputError((path, "not a pacman package: no zstd, xz or gzip data"))
    return io.BufferedReader(open_decompressor(kind, handle, path), CHUNK)


def _read(path: str, whole: bool, visit, listed=None) -> PacmanPackage:
    path = os.fspath(path)
    texts: dict[str, str] = {}
    mtree_data = None
    files: list[PacmanFile] = []
    digests: dict[str, tuple[str, str]] = {}
    meta_digests: dict[str, tuple[int, str, str]] = {}
    with _open(path) as handle:
        stream = _decompressed(handle, path)
        for member, body in tar.iter_members(stream, path):
            name = member.name
            if name in META and member.kind == tar.REG and not files:
                if name in texts or (name == ".MTREE" and mtree_data is not None):
                    raise RocpkgInputError((path, f"{name} appears twice"))
                data = body.read_all(MAX_MTREE if name == ".MTREE" else MAX_TEXT, name)
                if name == ".MTREE":
                    mtree_data = data
                else:
                    texts[name] = _decoded(data, name, path)
                    meta_digests[name] = (len(data), hashlib.md5(data, usedforsecurity=False).hexdigest(),
                                          hashlib.sha256(data).hexdigest())
                continue
            if name.startswith(".") and "/" not in name and not files:
                raise RocpkgInputError((path, f"an unknown metadata member {name!r}"))
            if not whole:
                break
            if not name:
                raise RocpkgInputError((path, "the package root is listed as a member"))
            found = PacmanFile("/" + name, _KINDS[member.kind], member.mode, member.size, member.linkname, member.mtime)
            files.append(found)
            if listed is not None:
                listed(found)
            if member.kind == tar.REG:
                digests[found.path] = _visit(found, body, visit)
    if ".PKGINFO" not in texts:
        raise RocpkgInputError((path, "no .PKGINFO before the package's files"))
    if mtree_data is None:
        raise RocpkgInputError((path, "no .MTREE before the package's files"))
    package = PacmanPackage(path, texts[".PKGINFO"], parse_pkginfo(texts[".PKGINFO"], path),
                            texts.get(".BUILDINFO", ""), texts.get(".INSTALL", ""),
                            mtree.parse(mtree_data, path, MAX_MTREE_TEXT))
    if whole:
        package.files = files
        _check_mtree(path, package.mtree, files, digests, meta_digests)
    else:
        package.files = [_from_mtree(e) for e in package.mtree if e.path not in META]
    return package


def _decoded(data: bytes, name: str, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RocpkgInputError((where, f"{name} is not UTF-8 text")) from None


def _from_mtree(entry: mtree.MtreeEntry) -> PacmanFile:
    kind = {"file": FILE, "dir": DIR, "link": SYMLINK}.get(entry.type, entry.type)
    return PacmanFile("/" + entry.path, kind, entry.mode, entry.size, entry.link, entry.time)


class _Watched:
    """A member's bytes as a visitor reads them, digested on the way."""

    def __init__(self, body):
        self.body = body
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.sha256 = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.body.read(n if n is not None and n >= 0 else CHUNK)
        self.md5.update(data)
        self.sha256.update(data)
        return data

    def drain(self) -> tuple[str, str]:
        while self.read(CHUNK):
            pass
        return self.md5.hexdigest(), self.sha256.hexdigest()


def _visit(found: PacmanFile, body, visit) -> tuple[str, str]:
    watched = _Watched(body)
    if visit is not None:
        visit(found, watched)
    return watched.drain()


def _check_mtree(path: str, listed: list[mtree.MtreeEntry], files: list[PacmanFile],
                 digests: dict[str, tuple[str, str]], meta: dict[str, tuple[int, str, str]]) -> None:
    """Every payload member as the .MTREE lists it, and every .MTREE entry in the payload;
    all differences at once."""
    problems = []
    by_path: dict[str, mtree.MtreeEntry] = {}
    for entry in listed:
        if entry.path in by_path:
            problems.append((f"{path}: .MTREE", f"lists {entry.path} twice"))
        by_path[entry.path] = entry
    seen = set()
    for name, (size, md5, sha256) in meta.items():
        entry = by_path.get(name)
        if entry is None or (entry.size, entry.md5, entry.sha256) != (size, md5, sha256):
            problems.append((f"{path}: {name}", "differs from its .MTREE entry" if entry else "not in the .MTREE"))
        seen.add(name)
    for found in files:
        rel = found.path[1:]
        if rel in seen:
            problems.append((f"{path}: {found.path}", "in the payload twice"))
            continue
        seen.add(rel)
        entry = by_path.get(rel)
        if entry is None:
            problems.append((f"{path}: {found.path}", "not in the .MTREE"))
            continue
        want = (_MTREE_KINDS[found.type], found.mode if found.type != SYMLINK else entry.mode)
        if (entry.type, entry.mode) != want:
            problems.append((f"{path}: {found.path}", f"a {found.type} of mode {found.mode:o}, the .MTREE says "
                                                      f"{entry.type} of mode {entry.mode:o}"))
        elif found.type == FILE and (entry.size, entry.md5, entry.sha256) != (found.size, *digests[found.path]):
            problems.append((f"{path}: {found.path}", "its bytes differ from the .MTREE's size or digests"))
        elif found.type == SYMLINK and entry.link != found.link:
            problems.append((f"{path}: {found.path}", f"links to {found.link!r}, the .MTREE says {entry.link!r}"))
    problems += [(f"{path}: /{p}", "in the .MTREE but not in the payload") for p in by_path if p not in seen]
    if problems:
        raise RocpkgInputError(*problems)


def _guarded(path, whole: bool, visit, listed=None) -> PacmanPackage:
    try:
        return _read(path, whole, visit, listed)
    except RocpkgInputError:
        raise
    except (OSError, EOFError, zstandard.ZstdError, lzma.LZMAError, zlib.error) as exc:
        raise RocpkgInputError((os.fspath(path), f"not a readable pacman package: {exc}")) from None


def read_pacman_info(path: str | os.PathLike) -> PacmanPackage:
    """The metadata of a package, read from the head of its stream only; files are the
    .MTREE's (not checked against the payload: read_pacman does that)."""
    return _guarded(path, False, None)


def read_pacman(path: str | os.PathLike,
                visit: Callable[[PacmanFile, BinaryIO], None] | None = None,
                listed: Callable[[PacmanFile], None] | None = None) -> PacmanPackage:
    """The whole package, streamed: listed(file) is called for each payload member as it
    comes (before visit), visit(file, reader) for each regular file (read what it needs;
    the rest is skipped), and the payload is checked against the .MTREE. Bad input (a
    damaged or hostile package, digests that differ) raises RocpkgInputError naming the
    package and each problem; what listed or visit raise passes through."""
    return _guarded(path, True, visit, listed)
