"""Which GPU target(s) a file carries device code for.

Recognised by their first bytes, reading only headers:
- AMDGPU ELF code object (e_machine 224): the processor from EF_AMDGPU_MACH, the xnack /
  sramecc state from e_flags (code object v4-v6; v2/v3 report only features that are on);
- clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`): the target of every amdgcn entry id
  (`hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`); host entries are skipped;
- compressed offload bundle (`CCOB` v1-v3, zstd or zlib): the same, after decompressing
  only the bundle header (never more than its declared uncompressed size);
- kpack archive: its `gfx_arches`;
- files that embed code objects (MIGraphX `.mxr`, or any file with scan_embedded=True):
  scanned in bounded chunks for ELF headers with e_machine 224.
Anything else is not device code: an empty list. A file that claims one of these formats
but is malformed raises KpackFormatError.
"""
from __future__ import annotations

import io
import os
import struct
import zlib
from typing import BinaryIO, Callable, NamedTuple

import zstandard

from kpack.archive import MAGIC as KPACK_MAGIC
from kpack.archive import ByteSource, KpackReader
from kpack.elf import EF_AMDGPU_MACH, ELFOSABI_AMDGPU_HSA, EM_AMDGPU
from kpack.errors import KpackFormatError
from kpack.targets import PROCESSOR_BY_MACH

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
ELF_MAGIC = b"\x7fELF"
EMBEDDING_SUFFIXES = (".mxr",)
SCAN_CHUNK = 1 << 20
_CCOB_HEADER_SIZE = {1: 20, 2: 24, 3: 32}
_CCOB_ZLIB, _CCOB_ZSTD = 0, 1

KIND_CODE_OBJECT = "code-object"
KIND_BUNDLE = "offload-bundle"
KIND_COMPRESSED_BUNDLE = "compressed-offload-bundle"
KIND_KPACK = "kpack"
KIND_EMBEDDED = "embedded-code-objects"
KIND_NONE = "not-device-code"


class Detection(NamedTuple):
    kind: str
    targets: list[str]


def _unique(items) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def elf_target(header: bytes, *, where: int = 0) -> str | None:
    """Target ID of an AMDGPU code object from its 64-byte ELF header; None when the
    header is not an AMDGPU ELF. Raises KpackFormatError for an AMDGPU ELF it cannot read."""
    if header[:4] != ELF_MAGIC or len(header) < 20:
        return None
    elf_class, data = header[4], header[5]
    machine = struct.unpack_from("<H" if data != 2 else ">H", header, 18)[0]
    if machine != EM_AMDGPU:
        return None
    if elf_class != 2 or data != 1:
        raise KpackFormatError("AMDGPU code object is not ELF64 little-endian", where=where + 4)
    if len(header) < 64:
        raise KpackFormatError(f"ELF header is truncated ({len(header)} of 64 bytes)", where=where)
    osabi, abi_version = header[7], header[8]
    (flags,) = struct.unpack_from("<I", header, 48)
    mach = flags & EF_AMDGPU_MACH
    processor = PROCESSOR_BY_MACH.get(mach)
    if processor is None:
        raise KpackFormatError(f"unknown EF_AMDGPU_MACH 0x{mach:02x} in e_flags 0x{flags:x}",
                               where=where + 48)
    features = {}
    if osabi == ELFOSABI_AMDGPU_HSA and abi_version >= 2:  # code object v4 and later
        for name, shift in (("sramecc", 10), ("xnack", 8)):
            state = (flags >> shift) & 0x3
            if state in (2, 3):  # 0 unsupported, 1 any: no suffix
                features[name] = state == 3
    elif osabi == ELFOSABI_AMDGPU_HSA and abi_version == 1:  # v3: a set bit means on
        if flags & 0x100:
            features["xnack"] = True
        if flags & 0x200:
            features["sramecc"] = True
    elif osabi == ELFOSABI_AMDGPU_HSA and abi_version == 0 and flags & 0x1:  # v2
        features["xnack"] = True
    return processor + "".join(f":{name}{'+' if on else '-'}" for name, on in sorted(features.items()))


def bundle_entry_target(entry_id: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx942:xnack-` -> `gfx942:xnack-`; None for host or
    non-amdgcn entries."""
    if "amdgcn-" not in entry_id:
        return None
    head = entry_id.split(":", 1)[0]
    cut = head.rfind("-gfx")
    return entry_id[cut + 1:] if cut >= 0 else None


def _bundle_targets(read: Callable[[int], bytes], size: int, describe: Callable[[int], int | str]) -> list[str]:
    """Targets of an uncompressed offload bundle read sequentially through `read(n)`;
    `size` bounds every declared length; `describe(pos)` names a position for errors."""
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

    take(len(BUNDLE_MAGIC))
    (count,) = struct.unpack("<Q", take(8))
    if 32 + 24 * count > size:
        raise KpackFormatError(f"{count} bundle entries cannot fit in {size} bytes", where=describe(24))
    targets = []
    for index in range(count):
        entry_at = position
        offset, length, id_length = struct.unpack("<QQQ", take(24))
        if offset + length > size:
            raise KpackFormatError(f"bundle entry {index} [{offset}, {offset + length}) runs past the "
                                   f"end ({size} bytes)", where=describe(entry_at))
        raw_id = take(id_length)
        try:
            entry_id = raw_id.decode("ascii")
        except UnicodeDecodeError:
            raise KpackFormatError(f"bundle entry {index} id is not ASCII", where=describe(entry_at + 24)) from None
        targets.append(bundle_entry_target(entry_id))
    return _unique(targets)


class _Window(io.RawIOBase):
    """A read-only view of [start, end) of a ByteSource, for streaming decompressors."""

    def __init__(self, source: ByteSource, start: int, end: int):
        self._source, self._position, self._end = source, start, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self._end - self._position, SCAN_CHUNK)
        if count <= 0:
            return 0
        data = self._source.read_at(self._position, count)
        buffer[:count] = data
        self._position += count
        return count


def _ccob_targets(source: ByteSource) -> list[str]:
    if source.size < 8:
        raise KpackFormatError("compressed bundle header is truncated", where=0)
    version, method = struct.unpack("<HH", source.read_at(4, 4))
    header_size = _CCOB_HEADER_SIZE.get(version)
    if header_size is None:
        raise KpackFormatError(f"unsupported compressed bundle version {version}", where=4)
    if source.size < header_size:
        raise KpackFormatError(f"compressed bundle header is truncated ({source.size} of "
                               f"{header_size} bytes)", where=0)
    header = source.read_at(0, header_size)
    if version == 1:
        total, (uncompressed,) = source.size, struct.unpack_from("<I", header, 8)
    elif version == 2:
        total, uncompressed = struct.unpack_from("<II", header, 8)
    else:
        total, uncompressed = struct.unpack_from("<QQ", header, 8)
    if not header_size <= total <= source.size:
        raise KpackFormatError(f"total size {total} does not fit the file ({source.size} bytes)", where=8)
    window = _Window(source, header_size, total)
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
        out = b""
        try:
            while len(out) < count:
                chunk = raw_read(count - len(out))
                if not chunk:
                    break
                out += chunk
        except (zstandard.ZstdError, zlib.error) as exc:
            raise KpackFormatError(f"compressed bundle does not decompress ({exc})", where=header_size) from None
        return out

    return _bundle_targets(read, uncompressed, lambda pos: f"decompressed offset {pos}")


def _scan_embedded(source: ByteSource) -> list[str]:
    """Find AMDGPU ELF headers anywhere in the file, one bounded chunk at a time."""
    targets = []
    position = 0
    while position < source.size:
        chunk = source.read_at(position, min(SCAN_CHUNK + 3, source.size - position))
        hit = chunk.find(ELF_MAGIC)
        while hit >= 0 and hit < SCAN_CHUNK:
            at = position + hit
            header = source.read_at(at, min(64, source.size - at))
            try:
                targets.append(elf_target(header, where=at))
            except KpackFormatError:
                pass  # four bytes that look like an ELF magic inside other data
            hit = chunk.find(ELF_MAGIC, hit + 1)
        position += SCAN_CHUNK
    return _unique(targets)


def _detect(handle: BinaryIO, scan_embedded: bool) -> Detection:
    source = ByteSource(handle)
    head = source.read_at(0, min(64, source.size))
    if head.startswith(ELF_MAGIC):
        target = elf_target(head)
        if target is not None:
            return Detection(KIND_CODE_OBJECT, [target])
    elif head.startswith(BUNDLE_MAGIC):
        position = 0

        def read(count: int) -> bytes:
            nonlocal position
            data = source.read_at(position, count)
            position += count
            return data

        return Detection(KIND_BUNDLE, _bundle_targets(read, source.size, lambda pos: pos))
    elif head.startswith(CCOB_MAGIC):
        return Detection(KIND_COMPRESSED_BUNDLE, _ccob_targets(source))
    elif head.startswith(KPACK_MAGIC):
        return Detection(KIND_KPACK, _unique(KpackReader(handle).gfx_arches))
    if scan_embedded:
        found = _scan_embedded(source)
        if found:
            return Detection(KIND_EMBEDDED, found)
    return Detection(KIND_NONE, [])


def detect(path: str | os.PathLike, *, scan_embedded: bool | None = None) -> Detection:
    """What kind of device file `path` is and its targets. scan_embedded: None scans only
    files named like embedding containers (EMBEDDING_SUFFIXES), True every file."""
    name = os.fspath(path)
    if not os.path.isfile(name):  # directories, FIFOs, devices: nothing to read
        if not os.path.exists(name):
            raise FileNotFoundError(2, "No such file or directory", name)
        return Detection(KIND_NONE, [])
    if scan_embedded is None:
        scan_embedded = name.lower().endswith(EMBEDDING_SUFFIXES)
    with open(name, "rb", buffering=0) as handle:
        try:
            return _detect(handle, scan_embedded)
        except KpackFormatError as exc:
            raise exc.with_path(name)


def detect_targets(path: str | os.PathLike, *, scan_embedded: bool | None = None) -> list[str]:
    """Target IDs `path` carries code for, e.g. ["gfx942:sramecc+:xnack-"]; [] = not device code."""
    return detect(path, scan_embedded=scan_embedded).targets


def detect_bytes(head: bytes, *, scan_embedded: bool = False) -> list[str]:
    """Like detect_targets for bytes in memory (a whole small file, or a file's head:
    64 bytes are enough for an ELF code object)."""
    return _detect(io.BytesIO(head), scan_embedded).targets
