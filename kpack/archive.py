"""Read kpack archives (format version 1, docs/kpack.md; the format's facts are in kpack.format).

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
  per reader. Fetching ordinal N first costs N+1 small reads (20,000 frames:
  80 KB requested; on a cold page cache each read still pulls in a 4 KiB page, which is
  why readahead is switched off with POSIX_FADV_RANDOM). The `none` scheme needs none of
  this: its blob offsets are in the TOC.
Memory is bounded by what the file holds, never by what it declares: MessagePack lengths
are capped at the TOC size, kernels are streamed in CHUNK-sized pieces (stream(); get()
joins them), a frame's output is capped at its `original_size`, and `original_size` at
what a zstd frame of that size can possibly produce.
"""
from __future__ import annotations

import io
import os
from array import array
from typing import Any, BinaryIO, Iterator

import msgpack
import zstandard

from kpack.errors import KpackFormatError
from kpack.format import (BLOB_AREA_START, CHUNK, FORMAT_VERSION, HEADER, HEADER_SIZE, KERNEL_TYPE,  # noqa: F401
                          MAGIC, SCHEME_NONE, SCHEME_ZSTD, SCHEMES, U32, WALKS_BEFORE_INDEX, ZSTD_MAX_RATIO,
                          ByteSource, Entry, Window, check_arch_map, check_entry, is_int, msgpack_limits,
                          parse_header, type_name)
from kpack.writer import KpackWriter  # noqa: F401  (kpack.archive is the package's front door)

# A zstd frame header is at most 18 bytes (magic 4, descriptor 1, window 1, dict id 4, size 8).
ZSTD_FRAME_HEADER_MAX = 18
HEAD_READ = 16 << 10   # head_entry reads a frame this much at a time


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
        version, toc_offset = parse_header(self._src.read_at(0, min(HEADER_SIZE, size)), size)
        self.version = version
        self.toc_offset = toc_offset
        self.toc_size = size - toc_offset
        self._toc_bytes = self._src.read_at(toc_offset, self.toc_size)
        self._parse_top_level()

    def _unpacker(self, start: int = 0, end: int | None = None) -> msgpack.Unpacker:
        view = memoryview(self._toc_bytes)[start:end]
        unpacker = msgpack.Unpacker(raw=False, **msgpack_limits(len(view)))
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
                    raise KpackFormatError(f"TOC key is a {type_name(name)}, not a string",
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
            ok = is_int(value) and value >= 0
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
        (count,) = U32.unpack(self._src.read_at(offset, 4))
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
                    check_arch_map(key, None)
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
        return None if value is None else check_arch_map(key, value)

    def entry(self, key: str, arch: str) -> Entry:
        """The TOC record of one kernel; KeyError if the archive has no such kernel."""
        try:
            arches = self._arch_map(key)
            if arches is None or arch not in arches:
                raise KeyError((key, arch))
            return check_entry(key, arch, arches[arch], self.kernel_count)
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
            for arch, record in check_arch_map(key, arches).items():
                found.append(check_entry(key, arch, record, self.kernel_count))
        return found

    # -- stored kernels -----------------------------------------------------------------

    def _check_blob(self, ordinal: int, blob) -> tuple[int, int]:
        where = f"blobs[{ordinal}]"
        if not isinstance(blob, dict) or not is_int(blob.get("offset")) or not is_int(blob.get("size")):
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
        read_at, unpack = self._src.read_at, U32.unpack
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

    def _frame_reader(self, offset: int, size: int, entry: Entry, read_size: int = CHUNK):
        """A bounded decompressing reader of one frame, after the checks its header allows:
        original_size within what the frame can hold and equal to what the frame declares."""
        where = f"toc[{entry.key!r}][{entry.arch!r}]"
        if entry.original_size > ZSTD_MAX_RATIO * size:
            raise KpackFormatError(f"original_size {entry.original_size} is more than a "
                                   f"{size}-byte zstd frame can hold", where=f"{where}.original_size")
        if size <= read_size:  # the usual case: one read of the whole frame
            frame = self._src.read_at(offset, size)
            source, head = io.BytesIO(frame), frame[:ZSTD_FRAME_HEADER_MAX]
        else:
            source = Window(self._src, offset, offset + size)
            head = self._src.read_at(offset, ZSTD_FRAME_HEADER_MAX)
        try:
            params = zstandard.get_frame_parameters(head)
        except zstandard.ZstdError as exc:
            raise KpackFormatError(f"not a zstd frame ({exc})", where=offset) from None
        if params.content_size not in (zstandard.CONTENTSIZE_UNKNOWN, entry.original_size):
            raise KpackFormatError(f"zstd frame declares {params.content_size} bytes but original_size "
                                   f"is {entry.original_size}", where=offset)
        return zstandard.ZstdDecompressor().stream_reader(source, read_size=min(read_size, max(size, 1)),
                                                          read_across_frames=False)

    def head_entry(self, entry: Entry, n: int) -> bytes:
        """The first n bytes of one kernel (fewer if it is shorter), decompressing no more
        of its frame than they need: what its ELF header says, without the whole kernel."""
        if self.scheme == SCHEME_NONE:
            offset, size = self._blob(entry.ordinal)
            return self._src.read_at(offset, min(n, size))
        offset, size = self._frame(entry.ordinal)
        try:
            return self._frame_reader(offset, size, entry, HEAD_READ).read(min(n, entry.original_size))
        except zstandard.ZstdError as exc:
            raise KpackFormatError(f"zstd frame does not decompress ({exc})", where=offset) from None

    def _inflate(self, offset: int, size: int, entry: Entry) -> Iterator[bytes]:
        """Decompress one frame in chunks of at most CHUNK bytes, never more than its
        original_size in all: a frame that claims or produces another size is an error."""
        stream = self._frame_reader(offset, size, entry)
        produced = 0
        try:
            while True:
                chunk = stream.read(min(CHUNK, entry.original_size - produced + 1))
                if not chunk:
                    break
                produced += len(chunk)
                if produced > entry.original_size:
                    raise KpackFormatError(f"zstd frame decompresses to more than original_size "
                                           f"{entry.original_size}", where=offset)
                yield chunk
        except zstandard.ZstdError as exc:
            raise KpackFormatError(f"zstd frame does not decompress ({exc})", where=offset) from None
        if produced != entry.original_size:
            raise KpackFormatError(f"zstd frame decompresses to {produced} bytes, original_size is "
                                   f"{entry.original_size}", where=offset)

    def _chunks(self, entry: Entry) -> Iterator[bytes]:
        if self.scheme == SCHEME_NONE:
            offset, size = self._blob(entry.ordinal)
            if size != entry.original_size:
                raise KpackFormatError(f"blob is {size} bytes but original_size is {entry.original_size}",
                                       where=f"toc[{entry.key!r}][{entry.arch!r}].original_size")
            for start in range(offset, offset + size, CHUNK):
                yield self._src.read_at(start, min(CHUNK, offset + size - start))
            return
        offset, size = self._frame(entry.ordinal)
        yield from self._inflate(offset, size, entry)

    def stream(self, key: str, arch: str) -> Iterator[bytes]:
        """One kernel in chunks of at most CHUNK bytes (memory stays bounded whatever the
        archive declares); KeyError when the archive has no such kernel."""
        found = self.entry(key, arch)
        return self.stream_entry(found)

    def stream_entry(self, entry: Entry) -> Iterator[bytes]:
        try:
            yield from self._chunks(entry)
        except KpackFormatError as exc:
            raise exc.with_path(self.path)

    def get(self, key: str, arch: str) -> bytes:
        """One kernel, decompressed: one positioned read of its blob, or its frame streamed."""
        return b"".join(self.stream(key, arch))

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

    def read_at(self, offset: int, size: int) -> bytes:
        """`size` bytes of the archive file at `offset` (KpackFormatError past its end)."""
        return self._src.read_at(offset, size)

    @property
    def fd(self) -> int | None:
        """The archive file's descriptor for positional reads (None for bytes in memory)."""
        return self._src.fd

    def blob_extent(self, ordinal: int) -> tuple[int, int]:
        """(offset, size) of a stored blob, its descriptor checked against the blob area."""
        return self._blob(ordinal)

    def frame_extent(self, ordinal: int) -> tuple[int, int]:
        """(offset, size) of a zstd frame, from the chain of size prefixes."""
        return self._frame(ordinal)

    def index_blobs(self) -> None:
        """Read and check every blob descriptor now (KpackFormatError on the first bad one)."""
        self._build_blob_table()

    def _build_blob_table(self) -> None:
        if self._blob_table is None:
            self._blob_lookups = WALKS_BEFORE_INDEX  # the next lookup indexes every blob
            self._blob(0)

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
