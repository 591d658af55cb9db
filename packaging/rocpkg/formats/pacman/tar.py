"""The tar archives inside pacman packages and databases: writing members as bsdtar does
for makepkg and repo-add (ustar headers, a pax header only where a name, link or size
needs one; owner root:root, uid/gid 0), and reading them back from a hostile file.

The reader is a small streaming ustar/pax parser rather than tarfile: tarfile reads a pax
header of any declared size into memory and keeps every member it has seen. Here every
header record is bounded (MAX_HEADER_RECORD), member names must stay inside the root
(relative, no `..`), and only regular files, directories and symlinks are accepted."""
from __future__ import annotations

import functools
import posixpath
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.streams import read_exact, read_upto, skip_exact
from rocpkg.formats.tarinfo import root_tarinfo

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE
MAX_HEADER_RECORD = 64 << 10     # a pax or GNU long-name record: names are at most 4 KiB
REG, DIR, SYM = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE


@functools.lru_cache(maxsize=4096)
def header(name: str, kind: bytes, mode: int, mtime: int, size: int = 0, linkname: str = "") -> bytes:
    """The header block(s) of one member (a directory's name gets its trailing '/')."""
    info = root_tarinfo(name + "/" if kind == DIR and not name.endswith("/") else name, kind, mode, mtime, size, linkname)
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def member(name: str, data: bytes, mtime: int, mode: int = 0o644) -> bytes:
    """A whole regular-file member: header, bytes, padding."""
    return header(name, REG, mode, mtime, len(data)) + data + padding(len(data))


def end(offset: int) -> bytes:
    """Two zero blocks, then zeros up to a full 10 KiB record, as bsdtar writes."""
    offset += 2 * BLOCK
    return b"\0" * (2 * BLOCK + (-offset % RECORD))


# -- reading -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Member:
    """One member read back: name relative to the root without trailing '/', its type
    (REG, DIR or SYM), permission bits, size, mtime and link target."""

    name: str
    kind: bytes
    mode: int
    size: int
    mtime: int
    linkname: str = ""


def _number(field: bytes, where: str) -> int:
    """A numeric header field: octal text or (first byte 0x80) base-256."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise RocpkgInputError((where, f"a tar header number is not octal: {field!r}")) from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax_records(data: bytes, where: str) -> dict[str, str]:
    """`len key=value\\n` records of a pax extended header."""
    records, at = {}, 0
    while at < len(data):
        space = data.find(b" ", at)
        try:
            length = int(data[at:space])
        except ValueError:
            raise RocpkgInputError((where, "a corrupt pax header record")) from None
        record = data[at:at + length]
        if length <= 0 or space < 0 or not record.endswith(b"\n") or b"=" not in record:
            raise RocpkgInputError((where, "a corrupt pax header record"))
        key, _, value = record[space - at + 1:-1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        at += length
    return records


def safe_name(raw: str, where: str) -> str:
    """A member name as a path relative to the root ("" for the root itself), refused when
    it is absolute or climbs out with `..`."""
    name = (raw[2:] if raw.startswith("./") else raw).rstrip("/")
    if raw.startswith("/") or "\0" in raw:
        raise RocpkgInputError((where, f"a member name outside the package root: {raw!r}"))
    if name in ("", "."):
        return ""
    if posixpath.normpath(name) != name or name == ".." or name.startswith("../"):
        raise RocpkgInputError((where, f"a member name that is not a plain relative path: {raw!r}"))
    return name


def iter_members(stream: BinaryIO, where: str) -> Iterator[tuple[Member, "_Body"]]:
    """Each member of a tar stream with a reader of its bytes (read it, or leave it: the
    rest is skipped before the next header). Ends at the first zero block."""
    pending: dict[str, str] = {}
    while True:
        block = read_upto(stream, BLOCK)
        if len(block) < BLOCK:
            raise RocpkgInputError((where, "the tar stream ends without its end blocks"))
        if block == bytes(BLOCK):
            return
        stored = _number(block[148:156], where)
        if stored != sum(block[:148]) + 256 + sum(block[156:]):
            raise RocpkgInputError((where, "a tar header with a wrong checksum"))
        kind = block[156:157] or REG
        size = _number(block[124:136], where)
        if kind in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
            if size > MAX_HEADER_RECORD:
                raise RocpkgInputError((where, f"a tar header record of {size} bytes (at most {MAX_HEADER_RECORD})"))
            data = _read(stream, size + len(padding(size)), where)[:size]
            if kind == tarfile.XHDTYPE:
                pending.update(_pax_records(data, where))
            elif kind == tarfile.GNUTYPE_LONGNAME:
                pending["path"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind == tarfile.GNUTYPE_LONGLINK:
                pending["linkpath"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        name = _text(block[0:100])
        if block[257:262] == b"ustar" and block[345:346] != b"\0":
            name = f"{_text(block[345:500])}/{name}"
        name = pending.get("path", name)
        linkname = pending.get("linkpath", _text(block[157:257]))
        if "size" in pending:
            try:
                size = int(pending["size"])
            except ValueError:
                raise RocpkgInputError((where, "a pax size that is not a number")) from None
        pending = {}
        if kind == tarfile.AREGTYPE:
            kind = REG
        if kind not in (REG, DIR, SYM):
            raise RocpkgInputError((where, f"member {name!r}: type {kind!r} (only files, directories and "
                                           "symlinks belong in a package)"))
        if kind != REG and size:
            raise RocpkgInputError((where, f"member {name!r}: a directory or symlink with {size} bytes of data"))
        found = Member(safe_name(name, where), kind, _number(block[100:108], where) & 0o7777, size,
                       _number(block[136:148], where), linkname)
        body = _Body(stream, size, where)
        yield found, body
        body.skip()
        _read(stream, len(padding(size)), where)


def _read(stream: BinaryIO, n: int, where: str) -> bytes:
    try:
        return read_exact(stream, n)
    except EOFError as exc:
        raise RocpkgInputError((where, f"the tar stream is cut short: {exc}")) from None


class _Body:
    """A member's bytes: read() at most what is left of it; skip() drains the rest."""

    def __init__(self, stream: BinaryIO, size: int, where: str):
        self.stream, self.left, self.where = stream, size, where

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        if n <= 0:
            return b""
        data = self.stream.read(n)
        if not data:
            raise RocpkgInputError((self.where, "the tar stream is cut short inside a member"))
        self.left -= len(data)
        return data

    def read_all(self, limit: int, what: str) -> bytes:
        """The whole member, refused when it is over limit bytes."""
        if self.left > limit:
            raise RocpkgInputError((self.where, f"{what} is {self.left} bytes (at most {limit})"))
        data = _read(self.stream, self.left, self.where)
        self.left = 0
        return data

    def skip(self) -> None:
        if self.left:
            try:
                skip_exact(self.stream, self.left)
            except EOFError as exc:
                raise RocpkgInputError((self.where, f"the tar stream is cut short: {exc}")) from None
            self.left = 0
