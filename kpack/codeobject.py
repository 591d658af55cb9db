"""The target ID of an AMDGPU code object, decoded per code-object version as comgr's
`amd_comgr_get_data_isa_name` does (comgr-metadata.cpp), so that kpack names a code object
exactly as the ROCm runtime will:

- the processor from EF_AMDGPU_MACH (e_flags & 0xff), LLVM's table in kpack.targets;
- code object v2 (EI_ABIVERSION 0): the processor and xnack come from the `AMD` notes, not
  e_flags: NT_AMD_HSA_ISA_VERSION (major:minor:stepping, e.g. 9:0:7 = gfx906 with xnack on),
  xnack taken from EF_AMDGPU_FEATURE_XNACK_V2 (bit 0) only for HSAIL-finalized objects;
  sramecc is always off ("9:0:6" is gfx906:sramecc-:xnack-);
- v3 (EI_ABIVERSION 1): one bit per feature, 0x100 xnack and 0x200 sramecc; a cleared bit
  is "off" (v3 has no "any"), and every feature the processor supports is named;
- v4, v5, v6 (EI_ABIVERSION 2-4): two-bit fields, 0x300 xnack and 0xc00 sramecc, each
  unsupported / any / off / on; "any" and "unsupported" name nothing;
- v4+ objects carry `amdhsa.target` in their NT_AMDGPU_METADATA note: where present it
  must agree with the header, or the object is malformed.

Only headers, program headers and notes are read (each bounded by the object's size);
a 64-byte header alone is enough for v3 and later.
"""
from __future__ import annotations

import io
import os
import struct
from typing import BinaryIO

import msgpack

from kpack.elf import ELF64_EHDR, ELF64_PHDR, ELF64_SHDR, CODE_OBJECT_BY_ABI_VERSION, EF_AMDGPU_MACH, ELFOSABI_AMDGPU_HSA, EM_AMDGPU
from kpack.elf import FEATURE_SHIFT as FEATURE_SHIFT_V4  # two bits each: unsupported, any, off, on
from kpack.errors import KpackFormatError
from kpack.targets import PROCESSOR_BY_MACH, PROCESSORS, R600_BY_MACH

ELF_MAGIC = b"\x7fELF"
XNACK_V2 = 0x01
XNACK_V3, SRAMECC_V3 = 0x100, 0x200
PT_NOTE, SHT_NOTE = 4, 7
NT_AMD_HSA_CODE_OBJECT_VERSION, NT_AMD_HSA_HSAIL, NT_AMD_HSA_ISA_VERSION = 1, 2, 3
NT_AMDGPU_METADATA = 32
MAX_NOTES = 64 << 20  # bytes of notes read from one object at most

# comgr's convertOldTargetNameToNew: the v2 ISA note (major:minor:stepping) -> processor;
# odd steppings of gfx9 and 8:0:1 / 8:1:0 mean xnack on.
_V2_PROCESSOR = {
    (6, 0, 0): "gfx600", (6, 0, 1): "gfx601", (6, 0, 2): "gfx602",
    (7, 0, 0): "gfx700", (7, 0, 1): "gfx701", (7, 0, 2): "gfx702", (7, 0, 3): "gfx703",
    (7, 0, 4): "gfx704", (7, 0, 5): "gfx705",
    (8, 0, 1): "gfx801", (8, 0, 0): "gfx802", (8, 0, 2): "gfx802", (8, 0, 3): "gfx803",
    (8, 0, 4): "gfx803", (8, 0, 5): "gfx805", (8, 1, 0): "gfx810",
    (9, 0, 0): "gfx900", (9, 0, 1): "gfx900", (9, 0, 2): "gfx902", (9, 0, 3): "gfx902",
    (9, 0, 4): "gfx904", (9, 0, 5): "gfx904", (9, 0, 6): "gfx906", (9, 0, 7): "gfx906",
    (9, 0, 12): "gfx90c",
}
_V2_XNACK_ON = {(8, 0, 1), (8, 1, 0), (9, 0, 1), (9, 0, 3), (9, 0, 5), (9, 0, 7)}


class CodeSource:
    """Bounded positioned reads of one object: bytes in memory, or [base, base+size) of a
    seekable binary file."""

    def __init__(self, source, base: int = 0, size: int | None = None):
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._data, self._file = memoryview(source), None
            total = len(self._data)
        else:
            self._data, self._file = None, source
            total = source.seek(0, os.SEEK_END)
        self.base = base
        self.size = max(0, min(total - base, size if size is not None else total))

    def read(self, offset: int, count: int) -> bytes:
        count = max(0, min(count, self.size - offset))
        if self._data is not None:
            return bytes(self._data[self.base + offset: self.base + offset + count])
        self._file.seek(self.base + offset)
        return self._file.read(count)


def _features_text(features: dict[str, bool]) -> str:
    return "".join(f":{name}{'+' if on else '-'}" for name, on in sorted(features.items()))


def _notes(src: CodeSource, where: int):
    """(owner, type, desc) of every note in PT_NOTE segments, else SHT_NOTE sections."""
    header = src.read(0, 64)
    fields = ELF64_EHDR.unpack(header)
    phoff, shoff, phentsize, phnum, shentsize, shnum = fields[5], fields[6], fields[9], fields[10], fields[11], fields[12]
    ranges = []
    if phoff and phentsize == ELF64_PHDR.size and phoff + phnum * ELF64_PHDR.size <= src.size:
        table = src.read(phoff, phnum * ELF64_PHDR.size)
        for index in range(phnum):
            p_type, _, p_offset, _, _, p_filesz, _, _ = ELF64_PHDR.unpack_from(table, index * ELF64_PHDR.size)
            if p_type == PT_NOTE:
                ranges.append((p_offset, p_filesz))
    if not ranges and shoff and shentsize == ELF64_SHDR.size and shoff + shnum * ELF64_SHDR.size <= src.size:
        table = src.read(shoff, shnum * ELF64_SHDR.size)
        for index in range(shnum):
            _, sh_type, _, _, sh_offset, sh_size, _, _, _, _ = ELF64_SHDR.unpack_from(table, index * ELF64_SHDR.size)
            if sh_type == SHT_NOTE:
                ranges.append((sh_offset, sh_size))
    budget = MAX_NOTES
    for offset, size in ranges:
        if offset + size > src.size or size > budget:
            raise KpackFormatError(f"note area [{offset}, {offset + size}) runs past the code object "
                                   f"({src.size} bytes)", where=where + offset)
        budget -= size
        data = src.read(offset, size)
        position = 0
        while position + 12 <= len(data):
            namesz, descsz, note_type = struct.unpack_from("<III", data, position)
            name_at = position + 12
            desc_at = name_at + (namesz + 3) // 4 * 4
            end = desc_at + (descsz + 3) // 4 * 4
            if desc_at + descsz > len(data):
                raise KpackFormatError("ELF note runs past its note area", where=where + offset + position)
            yield bytes(data[name_at:name_at + namesz]).rstrip(b"\0"), note_type, data[desc_at:desc_at + descsz]
            position = end


def _v2_target(src: CodeSource, flags: int, where: int) -> str:
    isa = None
    version = hsail = False
    for owner, note_type, desc in _notes(src, where):
        if owner != b"AMD":
            continue
        if note_type == NT_AMD_HSA_CODE_OBJECT_VERSION and len(desc) >= 8:
            version = True
        elif note_type == NT_AMD_HSA_HSAIL and len(desc) >= 11:
            hsail = True
        elif note_type == NT_AMD_HSA_ISA_VERSION and len(desc) >= 16:
            vendor_size, arch_size, major, minor, stepping = struct.unpack_from("<HHIII", desc)
            names = desc[16:16 + vendor_size + arch_size]
            vendor, arch = names[:vendor_size].rstrip(b"\0"), names[vendor_size:].rstrip(b"\0")
            if (vendor, arch) != (b"AMD", b"AMDGPU"):
                raise KpackFormatError(f"code object v2 ISA note names {vendor!r}:{arch!r}, not AMD:AMDGPU",
                                       where=where)
            isa = (major, minor, stepping)
    if isa is None or not version:
        raise KpackFormatError("code object v2 without its NT_AMD_HSA_ISA_VERSION / "
                               "NT_AMD_HSA_CODE_OBJECT_VERSION notes (v2 names its processor there)",
                               where=where)
    processor = _V2_PROCESSOR.get(isa)
    if processor is None:
        raise KpackFormatError(f"code object v2 ISA {isa[0]}:{isa[1]}:{isa[2]} is not an AMDGPU processor "
                               f"that code object v2 supports", where=where)
    supported = PROCESSORS[processor][1]
    features = {}
    if "sramecc" in supported:
        features["sramecc"] = False
    xnack_on = bool(flags & XNACK_V2) if hsail else isa in _V2_XNACK_ON
    if xnack_on or "xnack" in supported:
        features["xnack"] = xnack_on
    return processor + _features_text(features)


def _metadata_target(src: CodeSource, where: int) -> str | None:
    """`amdhsa.target` of the NT_AMDGPU_METADATA note (prefix stripped), or None."""
    for owner, note_type, desc in _notes(src, where):
        if owner == b"AMDGPU" and note_type == NT_AMDGPU_METADATA:
            try:
                document = msgpack.unpackb(bytes(desc), raw=False, strict_map_key=False)
            except Exception as exc:  # msgpack raises several types for bad input
                raise KpackFormatError(f"NT_AMDGPU_METADATA note is not MessagePack ({exc})", where=where) from None
            target = document.get("amdhsa.target") if isinstance(document, dict) else None
            if isinstance(target, str):
                return target.split("--", 1)[-1] if target.startswith("amdgcn-") else target
            return None
    return None


def decode_code_object(src: CodeSource, *, where: int = 0, check_notes: bool = True) -> str | None:
    """Target ID of the object in `src`; None when it is not an AMDGPU ELF at all."""
    header = src.read(0, 64)
    if header[:4] != ELF_MAGIC or len(header) < 20:
        return None
    machine = struct.unpack_from("<H" if header[5] != 2 else ">H", header, 18)[0]
    if machine != EM_AMDGPU:
        return None
    if header[4] != 2 or header[5] != 1:
        if header[4] == 1:
            raise KpackFormatError("32-bit AMDGPU ELF: an r600 object, not an amdgcn code object", where=where + 4)
        raise KpackFormatError("AMDGPU code object is not ELF64 little-endian", where=where + 4)
    if len(header) < 64:
        raise KpackFormatError(f"ELF header is truncated ({len(header)} of 64 bytes)", where=where)
    osabi, abi_version = header[7], header[8]
    (flags,) = struct.unpack_from("<I", header, 48)
    whole = src.size > 64
    if osabi == ELFOSABI_AMDGPU_HSA and abi_version == 0:
        if not whole:
            raise KpackFormatError("code object v2 names its processor in notes: the 64-byte header is "
                                   "not enough", where=where)
        return _v2_target(src, flags, where)
    mach = flags & EF_AMDGPU_MACH
    processor = PROCESSOR_BY_MACH.get(mach)
    if processor is None:
        if mach in R600_BY_MACH:
            what = f"the r600 processor {R600_BY_MACH[mach]}, not an amdgcn target"
        else:
            what = "not an AMDGPU processor in LLVM's table"
        raise KpackFormatError(f"unknown EF_AMDGPU_MACH 0x{mach:02x} in e_flags 0x{flags:x}: {what}",
                               where=where + 48)
    if osabi != ELFOSABI_AMDGPU_HSA:
        return processor  # PAL / Mesa objects: features are not part of their ISA name
    version = CODE_OBJECT_BY_ABI_VERSION.get(abi_version)
    if version is None:
        raise KpackFormatError(f"unknown AMDHSA ABI version {abi_version} (code object v2-v6 are 0-4)",
                               where=where + 8)
    features = {}
    if version == 3:
        supported = PROCESSORS[processor][1]
        for name, bit in (("sramecc", SRAMECC_V3), ("xnack", XNACK_V3)):
            if name in supported:
                features[name] = bool(flags & bit)
    else:
        for name, shift in FEATURE_SHIFT_V4.items():
            state = (flags >> shift) & 0x3
            if state in (2, 3):
                features[name] = state == 3
    target = processor + _features_text(features)
    if check_notes and whole and version >= 4:
        noted = _metadata_target(src, where)
        if noted is not None and noted != target:
            raise KpackFormatError(f"e_flags 0x{flags:x} name {target} but the amdhsa.target note says {noted}",
                                   where=where)
    return target


def code_object_target(source: bytes | bytearray | memoryview | BinaryIO | str | os.PathLike, *,
                       offset: int = 0, size: int | None = None) -> str:
    """The target ID of one AMDGPU code object, e.g. `gfx906:sramecc-:xnack+`, named as comgr
    names it. `source`: the object's bytes (a 64-byte header is enough for v3+), a seekable
    binary file, or a path; `offset`/`size` select an object embedded in a larger file.
    Raises KpackFormatError when it is not an AMDGPU code object or cannot be read."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            try:
                return code_object_target(handle, offset=offset, size=size)
            except KpackFormatError as exc:
                raise exc.with_path(source)
    if isinstance(source, io.TextIOBase):
        raise TypeError("code_object_target needs bytes or a binary file")
    target = decode_code_object(CodeSource(source, offset, size), where=offset)
    if target is None:
        raise KpackFormatError("not an AMDGPU code object (no ELF header with e_machine 224)", where=offset)
    return target
