"""A host ELF's section table, one section's bytes, its DT_NEEDED and DT_SONAME names and
the symbol versions it defines and needs: the one reader of ELF sections for the catalog,
the marker and the device-code search.

Every read is positioned and bounded: each table, string and section is checked against
the file's size before it is read, and a name is read a block at a time, never a length
the file declares. ELF32 and ELF64, either byte order; a section count or name-table index
too large for the header (SHN_XINDEX) is taken from section 0, as readelf does.

It replaces pyelftools on the path to a build's first write. pyelftools builds its
construct parsers anew for every file it opens and is slow to import; this reads the same
facts with a few struct unpacks a file. pyelftools remains the tests' independent judge
of what this returns.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, NamedTuple

from kpack.errors import KpackFormatError

ELF_MAGIC = b"\x7fELF"
SHT_NOBITS, SHT_STRTAB, SHT_DYNAMIC = 8, 3, 6
SHN_XINDEX = 0xFFFF
DT_NULL, DT_NEEDED, DT_SONAME = 0, 1, 14
NAME_LIMIT = 4096       # longest section or library name read; a longer one is malformed
# What a linked host ELF has at most, many times over (a few dozen sections, a few hundred
# bytes of section names, a few dozen dynamic entries). A file that declares more, inside
# its own size, would still cost memory and minutes of Python: it is refused.
SECTION_LIMIT = 1 << 16
NAMES_LIMIT = 1 << 20
DYNAMIC_LIMIT = 1 << 16
_BLOCK = 4096           # dynamic entries are read this many bytes at a time


class Section(NamedTuple):
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int


class _Layout(NamedTuple):
    """Where the header's fields are, for one ELF class and byte order."""
    shoff: struct.Struct        # e_shoff
    shoff_at: int
    counts: struct.Struct       # e_shentsize, e_shnum, e_shstrndx
    counts_at: int
    header: struct.Struct       # one section header
    dynamic: struct.Struct      # one dynamic entry (d_tag, d_val)


def _layout(ident: bytes) -> _Layout | None:
    if len(ident) < 52 or not ident.startswith(ELF_MAGIC) or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    order = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:
        if len(ident) < 64:
            return None
        return _Layout(struct.Struct(order + "Q"), 40, struct.Struct(order + "HHH"), 58,
                       struct.Struct(order + "IIQQQQIIQQ"), struct.Struct(order + "qQ"))
    return _Layout(struct.Struct(order + "I"), 32, struct.Struct(order + "HHH"), 46,
                   struct.Struct(order + "IIIIIIIIII"), struct.Struct(order + "iI"))


def sections(handle: BinaryIO, size: int) -> list[Section]:
    """Every section of an ELF file, in table order; [] for a file that is not an ELF or
    has no section table. Raises KpackFormatError (where: the header field at fault) for a
    table or a name that is not inside the file, or more of them than is read."""
    handle.seek(0)
    ident = handle.read(64)
    layout = _layout(ident)
    if layout is None:
        return []
    shoff, = layout.shoff.unpack_from(ident, layout.shoff_at)
    entsize, count, names_index = layout.counts.unpack_from(ident, layout.counts_at)
    if not shoff:
        return []
    if entsize != layout.header.size:
        raise KpackFormatError(f"e_shentsize is {entsize}, not {layout.header.size}", where="e_shentsize")
    if shoff + entsize > size:
        raise KpackFormatError(f"section table at {shoff} is not inside the file ({size} bytes)", where="e_shoff")
    first = layout.header.unpack(_read_exact(handle, shoff, entsize))
    count = count or first[5]                               # SHN_XINDEX: sh_size of section 0
    names_index = first[6] if names_index == SHN_XINDEX else names_index   # sh_link of section 0
    if shoff + count * entsize > size:
        raise KpackFormatError(f"section table [{shoff}, {shoff + count * entsize}) is not inside the file "
                               f"({size} bytes)", where="e_shoff")
    if count > SECTION_LIMIT:
        raise KpackFormatError(f"{count} sections, more than the {SECTION_LIMIT} read", where="e_shnum")
    table = _read_exact(handle, shoff, count * entsize)
    raw = [layout.header.unpack_from(table, index * entsize) for index in range(count)]
    if not raw:
        return []
    if names_index >= count:
        raise KpackFormatError(f"e_shstrndx {names_index} is not a section (there are {count})", where="e_shstrndx")
    names_at, names_size = raw[names_index][4], raw[names_index][5]
    if names_at + names_size > size:
        raise KpackFormatError(f"section name table [{names_at}, {names_at + names_size}) is not inside the "
                               f"file ({size} bytes)", where="e_shstrndx")
    wanted = min(names_size, max(fields[0] for fields in raw) + NAME_LIMIT)
    if wanted > NAMES_LIMIT:
        raise KpackFormatError(f"section names reach {wanted} bytes into their table, more than the {NAMES_LIMIT} "
                               "read", where="e_shstrndx")
    names = _read_exact(handle, names_at, wanted)
    result = []
    for name_at, sh_type, flags, _, offset, length, link, *_ in raw:
        _inside(name_at, names_size, "section name")
        result.append(Section(_terminated(names[name_at:name_at + NAME_LIMIT], name_at, "section name"), sh_type,
                              flags, offset, length, link))
    return result


def _read_exact(handle: BinaryIO, offset: int, length: int) -> bytes:
    """length bytes at offset, already checked to lie inside the file: a short read is a
    file that shrank while it was read."""
    handle.seek(offset)
    data = handle.read(length)
    if len(data) != length:
        raise KpackFormatError(f"the file ended at {offset + len(data)} while {length} bytes at {offset} were read "
                               "(it changed while it was read)", where=offset)
    return data


def _inside(at: int, table_size: int, what: str) -> None:
    if at >= table_size:
        raise KpackFormatError(f"{what} at {at} is past the end of its string table ({table_size} bytes)")


def _terminated(window: bytes, at: int, what: str) -> str:
    """The name a string table holds at `at`, from the bytes read there (at most NAME_LIMIT)."""
    end = window.find(b"\0")
    if end < 0:
        raise KpackFormatError(f"{what} at {at} is not NUL-terminated within {NAME_LIMIT} bytes or its table")
    return window[:end].decode("utf-8", "replace")


def section_named(found: list[Section], name: str) -> Section | None:
    """The first section of that name (as the runtime and pyelftools look one up)."""
    return next((section for section in found if section.name == name), None)


def section_bytes(handle: BinaryIO, section: Section, size: int, *, limit: int) -> bytes:
    """The bytes of one section, which must lie inside the file and be at most `limit`."""
    end = section.offset + section.size
    if section.type == SHT_NOBITS or end > size:
        raise KpackFormatError(f"{section.name} [{section.offset}, {end}) is not inside the file ({size} bytes)",
                               where=section.name)
    if section.size > limit:
        raise KpackFormatError(f"{section.name} is {section.size} bytes, more than the {limit} it may hold",
                               where=section.name)
    return _read_exact(handle, section.offset, section.size)


def needed(handle: BinaryIO, found: list[Section], size: int) -> tuple[str, ...]:
    """The DT_NEEDED names of the `.dynamic` section, in order, up to its DT_NULL; () when
    there is none. Raises KpackFormatError for a dynamic table or a name outside the file."""
    return tuple(name for tag, name in dynamic_names(handle, found, size) if tag == DT_NEEDED)


def dynamic_names(handle: BinaryIO, found: list[Section], size: int) -> tuple[tuple[int, str], ...]:
    """(d_tag, name) of each DT_NEEDED and DT_SONAME entry of the `.dynamic` section, in
    order, from one pass over the table; () when there is none. Raises KpackFormatError for
    a dynamic table or a name outside the file."""
    dynamic = section_named(found, ".dynamic")
    if dynamic is None or dynamic.type != SHT_DYNAMIC:
        return ()
    handle.seek(0)
    entry = dynamic_entry(handle.read(64))
    if entry is None:
        raise KpackFormatError("the ELF header changed while the file was read", where=0)
    strings = _linked_strings(found, dynamic)
    if dynamic.offset + dynamic.size > size or strings.offset + strings.size > size:
        raise KpackFormatError(f"the dynamic table or its strings are not inside the file ({size} bytes)",
                               where=".dynamic")
    return tuple((tag, _string_at(handle, strings, value))
                 for _, tag, value in dynamic_entries(handle, dynamic.offset, dynamic.size, entry)
                 if tag in (DT_NEEDED, DT_SONAME))


def _linked_strings(found: list[Section], section: Section) -> Section:
    """The string table a section's sh_link names."""
    if section.link >= len(found) or found[section.link].type != SHT_STRTAB:
        raise KpackFormatError(f"sh_link {section.link} is not a string table", where=section.name)
    return found[section.link]


def dynamic_entry(ident: bytes) -> struct.Struct | None:
    """One dynamic entry (d_tag, d_val) of the ELF whose header this is; None for no ELF."""
    layout = _layout(ident)
    return layout.dynamic if layout is not None else None


def dynamic_entries(handle: BinaryIO, offset: int, length: int, entry: struct.Struct):
    """(file offset, d_tag, d_val) of each entry of the dynamic table at [offset, offset +
    length), already checked to lie inside the file, up to its DT_NULL; read _BLOCK bytes at
    a time. A table without DT_NULL in its first DYNAMIC_LIMIT entries is refused there."""
    position, end = offset, offset + length - length % entry.size
    end = min(end, position + DYNAMIC_LIMIT * entry.size)
    while position < end:
        handle.seek(position)
        block = handle.read(min(_BLOCK - _BLOCK % entry.size, end - position))
        if not block:
            return
        for index, (tag, value) in enumerate(entry.iter_unpack(block[:len(block) - len(block) % entry.size])):
            if tag == DT_NULL:
                return
            yield position + index * entry.size, tag, value
        position += len(block)
    if length // entry.size > DYNAMIC_LIMIT:
        raise KpackFormatError(f"no DT_NULL in the first {DYNAMIC_LIMIT} dynamic entries", where=offset)


def _string_at(handle: BinaryIO, strings: Section, at: int, what: str = "DT_NEEDED name") -> str:
    _inside(at, strings.size, what)
    handle.seek(strings.offset + at)
    return _terminated(handle.read(min(NAME_LIMIT, strings.size - at)), at, what)


SHT_GNU_VERDEF, SHT_GNU_VERNEED = 0x6FFFFFFD, 0x6FFFFFFE
VER_FLG_BASE = 1
# A library defines and needs a few dozen symbol versions (glibc: about forty); the
# version sections are a few KiB. More than this is refused, not read.
VERSIONS_LIMIT = 1 << 12
VERSION_SECTION_LIMIT = 1 << 20
_VERDEF, _VERDAUX = struct.Struct("HHHHIII"), struct.Struct("II")      # without byte order
_VERNEED, _VERNAUX = struct.Struct("HHIII"), struct.Struct("IHHII")


def version_definitions(handle: BinaryIO, found: list[Section], size: int) -> tuple[str, ...]:
    """The symbol versions an ELF defines (`.gnu.version_d`, SHT_GNU_VERDEF), in table
    order, without the base entry (the file's own name); () when it has none. What rpm's
    elfdeps turns into `soname(VERSION)` provides. Raises KpackFormatError for a table
    that is cut short, loops, or names a string outside its table."""
    section = next((s for s in found if s.type == SHT_GNU_VERDEF), None)
    if section is None:
        return ()
    data, strings, order = _version_table(handle, found, size, section)
    verdef, verdaux = struct.Struct(order + _VERDEF.format), struct.Struct(order + _VERDAUX.format)
    names = []
    for at in _chain(data, section, verdef, next_field=6):
        _, flags, _, count, _, aux, _ = verdef.unpack_from(data, at)
        if count:
            name_at, _ = _record(data, at + aux, verdaux, section.name)
            name = _string_at(handle, strings, name_at, "version name")
            if not flags & VER_FLG_BASE:
                names.append(name)
    return tuple(names)


def version_needs(handle: BinaryIO, found: list[Section], size: int) -> tuple[tuple[str, str], ...]:
    """(library, version) of each symbol version an ELF needs (`.gnu.version_r`,
    SHT_GNU_VERNEED: `("libc.so.6", "GLIBC_2.34")`), in table order; () when it has none.
    What rpm's elfdeps turns into `library(VERSION)` requires. Raises KpackFormatError as
    version_definitions does."""
    section = next((s for s in found if s.type == SHT_GNU_VERNEED), None)
    if section is None:
        return ()
    data, strings, order = _version_table(handle, found, size, section)
    verneed, vernaux = struct.Struct(order + _VERNEED.format), struct.Struct(order + _VERNAUX.format)
    result: list[tuple[str, str]] = []
    for at in _chain(data, section, verneed, next_field=4):
        _, count, file_at, aux, _ = verneed.unpack_from(data, at)
        library = _string_at(handle, strings, file_at, "version file name")
        for aux_at in _chain(data, section, vernaux, next_field=4, start=at + aux, count=count):
            name_at = vernaux.unpack_from(data, aux_at)[3]
            result.append((library, _string_at(handle, strings, name_at, "version name")))
            if len(result) > VERSIONS_LIMIT:
                raise KpackFormatError(f"more than {VERSIONS_LIMIT} needed versions", where=section.name)
    return tuple(result)


def _version_table(handle: BinaryIO, found: list[Section], size: int, section: Section):
    """(bytes, its string table, byte order) of a version section, all inside the file."""
    strings = _linked_strings(found, section)
    if strings.offset + strings.size > size:
        raise KpackFormatError(f"the strings of {section.name} are not inside the file ({size} bytes)",
                               where=section.name)
    handle.seek(5)
    order = ">" if handle.read(1) == b"\x02" else "<"
    return section_bytes(handle, section, size, limit=VERSION_SECTION_LIMIT), strings, order


def _chain(data: bytes, section: Section, record: struct.Struct, *, next_field: int, start: int = 0,
           count: int = VERSIONS_LIMIT):
    """The offsets of a version section's linked records from `start`, each at the previous
    one plus its next field, every one inside the section: up to the one whose next field
    is zero, at most `count` (an entry's own count for auxiliary records). A chain longer
    than VERSIONS_LIMIT (a loop) is refused."""
    at = start
    for _ in range(min(count, VERSIONS_LIMIT)):
        step = _record(data, at, record, section.name)[next_field]
        yield at
        if not step:
            return
        at += step
    if count >= VERSIONS_LIMIT:
        raise KpackFormatError(f"more than {VERSIONS_LIMIT} version entries", where=section.name)


def _record(data: bytes, at: int, record: struct.Struct, where: str) -> tuple:
    if at < 0 or at + record.size > len(data):
        raise KpackFormatError(f"a version entry at {at} is not inside the section ({len(data)} bytes)", where=where)
    return record.unpack_from(data, at)


NT_GNU_BUILD_ID = 3
BUILD_ID_SECTION = ".note.gnu.build-id"
DEBUGLINK_SECTION = ".gnu_debuglink"
NOTE_LIMIT = 4096       # a build-id note is 16 bytes of header and name and at most 64 of id


def build_id(handle: BinaryIO, found: list[Section], size: int) -> str:
    """The GNU build-id of an ELF (lower-case hex of the NT_GNU_BUILD_ID note in
    `.note.gnu.build-id`), "" when it has none. Raises KpackFormatError for a note that is
    not inside the file or not a well-formed GNU note."""
    section = section_named(found, BUILD_ID_SECTION)
    if section is None:
        return ""
    handle.seek(0)
    ident = handle.read(6)
    order = ">" if ident[5:6] == b"\x02" else "<"
    data = section_bytes(handle, section, size, limit=NOTE_LIMIT)
    at = 0
    while at + 12 <= len(data):
        name_size, desc_size, note_type = struct.unpack_from(order + "III", data, at)
        name_at = at + 12
        desc_at = name_at + (name_size + 3) // 4 * 4
        end = desc_at + (desc_size + 3) // 4 * 4
        if desc_at + desc_size > len(data):
            break
        if note_type == NT_GNU_BUILD_ID and data[name_at:name_at + name_size] == b"GNU\0" and desc_size:
            return data[desc_at:desc_at + desc_size].hex()
        at = end
    raise KpackFormatError("no well-formed NT_GNU_BUILD_ID note", where=BUILD_ID_SECTION)


def debuglink(handle: BinaryIO, found: list[Section], size: int) -> str:
    """The file name a `.gnu_debuglink` section names (where gdb looks for the debug file),
    "" when there is none."""
    section = section_named(found, DEBUGLINK_SECTION)
    if section is None:
        return ""
    return _terminated(section_bytes(handle, section, size, limit=NAME_LIMIT + 8)[:NAME_LIMIT], 0, DEBUGLINK_SECTION)


def has_debug_sections(found: list[Section]) -> bool:
    """Whether an ELF carries DWARF (`.debug_*` sections holding bytes: `.debug_info` or
    another, not the NOBITS placeholders a stripped file keeps)."""
    return any(section.name.startswith(".debug_") and section.type != SHT_NOBITS and section.size
               for section in found)
