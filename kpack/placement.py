"""Device code only where it belongs.

- A host ELF must not carry kernels once its device code is split into kpack archives:
  RFC0008's split step turns `.hip_fatbin` into NOBITS, so a host file whose `.hip_fatbin`
  is still PROGBITS and non-empty (Debian's librocsparse: 1.3 GB of it) did not go through
  the split. `host_device_code(path)` reports that, and any AMDGPU code object or offload
  bundle embedded in another allocated data section (ROCr's blit kernels in `.data`), with
  the targets of each.
- Device code filed under a target must be for that target: `device_code_objects(path)`
  names the target of every code object inside a device file (code object, offload bundle,
  compressed bundle, kpack archive, embedding container), and `code_fits(target, filed_under)`
  says whether code for one target belongs under a target or family suffix.

Everything is read through bounded, positioned reads: section headers, bundle headers and
ELF headers, and data sections in 1 MiB chunks; never a whole file.
"""
from __future__ import annotations

import os
import struct
import threading
from typing import BinaryIO, NamedTuple

from kpack import elfread, memsearch
from kpack.archive import KpackReader
from kpack.bundle import BUNDLE_MAGIC, SCAN_CHUNK, BundleEntry, bundle_end, bundle_entries
from kpack.bundle import compressed_bundle_entries
from kpack.codeobject import ELF_MAGIC, EM_AMDGPU, CodeSource, decode_code_object
from kpack.detect import KIND_BUNDLE, KIND_CODE_OBJECT, KIND_COMPRESSED_BUNDLE, KIND_EMBEDDED, KIND_KPACK
from kpack.detect import ELF64_LE, detect, scan_code_objects
from kpack.elf import SHF_ALLOC, SHF_EXECINSTR, SHT_PROGBITS
from kpack.errors import KpackFormatError
from kpack.targets import FAMILIES, GENERIC_TARGETS, parse_target

FAT_BINARY = "fat-binary"                       # a non-empty PROGBITS .hip_fatbin
EMBEDDED_CODE_OBJECT = "embedded-code-object"   # an AMDGPU ELF inside another data section
EMBEDDED_BUNDLE = "embedded-offload-bundle"     # an offload bundle inside another data section
CODE_OBJECT = "code-object"                     # the file itself is an AMDGPU code object
FAT_BINARY_SECTIONS = (".hip_fatbin",)


class Finding(NamedTuple):
    kind: str
    section: str        # ".hip_fatbin", ".data"; "" for the whole file
    offset: int         # file offset of the section (fat binary) or of the embedded object
    size: int
    targets: list[str]
    count: int = 1      # offload bundles in a fat binary

    def describe(self) -> str:
        targets = ", ".join(self.targets) or "no amdgcn target"
        if self.kind == FAT_BINARY:
            return (f"{self.section} is PROGBITS and holds {self.size} bytes of device code ({self.count} offload "
                    f"bundles for {targets}): the kpack split step did not run on this host binary")
        if self.kind == CODE_OBJECT:
            return f"is an AMDGPU code object for {targets}"
        what = "an AMDGPU code object" if self.kind == EMBEDDED_CODE_OBJECT else "an offload bundle"
        return f"{self.section} embeds {what} for {targets} at offset {self.offset}"


class Bundle(NamedTuple):
    offset: int         # file offset of the bundle
    size: int
    entries: list[BundleEntry]


def _sections(handle: BinaryIO, size: int) -> list[elfread.Section]:
    """Every section of an ELF file, each PROGBITS one checked to lie inside the file."""
    found = elfread.sections(handle, size)
    for section in found:
        if section.type == SHT_PROGBITS and section.offset + section.size > size:
            raise KpackFormatError(f"section {section.name} [{section.offset}, {section.offset + section.size}) "
                                   "runs past the end of the file", where=section.name)
    return found


def _find(handle: BinaryIO, magics: tuple[bytes, ...], start: int, end: int) -> int:
    """Offset of the first of `magics` in [start, end), or -1; reads 1 MiB at a time into
    this thread's buffer (a host ELF's data sections are most of a release's host bytes:
    no new object, no fresh pages per read)."""
    overlap = max(len(magic) for magic in magics) - 1
    buffer = _scan_buffer(SCAN_CHUNK + overlap)
    with memoryview(buffer) as view:
        position = start
        while position < end:
            want = min(SCAN_CHUNK + overlap, end - position)
            handle.seek(position)
            got = handle.readinto(view[:want])
            hits = [hit for hit in (memsearch.find(buffer, magic, 0, min(got, SCAN_CHUNK + len(magic) - 1))
                                    for magic in magics) if hit >= 0]
            if hits:
                return position + min(hits)
            if got < want:
                return -1   # the file ends before the section does
            position += SCAN_CHUNK
    return -1


_THREAD_BUFFERS = threading.local()


def _scan_buffer(size: int) -> bytearray:
    """This thread's search buffer of at least `size` bytes (one per thread, kept)."""
    buffer = getattr(_THREAD_BUFFERS, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _THREAD_BUFFERS.buffer = bytearray(size)
    return buffer


def _bundles_in(handle: BinaryIO, start: int, end: int, *, check_objects: bool) -> list[Bundle]:
    """The uncompressed offload bundles laid one after another (with padding) in [start, end)."""
    bundles = []
    position = _find(handle, (BUNDLE_MAGIC,), start, end)
    while position >= 0:
        entries = bundle_entries(handle, base=position, size=end - position, check_objects=check_objects)
        length = bundle_end(entries)
        bundles.append(Bundle(position, length, entries))
        position = _find(handle, (BUNDLE_MAGIC,), position + length, end)
    return bundles


def fat_binary_bundles(path: str | os.PathLike, *, check_objects: bool = True) -> list[Bundle]:
    """The offload bundles of a host ELF's PROGBITS `.hip_fatbin`, in file order (each
    amdgcn entry checked against its ELF unless check_objects=False)."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        try:
            return [bundle for section in _sections(handle, size)
                    if section.name in FAT_BINARY_SECTIONS and section.type == SHT_PROGBITS
                    for bundle in _bundles_in(handle, section.offset, section.offset + section.size,
                                              check_objects=check_objects)]
        except KpackFormatError as exc:
            raise exc.with_path(path)


def _targets(entries) -> list[str]:
    return list(dict.fromkeys(entry.target for entry in entries if entry.target))


def _embedded(handle: BinaryIO, name: str, start: int, end: int, objects: bool = True) -> list[Finding]:
    found = []
    for at, target in scan_code_objects(handle, start, end) if objects else ():
        found.append(Finding(EMBEDDED_CODE_OBJECT, name, at, _elf_extent(handle, at, end), [target]))
    position = _find(handle, (BUNDLE_MAGIC,), start, end)
    while position >= 0:
        try:
            entries = bundle_entries(handle, base=position, size=end - position, check_objects=False)
        except KpackFormatError:  # the magic string inside other data
            position = _find(handle, (BUNDLE_MAGIC,), position + 1, end)
            continue
        length = bundle_end(entries)
        found.append(Finding(EMBEDDED_BUNDLE, name, position, length, _targets(entries)))
        position = _find(handle, (BUNDLE_MAGIC,), position + length, end)
    return found


def _elf_extent(handle: BinaryIO, at: int, end: int) -> int:
    """Bytes an embedded ELF spans (to the end of its section header table), bounded by end."""
    handle.seek(at)
    header = handle.read(64)
    shoff, = struct.unpack_from("<Q", header, 40)
    shentsize, shnum = struct.unpack_from("<HH", header, 58)
    return min(end - at, shoff + shentsize * shnum)


def host_device_code(path: str | os.PathLike, *, embedded_objects: bool = True) -> list[Finding]:
    """Device code inside a host file: a non-empty PROGBITS `.hip_fatbin` (with the targets of
    its bundles), AMDGPU code objects and offload bundles embedded in other allocated data
    sections, or the file itself being an AMDGPU code object. [] for a clean host file and
    for anything that is not an ELF. Raises KpackFormatError (naming the file) for a fat
    binary whose bundles are malformed or lie about their code objects.
    embedded_objects=False skips the search for whole code objects in data sections."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        try:
            layout = _host_layout(handle, size)
            if layout is None:
                return []
            if layout == CODE_OBJECT:
                target = decode_code_object(CodeSource(handle))
                return [Finding(CODE_OBJECT, "", 0, size, [target])]
            findings = []
            for name, offset, length in layout:
                if name in FAT_BINARY_SECTIONS:
                    bundles = _bundles_in(handle, offset, offset + length, check_objects=True)
                    targets = _targets(entry for bundle in bundles for entry in bundle.entries)
                    findings.append(Finding(FAT_BINARY, name, offset, length, targets, len(bundles)))
                else:
                    findings.extend(_embedded(handle, name, offset, offset + length, embedded_objects))
            return findings
        except KpackFormatError as exc:
            raise exc.with_path(path)


def _host_layout(handle: BinaryIO, size: int):
    """What host_device_code looks at in a file: None for anything that is not an ELF,
    CODE_OBJECT for an AMDGPU one, else (name, offset, size) of each section it searches:
    every non-empty PROGBITS `.hip_fatbin` and allocated, non-executable PROGBITS section."""
    handle.seek(0)
    head = handle.read(64)
    if not head.startswith(ELF_MAGIC) or len(head) < 20:
        return None
    if struct.unpack_from("<H", head, 18)[0] == EM_AMDGPU:
        return CODE_OBJECT
    return [(name, offset, length) for name, sh_type, flags, offset, length, _ in _sections(handle, size)
            if sh_type == SHT_PROGBITS and length
            and (name in FAT_BINARY_SECTIONS or (flags & SHF_ALLOC and not flags & SHF_EXECINSTR))]


class StreamedSearch:
    """host_device_code's answer for a file that someone reads front to back anyway (a
    package writer streaming it into a package): the searched sections are searched in
    the chunks as they pass, so that the file is not read a second time for its search (a
    release's host ELFs are a third of its bytes). Only a hit needs the file itself: an
    AMDGPU file, a `.hip_fatbin` section, a section header table that does not parse, or
    a magic the search looks for, anywhere in a searched section or across a chunk
    boundary inside one, sends the file to host_device_code, which reads what it needs
    again. So the answer is host_device_code's, and a clean host file costs no second read.

        search = StreamedSearch(embedded_objects); search.start(handle)
        for chunk in search.watch(chunks): ...    # the file's bytes, in order, from offset 0
        findings = search.findings(path)          # after the last chunk
    """

    def __init__(self, embedded_objects: bool = True):
        self.embedded_objects = embedded_objects
        self.magics = (BUNDLE_MAGIC, ELF64_LE) if embedded_objects else (BUNDLE_MAGIC,)
        self.ranges: list[tuple[int, int]] = []
        self.whole = False      # host_device_code must read the file: it holds (or may hold) device code
        self.started = False

    def start(self, handle: BinaryIO) -> None:
        """Read the ELF header and the section headers (bounded reads), before the bytes stream."""
        self.started = True
        try:
            layout = _host_layout(handle, os.fstat(handle.fileno()).st_size)
        except KpackFormatError:    # host_device_code raises the same error, naming the file
            self.whole = True
            return
        if layout is None:
            return
        if layout == CODE_OBJECT or any(name in FAT_BINARY_SECTIONS for name, _, _ in layout):
            self.whole = True
            return
        self.ranges = sorted((offset, offset + length) for _, offset, length in layout)

    def watch(self, chunks):
        """The chunks, passed on unchanged, searched where they lie in a searched section."""
        keep = max(len(magic) for magic in self.magics) - 1
        position, tail = 0, b""
        for chunk in chunks:
            if self.ranges and not self.whole:
                data = chunk if isinstance(chunk, bytes) else bytes(chunk)
                self.whole = self._hit(position, data, tail)
                tail = data[-keep:] if len(data) >= keep else (tail + data)[-keep:]
            yield chunk
            position += len(chunk)

    def _hit(self, position: int, data: bytes, tail: bytes) -> bool:
        end = position + len(data)
        for low, high in self.ranges:
            if low >= end:
                break
            if high <= position:
                continue
            if low < position and tail:     # a magic may start in the last chunk
                joined = tail + data[:len(tail)]
                if any(memsearch.find(joined, magic) >= 0 for magic in self.magics):
                    return True
            start, stop = max(low, position) - position, min(high, end) - position
            if any(memsearch.find(data, magic, start, stop) >= 0 for magic in self.magics):
                return True
        return False

    def findings(self, path: str | os.PathLike) -> list[Finding]:
        """host_device_code(path) once every chunk was watched: [] without a hit."""
        if not self.started:
            raise ValueError("StreamedSearch.findings before start")
        return host_device_code(path, embedded_objects=self.embedded_objects) if self.whole else []


def device_code_objects(path: str | os.PathLike) -> list[tuple[str, str]]:
    """(where, target) of every code object inside a device file: `("", target)` for a code
    object, `("bundle entry 2 (hipv4-...)", target)` for each amdgcn entry of a bundle (plain
    or compressed), `("lib/x.so#0", arch)` for each kernel of a kpack archive, `("offset N",
    target)` for code objects embedded in a container (.mxr). [] for a file that is not
    device code. Raises KpackFormatError naming the file for a malformed one."""
    kind, _ = detect(path)
    if kind not in (KIND_CODE_OBJECT, KIND_BUNDLE, KIND_COMPRESSED_BUNDLE, KIND_KPACK, KIND_EMBEDDED):
        return []
    try:
        with open(path, "rb") as handle:
            if kind == KIND_CODE_OBJECT:
                return [("", decode_code_object(CodeSource(handle)))]
            if kind in (KIND_BUNDLE, KIND_COMPRESSED_BUNDLE):
                entries = bundle_entries(handle) if kind == KIND_BUNDLE else compressed_bundle_entries(handle)
                return [(f"bundle entry {e.index} ({e.entry_id})", e.target) for e in entries if e.target]
            if kind == KIND_KPACK:
                return [(entry.key, entry.arch) for entry in KpackReader(handle).entries()]
            return [(f"offset {at}", target) for at, target in scan_code_objects(handle)]
    except KpackFormatError as exc:
        raise exc.with_path(path)


def code_fits(target: str, filed_under: str, families: dict[str, list[str]] | None = None) -> bool:
    """Whether code for `target` belongs under an artifact suffix `filed_under` (a target such as
    `gfx90a` / `gfx90a:xnack+`, or a family such as `gfx110X`): its processor is the suffix's
    processor (or a family member), or a generic target that runs on one; and it does not set
    a feature the suffix names the other way. gfx803 code under gfx90a does not fit;
    gfx90a:xnack- code fits gfx90a but not gfx90a:xnack+; gfx90a (any) code fits both."""
    table = families or FAMILIES
    code = parse_target(target)
    family = next((members for name, members in table.items() if name.lower() == filed_under.lower()), None)
    if family is not None:
        processors, wanted = set(family), {}
    else:
        where = parse_target(filed_under)
        processors, wanted = {where.processor}, where.features
    runs_on = set(GENERIC_TARGETS.get(code.processor, [code.processor]))
    if not runs_on & processors:
        return False
    return all(code.features.get(name, value) == value for name, value in wanted.items())
