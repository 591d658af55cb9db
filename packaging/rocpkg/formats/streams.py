"""One hashing and counting stream wrapper for every writer and indexer (createrepo_c's
model: count and hash while writing, never read a file twice)."""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import queue
import threading
from typing import BinaryIO, Iterable, Iterator

from rocpkg.errors import RocpkgInputError

# 256 KiB: a chunk is read, then compressed and hashed while it is still in the core's L2
# cache (1 MiB per core is common, with zstd's window and tables beside it). Larger
# chunks leave the cache and cost the writers more CPU than the four times as many
# syscalls of 256 KiB chunks do (benchmarks/RESULTS.md).
CHUNK = 256 << 10


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


class Tee:
    """Forwards writes to a sink and to taps (DigestThreads), counting the bytes."""

    def __init__(self, sink, *taps):
        self.sink, self.taps, self.count = sink, taps, 0

    def write(self, data) -> int:
        self.sink.write(data)
        for tap in self.taps:
            tap.write(data)
        self.count += len(data)
        return len(data)

    def flush(self) -> None:
        if hasattr(self.sink, "flush"):
            self.sink.flush()


def hash_file(path: str | os.PathLike, algorithms: Iterable[str] = ("sha256",)) -> HashingWriter:
    """Digest a file in chunks; returns the HashingWriter (count + hexdigest)."""
    hw = HashingWriter(None, algorithms)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            hw.write(chunk)
    return hw


def hash_open(f: BinaryIO, start: int, *hashes) -> int:
    """Feed the bytes of the open file f from `start` to its end into every hash (one
    reused buffer, bounded); returns their count. For the digests that cover bytes whose
    prefix is only final once the payload is written (see the writers): the payload was
    just written, so this reads the page cache, not the disk."""
    f.flush()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    count = 0
    # through a read-only descriptor of its own: reading back through the one still open
    # for writing costs several times the kernel time under gVisor
    with open(f.name, "rb", buffering=0) as reader:
        reader.seek(start)
        while n := reader.readinto(buffer):
            for h in hashes:
                h.update(view[:n])
            count += n
    return count


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


# Told the path of each file about to be made, replaced or removed (rocpkg.store.journal's
# change of OUT in progress registers here, and saves what the path holds first); empty
# outside such a change, so a build's writers pay one test per file.
WATCHERS: list = []


def touching(path: str | os.PathLike) -> None:
    """Say that `path` (a file, or a directory about to be made) is about to change (WATCHERS)."""
    for watch in WATCHERS:
        watch(os.fspath(path))


def remove_file(path: str | os.PathLike) -> bool:
    """Remove a file as a change its watchers are told of first; False when it is missing."""
    if not os.path.lexists(path):
        return False
    touching(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def make_dirs(path: str | os.PathLike) -> None:
    """os.makedirs(path, exist_ok=True), the directories it makes told to the watchers first."""
    if not os.path.isdir(path):
        touching(path)
        os.makedirs(path, exist_ok=True)


class AtomicOutput:
    """Write to `<path>.tmp-<pid>` and rename into place on success; remove on failure,
    so that no half-written package or index is ever visible under its final name.
    The watchers (touching) hear of path before anything is written."""

    def __init__(self, path: str | os.PathLike, mode: str = "wb"):
        self.path = os.fspath(path)
        self.tmp = f"{self.path}.tmp-{os.getpid()}"
        self.mode = mode
        self.file = None

    def __enter__(self):
        if WATCHERS:
            touching(self.path)
        # the directory is made only when the open finds it missing: a build writes
        # thousands of files into a few directories (makedirs costs 12 us a call)
        try:
            self.file = open(self.tmp, self.mode)
        except FileNotFoundError:
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


def write_atomic(path: str, data: bytes) -> None:
    """`data` as the whole of `path`, atomically (AtomicOutput)."""
    with AtomicOutput(path) as fh:
        fh.write(data)


def write_all(fd: int, data: bytes) -> None:
    """All of data written to the descriptor fd: a short write (a file-size limit, a full
    disk, a signal) is continued until the rest is written or the write fails with the
    error, never taken as the whole. The one loop for every os.write rocpkg makes."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "a write wrote nothing")
        view = view[written:]


def write_durable(path: str, data: bytes) -> None:
    """`data` as the whole of `path`, atomically and durably: a temporary `<path>.tmp-<pid>`
    (never through a symlink) written whole (write_all) and fsynced, renamed over path,
    then its directory fsynced. Once this returns the file survives a crash; when it
    raises (the error naming path), no temporary is left, and path is as it was unless
    only the directory's fsync failed."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if error.filename is None:
            error.filename = path
        raise


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


# -- reading sources: the one place both writers read a planned file's bytes ------------

_ZEROS = memoryview(bytes(CHUNK))


class _SourceChanged(Exception):
    """The source file is not the size it was planned (or first read) with."""


def _next_data(fd: int, position: int, size: int) -> int:
    """Offset of the next byte of data at or after position (size if only a hole is
    left). A file system that can't tell (EINVAL, EOPNOTSUPP) has no holes."""
    try:
        return min(os.lseek(fd, position, os.SEEK_DATA), size)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return size
        return position


def _next_hole(fd: int, position: int, size: int) -> int:
    try:
        return min(os.lseek(fd, position, os.SEEK_HOLE), size)
    except OSError:
        return size


def _read_span(fd: int, position: int, end: int):
    """The bytes of fd from its current offset, position, up to end, in CHUNK pieces; a
    file that ends sooner changed while it was read (_SourceChanged)."""
    while position < end:
        chunk = os.read(fd, min(CHUNK, end - position))
        if not chunk:
            raise _SourceChanged(f"it shrank while being packed: it ended at {position} bytes")
        yield chunk
        position += len(chunk)


def _whole(fd: int, size: int) -> bytes:
    """The whole file open at fd (at offset 0), `size` bytes, in one read of a byte more
    (a file that grew since it was opened says so); one that ends sooner or later changed
    while it was read (_SourceChanged)."""
    data = os.read(fd, size + 1)
    while 0 < len(data) < size:     # a short read that is not the end
        more = os.read(fd, size + 1 - len(data))
        if not more:
            break
        data += more
    if len(data) > size:
        raise _SourceChanged(f"it grew while being packed: it has more than the {size} bytes planned")
    if len(data) < size:
        raise _SourceChanged(f"it shrank while being packed: it ended at {len(data)} bytes")
    return data


def _chunks(fd: int, size: int, sparse: bool = True) -> Iterator[bytes | memoryview]:
    """Exactly `size` bytes of the file open at fd (at offset 0), in chunks of at most
    CHUNK, read from the descriptor itself (no buffered file object: a release's thousands
    of small files would pay its extra system calls each). Holes of a sparse file come from
    a shared zero buffer instead of read(): the kernel would only hand back zeros, at a
    real cost for multi-GiB sparse files; a file whose blocks hold all its bytes (sparse
    false) has no hole to look for."""
    position = 0
    if not sparse:
        yield from _read_span(fd, position, size)
        position = size
    while position < size:
        data_at = _next_data(fd, position, size)
        while position < data_at:
            step = min(CHUNK, data_at - position)
            yield _ZEROS[:step]
            position += step
        if position >= size:
            break
        hole_at = _next_hole(fd, position, size)
        os.lseek(fd, position, os.SEEK_SET)
        yield from _read_span(fd, position, hole_at)
        position = hole_at
    now = os.fstat(fd).st_size
    if now != size:
        raise _SourceChanged(f"it {'grew' if now > size else 'shrank'} while being packed: it has {now} bytes now")


def patch_chunks(chunks: Iterable[bytes | memoryview], patches) -> Iterator[bytes | memoryview]:
    """The chunks of one file with `patches` ((offset, bytes), sorted, not overlapping)
    written over them as they stream by; a patch may straddle chunk boundaries. Chunks no
    patch touches pass through untouched (no copy)."""
    if not patches:
        yield from chunks
        return
    position = 0
    for chunk in chunks:
        end = position + len(chunk)
        touched = [(at, data) for at, data in patches if at < end and at + len(data) > position]
        if touched:
            chunk = bytearray(chunk)
            for at, data in touched:
                lo, hi = max(at, position), min(at + len(data), end)
                chunk[lo - position:hi - position] = data[lo - at:hi - at]
        yield chunk
        position = end


class SourceFile:
    """One planned source file, opened for its single read: both writers read their
    sources through chunks() and nowhere else, so the planned byte patches
    (FileEntry.patches, rocpkg.inputs.rpath: RUNPATH -> RPATH) are applied here, once, before
    any digest sees the bytes. A file that vanished, can't be read, or is not the planned
    size (before or while it is read) is bad input naming `where` and the file."""

    def __init__(self, where: str, source: str, size: int, patches=(), identity: tuple[int, int] = (0, 0)):
        self.where, self.source, self.size, self.patches = where, source, size, patches
        try:  # never through a symlink swapped in since the catalog read the file
            fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise self._error("the source file is missing (vanished since planning?)") from None
        except OSError as exc:
            raise self._error(f"the source file can't be read: {exc.strerror}") from None
        self.fd = fd
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (identity != (0, 0) and (info.st_dev, info.st_ino) != identity):
            os.close(fd)
            raise self._error("the source file was replaced while packing (not the file the plan read)")
        self.mtime = int(info.st_mtime)
        self.found = (source, info.st_size, info.st_mtime_ns, info.st_ino)   # what was opened
        self.sparse = info.st_blocks * 512 < size     # a file system may not say: then holes are looked for
        if info.st_size != size:
            os.close(fd)
            raise self._error(f"the source file has {info.st_size} bytes, planned {size} (changed since planning?)")

    def _error(self, what: str) -> RocpkgInputError:
        return RocpkgInputError((self.where, f"{what} ({self.source})"))

    def __enter__(self) -> "SourceFile":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)

    def copy_to(self, out, digests, key) -> None:
        """Write exactly the planned bytes to `out` and to each digest of `digests`,
        which take them as `key`'s (begin/end around them): how every writer streams a
        source. A file of at most CHUNK bytes with no holes and no patches, most of a
        release's files, is read in one piece, with no generator between the read and
        its consumers."""
        for digest in digests:
            digest.begin(key)
        if self.size <= CHUNK and not self.sparse and not self.patches:
            try:
                data = _whole(self.fd, self.size)
            except (_SourceChanged, OSError) as exc:
                raise self._failed(exc) from None
            out.write(data)
            for digest in digests:
                digest.write(data)
        else:
            for chunk in self.chunks():
                out.write(chunk)
                for digest in digests:
                    digest.write(chunk)
        for digest in digests:
            digest.end(key)

    def chunks(self) -> Iterator[bytes | memoryview]:
        """Exactly the planned bytes, in chunks of at most CHUNK that are never reused
        afterwards (a digest thread may still hold one)."""
        try:
            yield from patch_chunks(_chunks(self.fd, self.size, self.sparse), self.patches)
        except (_SourceChanged, OSError) as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: Exception) -> RocpkgInputError:
        """What a failed read of the source is: a change of its size, or the OS's error."""
        if isinstance(exc, _SourceChanged):
            return self._error(f"the source file changed while packing: {exc}")
        return self._error(f"the source file can't be read: {exc.strerror}")


# -- digests beside the writer --------------------------------------------------------------


class InlineDigest:
    """DigestThread's interface, hashed in the caller's thread: what a package written on
    one core wants (handing each chunk to another thread only adds switches there)."""

    def __init__(self, algorithm: str, whole: bool = False):
        self.algorithm = algorithm
        self.results: dict[object, str] = {}
        self.count = 0
        self._whole = whole
        self._current = hashlib.new(algorithm, usedforsecurity=False) if whole else None

    def write(self, data) -> int:
        if self._current is not None:
            self._current.update(data)
        self.count += len(data)
        return len(data)

    def begin(self, key) -> None:
        self._current = hashlib.new(self.algorithm, usedforsecurity=False)

    def end(self, key=None) -> None:
        self.results[key] = self._current.hexdigest()
        self._current = None

    def close(self) -> dict[object, str]:
        if self._whole and self._current is not None:
            self.end(None)
        return self.results

    def hexdigest(self) -> str:
        return self.close()[None]

    def abandon(self) -> None:
        self._current = None


def digester(algorithm: str, threads: int, whole: bool = False):
    """The digest a writer takes beside its compressor: in a thread of its own when the
    package has more than one core to itself (it then costs no wall time), inline when
    it has one (every core is busy with another package)."""
    return DigestThread(algorithm, whole) if threads > 1 else InlineDigest(algorithm, whole)


class DigestThread:
    """Running digests fed from a bounded queue by a thread of their own, so that hashing
    overlaps reading and compressing (hashlib releases the GIL on large updates). The
    writer hands each chunk over and moves on; small pieces (tar and cpio headers, small
    files, the begin and end of each file's digest) are gathered into one batch of at
    most SMALL bytes or BATCH marks first, so that the queue carries few items whatever
    the number of files (each item is a hand-over between threads). begin(key)/end()
    delimit one file's digest (per-file md5/sha256); without them the digest covers the
    whole stream. At most DEPTH items wait, so memory stays flat in the payload size."""

    DEPTH = 4
    SMALL = 64 << 10
    BATCH = 512

    def __init__(self, algorithm: str, whole: bool = False):
        self.algorithm = algorithm
        self.results: dict[object, str] = {}
        self.count = 0
        self._pending: list = []        # bytearrays of data and (op, key) marks, in order
        self._pending_bytes = 0
        self._queue: queue.Queue = queue.Queue(self.DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"digest-{algorithm}", daemon=True)
        self._thread.start()
        self._whole = whole
        if whole:
            self.begin(None)

    def _run(self) -> None:
        current = None
        while True:
            batch = self._queue.get()
            try:
                for item in batch:
                    if isinstance(item, tuple):
                        op, key = item
                        if op == "stop":
                            return
                        if op == "begin":
                            current = hashlib.new(self.algorithm, usedforsecurity=False)
                        else:
                            self.results[key] = current.hexdigest()
                            current = None
                    elif current is not None:
                        current.update(item)
            except BaseException as exc:  # reported by close(); keep draining so put() never blocks
                self._error = exc

    def _flush(self) -> None:
        if self._pending:
            self._queue.put(self._pending)
            self._pending, self._pending_bytes = [], 0

    def _mark(self, op: str, key) -> None:
        self._pending.append((op, key))
        if len(self._pending) >= self.BATCH:
            self._flush()

    def write(self, data) -> int:
        n = len(data)
        self.count += n
        if n < self.SMALL:
            if self._pending and isinstance(self._pending[-1], bytearray):
                self._pending[-1] += data
            else:
                self._pending.append(bytearray(data))
            self._pending_bytes += n
            if self._pending_bytes >= self.SMALL:
                self._flush()
        else:
            self._flush()
            if isinstance(data, memoryview) and not data.readonly or isinstance(data, bytearray):
                data = bytes(data)  # the caller may reuse a mutable buffer
            self._queue.put((data,))
        return n

    def begin(self, key) -> None:
        self._mark("begin", key)

    def end(self, key=None) -> None:
        self._mark("end", key)

    def close(self) -> dict[object, str]:
        """Wait for the queued bytes; the digests by key (None: the whole stream's)."""
        if self._thread.is_alive():
            if self._whole:
                self.end(None)
            self._mark("stop", None)
            self._flush()
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self.results

    def hexdigest(self) -> str:
        """The whole stream's digest (a DigestThread made with whole=True), after close()."""
        return self.close()[None]

    def abandon(self) -> None:
        """Stop the thread without waiting for a result (the writer failed)."""
        if self._thread.is_alive():
            self._pending, self._pending_bytes = [("stop", None)], 0
            self._flush()
            self._thread.join()
