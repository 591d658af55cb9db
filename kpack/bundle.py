"""Clang offload bundles, read natively.

Uncompressed (`__CLANG_OFFLOAD_BUNDLE__`): the 24-byte magic, u64 entry count, then per
entry u64 offset (from the bundle start), u64 size, u64 id length and the id
(`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`, `host-x86_64-unknown-linux`), then the entries'
bytes. The id names the target; the AMDGPU ELF inside must agree with it (same processor, and
every feature the id names set the same way in the object), or the bundle is malformed.

Compressed (`CCOB` v1-v3, zstd or zlib): a header, then the compressed uncompressed bundle;
only its header is decompressed (never more than its declared size), so the ids are read but
the objects inside are not cross-checked.

Every declared offset and size is checked against the bytes that exist before anything is
read; nothing is allocated from a declared size.
"""
from __future__ import annotations

import os
import struct
import zlib
from typing import BinaryIO, Callable, NamedTuple

import zstandard

from kpack.codeobject import CodeSource, decode_code_object
from kpack.errors import KpackFormatError
from kpack.format import ByteSource, Window
from kpack.targets import is_target, parse_target

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
SCAN_CHUNK = 1 << 20
# An entry id is a target triple with its features ("hipv4-amdgcn-amd-amdhsa--gfx942:xnack+",
# under 100 bytes); a longer declared length is refused before anything is read for it.
MAX_ENTRY_ID = 4096
_CCOB_HEADER_SIZE = {1: 20, 2: 24, 3: 32}
_CCOB_ZLIB, _CCOB_ZSTD = 0, 1


class BundleEntry(NamedTuple):
    index: int
    entry_id: str
    target: str | None     # None for host and non-amdgcn entries
    offset: int            # from the start of the bundle
    size: int


def entry_target(entry_id: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx942:xnack-` -> `gfx942:xnack-` (also the old one-dash
    `hip-amdgcn-amd-amdhsa-gfx906`); None for host or non-amdgcn entries."""
    if "amdgcn-" not in entry_id:
        return None
    head = entry_id.split(":", 1)[0]
    cut = head.rfind("-gfx")
    return entry_id[cut + 1:] if cut >= 0 else None


def _parse_entries(read: Callable[[int], bytes], size: int, describe: Callable[[int], int | str]) -> list[BundleEntry]:
    """The entry table of an uncompressed bundle read sequentially through `read(n)`; `size`
    bounds every declared length; `describe(pos)` names a position for errors."""
    position = 0

    def take(count: int) -> bytes:
        nonlocal position
        if position + count > size:
            raise KpackFormatError(f"offload bundle is truncated (needs {count} bytes, "
                                   f"{size - position} left)", where=describe(position))
        data = read(count)
        if len(data) != count:
            raise KpackFormatError("offload bundle is truncated", where=describe(position))
        position += count
        return data

    if take(len(BUNDLE_MAGIC)) != BUNDLE_MAGIC:
        raise KpackFormatError("not a clang offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic)", where=describe(0))
    (count,) = struct.unpack("<Q", take(8))
    if 32 + 24 * count > size:
        raise KpackFormatError(f"{count} bundle entries cannot fit in {size} bytes", where=describe(24))
    entries = []
    for index in range(count):
        entry_at = position
        offset, length, id_length = struct.unpack("<QQQ", take(24))
        if offset + length > size:
            raise KpackFormatError(f"bundle entry {index} [{offset}, {offset + length}) runs past the "
                                   f"end ({size} bytes)", where=describe(entry_at))
        if id_length > MAX_ENTRY_ID and position + id_length <= size:   # (past the end: truncated)
            raise KpackFormatError(f"bundle entry {index} id is {id_length} bytes long (at most {MAX_ENTRY_ID})",
                                   where=describe(entry_at + 16))
        raw_id = take(id_length)
        try:
            entry_id = raw_id.decode("ascii")
        except UnicodeDecodeError:
            raise KpackFormatError(f"bundle entry {index} id is not ASCII", where=describe(entry_at + 24)) from None
        target = entry_target(entry_id)
        if target is not None and not is_target(target):
            raise KpackFormatError(f"bundle entry {index} id {entry_id!r} names no valid target",
                                   where=describe(entry_at + 24))
        entries.append(BundleEntry(index, entry_id, target, offset, length))
    return entries


def agrees(named: str, actual: str) -> bool:
    """Whether a code object of target `actual` can be filed under `named` (a bundle id or an
    artifact suffix): the same processor, and each feature `named` sets is set the same way."""
    want, have = parse_target(named), parse_target(actual)
    return want.processor == have.processor and all(
        have.features.get(name) == value for name, value in want.features.items())


def bundle_entries(handle: BinaryIO, *, base: int = 0, size: int | None = None,
                   check_objects: bool = True) -> list[BundleEntry]:
    """The entries of the uncompressed bundle at [base, base+size) of a seekable binary file.
    check_objects: decode the AMDGPU ELF of every amdgcn entry and require it to agree with
    its id (KpackFormatError naming the entry otherwise)."""
    total = handle.seek(0, os.SEEK_END)
    size = total - base if size is None else min(size, total - base)
    position = base

    def read(count: int) -> bytes:
        nonlocal position
        handle.seek(position)
        data = handle.read(count)
        position += len(data)
        return data

    entries = _parse_entries(read, size, lambda pos: base + pos)
    if check_objects:
        for entry in entries:
            if entry.target is None or not entry.size:
                continue
            where = base + entry.offset
            actual = decode_code_object(CodeSource(handle, where, entry.size), where=where)
            if actual is None:
                raise KpackFormatError(f"bundle entry {entry.index} ({entry.entry_id}) is not an AMDGPU "
                                       f"code object", where=where)
            if not agrees(entry.target, actual):
                raise KpackFormatError(f"bundle entry {entry.index} is named {entry.entry_id} but its code "
                                       f"object is for {actual}", where=where)
    return entries


def read_entry(handle: BinaryIO, entry: BundleEntry, *, base: int = 0) -> bytes:
    """The bytes of one entry (its size was checked against the bundle when it was parsed)."""
    handle.seek(base + entry.offset)
    data = handle.read(entry.size)
    if len(data) != entry.size:
        raise KpackFormatError(f"bundle entry {entry.index} is truncated", where=base + entry.offset)
    return data


def bundle_end(entries: list[BundleEntry]) -> int:
    """Bytes from the bundle start to the end of its last entry (at least its header)."""
    header = 32 + sum(24 + len(entry.entry_id) for entry in entries)
    return max([header] + [entry.offset + entry.size for entry in entries])


def compressed_bundle_entries(handle: BinaryIO) -> list[BundleEntry]:
    """The entry table of a `CCOB` compressed bundle (offsets are in the decompressed bundle)."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if size < 8:
        raise KpackFormatError("compressed bundle header is truncated", where=0)
    _, version, method = struct.unpack("<4sHH", handle.read(8))
    header_size = _CCOB_HEADER_SIZE.get(version)
    if header_size is None:
        raise KpackFormatError(f"unsupported compressed bundle version {version}", where=4)
    if size < header_size:
        raise KpackFormatError(f"compressed bundle header is truncated ({size} of {header_size} bytes)", where=0)
    handle.seek(0)
    header = handle.read(header_size)
    if version == 1:
        total, (uncompressed,) = size, struct.unpack_from("<I", header, 8)
    elif version == 2:
        total, uncompressed = struct.unpack_from("<II", header, 8)
    else:
        total, uncompressed = struct.unpack_from("<QQ", header, 8)
    if not header_size <= total <= size:
        raise KpackFormatError(f"total size {total} does not fit the file ({size} bytes)", where=8)
    window = Window(ByteSource(handle), header_size, total)
    if method == _CCOB_ZSTD:
        stream = zstandard.ZstdDecompressor().stream_reader(window, read_across_frames=False)
        raw_read = stream.read
    elif method == _CCOB_ZLIB:
        inflater = zlib.decompressobj()

        def raw_read(count: int) -> bytes:
            out = inflater.decompress(inflater.unconsumed_tail, count)
            while len(out) < count and not inflater.eof:
                chunk = window.read(SCAN_CHUNK)
                if not chunk:
                    break
                out += inflater.decompress(chunk, count - len(out))
            return out
    else:
        raise KpackFormatError(f"unknown compression method {method}", where=6)

    def read(count: int) -> bytes:
        """count bytes or fewer (the stream ended), asked for SCAN_CHUNK at a time: a
        decompressor allocates what it is asked for, and count comes from the bundle."""
        out = b""
        try:
            while len(out) < count:
                chunk = raw_read(min(count - len(out), SCAN_CHUNK))
                if not chunk:
                    break
                out += chunk
        except (zstandard.ZstdError, zlib.error) as exc:
            raise KpackFormatError(f"compressed bundle does not decompress ({exc})", where=header_size) from None
        return out

    return _parse_entries(read, uncompressed, lambda pos: f"decompressed offset {pos}")
