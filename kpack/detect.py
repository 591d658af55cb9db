"""Which GPU target(s) a file carries device code for.

Recognised by their first bytes, reading only headers:
- AMDGPU ELF code object (e_machine 224): its target ID as comgr names it, every code-object
  version (kpack.codeobject.code_object_target);
- clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`): the target of every amdgcn entry id
  (`hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`), each checked against the ELF inside;
  host entries are skipped (kpack.bundle);
- compressed offload bundle (`CCOB` v1-v3, zstd or zlib): the ids, after decompressing
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
from typing import BinaryIO, NamedTuple

from kpack import memsearch
from kpack.archive import MAGIC as KPACK_MAGIC
from kpack.archive import KpackReader
from kpack.bundle import BUNDLE_MAGIC, CCOB_MAGIC, SCAN_CHUNK, bundle_entries, compressed_bundle_entries
from kpack.bundle import entry_target as bundle_entry_target
from kpack.codeobject import ELF_MAGIC, CodeSource, decode_code_object
from kpack.errors import KpackFormatError

EMBEDDING_SUFFIXES = (".mxr",)
# what every AMDGPU code object starts with: ELF magic, 64-bit, little-endian, EV_CURRENT
# (a longer needle than the magic alone: the scan runs at twice the speed)
ELF64_LE = ELF_MAGIC + b"\x02\x01\x01"

KIND_CODE_OBJECT = "code-object"
KIND_BUNDLE = "offload-bundle"
KIND_COMPRESSED_BUNDLE = "compressed-offload-bundle"
KIND_KPACK = "kpack"
KIND_EMBEDDED = "embedded-code-objects"
KIND_NONE = "not-device-code"

__all__ = ["Detection", "detect", "detect_targets", "detect_bytes", "elf_target", "bundle_entry_target",
           "scan_code_objects", "SCAN_CHUNK"]


class Detection(NamedTuple):
    kind: str
    targets: list[str]


def _unique(items) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def elf_target(header: bytes, *, where: int = 0) -> str | None:
    """Target ID of an AMDGPU code object from its bytes (64 are enough for code object v3
    and later; v2 needs its notes); None when they are not an AMDGPU ELF. Raises
    KpackFormatError for an AMDGPU ELF it cannot read."""
    return decode_code_object(CodeSource(header), where=where)


def scan_code_objects(handle: BinaryIO, start: int = 0, end: int | None = None):
    """(offset, target) of every AMDGPU ELF header found in [start, end) of a seekable file,
    one bounded chunk at a time; four bytes that merely look like an ELF magic are skipped."""
    end = handle.seek(0, os.SEEK_END) if end is None else end
    position = start
    while position < end:
        handle.seek(position)
        chunk = handle.read(min(SCAN_CHUNK + len(ELF64_LE) - 1, end - position))
        hit = memsearch.find(chunk, ELF64_LE)
        while 0 <= hit < SCAN_CHUNK:
            at = position + hit
            try:
                target = decode_code_object(CodeSource(handle, at, end - at), where=at, check_notes=False)
            except KpackFormatError:
                target = None
            if target is not None:
                yield at, target
            hit = memsearch.find(chunk, ELF64_LE, hit + 1)
        position += SCAN_CHUNK


def _detect(handle: BinaryIO, scan_embedded: bool) -> Detection:
    handle.seek(0)
    head = handle.read(64)
    if head.startswith(ELF_MAGIC):
        target = decode_code_object(CodeSource(handle))
        if target is not None:
            return Detection(KIND_CODE_OBJECT, [target])
    elif head.startswith(BUNDLE_MAGIC):
        return Detection(KIND_BUNDLE, _unique(e.target for e in bundle_entries(handle)))
    elif head.startswith(CCOB_MAGIC):
        return Detection(KIND_COMPRESSED_BUNDLE, _unique(e.target for e in compressed_bundle_entries(handle)))
    elif head.startswith(KPACK_MAGIC):
        return Detection(KIND_KPACK, _unique(KpackReader(handle).gfx_arches))
    if scan_embedded:
        found = _unique(target for _, target in scan_code_objects(handle))
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
