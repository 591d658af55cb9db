"""The facts of one artifact file, read once while it is open: what kind of file it is
(host ELF, AMDGPU code object, kpack archive, other device code), a host ELF's DT_NEEDED,
`.rocm_kpack_ref` marker, RUNPATH tags and the device code it still carries, an archive's
TOC summary, the targets of device code. A malformed marker or archive becomes a recorded
error of that file, so plan, build and verify never reopen an artifact to learn something
about it. Every reader takes a seekable binary handle and reads bounded amounts."""
from __future__ import annotations

import dataclasses
import os
import struct
from dataclasses import dataclass

from kpack.errors import KpackFormatError
from kpack.marker import MARKER_LIMIT, MARKER_SECTION, Marker, decode_marker
from rocpkg.inputs.host_code import device_code
from rocpkg.inputs.host_code import why as explain

ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224
# Leading bytes that say "device code whose targets kpack.detect can read".
DEVICE_MAGICS = (b"__CLANG_OFFLOAD_BUNDLE__", b"CCOB")


@dataclass(frozen=True)
class ArchiveToc:
    """What the stages need of a kpack archive: its target IDs, and per kernel key the
    target IDs it holds."""

    arches: tuple[str, ...]
    kernels: dict[str, frozenset[str]]

    @classmethod
    def from_entries(cls, arches, entries) -> "ArchiveToc":
        """From an archive's gfx_arches and its TOC entries (kpack.format.Entry)."""
        kernels: dict[str, set[str]] = {}
        for entry in entries:
            kernels.setdefault(entry.key, set()).add(entry.arch)
        return cls(tuple(arches), {key: frozenset(found) for key, found in kernels.items()})


@dataclass(frozen=True)
class FileFacts:
    """Everything later stages need to know of one artifact file, read once by the catalog.

    elf:      "" (not ELF), "host" (an ELF that is not an AMDGPU code object) or "amdgpu"
    needed:   DT_NEEDED of an ELF
    marker:   the `.rocm_kpack_ref` marker of a host ELF (None: it has none)
    archive:  the TOC summary of a kpack archive
    targets:  target IDs of device code (code object, offload bundle, .mxr, archive)
    host_code: device code a host ELF still carries (kpack.placement.host_device_code: a
              non-empty .hip_fatbin means the kpack split step did not run)
    *_error:  what is wrong with the marker, the archive or the device code, "" if nothing
    runpath_tags: (file offset, DT_RPATH in this ELF's word size and byte order) of the
              d_tag of each DT_RUNPATH entry of a host ELF's dynamic table: the patches that
              turn RUNPATH into RPATH as TheRock's runpath_to_rpath does (rocpkg.inputs.rpath)
    runpath_error: why the RUNPATH of this ELF can't be turned into RPATH ("" if it can)
    build_id: a host ELF's GNU build-id, lower-case hex ("" if it has none or it is malformed)
    debuglink: the file name its `.gnu_debuglink` names ("" if none)
    debug_sections: whether it carries DWARF (`.debug_*` sections with bytes)
    soname:   a host ELF's DT_SONAME ("" if none)
    elf_bits: 64 or 32 for a host ELF (rpm's `()(64bit)` marker), 0 otherwise
    version_defs: the symbol versions it defines (`.gnu.version_d`, not the base entry)
    version_needs: (library, version) of each symbol version it needs (`.gnu.version_r`)
    linkage_error: why its dynamic table or version sections could not be read ("" if
              they could); needed, soname and versions are then () / "" as far as unread
    elf_end:  where the last byte a host ELF's headers describe ends (its header, program
              and section header tables, the bytes of its sections): a file longer than
              that carries bytes no section holds (a debug file padded out, 4 GiB of
              holes after a 4 KiB ELF); 0 when the section table was not read
    """

    elf: str = ""
    needed: tuple[str, ...] = ()
    marker: Marker | None = None
    marker_error: str = ""
    archive: ArchiveToc | None = None
    archive_error: str = ""
    targets: tuple[str, ...] = ()
    device_error: str = ""
    host_code: tuple[tuple[str, str], ...] = ()   # device code inside a host ELF: (kind, what)
    runpath_tags: tuple[tuple[int, bytes], ...] = ()
    runpath_error: str = ""
    build_id: str = ""
    debuglink: str = ""
    debug_sections: bool = False
    soname: str = ""
    elf_bits: int = 0
    version_defs: tuple[str, ...] = ()
    version_needs: tuple[tuple[str, str], ...] = ()
    linkage_error: str = ""
    elf_end: int = 0


_PLAIN, _OTHER_ELF = FileFacts(), FileFacts(elf="other")
HEAD_SIZE = 64     # the leading bytes that tell what kind of file an artifact is


def plain_facts(head: bytes, name: str, scan_embedded: bool = False) -> FileFacts | None:
    """The facts of a file whose first HEAD_SIZE bytes (or all of them) say there is
    nothing more to read in it (not ELF, not a kpack archive, not device code, not a
    file to search for embedded code); None when read_facts must read further. Most of
    a release's files (headers, data, scripts) end here, after one read, and share one
    of two FileFacts (facts are immutable and say nothing of the file's identity)."""
    elf = head.startswith(ELF_MAGIC)
    if (elf and len(head) >= 20) or name.endswith(".kpack") or head.startswith((b"KPAK", *DEVICE_MAGICS)) \
            or scan_embedded:
        return None
    return _OTHER_ELF if elf else _PLAIN


def read_facts(fh, name: str, scan_embedded: bool = False, host_code: bool = True,
               head: bytes | None = None) -> FileFacts:
    """Every fact of one open artifact file (seekable binary handle) that a later stage
    needs; format errors are recorded in the facts, OSError propagates. host_code=False
    leaves a host ELF's device code (its data sections) for _with_host_code. head: the
    file's first HEAD_SIZE bytes, when the caller has read them (every reader here seeks)."""
    head = fh.read(HEAD_SIZE) if head is None else head
    plain = plain_facts(head, name, scan_embedded)
    if plain is not None:
        return plain
    if head.startswith(ELF_MAGIC) and len(head) >= 20:
        machine = struct.unpack_from(">H" if head[5] == 2 else "<H", head, 18)[0]
        if machine == EM_AMDGPU:
            return _code_object_facts(fh)
        facts = _with_runpath(_host_elf_facts(fh, head), fh)
        return _with_host_code(facts, fh) if host_code else facts
    if name.endswith(".kpack") or head.startswith(b"KPAK"):
        return _archive_facts(fh)
    return _device_facts(fh, scan_embedded)


def _code_object_facts(fh) -> FileFacts:
    """The target comgr would name (kpack.codeobject: a v2 object is named from its notes,
    read from this open file with bounded reads)."""
    from kpack.codeobject import code_object_target

    fh.seek(0)
    try:
        return FileFacts(elf="amdgpu", targets=(code_object_target(fh),))
    except KpackFormatError as exc:
        return FileFacts(elf="amdgpu", device_error=explain(exc))


def _with_host_code(facts: FileFacts, fh, embedded_objects: bool = True) -> FileFacts:
    """Add the device code a host ELF still carries (read through this open file)."""
    return dataclasses.replace(facts, **device_code(fh, embedded_objects))


def _with_runpath(facts: FileFacts, fh) -> FileFacts:
    """Add where the DT_RUNPATH tags of a host ELF lie (rocpkg.inputs.rpath reads them)."""
    from rocpkg.inputs.rpath import runpath_tags

    tags, error = runpath_tags(fh)
    return dataclasses.replace(facts, runpath_tags=tags, runpath_error=error)


def _host_elf_facts(fh, head: bytes) -> FileFacts:
    """DT_NEEDED, SONAME, symbol versions, debug facts and the `.rocm_kpack_ref` marker,
    from one read of the section table (head: the file's first 64 bytes, already read)."""
    from kpack import elfread

    size = os.fstat(fh.fileno()).st_size
    try:
        found = elfread.sections(fh, size)
    except KpackFormatError as exc:
        return FileFacts(elf="host", marker_error=f"unreadable ELF ({explain(exc)})")
    read = {**_linkage_facts(fh, found, size), **_debug_facts(fh, found, size), "elf_end": _elf_end(head, found)}
    section = elfread.section_named(found, MARKER_SECTION)
    if section is None:
        return FileFacts(elf="host", **read)
    try:
        marker = decode_marker(elfread.section_bytes(fh, section, size, limit=MARKER_LIMIT), where=MARKER_SECTION)
    except KpackFormatError as exc:
        return FileFacts(elf="host", marker_error=explain(exc), **read)
    return FileFacts(elf="host", marker=marker, **read)


def _linkage_facts(fh, found, size: int) -> dict:
    """DT_NEEDED, DT_SONAME, the ELF class and the symbol versions a host ELF defines and
    needs, from its section table; what can't be read is () / "" and linkage_error says
    why (a .dynamic rocpkg cannot parse: no dependency is inferred from it)."""
    from kpack import elfread

    fh.seek(4)
    facts: dict = {"needed": (), "elf_bits": 64 if fh.read(1) == b"\x02" else 32}
    try:
        names = elfread.dynamic_names(fh, found, size)
        facts["needed"] = tuple(name for tag, name in names if tag == elfread.DT_NEEDED)
        facts["soname"] = next((name for tag, name in names if tag == elfread.DT_SONAME), "")
        facts["version_defs"] = elfread.version_definitions(fh, found, size)
        facts["version_needs"] = elfread.version_needs(fh, found, size)
    except KpackFormatError as exc:
        facts["linkage_error"] = explain(exc)
    return facts


def _elf_end(head: bytes, found) -> int:
    """The end of what a host ELF's header describes (FileFacts.elf_end), from its header
    (the first 64 bytes) and the sections already read: nothing more is read."""
    from kpack.elfread import SHT_NOBITS

    order = ">" if head[5:6] == b"\x02" else "<"
    if head[4:5] == b"\x02":
        phoff, shoff, ehsize, phentsize, phnum, shentsize = struct.unpack_from(order + "QQxxxxHHHH", head, 32)
    else:
        phoff, shoff, ehsize, phentsize, phnum, shentsize = struct.unpack_from(order + "IIxxxxHHHH", head, 28)
    ends = [ehsize, phoff + phentsize * phnum if phnum else 0, shoff + shentsize * len(found) if found else 0]
    ends += [s.offset + s.size for s in found if s.type != SHT_NOBITS]
    return max(ends)


def _debug_facts(fh, found, size: int) -> dict:
    """The build-id, debug link and DWARF presence of a host ELF, from its section table;
    a malformed note or link reads as absent."""
    from kpack import elfread

    facts = {"debug_sections": elfread.has_debug_sections(found)}
    for name, read in (("build_id", elfread.build_id), ("debuglink", elfread.debuglink)):
        try:
            facts[name] = read(fh, found, size)
        except KpackFormatError:
            facts[name] = ""
    return facts


def _archive_facts(fh) -> FileFacts:
    """The TOC summary of a kpack archive (header and TOC only, never a kernel), with the
    declared kernel sizes held against what the file can hold."""
    from kpack.archive import SCHEME_ZSTD, ZSTD_MAX_RATIO, KpackReader

    fh.seek(0)
    try:
        reader = KpackReader(fh)
        stored = reader.zstd_size * ZSTD_MAX_RATIO if reader.scheme == SCHEME_ZSTD else reader.file_size
        toc = ArchiveToc.from_entries(reader.gfx_arches, _held(reader.entries(), stored))
    except KpackFormatError as exc:
        return FileFacts(archive_error=explain(exc))
    return FileFacts(archive=toc, targets=toc.arches)


def _held(entries, stored: int):
    """The TOC entries, each declared size held against what the archive can hold."""
    for entry in entries:
        if entry.original_size > stored:
            raise KpackFormatError(f"original_size {entry.original_size} is more than the archive can hold "
                                   f"({stored} bytes)", where=f"toc[{entry.key!r}][{entry.arch!r}].original_size")
        yield entry


def _device_facts(fh, scan_embedded: bool) -> FileFacts:
    """Targets of an offload bundle, compressed bundle or code-object container, by
    kpack.detect over this same open file (/proc/self/fd names the open file, not a path
    that could have been swapped)."""
    from kpack.detect import detect

    try:
        return FileFacts(targets=tuple(detect(f"/proc/self/fd/{fh.fileno()}", scan_embedded=scan_embedded).targets))
    except KpackFormatError as exc:
        return FileFacts(device_error=explain(exc))
