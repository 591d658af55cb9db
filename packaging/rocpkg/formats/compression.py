"""Payload compression for both writers and both readers: the one list of kinds, the
compressor factory and the decompressor switch.

The .deb and .rpm writers have always framed xz and gzip a little differently (xz check,
gzip header OS byte), and frame zstd differently (dpkg reads one frame, rpm a run of
them); each keeps its own `Flavour` so that a rebuilt package keeps its bytes (a
repository refuses a published version whose bytes changed). No output depends on the
number of threads: a run of frames is compressed frame by frame, and one frame of a large
payload by zstd's own workers, whose output is the same for any number of workers from 1
up (tests/test_parallel_readback.py holds the library to it)."""
from __future__ import annotations

import collections
import ctypes
import gzip
import lzma
import os
import threading
import zlib
from dataclasses import dataclass

import zstandard

from rocpkg.errors import RocpkgInputError

# kind -> file name suffix (data.tar.zst ...); the kinds every writer accepts
SUFFIXES = {"zstd": "zst", "xz": "xz", "gzip": "gz"}
KINDS = tuple(SUFFIXES)
# RPM zstd payloads are a run of independent frames of ZSTD_FRAME_SIZE input bytes each
# (ZstdFrames): a frame's bytes depend on its input alone, so the output is the same for
# any number of threads, and one thread compresses at single-threaded zstd's speed (zstd's
# own multi-threaded mode, even with one worker, costs markedly more CPU). 4 MiB is twice
# zstd -3's window: a frame boundary costs a few hundred bytes of ratio. (.deb: Flavour.)
ZSTD_FRAME_SIZE = 4 << 20
ZSTD_MAX_THREADS = 16
# Compressed output goes to the file in writes of at most 1 MiB: on Linux (ext4), a
# write of 2 MiB or more costs several times the kernel time of the same bytes in 1 MiB
# writes, so an .rpm's 4 MiB frames are not written whole (benchmarks/RESULTS.md).
STREAM_WRITE_SIZE = 1 << 20


@dataclass(frozen=True)
class Flavour:
    """How one package format frames its xz, gzip and zstd streams."""

    xz_check: int           # lzma.CHECK_*
    zlib_gzip_header: bool  # zlib's gzip header (OS byte 3) rather than Python gzip's (255)
    zstd_checksum: bool = False  # a content checksum per zstd frame
    zstd_frames: bool = True     # a run of ZSTD_FRAME_SIZE frames; False: one frame
    # one frame of a payload of at least this many bytes is compressed by zstd's workers
    # (as many as the writer has threads, at least one: the same bytes for any number);
    # 0: one single-threaded frame whatever the size
    zstd_workers_from: int = 0


# .deb: zstd frames with content checksums, as dpkg-deb writes them (dpkg then refuses a
# flipped byte: "Restored data doesn't match checksum"), and one frame only: dpkg 1.21
# (Debian 12) stops reading data.tar.zst at the end of its first frame ("tar: Unexpected
# EOF"). Below DEB_WORKERS_FROM that frame is one compressing thread (the md5s go beside
# it), the bytes .debs have always had; from it up zstd's workers share the
# frame (its bytes differ from the single-threaded frame's), so that one large package
# does not keep every other core idle while it compresses alone. The threshold is a
# package that can bound a build on many cores (256 MiB is a second or more of zstd -3 on
# one core): zstd's workers cost about a tenth more CPU than one thread for the same
# bytes, which a smaller package would pay on a one- or two-core machine for no gain.
# An RPM's payload digest covers its payload; rpm reads a run of frames.
DEB_WORKERS_FROM = 256 << 20
DEB = Flavour(xz_check=lzma.CHECK_CRC64, zlib_gzip_header=False, zstd_checksum=True, zstd_frames=False,
              zstd_workers_from=DEB_WORKERS_FROM)
RPM = Flavour(xz_check=lzma.CHECK_CRC32, zlib_gzip_header=True)


def usable_cores() -> int:
    """The cores this process may run on (taskset, a cgroup cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8   # glibc's mallopt parameters


def keep_frame_buffers() -> None:
    """Have glibc's malloc keep freed frame-sized buffers for the next frame. By default
    a 4 MiB block is mapped for each allocation and unmapped when freed (or the heap is
    trimmed), so every frame's input and output would fault their pages in again and a
    large part of a build's CPU would go to the kernel. All the process's threads then
    share one arena: each compressing thread's own arena would keep the frames it freed,
    and a worker whose packages are given many threads, package after package, would hold
    more the more it wrote (its memory grew with the payload at 16 cores); with one, what
    it keeps is what one package's frames in flight need. Call it before the process
    starts a thread. Process-wide; a no-op without glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 128 << 20)
    mallopt(_M_ARENA_MAX, 1)


def writer_threads(threads: int) -> int:
    """The cores one package's writer may use (BuildOptions.threads, 0 for all): its
    compressor's workers, and whether its digests run beside it (streams.digester)."""
    return min(threads or usable_cores(), ZSTD_MAX_THREADS)


def _unknown(kind: str) -> RocpkgInputError:
    return RocpkgInputError(("compression", f"unknown compression {kind!r} ({', '.join(KINDS)})"))


class Compressor:
    """write() compresses into sink; close() ends the stream without closing sink.
    zstd is a run of fixed-size frames (ZstdFrames) or one frame (the flavour says which),
    single-threaded or, for a payload of `size` bytes from the flavour's zstd_workers_from
    up, by zstd's workers; gzip writes no name and mtime 0.
    Levels are clamped to each kind's range (zstd 1-19, xz 0-9, gzip 1-9)."""

    def __init__(self, kind: str, sink, level: int, threads: int, flavour: Flavour, size: int = 0):
        self.kind = kind
        self.sink = sink
        self.stream = None
        self.obj = None
        if kind == "zstd":
            level = max(1, min(level, 19))
            if flavour.zstd_frames:
                self.stream = ZstdFrames(sink, level, writer_threads(threads), flavour.zstd_checksum)
            else:
                # output handed on in 1 MiB pieces, not zstd's 128 KiB: a .deb's data member
                # goes out in an eighth of the writes (the bytes are the same)
                context = zstd_workers(level, flavour.zstd_checksum, writer_threads(threads)) \
                    if 0 < flavour.zstd_workers_from <= size else _context(level, flavour.zstd_checksum)
                self.stream = context.stream_writer(sink, closefd=False, write_return_read=True,
                                                    write_size=STREAM_WRITE_SIZE)
        elif kind == "xz":
            self.obj = lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=flavour.xz_check,
                                           preset=max(0, min(level, 9)))
        elif kind == "gzip" and flavour.zlib_gzip_header:
            self.obj = zlib.compressobj(max(1, min(level, 9)), zlib.DEFLATED, 31)
        elif kind == "gzip":
            self.stream = gzip.GzipFile(filename="", mode="wb", fileobj=sink,
                                        compresslevel=max(1, min(level, 9)), mtime=0)
        else:
            raise _unknown(kind)

    def write(self, data) -> int:
        if self.stream is not None:
            self.stream.write(data)
        else:
            out = self.obj.compress(data)
            if out:
                self.sink.write(out)
        return len(data)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        else:
            self.sink.write(self.obj.flush())


_THREAD_CONTEXTS = threading.local()


def _context(level: int, checksum: bool) -> zstandard.ZstdCompressor:
    """This thread's single-threaded zstd context for a setting, made once (a context is a
    few MiB of tables; 400 packages of a release reuse it)."""
    contexts = getattr(_THREAD_CONTEXTS, "by_setting", None)
    if contexts is None:
        contexts = _THREAD_CONTEXTS.by_setting = {}
    key = (level, checksum)
    if key not in contexts:
        contexts[key] = zstandard.ZstdCompressor(level=level, write_checksum=checksum, write_content_size=True)
    return contexts[key]


def zstd_workers(level: int, checksum: bool, workers: int) -> zstandard.ZstdCompressor:
    """This thread's context compressing one frame on `workers` zstd threads (at least
    one): the same bytes for any number of workers, not those of a single-threaded
    context. The last one made is kept for the next large package of the same setting,
    like _context: a new one would allocate its workers' buffers again for every large
    package and fault every page of them in again. Only one is kept (a setting's
    buffers grow with its workers): memory stays that of one package's workers."""
    key = (level, checksum, max(1, workers))
    kept = getattr(_THREAD_CONTEXTS, "with_workers", None)
    if kept is None or kept[0] != key:
        kept = _THREAD_CONTEXTS.with_workers = (key, zstandard.ZstdCompressor(
            level=level, write_checksum=checksum, write_content_size=True, threads=key[2]))
    return kept[1]


def _compress_frame(level: int, checksum: bool, data: bytes) -> bytes:
    return _context(level, checksum).compress(data)


class ZstdFrames:
    """A zstd stream written as independent frames of ZSTD_FRAME_SIZE input bytes (the
    last one shorter; one empty frame for no input at all). zstd decoders read a run of
    frames as one stream (RFC 8878 3: dpkg, rpm and `zstd -d` all do). With threads > 1
    the frames are compressed by a pool of that many threads (zstandard releases the
    GIL) and written in order; at most threads + 2 frames are in flight, so memory is
    bounded by the frame size, not the package's."""

    def __init__(self, sink, level: int, threads: int, checksum: bool):
        self.sink, self.level, self.threads, self.checksum = sink, level, threads, checksum
        self.parts: list[bytes] = []
        self.buffered = 0
        self.frames = 0
        self.pool = None
        self.pending: collections.deque = collections.deque()

    def write(self, data) -> int:
        n = len(data)
        # pieces of immutable data are kept as views (one copy, when a frame is joined);
        # a caller's mutable buffer is copied now
        view = memoryview(data) if isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly) \
            else memoryview(bytes(data))
        while view:
            room = ZSTD_FRAME_SIZE - self.buffered
            self.parts.append(view[:room])
            self.buffered += len(self.parts[-1])
            view = view[room:]
            if self.buffered == ZSTD_FRAME_SIZE:
                self._frame()
        return n

    def _frame(self) -> None:
        block = b"".join(self.parts)
        self.parts, self.buffered = [], 0
        self.frames += 1
        if self.threads <= 1:
            self._emit(_compress_frame(self.level, self.checksum, block))
            return
        if self.pool is None:
            # here: a build's first write need not wait for concurrent.futures (and logging)
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="zstd")
        self.pending.append(self.pool.submit(_compress_frame, self.level, self.checksum, block))
        while len(self.pending) > self.threads + 2:
            self._emit(self.pending.popleft().result())

    def _emit(self, frame: bytes) -> None:
        """A compressed frame to the sink in STREAM_WRITE_SIZE pieces (views, no copy)."""
        if len(frame) <= STREAM_WRITE_SIZE:
            self.sink.write(frame)
            return
        view = memoryview(frame)
        for start in range(0, len(frame), STREAM_WRITE_SIZE):
            self.sink.write(view[start:start + STREAM_WRITE_SIZE])

    def close(self) -> None:
        if self.buffered or not self.frames:
            self._frame()
        try:
            while self.pending:
                self._emit(self.pending.popleft().result())
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)


def compressor(kind: str, sink, options, flavour: Flavour, size: int = 0) -> Compressor:
    """The payload compressor a BuildOptions asks for (kind, level, threads), for a payload
    of `size` bytes (the framing of some flavours depends on it)."""
    return Compressor(kind, sink, options.compression_level, options.threads, flavour, size)


def open_decompressor(kind: str, raw, where: str):
    """A read stream of raw's decompressed bytes. kind is a compressor name (an RPM's
    PAYLOADCOMPRESSOR), a file suffix (a .deb member's `.zst`) or "" for none."""
    kind = {suffix: name for name, suffix in SUFFIXES.items()}.get(kind.lstrip("."), kind.lstrip("."))
    if kind == "zstd":
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    if kind in ("xz", "lzma"):
        return lzma.LZMAFile(raw)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "":
        return raw
    raise RocpkgInputError((where, f"unsupported compression {kind!r}"))


# The levels each kind accepts (the Compressor uses them as they are: zstd's 20-22 need
# its "ultra" window sizes, which the writers do not enable, so they are refused).
LEVELS = {"zstd": (1, 19), "xz": (0, 9), "gzip": (1, 9)}


def level_problem(kind: str, level: int) -> str:
    """What is wrong with a compression level for kind ("" if nothing)."""
    low, high = LEVELS.get(kind, (level, level))
    return "" if low <= level <= high else f"{kind} takes a level from {low} to {high}, got {level}"
