"""The `.rocm_kpack_ref` marker of a host binary, and where it sends the runtime.

The section holds MessagePack `{kpack_search_paths: [str], kernel_name: str}`. Where the
runtime looks with it, and what it loads, is kpack.loader's business (one model).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgpack

from kpack import elfread
from kpack.errors import KpackFormatError

MARKER_SECTION = ".rocm_kpack_ref"
# A marker is a few search paths and a name: hundreds of bytes. One that claims more is
# refused before it is read.
MARKER_LIMIT = 1 << 20
GFXARCH = "@GFXARCH@"


@dataclass(frozen=True)
class Marker:
    kpack_search_paths: list[str] = field(default_factory=list)
    kernel_name: str = ""

    def owns(self, key: str) -> bool:
        """Whether an archive key (`kernel_name#N`) belongs to this binary."""
        name, sep, number = key.rpartition("#")
        return sep == "#" and name == self.kernel_name and number.isdigit()


def encode_marker(marker: Marker) -> bytes:
    return msgpack.packb({"kpack_search_paths": list(marker.kpack_search_paths),
                          "kernel_name": marker.kernel_name}, use_bin_type=True)


def decode_marker(data: bytes, *, where: int | str | None = None) -> Marker:
    """Parse a marker payload; trailing bytes (section padding) are ignored, as the
    runtime does."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1),
                                max_bin_len=len(data), max_str_len=len(data),
                                max_array_len=len(data), max_map_len=len(data),
                                max_ext_len=len(data))
    unpacker.feed(data)
    try:
        value = unpacker.unpack()
    except (msgpack.OutOfData, msgpack.UnpackException, ValueError, TypeError, RecursionError) as exc:
        raise KpackFormatError(f"marker is not valid MessagePack ({exc or 'truncated'})", where=where) from None
    if not isinstance(value, dict):
        raise KpackFormatError("marker is not a map", where=where)
    paths, name = value.get("kpack_search_paths"), value.get("kernel_name")
    if not isinstance(name, str) or not name:
        raise KpackFormatError("marker has no kernel_name string", where=where)
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise KpackFormatError("marker's kpack_search_paths is not a non-empty list of strings", where=where)
    return Marker(list(paths), name)


def read_marker(path: str | os.PathLike) -> Marker | None:
    """The marker of a host ELF; None for a non-ELF file or an ELF without the section."""
    name = os.fspath(path)
    with open(name, "rb") as handle:
        return read_marker_from(handle, os.fstat(handle.fileno()).st_size, name)


def read_marker_from(handle, size: int, name: str) -> Marker | None:
    """read_marker over any seekable binary handle of `size` bytes (a window of a
    package member, say); name is what an error names."""
    handle.seek(0)
    if handle.read(4) != elfread.ELF_MAGIC:
        return None
    try:
        return marker_in_sections(handle, elfread.sections(handle, size), size, name)
    except KpackFormatError as exc:
        raise exc.with_path(name)


def marker_in_sections(handle, found: list, size: int, name: str) -> Marker | None:
    """The marker of an ELF whose section table (elfread.sections) is already read."""
    section = elfread.section_named(found, MARKER_SECTION)
    if section is None:
        return None
    try:
        return decode_marker(elfread.section_bytes(handle, section, size, limit=MARKER_LIMIT), where=MARKER_SECTION)
    except KpackFormatError as exc:
        raise exc.with_path(name)
