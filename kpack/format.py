"""The kpack archive format's facts (version 1, docs/kpack.md) and the bounded byte access the
reader, the writer and the checks share.

Header 16 bytes (HEADER: `KPAK`, u32 version, u64 TOC offset), zeros to BLOB_AREA_START,
the blob area, then a MessagePack TOC running to the end of the file. rocpkg reads these
names instead of restating them.
"""
from __future__ import annotations

import io
import os
import stat
import struct
from typing import Any, BinaryIO, NamedTuple

from kpack.errors import KpackFormatError

MAGIC = b"KPAK"
FORMAT_VERSION = 1
HEADER_SIZE = 16
BLOB_AREA_START = 64
SCHEME_NONE = "none"
SCHEME_ZSTD = "zstd-per-kernel"
SCHEMES = (SCHEME_NONE, SCHEME_ZSTD)
KERNEL_TYPE = "hsaco"
# Lookups answered by walking the TOC (early exit) before a full index is built: an index
# costs about as much as four or five walks, and most readers fetch a handful of kernels.
WALKS_BEFORE_INDEX = 3
# One zstd RLE block (3-byte header + 1 byte) expands to at most 128 KiB: no frame can
# produce more than this many bytes per byte of input.
ZSTD_MAX_RATIO = 32768

U32 = struct.Struct("<I")
# The 16-byte header: magic, u32 version, u64 TOC offset (little-endian).
HEADER = struct.Struct("<4sIQ")
# Bytes handed out per chunk when a kernel is streamed (decompressed or copied).
CHUNK = 1 << 20
# The largest TOC read into memory (about 2.5 million kernels); a larger one is refused.
MAX_TOC_SIZE = 256 << 20


class Entry(NamedTuple):
    key: str
    arch: str
    ordinal: int
    original_size: int
    metadata: Any = None


def msgpack_limits(size: int) -> dict:
    """msgpack.Unpacker limits so that no declared length can exceed the bytes present."""
    size = max(size, 1)
    return dict(max_buffer_size=size, max_bin_len=size, max_str_len=size,
                max_array_len=size, max_map_len=size, max_ext_len=size)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def type_name(value) -> str:
    return {dict: "map", list: "array", str: "string", bytes: "binary", bool: "boolean",
            int: "integer", float: "float", type(None): "nil"}.get(type(value), type(value).__name__)


def file_kind(mode: int) -> str:
    """What a file of this mode is, for an error."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "of an unknown type"


class ByteSource:
    """Positioned reads from a path (os.pread, nothing buffered) or from a seekable binary
    file object (seek + read; lets a caller count what the reader reads)."""

    def __init__(self, source: str | os.PathLike | BinaryIO):
        self._fd = None
        self._file = None
        if isinstance(source, (str, os.PathLike)):
            self.name = os.fspath(source)
            # without blocking (opening a FIFO waits for a writer), and only a regular file
            self._fd = os.open(self.name, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
                               | getattr(os, "O_CLOEXEC", 0))
            info = os.fstat(self._fd)
            if not stat.S_ISREG(info.st_mode):
                os.close(self._fd)
                self._fd = None
                raise KpackFormatError(f"is {file_kind(info.st_mode)}, not a regular file", path=self.name)
            self.size = info.st_size
            if hasattr(os, "posix_fadvise"):  # small scattered reads: no readahead
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
        else:
            self._file = source
            self.name = str(getattr(source, "name", "<stream>"))
            self.size = source.seek(0, os.SEEK_END)

    @property
    def fd(self) -> int | None:
        """The descriptor when reading a path, for os.pread in hot loops; None for file objects."""
        return self._fd

    def read_at(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise KpackFormatError(
                f"{size} bytes at offset {offset} run past the end of the file ({self.size} bytes)",
                where=offset)
        chunks = []
        got = 0
        while got < size:
            if self._fd is not None:
                chunk = os.pread(self._fd, size - got, offset + got)
            else:
                self._file.seek(offset + got)
                chunk = self._file.read(size - got)
            if not chunk:
                raise KpackFormatError("file ended while reading (did it shrink?)", where=offset + got)
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Window(io.RawIOBase):
    """[start, end) of a ByteSource as a raw stream, read in chunks of at most CHUNK bytes
    (what a streaming decompressor reads a frame through)."""

    def __init__(self, source: "ByteSource", start: int, end: int):
        super().__init__()
        self._source, self._position, self._end = source, start, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self._end - self._position, CHUNK)
        if count <= 0:
            return 0
        buffer[:count] = self._source.read_at(self._position, count)
        self._position += count
        return count


def parse_header(data: bytes, file_size: int) -> tuple[int, int]:
    """(version, TOC offset) of an archive whose first 16 bytes are `data`; raises
    KpackFormatError for a short file, bad magic, another version or a TOC offset that
    leaves no TOC inside the file."""
    if file_size < HEADER_SIZE or len(data) < HEADER_SIZE:
        raise KpackFormatError(f"file is {file_size} bytes, shorter than the {HEADER_SIZE}-byte header",
                               where=0)
    magic, version, toc_offset = HEADER.unpack(data[:HEADER_SIZE])
    if magic != MAGIC:
        raise KpackFormatError(f"bad magic {magic!r}, expected {MAGIC!r}", where=0)
    if version != FORMAT_VERSION:
        raise KpackFormatError(f"unsupported version {version}, expected {FORMAT_VERSION}", where=4)
    if toc_offset >= file_size:
        raise KpackFormatError(f"TOC offset {toc_offset} is past the end of the file ({file_size} bytes)"
                               if toc_offset > file_size else f"TOC offset {toc_offset} leaves no room for a "
                               f"TOC before the end of the file", where=8)
    if toc_offset < BLOB_AREA_START:
        raise KpackFormatError(f"TOC offset {toc_offset} is inside the {BLOB_AREA_START}-byte header",
                               where=8)
    if file_size - toc_offset > MAX_TOC_SIZE:
        raise KpackFormatError(f"TOC of {file_size - toc_offset} bytes is larger than the {MAX_TOC_SIZE} "
                               f"bytes kpack reads", where=8)
    return version, toc_offset


def check_entry(key: str, arch, entry, count: int) -> Entry:
    """Validate one `toc[key][arch]` record; `count` is the number of stored kernels."""
    where = f"toc[{key!r}][{arch!r}]"
    if not isinstance(arch, str) or not arch:
        raise KpackFormatError(f"architecture key is a {type_name(arch)}, not a string", where=where)
    if not isinstance(entry, dict):
        raise KpackFormatError(f"entry is a {type_name(entry)}, not a map", where=where)
    for name in ("type", "ordinal", "original_size"):
        if name not in entry:
            raise KpackFormatError(f"entry has no {name!r}", where=where)
    if entry["type"] != KERNEL_TYPE:
        raise KpackFormatError(f"type is {entry['type']!r}, expected {KERNEL_TYPE!r}", where=f"{where}.type")
    ordinal, original_size = entry["ordinal"], entry["original_size"]
    if not is_int(ordinal) or not 0 <= ordinal < count:
        raise KpackFormatError(f"ordinal {ordinal!r} is out of range (archive stores {count} kernels)",
                               where=f"{where}.ordinal")
    if not is_int(original_size) or original_size < 0:
        raise KpackFormatError(f"original_size {original_size!r} is not a size", where=f"{where}.original_size")
    return Entry(key, arch, ordinal, original_size, entry.get("metadata"))


def check_arch_map(key, arches) -> dict:
    where = f"toc[{key!r}]"
    if not isinstance(key, str) or not key:
        raise KpackFormatError(f"binary key is a {type_name(key)}, not a string", where=where)
    if not isinstance(arches, dict):
        raise KpackFormatError(f"value is a {type_name(arches)}, not a map of architectures", where=where)
    return arches
