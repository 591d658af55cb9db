"""One hashing and counting stream wrapper for every writer and indexer (createrepo_c's
model: count and hash while writing, never read a file twice)."""
from __future__ import annotations

import hashlib
import os
from typing import BinaryIO, Iterable

CHUNK = 1 << 20


class HashingWriter:
    """File-like sink that forwards writes and keeps running digests and a byte count."""

    def __init__(self, sink: BinaryIO | None, algorithms: Iterable[str] = ("sha256",)):
        self.sink = sink
        self.hashes = {name: hashlib.new(name) for name in algorithms}
        self.count = 0

    def write(self, data) -> int:
        if self.sink is not None:
            self.sink.write(data)
        for h in self.hashes.values():
            h.update(data)
        n = len(data)
        self.count += n
        return n

    def flush(self) -> None:
        if self.sink is not None and hasattr(self.sink, "flush"):
            self.sink.flush()

    def hexdigest(self, name: str = "sha256") -> str:
        return self.hashes[name].hexdigest()

    def digest(self, name: str = "sha256") -> bytes:
        return self.hashes[name].digest()


def hash_file(path: str | os.PathLike, algorithms: Iterable[str] = ("sha256",)) -> HashingWriter:
    """Digest a file in chunks; returns the HashingWriter (count + hexdigest)."""
    hw = HashingWriter(None, algorithms)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            hw.write(chunk)
    return hw


def copy_stream(src: BinaryIO, dst, size: int | None = None) -> int:
    """Copy src to dst in bounded chunks; with size, copy exactly that many bytes or raise
    EOFError (a file that shrank while being packed)."""
    copied = 0
    while size is None or copied < size:
        want = CHUNK if size is None else min(CHUNK, size - copied)
        chunk = src.read(want)
        if not chunk:
            if size is not None:
                raise EOFError(f"expected {size} bytes, got {copied}")
            break
        dst.write(chunk)
        copied += len(chunk)
    return copied


class AtomicOutput:
    """Write to `<path>.tmp-<pid>` and rename into place on success; remove on failure,
    so that no half-written package or index is ever visible under its final name."""

    def __init__(self, path: str | os.PathLike, mode: str = "wb"):
        self.path = os.fspath(path)
        self.tmp = f"{self.path}.tmp-{os.getpid()}"
        self.mode = mode
        self.file = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self.file = open(self.tmp, self.mode)
        return self.file

    def __exit__(self, exc_type, exc, tb):
        try:
            self.file.close()  # flushes: a full disk may only show here
            if exc_type is None:
                os.replace(self.tmp, self.path)
        except OSError as error:
            self._discard()
            raise self._named(error)
        except BaseException:
            self._discard()
            raise
        if exc_type is not None:
            self._discard()
            if isinstance(exc, OSError):
                self._named(exc)
        return False

    def _discard(self) -> None:
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def _named(self, error: OSError) -> OSError:
        """A failed write (ENOSPC, EIO) names no file; the user needs to know which one."""
        if error.filename is None:
            error.filename = self.path
        return error


def read_upto(stream, n: int) -> bytes:
    """Up to n bytes, fewer only at the end of the stream (raw streams may return less)."""
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_exact(stream, n: int) -> bytes:
    """Exactly n bytes or EOFError: a truncated payload is an error, not a short read."""
    data = read_upto(stream, n)
    if len(data) != n:
        raise EOFError(f"truncated: wanted {n} bytes, got {len(data)}")
    return data


def skip_exact(stream, n: int) -> None:
    """Consume n bytes of a non-seekable stream in bounded chunks."""
    while n > 0:
        n -= len(read_exact(stream, min(CHUNK, n)))
