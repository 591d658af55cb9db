"""OpenPGP header signatures added to built RPMs (what `rpmsign --addsign` does for v4
packages), on all cores: each package is read once, in a worker process
(rocpkg.formats.parallel), into a signed copy beside it whose SHA-256 (and, when asked, the
unsigned file's) is taken in that one pass, so that nothing reads the package again to
index it. The caller renames each copy into place as it is handed over: the copies on
disk at once are about as many as the processes, never a second copy of the tree.

A signed copy differs from its package only between the lead and the main header (the
signature header, RESERVEDSPACE shrunk to keep its length): the main header and the
payload, and so their digests, are the same bytes. It keeps the package's mode and mtime
(the indexes date a package by its mtime). The signer is used through its public methods
only (detached_binary, rpm_header_signature_tag): it is plain data, pickled to the workers."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Iterator

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.parallel import file_size, spread
from rocpkg.formats.rpm.read import read_rpm, signature_area
from rocpkg.formats.rpm.record import package_from_header
from rocpkg.formats.rpm.signature import LEAD_SIZE
from rocpkg.formats.rpm.tags import TYPE_BIN
from rocpkg.formats.streams import CHUNK, write_all


@dataclass(frozen=True)
class SignedCopy:
    """A package's signed copy, written whole at `copy`, not yet in place (as the build
    writes packages, rocpkg.formats.streams.AtomicOutput: renamed, not fsync'd; forcing a
    tree of packages to disk would cost the repository step the disk's speed)."""

    path: str
    copy: str
    size: int
    sha256: str             # of the signed copy
    unsigned_sha256: str    # of the package before, when asked for; else ""


def nevra_key(record) -> tuple:
    """(name, epoch, version, release, arch): how the indexes tell one package from another."""
    return record.name, record.epoch, record.version, record.release, record.arch


def sign_copies(paths: list[str], signer, *, unsigned_of: frozenset = frozenset(),
                jobs: int | None = None) -> Iterator[SignedCopy]:
    """A signed copy of each RPM in paths that has no header signature yet, made on `jobs`
    processes and handed over as each is done, for the caller to rename into place;
    the unsigned file's SHA-256 too for a package whose nevra_key is in `unsigned_of`.
    Unreadable packages are skipped (the indexer reports them). Once the generator ends
    or is closed (an error, contextlib.closing), no copy that was not renamed is left."""
    copies = [f"{path}.tmp-{os.getpid()}" for path in paths]
    answers = spread(_sign_copy, [(path, copy, signer, unsigned_of) for path, copy in zip(paths, copies)], jobs,
                     size=lambda item: file_size(item[0]), ordered=False)
    try:
        for answer in answers:
            if answer is not None:
                yield answer
    finally:
        answers.close()     # the workers are done: no copy is still being written
        for copy in copies:
            _unlink(copy)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sign_copy(path: str, copy: str, signer, unsigned_of: frozenset) -> SignedCopy | None:
    try:
        info = read_rpm(path)
    except RocpkgInputError:
        return None         # unreadable: reported with every other one when indexing
    record = package_from_header(info)
    if record.header_signed:
        return None
    with open(path, "rb", buffering=0) as src:
        st = os.fstat(src.fileno())
        head = _pread_exact(src, info.header_end, 0, path)
        signature = signer.detached_binary(head[info.header_start:])
        blob = signature_area(info, {signer.rpm_header_signature_tag: (TYPE_BIN, signature)})
        signed = hashlib.sha256(head[:LEAD_SIZE] + blob + head[info.header_start:])
        unsigned = hashlib.sha256(head) if nevra_key(record) in unsigned_of else None
        try:
            with open(copy, "wb", buffering=0) as out:
                write_all(out.fileno(), head[:LEAD_SIZE] + blob + head[info.header_start:])
                size = _copy_rest(src, out, info.header_end, st.st_size, path, signed, unsigned)
                os.fchmod(out.fileno(), st.st_mode & 0o7777)
            os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            _unlink(copy)
            raise
    return SignedCopy(path, copy, size, signed.hexdigest(), unsigned.hexdigest() if unsigned else "")


def _pread_exact(src, n: int, at: int, path: str) -> bytes:
    data = os.pread(src.fileno(), n, at)
    if len(data) != n:
        raise RocpkgInputError((path, f"changed while it was signed: {len(data)} bytes where {n} were"))
    return data


def _copy_rest(src, out, start: int, size: int, path: str, *hashes) -> int:
    """The bytes of src from `start` to `size` onto out, into every hash given (None
    skipped); returns the file's whole size."""
    hashes = [h for h in hashes if h is not None]
    buffer = bytearray(4 * CHUNK)
    view = memoryview(buffer)
    src.seek(start)
    at = start
    while n := src.readinto(buffer):
        for h in hashes:
            h.update(view[:n])
        write_all(out.fileno(), view[:n])
        at += n
    if at != size:
        raise RocpkgInputError((path, f"changed while it was signed: {at} bytes, {size} when it was opened"))
    return at
