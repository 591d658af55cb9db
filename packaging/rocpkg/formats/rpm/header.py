"""The RPM header codec: index entries sorted by tag, an aligned data store and the
region tag, encoded and decoded (rpm's lib/header.c; rpmpack's header.go)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from rocpkg.formats.rpm.tags import (TYPE_BIN, TYPE_CHAR, TYPE_I18NSTRING, TYPE_INT8, TYPE_INT16, TYPE_INT32,
                             TYPE_INT64, TYPE_STRING, TYPE_STRING_ARRAY)

_INT_FORMATS = {TYPE_CHAR: "B", TYPE_INT8: "B", TYPE_INT16: "H", TYPE_INT32: "I", TYPE_INT64: "Q"}
_ALIGN = {TYPE_INT16: 2, TYPE_INT32: 4, TYPE_INT64: 8}

HEADER_MAGIC = b"\x8e\xad\xe8\x01\x00\x00\x00\x00"
_REGION_TRAILER = 16
# rpm's own limits (lib/header_internal.h): refuse anything larger before allocating.
MAX_TAGS = 0xFFFF
MAX_DATA = 0x0FFFFFFF
MAX_SIG_TAGS = 32          # rpm hdrblobRead: il_max for signature headers
MAX_SIG_DATA = 64 << 20


def _encode_value(tag: int, typ: int, value) -> tuple[bytes, int]:
    """(bytes, count) of one entry's value."""
    if typ in _INT_FORMATS:
        values = [value] if isinstance(value, int) else list(value)
        if not values:
            raise ValueError(f"tag {tag}: empty integer array")
        return struct.pack(f">{len(values)}{_INT_FORMATS[typ]}", *values), len(values)
    if typ == TYPE_STRING:
        return _cstr(tag, value), 1
    if typ in (TYPE_STRING_ARRAY, TYPE_I18NSTRING):
        values = [value] if isinstance(value, str) else list(value)
        if not values:
            raise ValueError(f"tag {tag}: empty string array")
        return b"".join(_cstr(tag, v) for v in values), len(values)
    if typ == TYPE_BIN:
        data = bytes(value)
        if not data:
            raise ValueError(f"tag {tag}: empty binary")
        return data, len(data)
    raise ValueError(f"tag {tag}: unsupported type {typ}")


def _cstr(tag: int, text: str) -> bytes:
    data = text.encode("utf-8", "surrogateescape")
    if b"\0" in data:
        raise ValueError(f"tag {tag}: NUL byte in string")
    return data + b"\0"


def encode_header(entries: dict[int, tuple[int, object]], region_tag: int | None) -> bytes:
    """Serialize a header: magic, il, dl, index entries sorted by tag, data store.

    entries maps tag -> (type, value). With region_tag (63 main, 62 signature) the first
    index entry is the region tag whose 16-byte trailer ends the data store, with the
    negative offset rpm's hdrblobVerifyRegion expects."""
    index = []
    data = bytearray()
    for tag in sorted(entries):
        typ, value = entries[tag]
        blob, count = _encode_value(tag, typ, value)
        align = _ALIGN.get(typ, 1)
        data += b"\0" * (-len(data) % align)
        index.append(struct.pack(">iIiI", tag, typ, len(data), count))
        data += blob
    if region_tag is not None:
        il = len(index) + 1
        index.insert(0, struct.pack(">iIiI", region_tag, TYPE_BIN, len(data), _REGION_TRAILER))
        data += struct.pack(">iIiI", region_tag, TYPE_BIN, -il * 16, _REGION_TRAILER)
    return HEADER_MAGIC + struct.pack(">II", len(index), len(data)) + b"".join(index) + bytes(data)


@dataclass
class DecodedHeader:
    """One header as read: values by tag, their types, and its encoded length."""

    values: dict[int, object]
    types: dict[int, int]
    length: int


def decode_header(blob: bytes, region_tag: int | None, max_tags: int = MAX_TAGS,
                  max_data: int = MAX_DATA) -> DecodedHeader:
    """Parse a header from the start of blob, checking every bound (ValueError on any
    inconsistency). Values: ints -> list[int], STRING -> str, STRING_ARRAY/I18NSTRING
    -> list[str], BIN -> bytes. The region tag itself is checked, not returned."""
    il, dl = header_sizes(blob[:16], max_tags, max_data)
    need = 16 + il * 16 + dl
    if len(blob) < need:
        raise ValueError(f"header truncated: need {need} bytes, have {len(blob)}")
    store = blob[16 + il * 16: need]
    values: dict[int, object] = {}
    types: dict[int, int] = {}
    for i in range(il):
        tag, typ, offset, count = struct.unpack_from(">iIiI", blob, 16 + i * 16)
        if offset < 0 or offset >= dl:
            raise ValueError(f"tag {tag}: offset {offset} outside data store of {dl} bytes")
        if i == 0 and region_tag is not None and tag == region_tag:
            _check_region(store, tag, typ, offset, count, il)
            continue
        if count == 0 or count > dl:
            raise ValueError(f"tag {tag}: bad count {count}")
        values[tag] = _decode_value(store, tag, typ, offset, count)
        types[tag] = typ
    return DecodedHeader(values, types, need)


def header_sizes(intro: bytes, max_tags: int = MAX_TAGS, max_data: int = MAX_DATA) -> tuple[int, int]:
    """(index count, data length) from a header's 16-byte intro, bounds-checked."""
    if len(intro) < 16 or intro[:8] != HEADER_MAGIC:
        raise ValueError("bad header magic")
    il, dl = struct.unpack(">II", intro[8:16])
    if il < 1 or il > max_tags:
        raise ValueError(f"header index count {il} out of range")
    if dl > max_data:
        raise ValueError(f"header data size {dl} out of range")
    return il, dl


def _check_region(store: bytes, tag: int, typ: int, offset: int, count: int, il: int) -> None:
    if typ != TYPE_BIN or count != _REGION_TRAILER or offset + _REGION_TRAILER > len(store):
        raise ValueError(f"region tag {tag}: bad entry")
    rtag, rtyp, roff, rcount = struct.unpack_from(">iIiI", store, offset)
    if rtag != tag or rtyp != TYPE_BIN or rcount != _REGION_TRAILER or roff > 0 or \
            -roff % 16 or -roff // 16 > il:
        raise ValueError(f"region tag {tag}: bad trailer")


def _decode_value(store: bytes, tag: int, typ: int, offset: int, count: int):
    if typ in _INT_FORMATS:
        fmt = _INT_FORMATS[typ]
        size = struct.calcsize(fmt) * count
        if offset % _ALIGN.get(typ, 1) or offset + size > len(store):
            raise ValueError(f"tag {tag}: integer array out of bounds or misaligned")
        return list(struct.unpack_from(f">{count}{fmt}", store, offset))
    if typ == TYPE_BIN:
        if offset + count > len(store):
            raise ValueError(f"tag {tag}: binary out of bounds")
        return bytes(store[offset:offset + count])
    if typ in (TYPE_STRING, TYPE_STRING_ARRAY, TYPE_I18NSTRING):
        if typ == TYPE_STRING and count != 1:
            raise ValueError(f"tag {tag}: string with count {count}")
        strings = []
        pos = offset
        for _ in range(count):
            end = store.find(b"\0", pos)
            if end < 0:
                raise ValueError(f"tag {tag}: unterminated string")
            strings.append(store[pos:end].decode("utf-8", "surrogateescape"))
            pos = end + 1
        return strings[0] if typ == TYPE_STRING else strings
    raise ValueError(f"tag {tag}: unknown type {typ}")


