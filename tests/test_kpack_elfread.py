"""kpack.elfread, judged by pyelftools: the same sections and DT_NEEDED names on the
system's own libraries and programs, on ELF32 copies (objcopy) and on a big-endian host
ELF; and only KpackFormatError, never another exception, for a damaged one."""
from __future__ import annotations

import glob
import os
import shutil
import struct
import subprocess

import pytest
from elftools.elf import enums
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpack import elfread
from kpack.elf import ELF64_EHDR, ELF64_PHDR, ELF64_SHDR, SHT_DYNAMIC, SHT_HASH, build_host_elf
from kpack.errors import KpackFormatError
from kpack.marker import MARKER_LIMIT, MARKER_SECTION, Marker, encode_marker, read_marker

_TYPE_NUMBERS = {name: number for table in vars(enums).values() if isinstance(table, dict)
                 and "SHT_PROGBITS" in table for name, number in table.items()}


def _system_elfs(limit: int = 40) -> list[str]:
    found = []
    for path in sorted(glob.glob("/usr/lib/x86_64-linux-gnu/*.so*") + glob.glob("/usr/bin/*")):
        if len(found) == limit:
            break
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                if handle.read(4) == elfread.ELF_MAGIC:
                    found.append(path)
    return found


def _as_pyelftools_reads(path, sections_only: bool = False) -> tuple[list[tuple], tuple[str, ...]]:
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        found = []
        for index in range(elf.num_sections()):   # headers only: an objcopy'd .dynsym need not parse
            header = elf._get_section_header(index)
            kind = header["sh_type"]
            found.append((elf._get_section_name(header), _TYPE_NUMBERS.get(kind, kind), header["sh_flags"],
                          header["sh_offset"], header["sh_size"], header["sh_link"]))
        if sections_only:
            return found, ()
        dynamic = elf.get_section_by_name(".dynamic")
        needed = tuple(tag.needed for tag in dynamic.iter_tags("DT_NEEDED")) if dynamic is not None else ()
    return found, needed


def _as_readelf_reads_needed(path) -> tuple[str, ...]:
    shown = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True).stdout
    return tuple(line.split("Shared library: [", 1)[1].rsplit("]", 1)[0]
                 for line in shown.splitlines() if "(NEEDED)" in line)


def _as_elfread_reads(path) -> tuple[list[tuple], tuple[str, ...]]:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        found = elfread.sections(handle, size)
        return [tuple(section) for section in found], elfread.needed(handle, found, size)


def test_system_libraries_and_programs_read_as_pyelftools_reads_them():
    paths = _system_elfs()
    if len(paths) < 10:
        pytest.skip("too few ELF files under /usr/lib/x86_64-linux-gnu and /usr/bin")
    with_needed = 0
    for path in paths:
        expected = _as_pyelftools_reads(path)
        assert _as_elfread_reads(path) == expected, path
        with_needed += bool(expected[1])
    assert with_needed >= 10


@pytest.mark.parametrize("target", ["elf32-i386", "elf32-x86-64"])
def test_elf32_copies_read_as_pyelftools_reads_them(tmp_path, target):
    if not shutil.which("objcopy") or not shutil.which("readelf"):
        pytest.skip("objcopy, readelf (binutils) not installed")
    libz = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*"))
    if not libz:
        pytest.skip("no libz to convert")
    copy = tmp_path / "libz32.so"
    subprocess.run(["objcopy", "-O", target, libz[0], str(copy)], check=True, capture_output=True)
    assert copy.read_bytes()[4] == 1   # ELFCLASS32
    found, needed = _as_elfread_reads(copy)
    # objcopy keeps the 64-bit contents of .dynamic and .dynsym, which pyelftools refuses to
    # parse: the section headers are judged by pyelftools, the dynamic table by readelf
    assert found == _as_pyelftools_reads(copy, sections_only=True)[0]
    assert needed == _as_readelf_reads_needed(copy) and needed


def _big_endian(image: bytes) -> bytes:
    """The same ELF64 with every header, section header, dynamic entry and hash word in big-endian."""
    out = bytearray(image)
    header = list(ELF64_EHDR.unpack_from(image))
    header[0] = header[0][:5] + b"\x02" + header[0][6:]
    struct.pack_into(">" + ELF64_EHDR.format[1:], out, 0, *header)
    phoff, shoff, phnum, shnum = header[5], header[6], header[10], header[12]
    for index in range(phnum):
        struct.pack_into(">" + ELF64_PHDR.format[1:], out, phoff + index * ELF64_PHDR.size,
                         *ELF64_PHDR.unpack_from(image, phoff + index * ELF64_PHDR.size))
    for index in range(shnum):
        fields = ELF64_SHDR.unpack_from(image, shoff + index * ELF64_SHDR.size)
        struct.pack_into(">" + ELF64_SHDR.format[1:], out, shoff + index * ELF64_SHDR.size, *fields)
        if fields[1] == SHT_DYNAMIC:
            for at in range(fields[4], fields[4] + fields[5], 16):
                struct.pack_into(">qQ", out, at, *struct.unpack_from("<qQ", image, at))
        if fields[1] == SHT_HASH:
            for at in range(fields[4], fields[4] + fields[5], 4):
                struct.pack_into(">I", out, at, *struct.unpack_from("<I", image, at))
    return bytes(out)


def test_big_endian_host_elf_reads_as_pyelftools_reads_it(tmp_path):
    marker = Marker(["../.kpack/blas_lib_@GFXARCH@.kpack"], "blas/lib/librocblas.so.4")
    path = tmp_path / "librocblas.so.4"
    path.write_bytes(_big_endian(build_host_elf({".text": b"\xc3", MARKER_SECTION: encode_marker(marker)},
                                                soname="librocblas.so.4")))
    found, needed = _as_elfread_reads(path)
    assert (found, needed) == _as_pyelftools_reads(path)
    assert needed == ("libc.so.6",) and read_marker(path) == marker


def _rewrite_section(image: bytes, name: str, **fields) -> bytes:
    """The image with one section header's sh_type / sh_offset / sh_size changed."""
    header = ELF64_EHDR.unpack_from(image)
    shoff, shnum, names_index = header[6], header[12], header[13]
    rows = [list(ELF64_SHDR.unpack_from(image, shoff + i * ELF64_SHDR.size)) for i in range(shnum)]
    names_at = rows[names_index][4]
    out = bytearray(image)
    for index, row in enumerate(rows):
        start = names_at + row[0]
        if image[start:image.index(b"\0", start)].decode() == name:
            for key, value in fields.items():
                row[{"type": 1, "offset": 4, "size": 5}[key]] = value
            ELF64_SHDR.pack_into(out, shoff + index * ELF64_SHDR.size, *row)
    return bytes(out)


@pytest.mark.parametrize("change, message", [
    ({"type": 8}, "is not inside the file"),                    # SHT_NOBITS
    ({"offset": 1 << 40}, "is not inside the file"),
    ({"size": MARKER_LIMIT + 1, "offset": 0}, "more than the"),
])
def test_a_marker_section_that_lies_is_refused_before_it_is_read(tmp_path, change, message):
    image = build_host_elf({MARKER_SECTION: b"\x80" + b"\0" * (MARKER_LIMIT + 1)}, soname="libx.so")
    path = tmp_path / "libx.so"
    path.write_bytes(_rewrite_section(image, MARKER_SECTION, **change))
    with pytest.raises(KpackFormatError, match=message) as raised:
        read_marker(path)
    assert raised.value.path == str(path)


@pytest.mark.parametrize("field, at, value, message", [
    ("e_shoff", 40, struct.pack("<Q", 1 << 40), "section table at"),
    ("e_shentsize", 58, struct.pack("<H", 40), "e_shentsize is 40"),
    ("e_shnum", 60, struct.pack("<H", 0xFF00), "is not inside the file"),
    ("e_shstrndx", 62, struct.pack("<H", 0xFEFF), "is not a section"),
])
def test_a_section_table_that_lies_is_refused(tmp_path, field, at, value, message):
    image = bytearray(build_host_elf({".text": b"\xc3"}, soname="libx.so"))
    image[at:at + len(value)] = value
    path = tmp_path / "libx.so"
    path.write_bytes(bytes(image))
    with open(path, "rb") as handle, pytest.raises(KpackFormatError, match=message):
        elfread.sections(handle, len(image))


_HOST = build_host_elf({".text": b"\xc3", MARKER_SECTION: encode_marker(Marker(["x_@GFXARCH@.kpack"], "x"))},
                       soname="libx.so", runpath="$ORIGIN")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.integers(0, len(_HOST) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.integers(16, len(_HOST)))
def test_a_damaged_host_elf_raises_only_kpack_format_error(tmp_path, changes, cut):
    image = bytearray(_HOST)
    for at, value in changes:
        image[at] = value
    path = tmp_path / "damaged.so"
    path.write_bytes(bytes(image[:cut]))
    with open(path, "rb") as handle:
        try:
            found = elfread.sections(handle, cut)
            elfread.needed(handle, found, cut)
            section = elfread.section_named(found, MARKER_SECTION)
            if section is not None:
                elfread.section_bytes(handle, section, cut, limit=MARKER_LIMIT)
        except KpackFormatError:
            pass


def test_a_section_count_past_what_is_read_is_refused_though_the_file_holds_it(tmp_path):
    image = build_host_elf({".text": b"\xc3"}, soname="libx.so")
    shoff = ELF64_EHDR.unpack_from(image)[6]
    count = elfread.SECTION_LIMIT + 1
    damaged = bytearray(image + bytes(count * ELF64_SHDR.size))     # the file is big enough for the table it declares
    struct.pack_into("<H", damaged, 60, 0)                      # e_shnum 0: the count is section 0's sh_size
    struct.pack_into("<Q", damaged, shoff + 32, count)
    with open(tmp_path / "libx.so", "wb") as fh:
        fh.write(damaged)
    with open(tmp_path / "libx.so", "rb") as handle, pytest.raises(KpackFormatError, match=f"{count} sections"):
        elfread.sections(handle, len(damaged))


def test_a_dynamic_table_without_its_end_is_read_no_further_than_a_real_one_goes(tmp_path):
    from rocpkg.inputs.rpath import runpath_tags

    image = build_host_elf({".text": b"\xc3"}, soname="libx.so", runpath="$ORIGIN")
    entries = elfread.DYNAMIC_LIMIT + 8
    table_at = len(image)
    padded = image + struct.pack("<qQ", 21, 0) * entries        # DT_DEBUG, never DT_NULL
    damaged = bytearray(_rewrite_section(padded, ".dynamic", offset=table_at, size=entries * 16))
    header = ELF64_EHDR.unpack_from(damaged)
    for index in range(header[10]):                             # PT_DYNAMIC: the table the loader reads
        at = header[5] + index * ELF64_PHDR.size
        fields = list(ELF64_PHDR.unpack_from(damaged, at))
        if fields[0] == 2:
            fields[2], fields[5] = table_at, entries * 16
            ELF64_PHDR.pack_into(damaged, at, *fields)
    path = tmp_path / "libx.so"
    path.write_bytes(bytes(damaged))
    with open(path, "rb") as handle:
        found = elfread.sections(handle, len(damaged))
        with pytest.raises(KpackFormatError, match="no DT_NULL"):
            elfread.needed(handle, found, len(damaged))
        assert runpath_tags(handle) == ((), f"no DT_NULL in the first {elfread.DYNAMIC_LIMIT} entries of PT_DYNAMIC")
