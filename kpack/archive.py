"""Read and write kpack archives (format version 1, DESIGN §8).

Layout: 16-byte header (`KPAK`, u32 version, u64 TOC offset), zeros to offset 64, the
blob area, then a MessagePack TOC running to the end of the file. The `none` scheme
stores each kernel as a blob listed in `blobs` (absolute offset and size); the
`zstd-per-kernel` scheme stores a u32 count and then, per kernel, a u32 size and one
complete zstd frame at `zstd_offset`. Kernels are addressed by ordinal.

Reading costs (the reason for the lazy design below):
- open reads the header and the TOC bytes, and parses only the TOC's small top-level
  values; the `toc` map and the `blobs` list are walked by msgpack's C `skip()` (no Python
  objects), which also proves the TOC is well-formed and ends exactly at EOF. For the zstd
  scheme it reads the 4-byte frame count too.
- get(key, arch) reads one blob or one frame: one positioned read. Finding the entry
  costs CPU, not I/O: the first few lookups walk the `toc` keys and stop at the match;
  after WALKS_BEFORE_INDEX of them a key -> position index is built (one pass) and used
  from then on. Blob descriptors are found the same way.
- zstd frame offsets are not in the TOC and cannot be derived from it. They are found by
  walking the u32 size prefixes from the start of the zstd area up to the wanted ordinal
  (one 4-byte positioned read per frame) and cached, so each prefix is read at most once
  per reader. Fetching ordinal N first costs N+1 small reads (20,000 frames: ~30 ms,
  80 KB requested; on a cold page cache each read still pulls in a 4 KiB page, which is
  why readahead is switched off with POSIX_FADV_RANDOM). The `none` scheme needs none of
  this: its blob offsets are in the TOC.
Everything read is bounded by the file size: MessagePack lengths are capped at the TOC
size, a frame's output at its `original_size`, and `original_size` at what a zstd frame
of that size can possibly produce.
"""
from __future__ import annotations

import io
import os
import struct
from array import array
from typing import Any, BinaryIO, Iterator, NamedTuple

import msgpack
import zstandard

from kpack.errors import KpackFormatError
from rocpkg.streams import AtomicOutput

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

_U32 = struct.Struct("<I")
_HEADER = struct.Struct("<4sIQ")


class Entry(NamedTuple):
    key: str
    arch: str
    ordinal: int
    original_size: int
    metadata: Any = None


def _limits(size: int) -> dict:
    """msgpack.Unpacker limits so that no declared length can exceed the bytes present."""
    size = max(size, 1)
    return dict(max_buffer_size=size, max_bin_len=size, max_str_len=size,
                max_array_len=size, max_map_len=size, max_ext_len=size)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value) -> str:
    return {dict: "map", list: "array", str: "string", bytes: "binary", bool: "boolean",
            int: "integer", float: "float", type(None): "nil"}.get(type(value), type(value).__name__)


class ByteSource:
    """Positioned reads from a path (os.pread, nothing buffered) or from a seekable binary
    file object (seek + read; lets a caller count what the reader reads)."""

    def __init__(self, source: str | os.PathLike | BinaryIO):
        self._fd = None
        self._file = None
        if isinstance(source, (str, os.PathLike)):
            self.name = os.fspath(source)
            self._fd = os.open(self.name, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            self.size = os.fstat(self._fd).st_size
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


def _check_entry(key: str, arch, entry, count: int) -> Entry:
    """Validate one `toc[key][arch]` record; `count` is the number of stored kernels."""
    where = f"toc[{key!r}][{arch!r}]"
    if not isinstance(arch, str) or not arch:
        raise KpackFormatError(f"architecture key is a {_type_name(arch)}, not a string", where=where)
    if not isinstance(entry, dict):
        raise KpackFormatError(f"entry is a {_type_name(entry)}, not a map", where=where)
    for name in ("type", "ordinal", "original_size"):
        if name not in entry:
            raise KpackFormatError(f"entry has no {name!r}", where=where)
    if entry["type"] != KERNEL_TYPE:
        raise KpackFormatError(f"type is {entry['type']!r}, expected {KERNEL_TYPE!r}", where=f"{where}.type")
    ordinal, original_size = entry["ordinal"], entry["original_size"]
    if not _is_int(ordinal) or not 0 <= ordinal < count:
        raise KpackFormatError(f"ordinal {ordinal!r} is out of range (archive stores {count} kernels)",
                               where=f"{where}.ordinal")
    if not _is_int(original_size) or original_size < 0:
        raise KpackFormatError(f"original_size {original_size!r} is not a size", where=f"{where}.original_size")
    return Entry(key, arch, ordinal, original_size, entry.get("metadata"))


def _check_arch_map(key, arches) -> dict:
    where = f"toc[{key!r}]"
    if not isinstance(key, str) or not key:
        raise KpackFormatError(f"binary key is a {_type_name(key)}, not a string", where=where)
    if not isinstance(arches, dict):
        raise KpackFormatError(f"value is a {_type_name(arches)}, not a map of architectures", where=where)
    return arches


class KpackReader:
    """An open kpack archive. See the module docstring for what each call reads."""

    def __init__(self, source: str | os.PathLike | BinaryIO):
        self._src = ByteSource(source)
        self.path = self._src.name
        try:
            self._open()
        except KpackFormatError as exc:
            self._src.close()
            raise exc.with_path(self.path)
        except BaseException:
            self._src.close()
            raise

    # -- open ---------------------------------------------------------------------------

    def _open(self) -> None:
        size = self.file_size = self._src.size
        if size < HEADER_SIZE:
            raise KpackFormatError(f"file is {size} bytes, shorter than the {HEADER_SIZE}-byte header",
                                   where=0)
        magic, version, toc_offset = _HEADER.unpack(self._src.read_at(0, HEADER_SIZE))
        if magic != MAGIC:
            raise KpackFormatError(f"bad magic {magic!r}, expected {MAGIC!r}", where=0)
        if version != FORMAT_VERSION:
            raise KpackFormatError(f"unsupported version {version}, expected {FORMAT_VERSION}", where=4)
        if toc_offset >= size:
            raise KpackFormatError(f"TOC offset {toc_offset} is past the end of the file ({size} bytes)"
                                   if toc_offset > size else f"TOC offset {toc_offset} leaves no room for a "
                                   f"TOC before the end of the file", where=8)
        if toc_offset < BLOB_AREA_START:
            raise KpackFormatError(f"TOC offset {toc_offset} is inside the {BLOB_AREA_START}-byte header",
                                   where=8)
        self.version = version
        self.toc_offset = toc_offset
        self.toc_size = size - toc_offset
        self._toc_bytes = self._src.read_at(toc_offset, self.toc_size)
        self._parse_top_level()

    def _unpacker(self, start: int = 0, end: int | None = None) -> msgpack.Unpacker:
        view = memoryview(self._toc_bytes)[start:end]
        unpacker = msgpack.Unpacker(raw=False, **_limits(len(view)))
        unpacker.feed(view)
        return unpacker

    def _msgpack_error(self, exc: Exception, at: int) -> KpackFormatError:
        if isinstance(exc, msgpack.OutOfData):
            return KpackFormatError("TOC ends in the middle of a MessagePack value (truncated?)",
                                    where=self.toc_offset + at)
        return KpackFormatError(f"TOC is not valid MessagePack ({exc})", where=self.toc_offset + at)

    def _parse_top_level(self) -> None:
        """Unpack the small top-level values; skip over `toc` and `blobs` in C, keeping
        their byte ranges."""
        first = self._toc_bytes[0]
        if not (0x80 <= first <= 0x8F or first in (0xDE, 0xDF)):
            raise KpackFormatError(f"TOC is not a map (first byte 0x{first:02x})", where=self.toc_offset)
        unpacker = self._unpacker()
        top: dict[str, Any] = {}
        self._ranges: dict[str, tuple[int, int]] = {}
        try:
            for _ in range(unpacker.read_map_header()):
                at = unpacker.tell()
                name = unpacker.unpack()
                if not isinstance(name, str):
                    raise KpackFormatError(f"TOC key is a {_type_name(name)}, not a string",
                                           where=self.toc_offset + at)
                if name in top or name in self._ranges:
                    raise KpackFormatError(f"TOC has key {name!r} twice", where=self.toc_offset + at)
                if name in ("toc", "blobs"):
                    start = unpacker.tell()
                    unpacker.skip()
                    self._ranges[name] = (start, unpacker.tell())
                elif name in ("format_version", "group_name", "gfx_arch_family", "gfx_arches",
                              "compression_scheme", "zstd_offset", "zstd_size"):
                    top[name] = unpacker.unpack()
                else:
                    unpacker.skip()  # unknown keys are allowed and ignored
            end = unpacker.tell()
        except KpackFormatError:
            raise
        except (msgpack.OutOfData, msgpack.UnpackException, ValueError, TypeError, RecursionError) as exc:
            raise self._msgpack_error(exc, 0) from None
        if end != self.toc_size:
            raise KpackFormatError(f"{self.toc_size - end} bytes follow the TOC (it must run to EOF)",
                                   where=self.toc_offset + end)
        self._check_top_level(top)

    def _require(self, top: dict, name: str, kind):
        if name not in top and name not in self._ranges:
            raise KpackFormatError(f"TOC has no {name!r} key", where=f"TOC[{name!r}]")
        value = top.get(name)
        if kind is int:
            ok = _is_int(value) and value >= 0
        elif kind == "strings":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        else:
            ok = isinstance(value, kind)
        if not ok:
            expected = {int: "a non-negative integer", str: "a string", "strings": "an array of strings"}[kind]
            raise KpackFormatError(f"{value!r:.60} is not {expected}", where=f"TOC[{name!r}]")
        return value

    def _check_top_level(self, top: dict) -> None:
        fmt = self._require(top, "format_version", int)
        if fmt != FORMAT_VERSION:
            raise KpackFormatError(f"unsupported format_version {fmt}", where="TOC['format_version']")
        self.group_name = self._require(top, "group_name", str)
        self.gfx_arch_family = self._require(top, "gfx_arch_family", str)
        self.gfx_arches = list(self._require(top, "gfx_arches", "strings"))
        if "toc" not in self._ranges:
            raise KpackFormatError("TOC has no 'toc' key", where="TOC['toc']")
        start, _ = self._ranges["toc"]
        first = self._toc_bytes[start]
        if not (0x80 <= first <= 0x8F or first in (0xDE, 0xDF)):
            raise KpackFormatError("'toc' is not a map", where="TOC['toc']")
        self.scheme = self._require(top, "compression_scheme", str)
        if self.scheme == SCHEME_NONE:
            self._open_blobs()
        elif self.scheme == SCHEME_ZSTD:
            self._open_zstd(top)
        else:
            raise KpackFormatError(f"unknown compression scheme {self.scheme!r}",
                                   where="TOC['compression_scheme']")
        # Lazily built lookup state.
        self._lookups = 0
        self._key_index: dict[str, int] | None = None
        self._entries: list[Entry] | None = None
        self._blob_lookups = 0
        self._blob_table: tuple[array, array] | None = None
        self._frame_starts = array("Q")

    def _open_blobs(self) -> None:
        if "blobs" not in self._ranges:
            raise KpackFormatError("TOC has no 'blobs' key (required by scheme 'none')", where="TOC['blobs']")
        start, end = self._ranges["blobs"]
        first = self._toc_bytes[start]
        if not (0x90 <= first <= 0x9F or first in (0xDC, 0xDD)):
            raise KpackFormatError("'blobs' is not an array", where="TOC['blobs']")
        self.kernel_count = self._unpacker(start, end).read_array_header()

    def _open_zstd(self, top: dict) -> None:
        offset = self._require(top, "zstd_offset", int)
        size = self._require(top, "zstd_size", int)
        if offset < BLOB_AREA_START or offset + size > self.toc_offset:
            raise KpackFormatError(
                f"zstd area [{offset}, {offset + size}) is outside the blob area "
                f"[{BLOB_AREA_START}, {self.toc_offset})", where="TOC['zstd_offset']")
        if size < 4:
            raise KpackFormatError(f"zstd area of {size} bytes has no room for its count",
                                   where="TOC['zstd_size']")
        self.zstd_offset, self.zstd_size = offset, size
        (count,) = _U32.unpack(self._src.read_at(offset, 4))
        if 4 + 4 * count > size:
            raise KpackFormatError(f"frame count {count} cannot fit in a zstd area of {size} bytes",
                                   where=offset)
        self.kernel_count = count

    # -- TOC lookups --------------------------------------------------------------------

    def _walk_keys(self, wanted: str | None):
        """Walk the `toc` map: with `wanted`, return its decoded value (or None) as soon as
        it is found; without, return {key: position of its value}."""
        start, end = self._ranges["toc"]
        unpacker = self._unpacker(start, end)
        index: dict[str, int] = {}
        try:
            unpack, skip, tell = unpacker.unpack, unpacker.skip, unpacker.tell
            for _ in range(unpacker.read_map_header()):
                key = unpack()
                if wanted is not None:
                    if key == wanted:
                        return unpack()
                    skip()
                    continue
                if not isinstance(key, str):
                    _check_arch_map(key, None)
                if key in index:
                    raise KpackFormatError("binary key appears twice", where=f"toc[{key!r}]")
                index[key] = start + tell()
                skip()
        except KpackFormatError:
            raise
        except (msgpack.OutOfData, msgpack.UnpackException, ValueError, TypeError, RecursionError) as exc:
            raise self._msgpack_error(exc, start) from None
        return None if wanted is not None else index

    def _arch_map(self, key: str) -> dict | None:
        self._lookups += 1
        if self._key_index is None and self._lookups <= WALKS_BEFORE_INDEX:
            value = self._walk_keys(key)
        else:
            if self._key_index is None:
                self._key_index = self._walk_keys(None)
            position = self._key_index.get(key)
            if position is None:
                return None
            try:
                value = self._unpacker(position, self._ranges["toc"][1]).unpack()
            except (msgpack.OutOfData, msgpack.UnpackException, ValueError, TypeError, RecursionError) as exc:
                raise self._msgpack_error(exc, position) from None
        return None if value is None else _check_arch_map(key, value)

    def entry(self, key: str, arch: str) -> Entry:
        """The TOC record of one kernel; KeyError if the archive has no such kernel."""
        try:
            arches = self._arch_map(key)
            if arches is None or arch not in arches:
                raise KeyError((key, arch))
            return _check_entry(key, arch, arches[arch], self.kernel_count)
        except KpackFormatError as exc:
            raise exc.with_path(self.path)

    @property
    def binaries(self) -> list[str]:
        """Binary keys in TOC order."""
        if self._key_index is None:
            try:
                self._key_index = self._walk_keys(None)
            except KpackFormatError as exc:
                raise exc.with_path(self.path)
        return list(self._key_index)

    def entries(self) -> Iterator[Entry]:
        """Every kernel record in TOC order (parses and validates the whole TOC once)."""
        if self._entries is None:
            try:
                self._entries = self._parse_entries()
            except KpackFormatError as exc:
                raise exc.with_path(self.path)
        return iter(self._entries)

    def _parse_entries(self) -> list[Entry]:
        start, end = self._ranges["toc"]
        try:
            declared = self._unpacker(start, end).read_map_header()
            toc = self._unpacker(start, end).unpack()
        except (msgpack.OutOfData, msgpack.UnpackException, ValueError, TypeError, RecursionError) as exc:
            raise self._msgpack_error(exc, start) from None
        if len(toc) != declared:
            raise KpackFormatError(f"'toc' lists {declared} binaries but only {len(toc)} distinct keys",
                                   where="TOC['toc']")
        found = []
        for key, arches in toc.items():
            for arch, record in _check_arch_map(key, arches).items():
                found.append(_check_entry(key, arch, record, self.kernel_count))
        return found

    # -- stored kernels -----------------------------------------------------------------

    def _check_blob(self, ordinal: int, blob) -> tuple[int, int]:
        where = f"blobs[{ordinal}]"
        if not isinstance(blob, dict) or not _is_int(blob.get("offset")) or not _is_int(blob.get("size")):
            raise KpackFormatError("blob is not a map of integer 'offset' and 'size'", where=where)
        offset, size = blob["offset"], blob["size"]
        if offset < BLOB_AREA_START or size < 0 or offset + size > self.toc_offset:
            raise KpackFormatError(f"blob [{offset}, {offset + size}) is outside the blob area "
                                   f"[{BLOB_AREA_START}, {self.toc_offset})", where=where)
        return offset, size

    def _blob(self, ordinal: int) -> tuple[int, int]:
        """(offset, size) of a blob: skip to it the first time, index all blobs after."""
        start, end = self._ranges["blobs"]
        self._blob_lookups += 1
        try:
            if self._blob_table is None and self._blob_lookups <= WALKS_BEFORE_INDEX:
                unpacker = self._unpacker(start, end)
                unpacker.read_array_header()
                for _ in range(ordinal):
                    unpacker.skip()
                return self._check_blob(ordinal, unpacker.unpack())
            if self._blob_table is None:
                offsets, sizes = array("Q"), array("Q")
                for i, blob in enumerate(self._unpacker(start, end).unpack()):
                    offset, size = self._check_blob(i, blob)
                    offsets.append(offset)
                    sizes.append(size)
                self._blob_table = (offsets, sizes)
        except KpackFormatError:
            raise
        except (msgpack.OutOfData, msgpack.UnpackException, ValueError, TypeError, RecursionError) as exc:
            raise self._msgpack_error(exc, start) from None
        return self._blob_table[0][ordinal], self._blob_table[1][ordinal]

    def _frame(self, ordinal: int) -> tuple[int, int]:
        """(offset, size) of a zstd frame. Frame starts are learnt by walking the u32 size
        prefixes (one 4-byte read per frame) up to the frame after `ordinal`, and kept:
        a frame whose start is known costs exactly one read, of the frame itself."""
        starts = self._frame_starts
        end = self.zstd_offset + self.zstd_size
        if not starts:
            starts.append(self.zstd_offset + 4)
        read_at, unpack = self._src.read_at, _U32.unpack
        fd, pread = self._src.fd, os.pread
        position = starts[-1]
        while len(starts) <= ordinal + 1:
            if position + 4 > end:
                raise KpackFormatError(f"frame {len(starts) - 1} starts past the end of the zstd area "
                                       f"({end})", where=position)
            # the hot loop of a first fetch deep in a large archive: a bare pread when the
            # source is a path (its bounds are checked just above and below)
            prefix = pread(fd, 4, position) if fd is not None else read_at(position, 4)
            if len(prefix) != 4:
                prefix = read_at(position, 4)
            (size,) = unpack(prefix)
            if position + 4 + size > end:
                raise KpackFormatError(f"frame {len(starts) - 1} of {size} bytes runs past the end of "
                                       f"the zstd area ({end})", where=position)
            position += 4 + size
            starts.append(position)
        return starts[ordinal] + 4, starts[ordinal + 1] - starts[ordinal] - 4

    def _decompress(self, frame: bytes, entry: Entry, offset: int) -> bytes:
        where = f"toc[{entry.key!r}][{entry.arch!r}]"
        if entry.original_size > ZSTD_MAX_RATIO * len(frame):
            raise KpackFormatError(f"original_size {entry.original_size} is more than a "
                                   f"{len(frame)}-byte zstd frame can hold", where=f"{where}.original_size")
        try:
            params = zstandard.get_frame_parameters(frame)
        except zstandard.ZstdError as exc:
            raise KpackFormatError(f"not a zstd frame ({exc})", where=offset) from None
        if params.content_size not in (zstandard.CONTENTSIZE_UNKNOWN, entry.original_size):
            raise KpackFormatError(f"zstd frame declares {params.content_size} bytes but original_size "
                                   f"is {entry.original_size}", where=offset)
        try:
            data = zstandard.ZstdDecompressor().decompress(
                frame, max_output_size=max(entry.original_size, 1), allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise KpackFormatError(f"zstd frame does not decompress ({exc})", where=offset) from None
        if len(data) != entry.original_size:
            raise KpackFormatError(f"zstd frame decompresses to {len(data)} bytes, original_size is "
                                   f"{entry.original_size}", where=offset)
        return data

    def _load(self, entry: Entry) -> bytes:
        if self.scheme == SCHEME_NONE:
            offset, size = self._blob(entry.ordinal)
            if size != entry.original_size:
                raise KpackFormatError(f"blob is {size} bytes but original_size is {entry.original_size}",
                                       where=f"toc[{entry.key!r}][{entry.arch!r}].original_size")
            return self._src.read_at(offset, size)
        offset, size = self._frame(entry.ordinal)
        return self._decompress(self._src.read_at(offset, size), entry, offset)

    def get(self, key: str, arch: str) -> bytes:
        """One kernel, decompressed: one positioned read of its blob or frame."""
        found = self.entry(key, arch)
        try:
            return self._load(found)
        except KpackFormatError as exc:
            raise exc.with_path(self.path)

    def stored_bytes(self) -> int:
        """Bytes the kernels occupy in the file (all blobs, or the whole zstd area)."""
        if self.scheme == SCHEME_ZSTD:
            return self.zstd_size
        if not self.kernel_count:
            return 0
        try:
            self._build_blob_table()
        except KpackFormatError as exc:
            raise exc.with_path(self.path)
        return sum(self._blob_table[1])

    def _build_blob_table(self) -> None:
        if self._blob_table is None:
            self._blob_lookups = WALKS_BEFORE_INDEX  # the next lookup indexes every blob
            self._blob(0)

    # -- verify -------------------------------------------------------------------------

    def verify(self) -> None:
        """Check everything the format promises; raise KpackFormatError at the first fault."""
        try:
            self._verify()
        except KpackFormatError as exc:
            raise exc.with_path(self.path)

    def _verify(self) -> None:
        padding = self._src.read_at(HEADER_SIZE, BLOB_AREA_START - HEADER_SIZE)
        if any(padding):
            first = next(i for i, byte in enumerate(padding) if byte)
            raise KpackFormatError("header padding is not zero", where=HEADER_SIZE + first)
        entries = list(self.entries())
        seen: dict[int, Entry] = {}
        for found in entries:
            if found.ordinal in seen:
                other = seen[found.ordinal]
                raise KpackFormatError(f"ordinal {found.ordinal} is also used by "
                                       f"{other.key!r}/{other.arch!r}",
                                       where=f"toc[{found.key!r}][{found.arch!r}].ordinal")
            seen[found.ordinal] = found
        if len(seen) != self.kernel_count:
            raise KpackFormatError(f"archive stores {self.kernel_count} kernels but the TOC lists "
                                   f"{len(seen)}", where="TOC['toc']")
        used = {found.arch for found in entries}
        if len(set(self.gfx_arches)) != len(self.gfx_arches) or set(self.gfx_arches) != used:
            raise KpackFormatError(f"gfx_arches {self.gfx_arches} differ from the architectures the "
                                   f"TOC uses {sorted(used)}", where="TOC['gfx_arches']")
        if self.scheme == SCHEME_NONE:
            if self.kernel_count:
                self._build_blob_table()  # validates every blob descriptor
            for found in entries:
                _, size = self._blob(found.ordinal)
                if size != found.original_size:
                    raise KpackFormatError(f"blob is {size} bytes but original_size is {found.original_size}",
                                           where=f"toc[{found.key!r}][{found.arch!r}].original_size")
            return
        end = self.zstd_offset + self.zstd_size
        if self.kernel_count:
            last_offset, last_size = self._frame(self.kernel_count - 1)
            frames_end = last_offset + last_size
        else:
            frames_end = self.zstd_offset + 4
        if frames_end != end:
            raise KpackFormatError(f"{self.kernel_count} frames end at {frames_end} but the zstd area "
                                   f"ends at {end} (wrong frame count?)", where=frames_end)
        for ordinal in range(self.kernel_count):
            self._load(seen[ordinal])

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        self._src.close()

    def __enter__(self) -> "KpackReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_toc_arches(path: str | os.PathLike) -> list[str]:
    """The `gfx_arches` of an archive (header and TOC only)."""
    with KpackReader(path) as reader:
        return list(reader.gfx_arches)


class KpackWriter:
    """Write an archive kernel by kernel: each blob or frame goes to disk as it is added,
    the TOC and the header's TOC offset at close. Ordinals follow the order of add().
    Output goes to a temporary name and is renamed into place only when complete."""

    def __init__(self, path: str | os.PathLike, group_name: str, gfx_arch_family: str,
                 gfx_arches: list[str] | None = None, scheme: str = SCHEME_NONE, level: int = 3):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown compression scheme {scheme!r} (expected one of {SCHEMES})")
        self.path = os.fspath(path)
        self.scheme = scheme
        self._meta = (group_name, gfx_arch_family, list(gfx_arches) if gfx_arches is not None else None)
        self._toc: dict[str, dict[str, dict]] = {}
        self._blobs: list[dict] = []
        self._arches: list[str] = []
        self._count = 0
        self._compressor = zstandard.ZstdCompressor(level=level, write_content_size=True,
                                                    write_checksum=False)
        self._output = AtomicOutput(self.path)
        self._file = self._output.__enter__()
        self._file.write(b"\0" * BLOB_AREA_START)
        if scheme == SCHEME_ZSTD:
            self._file.write(_U32.pack(0))  # frame count, patched at close
        self._closed = False

    def add(self, key: str, arch: str, data: bytes, metadata: Any = None) -> int:
        """Append one kernel; returns its ordinal. Empty metadata is not stored."""
        if self._closed:
            raise ValueError("archive is already closed")
        if not isinstance(key, str) or not key or not isinstance(arch, str) or not arch:
            raise ValueError(f"key and arch must be non-empty strings, got {key!r}, {arch!r}")
        if arch in self._toc.get(key, {}):
            raise ValueError(f"kernel {key!r} for {arch} is already in the archive")
        if self.scheme == SCHEME_NONE:
            self._blobs.append({"offset": self._file.tell(), "size": len(data)})
            self._file.write(data)
        else:
            frame = self._compressor.compress(data)
            if len(frame) > 0xFFFFFFFF:
                raise ValueError(f"kernel {key!r} compresses to {len(frame)} bytes; frames are limited to 4 GiB")
            self._file.write(_U32.pack(len(frame)))
            self._file.write(frame)
        record = {"type": KERNEL_TYPE, "ordinal": self._count, "original_size": len(data)}
        if metadata:
            record["metadata"] = metadata
        self._toc.setdefault(key, {})[arch] = record
        if arch not in self._arches:
            self._arches.append(arch)
        self._count += 1
        return self._count - 1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            toc_offset = self._file.tell()
            group_name, family, arches = self._meta
            toc: dict[str, Any] = {
                "format_version": FORMAT_VERSION,
                "group_name": group_name,
                "gfx_arch_family": family,
                "gfx_arches": arches if arches is not None else list(self._arches),
                "toc": self._toc,
                "compression_scheme": self.scheme,
            }
            if self.scheme == SCHEME_NONE:
                toc["blobs"] = self._blobs
            else:
                toc["zstd_offset"] = BLOB_AREA_START
                toc["zstd_size"] = toc_offset - BLOB_AREA_START
                self._file.seek(BLOB_AREA_START)
                self._file.write(_U32.pack(self._count))
                self._file.seek(toc_offset)
            self._file.write(msgpack.packb(toc, use_bin_type=True))
            self._file.seek(0)
            self._file.write(_HEADER.pack(MAGIC, FORMAT_VERSION, toc_offset))
        except BaseException as exc:
            self._output.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._output.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop the partial archive; nothing appears under the final name."""
        if not self._closed:
            self._closed = True
            self._output.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self) -> "KpackWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class CountingReader(io.RawIOBase):
    """A binary file that counts the bytes and read calls made through it: hand it to
    KpackReader to see what a lookup really reads (tests and benchmarks prove the O(1)
    access with it)."""

    def __init__(self, path):
        self._file = open(path, "rb", buffering=0)
        self.bytes_read = 0
        self.reads = 0
        self.name = str(path)

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        return self._file.seek(offset, whence)

    def read(self, size=-1):
        data = self._file.read(size)
        self.bytes_read += len(data)
        self.reads += 1
        return data

    def close(self):
        self._file.close()
        super().close()
