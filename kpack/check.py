"""The structural check of one kpack archive: what `kpack verify` prints and what rocpkg's
build refuses. One problem, one line naming the file and the place; only this archive is
blamed. A structural fault is reported alone (what follows from it would be noise: a wrong
frame count also misplaces every later frame); once the structure is sound every kernel is
checked on its own, and each bad one is a line.

Checked: header and padding; TOC shape and types; ordinals (unique, one per stored
kernel); gfx_arches (no repeats; every arch the TOC files kernels under is listed, else
the runtime can never reach them — listing an arch without kernels is valid, the
reference writer does it for empty archives); blob and frame bounds against the file;
declared sizes (blob size, zstd frame header, what a frame can hold); with decode_objects,
every kernel streamed through decompression (bounded memory) to its exact original_size,
and each AMDGPU code object's EF_AMDGPU_MACH, plus the xnack/sramecc state where the arch
names one, compared with the arch it is filed under. `expected_target` is the target the
archive's name files it under (`blas_lib_gfx942.kpack`): gfx_arches must list it and the
TOC must hold kernels for it only.
"""
from __future__ import annotations

import os

import zstandard

from kpack.codeobject import code_object_target
from kpack.archive import ZSTD_FRAME_HEADER_MAX, KpackReader
from kpack.errors import InvalidTargetError, KpackFormatError
from kpack.format import BLOB_AREA_START, HEADER_SIZE, SCHEME_NONE, ZSTD_MAX_RATIO, Entry
from kpack.targets import parse_target

# Problems reported per archive before the rest are summarised in one line.
MAX_PROBLEMS = 20


class CodeObjectProblem(KpackFormatError):
    """A kernel that is sound as archive data but is not a code object for the arch it is
    filed under (another EF_AMDGPU_MACH or feature state, or no AMDGPU ELF at all): what
    a GPU meets as hipErrorInvalidImage. Callers may allow it apart from format faults."""


def check_archive(path: str | os.PathLike, expected_target: str | None = None, *,
                  decode_objects: bool = True, require_code_objects: bool = True,
                  whole_kernels: bool = True) -> list[KpackFormatError]:
    """Every problem of the archive at `path` ([] = sound). require_code_objects=False
    accepts kernels that are not ELF files at all (opaque test payloads, as in
    rocm-kpack's own test assets); an ELF for another machine, or for another target, is
    still a problem. whole_kernels=False decodes only each kernel's ELF header and walks
    its frame's block headers instead of decompressing it (see _check_frame_blocks)."""
    name = os.fspath(path)
    try:
        with KpackReader(name) as reader:
            return check_reader(reader, expected_target, decode_objects=decode_objects,
                                require_code_objects=require_code_objects, whole_kernels=whole_kernels)
    except KpackFormatError as exc:
        return [exc.with_path(name)]
    except OSError as exc:
        return [KpackFormatError(exc.strerror or str(exc), path=name)]


def verify_reader(reader: KpackReader) -> None:
    """Check everything the format promises of an open archive (kernels may be opaque
    payloads); raise the first problem check_reader finds."""
    problems = check_reader(reader, require_code_objects=False)
    if problems:
        raise problems[0]


def check_reader(reader: KpackReader, expected_target: str | None = None, *, decode_objects: bool = True,
                 require_code_objects: bool = True, whole_kernels: bool = True) -> list[KpackFormatError]:
    """check_archive for an archive that is already open."""
    problems: list[KpackFormatError] = []
    try:
        _check(reader, expected_target, decode_objects, require_code_objects, problems, whole_kernels)
    except KpackFormatError as exc:  # a fault that stops the walk (the TOC cannot be read further)
        problems.append(exc)
    for problem in problems:
        problem.with_path(reader.path)
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = [KpackFormatError(f"and {len(problems) - MAX_PROBLEMS} more problems",
                                                    path=reader.path)]
    return problems


def _check(reader: KpackReader, expected: str | None, decode: bool, require_objects: bool,
           problems: list[KpackFormatError], whole: bool = True) -> None:
    padding = reader.read_at(HEADER_SIZE, BLOB_AREA_START - HEADER_SIZE)
    if any(padding):
        first = next(i for i, byte in enumerate(padding) if byte)
        raise KpackFormatError("header padding is not zero", where=HEADER_SIZE + first)
    entries = list(reader.entries())
    by_ordinal: dict[int, Entry] = {}
    for entry in entries:
        if entry.ordinal in by_ordinal:
            other = by_ordinal[entry.ordinal]
            raise KpackFormatError(f"ordinal {entry.ordinal} is also used by {other.key!r}/{other.arch!r}",
                                   where=f"toc[{entry.key!r}][{entry.arch!r}].ordinal")
        else:
            by_ordinal[entry.ordinal] = entry
    if len(by_ordinal) != reader.kernel_count:
        raise KpackFormatError(f"archive stores {reader.kernel_count} kernels but the TOC lists "
                               f"{len(by_ordinal)}", where="TOC['toc']")
    _check_arches(reader, entries, expected, problems)
    _check_storage(reader, entries, problems)
    if decode and not problems:
        for entry in entries:
            _check_kernel(reader, entry, require_objects, problems, whole)


def _check_arches(reader: KpackReader, entries: list[Entry], expected: str | None,
                  problems: list[KpackFormatError]) -> None:
    listed = reader.gfx_arches
    repeated = sorted({arch for arch in listed if listed.count(arch) > 1})
    if repeated:
        problems.append(KpackFormatError(f"gfx_arches lists {', '.join(repeated)} more than once",
                                         where="TOC['gfx_arches']"))
    for arch in dict.fromkeys(entry.arch for entry in entries):
        if arch not in listed:
            problems.append(KpackFormatError(f"TOC files kernels under {arch} but gfx_arches "
                                             f"({', '.join(listed) or 'empty'}) does not list it: the runtime "
                                             f"never looks there", where="TOC['gfx_arches']"))
        elif expected is not None and arch != expected:
            problems.append(KpackFormatError(f"archive is named for {expected} but holds kernels for {arch}",
                                             where="TOC['toc']"))
    if expected is not None and expected not in listed:
        problems.append(KpackFormatError(f"archive is named for {expected} but gfx_arches lists "
                                         f"{', '.join(listed) or 'nothing'}", where="TOC['gfx_arches']"))


def _check_storage(reader: KpackReader, entries: list[Entry], problems: list[KpackFormatError]) -> None:
    """Blob and frame bounds and the sizes they declare, without decompressing."""
    if reader.scheme == SCHEME_NONE:
        if reader.kernel_count:
            reader.index_blobs()  # validates every blob descriptor
        for entry in entries:
            _, size = reader.blob_extent(entry.ordinal)
            if size != entry.original_size:
                problems.append(KpackFormatError(f"blob is {size} bytes but original_size is {entry.original_size}",
                                                 where=f"toc[{entry.key!r}][{entry.arch!r}].original_size"))
        return
    end = reader.zstd_offset + reader.zstd_size
    frames_end = reader.zstd_offset + 4
    if reader.kernel_count:
        last_offset, last_size = reader.frame_extent(reader.kernel_count - 1)
        frames_end = last_offset + last_size
    if frames_end != end:
        raise KpackFormatError(f"{reader.kernel_count} frames end at {frames_end} but the zstd area "
                               f"ends at {end} (wrong frame count?)", where=frames_end)
    for entry in entries:
        offset, size = reader.frame_extent(entry.ordinal)
        where = f"toc[{entry.key!r}][{entry.arch!r}]"
        if entry.original_size > ZSTD_MAX_RATIO * size:
            problems.append(KpackFormatError(f"original_size {entry.original_size} is more than a {size}-byte "
                                             f"zstd frame can hold", where=f"{where}.original_size"))
            continue
        try:
            params = zstandard.get_frame_parameters(reader.read_at(offset, min(size, ZSTD_FRAME_HEADER_MAX)))
        except zstandard.ZstdError as exc:
            problems.append(KpackFormatError(f"not a zstd frame ({exc})", where=offset))
            continue
        if params.content_size not in (zstandard.CONTENTSIZE_UNKNOWN, entry.original_size):
            problems.append(KpackFormatError(f"zstd frame declares {params.content_size} bytes but "
                                             f"original_size is {entry.original_size}", where=offset))


V2_OBJECT_LIMIT = 64 << 20  # a v2 object is named from its notes: kept whole up to this size


def _object_target(data: bytes) -> str | None:
    """The target an AMDGPU code object says (kpack.codeobject, comgr's reading); None when
    `data` is not an AMDGPU ELF at all."""
    if not _is_amdgpu_elf(data):
        return None
    return code_object_target(data)


def _is_amdgpu_elf(head: bytes) -> bool:
    return len(head) >= 20 and head[:4] == b"\x7fELF" and head[5] == 1 and head[18:20] == b"\xe0\x00"


def _is_v2(head: bytes) -> bool:
    """Code object v2 (EI_OSABI HSA, EI_ABIVERSION 0) names its target in notes, not e_flags."""
    return _is_amdgpu_elf(head) and len(head) > 8 and head[7] == 64 and head[8] == 0


def _check_kernel(reader: KpackReader, entry: Entry, require_objects: bool,
                  problems: list[KpackFormatError], whole: bool = True) -> None:
    """Stream one kernel through decompression (bounded) and compare its ELF target. Only
    the header is kept, except for a v2 object (its target is in its notes), kept whole up
    to V2_OBJECT_LIMIT. whole=False decodes the header alone (and a v2 object whole) and
    checks the rest of the frame by its block headers."""
    where = f"toc[{entry.key!r}][{entry.arch!r}]"
    kept = bytearray()
    keep_all = None  # decided once the ELF header is in hand
    try:
        if not whole:
            head = reader.head_entry(entry, 64)
            if not _is_v2(head):
                _check_frame_blocks(reader, entry)
                _compare_target(head, entry, require_objects, problems, where)
                return
        for chunk in reader.stream_entry(entry):
            if keep_all is None:
                kept += chunk
                if len(kept) >= 64:
                    keep_all = _is_v2(kept)
            elif keep_all:
                kept += chunk
                if len(kept) > V2_OBJECT_LIMIT:
                    problems.append(CodeObjectProblem(f"code object v2 larger than {V2_OBJECT_LIMIT} bytes: its "
                                                      f"target cannot be read from its notes", where=where))
                    return
    except KpackFormatError as exc:  # the stored bytes themselves are bad: a structural problem
        if exc.where is None:
            exc.where = where
        problems.append(exc)
        return
    _compare_target(bytes(kept if keep_all else kept[:64]), entry, require_objects, problems, where)


def _compare_target(data: bytes, entry: Entry, require_objects: bool, problems: list[KpackFormatError],
                    where: str) -> None:
    """The code object's target (from its header, or its notes for v2) against its arch."""
    try:
        found = _object_target(data)
    except KpackFormatError as exc:
        problems.append(CodeObjectProblem(exc.what, where=where))
        return
    if found is None:
        if require_objects or data.startswith(b"\x7fELF"):
            problems.append(CodeObjectProblem("kernel is not an AMDGPU code object", where=where))
        return
    mismatch = _target_mismatch(found, entry.arch)
    if mismatch:
        problems.append(CodeObjectProblem(f"code object is for {found}, not {entry.arch} ({mismatch})", where=where))


ZSTD_BLOCK_MAX = 128 << 10   # the largest a zstd block is, stored or decoded (RFC 8878 3.1.1.2.3)


def _check_frame_blocks(reader: KpackReader, entry: Entry) -> None:
    """A kernel's zstd frame checked by its block headers, without decompressing: every
    block lies inside the frame, the last one ends it (checksum included), and the blocks
    can hold original_size (stored and RLE blocks count exactly, compressed ones at most
    128 KiB). A truncated, padded or misframed kernel fails here, at a few bytes read per
    128 KiB; a damaged byte inside a compressed block only whole decoding finds
    (`kpack verify`, `rocpkg build --deep-check`)."""
    if reader.scheme == SCHEME_NONE:
        return  # a stored blob: its size was compared with original_size (_check_storage)
    offset, size = reader.frame_extent(entry.ordinal)
    src, end = reader, offset + size
    head = src.read_at(offset, min(size, 18))
    try:
        params = zstandard.get_frame_parameters(head)
        position = offset + zstandard.frame_header_size(head)
    except zstandard.ZstdError as exc:
        raise KpackFormatError(f"not a zstd frame ({exc})", where=offset) from None
    low = high = 0
    # one pread per block header (16,000 of them per GiB): through the descriptor when
    # there is one, without read_at's bounds check and loop (the frame was checked to lie
    # inside the file), which would otherwise be a large part of the walk's time
    fd = src.fd
    read = (lambda at: os.pread(fd, 3, at)) if fd is not None else (lambda at: src.read_at(at, 3))
    while True:
        block = read(position) if position + 3 <= end else b""
        if len(block) != 3:
            raise KpackFormatError("zstd frame ends inside a block header (truncated?)", where=position)
        value = int.from_bytes(block, "little")
        last, kind, block_size = value & 1, (value >> 1) & 3, value >> 3
        if kind == 3 or block_size > ZSTD_BLOCK_MAX:
            raise KpackFormatError(f"zstd block header is not valid ({'reserved type' if kind == 3 else 'over 128 KiB'})",
                                   where=position)
        position += 3 + (1 if kind == 1 else block_size)
        if position > end:
            raise KpackFormatError("zstd block runs past the end of its frame (truncated?)", where=position)
        low += 0 if kind == 2 else block_size
        high += ZSTD_BLOCK_MAX if kind == 2 else block_size
        if last:
            break
    position += 4 if params.has_checksum else 0
    if position != end:
        raise KpackFormatError(f"zstd frame's blocks end at {position}, the frame at {end}", where=offset)
    if not low <= entry.original_size <= high:
        raise KpackFormatError(f"zstd frame's blocks hold {low} to {high} bytes, original_size is "
                               f"{entry.original_size}", where=offset)


def _target_mismatch(found: str, filed: str) -> str | None:
    """Why a code object for `found` does not belong under arch `filed`, or None."""
    try:
        have, want = parse_target(found), parse_target(filed)
    except InvalidTargetError:
        return None if found == filed else "arch is not a target ID"
    if have.processor != want.processor:
        return f"EF_AMDGPU_MACH says {have.processor}"
    for feature, on in sorted(want.features.items()):
        if feature in have.features and have.features[feature] != on:
            return f"e_flags say {feature}{'+' if have.features[feature] else '-'}"
    return None
