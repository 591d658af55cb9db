"""Minimal ELF64 little-endian builders: a host shared object carrying arbitrary sections
(e.g. the `.rocm_kpack_ref` marker) and an AMDGPU code object for a given target.

They exist so that sample artifacts and tests use real, tool-readable ELF files
(`readelf -S`, pyelftools) instead of mocks. The output is a pure function of the
arguments: byte-identical on every run.
"""
from __future__ import annotations

import struct

from kpack.targets import GENERIC_TARGETS, MACH_BY_PROCESSOR, parse_target, supported_features

EM_X86_64 = 62
EM_AMDGPU = 224
ET_DYN = 3
ELFOSABI_NONE = 0
ELFOSABI_AMDGPU_HSA = 64
# EI_ABIVERSION for each AMDHSA code object version.
ABI_VERSION_BY_CODE_OBJECT = {2: 0, 3: 1, 4: 2, 5: 3, 6: 4}
CODE_OBJECT_BY_ABI_VERSION = {v: k for k, v in ABI_VERSION_BY_CODE_OBJECT.items()}

EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
EF_AMDGPU_GENERIC_VERSION_OFFSET = 24
# Per feature (V4+): unsupported / any / off / on, in units of the feature's lowest bit.
FEATURE_UNSUPPORTED, FEATURE_ANY, FEATURE_OFF, FEATURE_ON = 0, 1, 2, 3
FEATURE_SHIFT = {"xnack": 8, "sramecc": 10}

SHT_PROGBITS, SHT_STRTAB, SHT_HASH, SHT_DYNAMIC, SHT_DYNSYM = 1, 3, 5, 6, 11
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_SONAME = 0, 1, 4, 5, 6, 10, 11, 14
DT_RPATH, DT_RUNPATH = 15, 29

PT_GNU_STACK = 0x6474E551
ELF64_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
ELF64_PHDR = struct.Struct("<IIQQQQQQ")
ELF64_SHDR = struct.Struct("<IIQQQQIIQQ")


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _build_elf(*, machine: int, osabi: int, abi_version: int, flags: int,
               sections: list[tuple[str, int, int, bytes, int, int]], dynamic: int | None,
               gnu_stack: bool = False) -> bytes:
    """Lay out header, program headers, section data, .shstrtab and section headers.

    sections: (name, sh_type, sh_flags, data, sh_link, sh_entsize); section indices start
    at 1. `dynamic` is the index of a .dynamic section to give a PT_DYNAMIC, if any.
    Allocated sections get sh_addr == file offset, all covered by one PT_LOAD."""
    names = [name for name, *_ in sections] + [".shstrtab"]
    shstrtab = b"\0"
    name_offsets = {}
    for name in names:
        name_offsets[name] = len(shstrtab)
        shstrtab += name.encode() + b"\0"
    phnum = 1 + (dynamic is not None) + gnu_stack
    offset = ELF64_EHDR.size + phnum * ELF64_PHDR.size
    body = bytearray()
    placed = []  # (offset, size)
    for _, _, _, data, _, _ in sections:
        offset = _align(offset, 16)
        body += b"\0" * (offset - ELF64_EHDR.size - phnum * ELF64_PHDR.size - len(body))
        placed.append((offset, len(data)))
        body += data
        offset += len(data)
    load_end = offset
    shstrtab_offset = offset
    body += shstrtab
    offset += len(shstrtab)
    shoff = _align(offset, 8)
    body += b"\0" * (shoff - offset)

    shdrs = [ELF64_SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    for (name, sh_type, sh_flags, _, link, entsize), (sec_offset, size) in zip(sections, placed):
        addr = sec_offset if sh_flags & SHF_ALLOC else 0
        shdrs.append(ELF64_SHDR.pack(name_offsets[name], sh_type, sh_flags, addr, sec_offset, size,
                                link, 0, 8 if sh_type == SHT_DYNAMIC else 1, entsize))
    shdrs.append(ELF64_SHDR.pack(name_offsets[".shstrtab"], SHT_STRTAB, 0, 0, shstrtab_offset,
                            len(shstrtab), 0, 0, 1, 0))

    phdrs = [ELF64_PHDR.pack(PT_LOAD, 0x4 | 0x2, 0, 0, 0, load_end, load_end, 0x1000)]
    if dynamic is not None:
        dyn_offset, dyn_size = placed[dynamic - 1]
        phdrs.append(ELF64_PHDR.pack(PT_DYNAMIC, 0x4 | 0x2, dyn_offset, dyn_offset, dyn_offset,
                                dyn_size, dyn_size, 8))
    if gnu_stack:  # a non-executable stack, as every toolchain marks host objects
        phdrs.append(ELF64_PHDR.pack(PT_GNU_STACK, 0x4 | 0x2, 0, 0, 0, 0, 0, 16))
    ident = b"\x7fELF" + bytes([2, 1, 1, osabi, abi_version]) + b"\0" * 7
    header = ELF64_EHDR.pack(ident, ET_DYN, machine, 1, 0, ELF64_EHDR.size, shoff, flags, ELF64_EHDR.size,
                        ELF64_PHDR.size, phnum, ELF64_SHDR.size, len(shdrs), len(shdrs) - 1)
    return header + b"".join(phdrs) + bytes(body) + b"".join(shdrs)


def build_host_elf(sections: dict[str, bytes], *, soname: str | None = None, runpath: str | None = None,
                   rpath: str | None = None, needed: tuple[str, ...] = ()) -> bytes:
    """An x86-64 shared object (ET_DYN) holding `sections` as allocated PROGBITS sections
    (`.text` is also executable), plus `.dynstr`/`.dynamic` with DT_SONAME when given, and
    DT_RUNPATH / DT_RPATH when given (with a soname: what toolchains link, `$ORIGIN`);
    DT_NEEDED names libc.so.6, then `needed`."""
    entries = []
    for name, data in sections.items():
        flags = SHF_ALLOC | (SHF_EXECINSTR if name == ".text" else 0)
        entries.append((name, SHT_PROGBITS, flags, bytes(data), 0, 0))
    dynamic = None
    if soname is not None:
        # What a linker leaves in every shared object and the distro linters look for:
        # DT_NEEDED libc, a symbol table (the null symbol) and its SysV hash table.
        dynstr = b"\0" + soname.encode() + b"\0libc.so.6\0"
        paths = []
        for name in needed:
            paths += [DT_NEEDED, len(dynstr)]
            dynstr += name.encode() + b"\0"
        for tag, value in ((DT_RUNPATH, runpath), (DT_RPATH, rpath)):
            if value is not None:
                paths += [tag, len(dynstr)]
                dynstr += value.encode() + b"\0"
        base = len(entries)
        dynstr_index, dynsym_index, hash_index = base + 1, base + 2, base + 3
        dynsym = b"\0" * 24
        sysv_hash = struct.pack("<IIII", 1, 1, 0, 0)  # nbucket=1, nchain=1, bucket, chain
        fixed = [(".dynstr", SHT_STRTAB, SHF_ALLOC, dynstr, 0, 0),
                 (".dynsym", SHT_DYNSYM, SHF_ALLOC, dynsym, dynstr_index, 24),
                 (".hash", SHT_HASH, SHF_ALLOC, sysv_hash, dynsym_index, 4)]
        # addresses are file offsets, which _build_elf decides: lay out once to learn them
        probe = entries + fixed + [(".dynamic", SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, b"\0" * (144 + 8 * len(paths)),
                                    dynstr_index, 16)]
        image = _build_elf(machine=EM_X86_64, osabi=ELFOSABI_NONE, abi_version=0, flags=0,
                           sections=probe, dynamic=len(probe), gnu_stack=True)
        table = struct.pack("<" + "qQ" * (9 + len(paths) // 2), DT_SONAME, 1, DT_NEEDED, len(soname) + 2, *paths,
                            DT_STRTAB, _section_offset(image, dynstr_index), DT_STRSZ, len(dynstr),
                            DT_SYMTAB, _section_offset(image, dynsym_index), DT_SYMENT, 24,
                            DT_HASH, _section_offset(image, hash_index), DT_NULL, 0, DT_NULL, 0)
        entries = probe[:-1] + [(".dynamic", SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, table,
                                 dynstr_index, 16)]
        dynamic = len(entries)
    return _build_elf(machine=EM_X86_64, osabi=ELFOSABI_NONE, abi_version=0, flags=0,
                      sections=entries, dynamic=dynamic, gnu_stack=True)


def _section_offset(image: bytes, index: int) -> int:
    fields = ELF64_EHDR.unpack_from(image)
    shoff = fields[6]
    return ELF64_SHDR.unpack_from(image, shoff + index * ELF64_SHDR.size)[4]


def _feature_bits(name: str, value: bool | None, processor: str) -> int:
    if name not in supported_features(processor):
        if value is not None:
            raise ValueError(f"{processor} does not support {name}")
        state = FEATURE_UNSUPPORTED
    else:
        state = FEATURE_ANY if value is None else FEATURE_ON if value else FEATURE_OFF
    return state << FEATURE_SHIFT[name]


def amdgpu_e_flags(processor: str, *, xnack: bool | None = None, sramecc: bool | None = None,
                   code_object_version: int = 4) -> int:
    """e_flags for a V4+ code object: EF_AMDGPU_MACH | XNACK_V4 | SRAMECC_V4 (and the
    generic version 1 for generic targets, which require code object v6)."""
    target = parse_target(processor)
    bare = target.processor
    if bare not in MACH_BY_PROCESSOR:
        raise ValueError(f"no EF_AMDGPU_MACH value known for {bare}")
    if code_object_version not in (4, 5, 6):
        raise ValueError(f"code object version {code_object_version} is not 4, 5 or 6")
    xnack = target.features.get("xnack") if xnack is None else xnack
    sramecc = target.features.get("sramecc") if sramecc is None else sramecc
    flags = MACH_BY_PROCESSOR[bare] | _feature_bits("xnack", xnack, bare) | _feature_bits("sramecc", sramecc, bare)
    if bare in GENERIC_TARGETS:
        if code_object_version < 6:
            raise ValueError(f"generic target {bare} needs code object v6")
        flags |= 1 << EF_AMDGPU_GENERIC_VERSION_OFFSET
    return flags


def build_amdgpu_code_object(processor: str, *, xnack: bool | None = None,
                             sramecc: bool | None = None, payload: bytes = b"",
                             abi_version: int = 4) -> bytes:
    """An AMDGPU code object (ET_DYN, e_machine 224, ELFOSABI_AMDGPU_HSA) for `processor`
    (a processor or target ID); `abi_version` is the code object version 4, 5 or 6.
    Features: None = any (or unsupported, when the processor has no such feature)."""
    flags = amdgpu_e_flags(processor, xnack=xnack, sramecc=sramecc, code_object_version=abi_version)
    return _build_elf(machine=EM_AMDGPU, osabi=ELFOSABI_AMDGPU_HSA,
                      abi_version=ABI_VERSION_BY_CODE_OBJECT[abi_version], flags=flags,
                      sections=[(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, bytes(payload), 0, 0)],
                      dynamic=None)


def build_offload_bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """A clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`, u64 entry count, then per entry
    u64 offset, u64 size, u64 id length and the id) followed by the entries' bytes.
    entries: (entry id, code object), e.g. ("hipv4-amdgcn-amd-amdhsa--gfx942:xnack-", co)."""
    magic = b"__CLANG_OFFLOAD_BUNDLE__"
    ids = [entry_id.encode("ascii") for entry_id, _ in entries]
    position = len(magic) + 8 + sum(24 + len(entry_id) for entry_id in ids)
    header = bytearray(magic + struct.pack("<Q", len(entries)))
    for entry_id, (_, blob) in zip(ids, entries):
        header += struct.pack("<QQQ", position, len(blob), len(entry_id)) + entry_id
        position += len(blob)
    return bytes(header) + b"".join(blob for _, blob in entries)


def build_compressed_bundle(bundle: bytes, *, version: int = 3, level: int = 3) -> bytes:
    """A `CCOB` compressed offload bundle (version 2 or 3, zstd) around `bundle`. The hash
    field (a truncated MD5 in clang's output) is left zero: nothing here checks it."""
    import zstandard

    payload = zstandard.ZstdCompressor(level=level).compress(bundle)
    if version == 3:
        header = b"CCOB" + struct.pack("<HHQQQ", 3, 1, 32 + len(payload), len(bundle), 0)
    elif version == 2:
        header = b"CCOB" + struct.pack("<HHIIQ", 2, 1, 24 + len(payload), len(bundle), 0)
    else:
        raise ValueError(f"compressed bundle version {version} is not 2 or 3")
    return header + payload
