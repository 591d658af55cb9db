"""RUNPATH -> RPATH as TheRock ships it, without patchelf and without a staging copy.

TheRock's packaging runs `patchelf --force-rpath` on every ELF it packs (runpath_to_rpath,
on by default) and its install test fails an installed ELF that still carries DT_RUNPATH.
The change is one word per entry: the d_tag of a DT_RUNPATH entry of the dynamic table
becomes DT_RPATH (the string it points at stays). The catalog finds those words
(`runpath_tags`, from the open file it reads once); the plan copies them into
FileEntry.patches; the writers pass each source's chunks through `streams.patch_chunks` before
hashing, so sizes and digests are those of the bytes written.

An ELF with both tags is refused: glibc ignores DT_RPATH when DT_RUNPATH is present, while
patchelf --force-rpath leaves two DT_RPATH entries of which ld.so uses whichever comes
last, which is not the search path the file was built with.
"""
from __future__ import annotations

import os
import struct

from kpack.elfread import DYNAMIC_LIMIT, dynamic_entries, dynamic_entry
from kpack.errors import KpackFormatError

DT_RPATH, DT_RUNPATH = 15, 29
PT_DYNAMIC = 2


def runpath_tags(fh) -> tuple[tuple[tuple[int, bytes], ...], str]:
    """(patches, error) of one open ELF: a (file offset, replacement d_tag bytes) per
    DT_RUNPATH entry of its PT_DYNAMIC table, or no patches and why they can't be made.
    Everything the file declares is checked against its size before it is read."""
    size = os.fstat(fh.fileno()).st_size
    fh.seek(0)
    ident = fh.read(64)
    if len(ident) < 52 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return (), ""  # not an ELF this reads: nothing to rewrite
    wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    if wide:
        phoff, = struct.unpack_from(order + "Q", ident, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", ident, 54)
        phdr, word = order + "II6Q", order + "q"
    else:
        phoff, = struct.unpack_from(order + "I", ident, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", ident, 42)
        phdr, word = order + "8I", order + "i"
    if phentsize < struct.calcsize(phdr) or phoff + phnum * phentsize > size:
        return (), f"program headers [{phoff}, {phoff + phnum * phentsize}) are not inside the file ({size} bytes)"
    for index in range(phnum):
        fh.seek(phoff + index * phentsize)
        fields = struct.unpack(phdr, fh.read(struct.calcsize(phdr)))
        p_type = fields[0]
        p_offset, p_filesz = (fields[2], fields[5]) if wide else (fields[1], fields[4])
        if p_type == PT_DYNAMIC:
            if p_offset + p_filesz > size:
                return (), f"PT_DYNAMIC [{p_offset}, {p_offset + p_filesz}) is not inside the file ({size} bytes)"
            return _dynamic_patches(fh, p_offset, p_filesz, word, dynamic_entry(ident))
    return (), ""


def _dynamic_patches(fh, offset: int, length: int, word: str, entry) -> tuple[tuple[tuple[int, bytes], ...], str]:
    if entry is None:
        return (), ""   # not an ELF this reads: nothing to rewrite
    found, rpath = [], False
    try:
        for at, tag, _ in dynamic_entries(fh, offset, length, entry):
            if tag == DT_RUNPATH:
                found.append(at)
            elif tag == DT_RPATH:
                rpath = True
    except KpackFormatError:        # a hostile table: read no further than a real one goes
        return (), f"no DT_NULL in the first {DYNAMIC_LIMIT} entries of PT_DYNAMIC"
    return _result(found, rpath, word)


def _result(found: list[int], rpath: bool, word: str) -> tuple[tuple[tuple[int, bytes], ...], str]:
    if found and rpath:
        return (), ("has both DT_RPATH and DT_RUNPATH: the loader follows RUNPATH, and turning it into a "
                    "second RPATH would change the search path; relink it with one of them, or set "
                    "runpath_to_rpath to false")
    replacement = struct.pack(word, DT_RPATH)
    return tuple((at, replacement) for at in found), ""


def planned_patches(facts, enabled: bool) -> tuple[tuple[tuple[int, bytes], ...], str]:
    """(FileEntry.patches, why not) of a file with these catalog facts: its RUNPATH tags
    when the release rewrites them (settings.runpath_to_rpath), else none."""
    if not enabled or facts is None:
        return (), ""
    return facts.runpath_tags, facts.runpath_error
