"""Write kpack archives (format version 1, docs/kpack.md) kernel by kernel, never holding more
than one kernel in memory, and never leaving a partial archive under its final name."""
from __future__ import annotations

import os
from typing import Any

import msgpack
import zstandard

from kpack.format import BLOB_AREA_START, FORMAT_VERSION, HEADER, KERNEL_TYPE, MAGIC, SCHEME_NONE, \
    SCHEME_ZSTD, SCHEMES, U32


class AtomicFile:
    """`<path>.tmp-<pid>` opened for writing, renamed to `path` by commit() and removed by
    discard(): readers see the old file or the complete new one, never a partial one."""

    def __init__(self, path: str):
        self.path = path
        self.tmp = f"{path}.tmp-{os.getpid()}"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # a symlink planted under the temporary name is refused (ELOOP), never written through
        self.file = os.fdopen(os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      0o666), "w+b")

    def commit(self) -> None:
        try:
            self.file.close()
        except BaseException:
            self.discard()
            raise
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        try:
            self.file.close()
        finally:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass


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
        self._output = AtomicFile(self.path)
        self._file = self._output.file
        self._file.write(b"\0" * BLOB_AREA_START)
        if scheme == SCHEME_ZSTD:
            self._file.write(U32.pack(0))  # frame count, patched at close
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
            self._file.write(U32.pack(len(frame)))
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
                self._file.write(U32.pack(self._count))
                self._file.seek(toc_offset)
            self._file.write(msgpack.packb(toc, use_bin_type=True))
            self._file.seek(0)
            self._file.write(HEADER.pack(MAGIC, FORMAT_VERSION, toc_offset))
        except BaseException:
            self._output.discard()
            raise
        self._output.commit()

    def abort(self) -> None:
        """Drop the partial archive; nothing appears under the final name."""
        if not self._closed:
            self._closed = True
            self._output.discard()

    def __enter__(self) -> "KpackWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
