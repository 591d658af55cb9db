"""Payload compression for both writers and both readers: the one list of kinds, the
compressor factory and the decompressor switch.

The .deb and .rpm writers have always framed xz and gzip a little differently (xz check,
gzip header OS byte); each keeps its own `Flavour` so that a rebuilt package keeps its
bytes (a repository refuses a published version whose bytes changed)."""
from __future__ import annotations

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
# zstd workers each hold about 3 jobs: 4 MiB jobs keep a worker near 12 MB of RSS (the
# default job size costs ~30 MB per worker), so 16 workers (the last big package of a
# build on a 16-core machine) stay near 200 MB. The output depends on the job size,
# never on the number of workers.
ZSTD_JOB_SIZE = 4 << 20
ZSTD_MAX_THREADS = 16


@dataclass(frozen=True)
class Flavour:
    """How one package format frames xz and gzip streams."""

    xz_check: int           # lzma.CHECK_*
    zlib_gzip_header: bool  # zlib's gzip header (OS byte 3) rather than Python gzip's (255)
    zstd_checksum: bool = False  # a content checksum per zstd frame


# .deb: zstd frames with content checksums, as dpkg-deb writes them (dpkg then refuses a
# flipped byte: "Restored data doesn't match checksum"); an RPM's payload digest covers it.
DEB = Flavour(xz_check=lzma.CHECK_CRC64, zlib_gzip_header=False, zstd_checksum=True)
RPM = Flavour(xz_check=lzma.CHECK_CRC32, zlib_gzip_header=True)


def usable_cores() -> int:
    """The cores this process may run on (taskset, a cgroup cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def writer_threads(options) -> int:
    """The cores one package's writer may use: its compressor's workers, and whether its
    digests run beside it (streams.digester)."""
    return min(options.threads or usable_cores(), ZSTD_MAX_THREADS)


def _unknown(kind: str) -> RocpkgInputError:
    return RocpkgInputError(("compression", f"unknown compression {kind!r} ({', '.join(KINDS)})"))


class Compressor:
    """write() compresses into sink; close() ends the stream without closing sink.
    zstd runs in worker threads with a fixed job size; gzip writes no name and mtime 0.
    Levels are clamped to each kind's range (zstd 1-19, xz 0-9, gzip 1-9)."""

    def __init__(self, kind: str, sink, level: int, threads: int, flavour: Flavour):
        self.kind = kind
        self.sink = sink
        self.stream = None
        self.obj = None
        if kind == "zstd":
            workers = min(threads or usable_cores(), ZSTD_MAX_THREADS)  # as writer_threads
            self.stream = _zstd_compressor(max(1, min(level, 19)), workers, flavour.zstd_checksum).stream_writer(
                sink, closefd=False, write_return_read=True)
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


_ZSTD_CONTEXTS = threading.local()
_FORKED_CONTEXTS: list = []


def _zstd_compressor(level: int, workers: int, checksum: bool) -> zstandard.ZstdCompressor:
    """A zstd context reused package after package by one thread while the setting stays
    the same: a context starts its worker threads once (setting them up for each of 400
    small packages cost as much as compressing them). Only the last one is kept, so a
    worker's memory stays that of one context. Each stream is a new frame: reuse changes
    no byte."""
    key = (level, workers, checksum)
    held = getattr(_ZSTD_CONTEXTS, "held", None)
    if held is not None and _ZSTD_CONTEXTS.pid != os.getpid():
        # A forked worker inherits a context whose worker threads stayed in the parent:
        # using it, or even freeing it, waits forever on them, so it is kept, unused.
        _FORKED_CONTEXTS.append(held)
        held = None
    if held is None or held[0] != key:
        parameters = zstandard.ZstdCompressionParameters.from_level(
            level, threads=workers, job_size=ZSTD_JOB_SIZE, write_checksum=checksum)
        held = _ZSTD_CONTEXTS.held = (key, zstandard.ZstdCompressor(compression_params=parameters))
        _ZSTD_CONTEXTS.pid = os.getpid()
    return held[1]


def compressor(kind: str, sink, options, flavour: Flavour) -> Compressor:
    """The payload compressor a BuildOptions asks for (kind, level, threads)."""
    return Compressor(kind, sink, options.compression_level, options.threads, flavour)


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
