"""Native RPM v4 writer and reader (rpmpack's model: small separate parts).

Parts, each usable and testable alone:
  1. tag table       Tag / SigTag / TYPE_* constants (rpm's include/rpm/rpmtag.h)
  2. header codec    encode_header() / decode_header(): index + data store, region tag,
                     entries sorted by tag, type alignment
  3. cpio            CpioWriter: "newc" entries, or rpm's stripped "07070X" form
  4. lead + signature header
  5. reader          read_rpm(), replace_signature()
  6. writer          write_rpm(): parses the rendered spec (templates are the single
                     source of metadata text) and streams files into a .rpm

The writer knows nothing of ROCm: it packs what a PackageSpec says.
"""
from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass, field

from rocpkg.errors import RocpkgInputError

# ---------------------------------------------------------------------------
# 1. tag table
# ---------------------------------------------------------------------------

TYPE_NULL = 0
TYPE_CHAR = 1
TYPE_INT8 = 2
TYPE_INT16 = 3
TYPE_INT32 = 4
TYPE_INT64 = 5
TYPE_STRING = 6
TYPE_BIN = 7
TYPE_STRING_ARRAY = 8
TYPE_I18NSTRING = 9

_INT_FORMATS = {TYPE_CHAR: "B", TYPE_INT8: "B", TYPE_INT16: "H", TYPE_INT32: "I", TYPE_INT64: "Q"}
_ALIGN = {TYPE_INT16: 2, TYPE_INT32: 4, TYPE_INT64: 8}


class Tag(enum.IntEnum):
    """Main header tags (the subset rocpkg writes or reads)."""

    HEADERIMMUTABLE = 63
    HEADERI18NTABLE = 100
    NAME = 1000
    VERSION = 1001
    RELEASE = 1002
    EPOCH = 1003
    SUMMARY = 1004
    DESCRIPTION = 1005
    BUILDTIME = 1006
    BUILDHOST = 1007
    SIZE = 1009
    VENDOR = 1011
    LICENSE = 1014
    PACKAGER = 1015
    GROUP = 1016
    URL = 1020
    OS = 1021
    ARCH = 1022
    PREIN = 1023
    POSTIN = 1024
    PREUN = 1025
    POSTUN = 1026
    OLDFILENAMES = 1027
    FILESIZES = 1028
    FILEMODES = 1030
    FILERDEVS = 1033
    FILEMTIMES = 1034
    FILEDIGESTS = 1035
    FILELINKTOS = 1036
    FILEFLAGS = 1037
    FILEUSERNAME = 1039
    FILEGROUPNAME = 1040
    SOURCERPM = 1044
    FILEVERIFYFLAGS = 1045
    ARCHIVESIZE = 1046
    PROVIDENAME = 1047
    REQUIREFLAGS = 1048
    REQUIRENAME = 1049
    REQUIREVERSION = 1050
    CONFLICTFLAGS = 1053
    CONFLICTNAME = 1054
    CONFLICTVERSION = 1055
    RPMVERSION = 1064
    CHANGELOGTIME = 1080
    CHANGELOGNAME = 1081
    CHANGELOGTEXT = 1082
    PREINPROG = 1085
    POSTINPROG = 1086
    PREUNPROG = 1087
    POSTUNPROG = 1088
    OBSOLETENAME = 1090
    FILEDEVICES = 1095
    FILEINODES = 1096
    FILELANGS = 1097
    PROVIDEFLAGS = 1112
    PROVIDEVERSION = 1113
    OBSOLETEFLAGS = 1114
    OBSOLETEVERSION = 1115
    DIRINDEXES = 1116
    BASENAMES = 1117
    DIRNAMES = 1118
    OPTFLAGS = 1122
    PAYLOADFORMAT = 1124
    PAYLOADCOMPRESSOR = 1125
    PAYLOADFLAGS = 1126
    PLATFORM = 1132
    FILECOLORS = 1140
    FILECLASS = 1141
    CLASSDICT = 1142
    FILEDEPENDSX = 1143
    FILEDEPENDSN = 1144
    DEPENDSDICT = 1145
    LONGFILESIZES = 5008
    LONGSIZE = 5009
    FILEDIGESTALGO = 5011
    RECOMMENDNAME = 5046
    RECOMMENDVERSION = 5047
    RECOMMENDFLAGS = 5048
    SUGGESTNAME = 5049
    SUGGESTVERSION = 5050
    SUGGESTFLAGS = 5051
    ENCODING = 5062
    PAYLOADDIGEST = 5092
    PAYLOADDIGESTALGO = 5093
    PAYLOADDIGESTALT = 5097


class SigTag(enum.IntEnum):
    """Signature header tags (numbers overlap the main header's: a separate table)."""

    HEADERSIGNATURES = 62
    DSA = 267
    RSA = 268
    SHA1 = 269
    LONGSIZE = 270
    LONGARCHIVESIZE = 271
    SHA256 = 273
    SIZE = 1000
    PGP = 1002
    MD5 = 1004
    GPG = 1005
    PAYLOADSIZE = 1007
    RESERVEDSPACE = 1008


TAGS: dict[str, int] = {t.name: int(t) for t in Tag}
SIGTAGS: dict[str, int] = {t.name: int(t) for t in SigTag}

# Dependency sense flags (rpmds.h)
RPMSENSE_ANY = 0
RPMSENSE_LESS = 1 << 1
RPMSENSE_GREATER = 1 << 2
RPMSENSE_EQUAL = 1 << 3
RPMSENSE_INTERP = 1 << 8
RPMSENSE_SCRIPT_PRE = 1 << 9
RPMSENSE_SCRIPT_POST = 1 << 10
RPMSENSE_SCRIPT_PREUN = 1 << 11
RPMSENSE_SCRIPT_POSTUN = 1 << 12
RPMSENSE_RPMLIB = 1 << 24

# File flags / verify flags / digest algorithms
RPMFILE_NONE = 0
RPMVERIFY_ALL = 0xFFFFFFFF
PGPHASHALGO_SHA256 = 8

# ---------------------------------------------------------------------------
# 2. header codec
# ---------------------------------------------------------------------------

HEADER_MAGIC = b"\x8e\xad\xe8\x01\x00\x00\x00\x00"
_REGION_TRAILER = 16
# rpm's own limits (lib/header_internal.h): refuse anything larger before allocating.
MAX_TAGS = 0xFFFF
MAX_DATA = 0x0FFFFFFF
MAX_SIG_TAGS = 1000
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
        if offset < 0 or offset >= dl and not (offset == dl and count == 0):
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


# ---------------------------------------------------------------------------
# 4. lead + signature header
# ---------------------------------------------------------------------------

LEAD_MAGIC = b"\xed\xab\xee\xdb"
LEAD_SIZE = 96
RESERVED_SPACE = 4128   # room for a later in-place header signature (RSA/EdDSA packet)


def encode_lead(nevr: str) -> bytes:
    """The 96-byte legacy lead: v3.0, binary, archnum 1, osnum 1, signature type 5."""
    name = nevr.encode("utf-8")[:65]
    return (LEAD_MAGIC + bytes([3, 0]) + struct.pack(">HH", 0, 1)
            + name.ljust(66, b"\0") + struct.pack(">HH", 1, 5) + b"\0" * 16)


def _pad8(n: int) -> int:
    return -n % 8


def encode_signature(tags: dict[int, tuple[int, object]], area_size: int | None) -> bytes:
    """Signature header plus its padding to 8 bytes. With area_size, RESERVEDSPACE is
    sized so that the result is exactly area_size bytes (the signature sits between the
    lead and the main header, so its size can never change once written)."""
    tags = {t: v for t, v in tags.items() if t != SigTag.RESERVEDSPACE}
    if area_size is None:
        tags[SigTag.RESERVEDSPACE] = (TYPE_BIN, bytes(RESERVED_SPACE))
        blob = encode_header(tags, SigTag.HEADERSIGNATURES)
        return blob + bytes(_pad8(len(blob)))
    bare = encode_header(tags, SigTag.HEADERSIGNATURES)
    if len(bare) + _pad8(len(bare)) == area_size:
        return bare + bytes(_pad8(len(bare)))
    # Adding RESERVEDSPACE costs one index entry plus its bytes; alignment of later
    # entries can shift by a few bytes, so search a small window around the estimate.
    estimate = area_size - len(bare) - 16
    for reserved in range(estimate, max(estimate - 24, 0), -1):
        tags[SigTag.RESERVEDSPACE] = (TYPE_BIN, bytes(reserved))
        blob = encode_header(tags, SigTag.HEADERSIGNATURES)
        if len(blob) + _pad8(len(blob)) == area_size:
            return blob + bytes(_pad8(len(blob)))
    raise ValueError(f"signature tags do not fit the {area_size}-byte signature area")


# ---------------------------------------------------------------------------
# 5. reader
# ---------------------------------------------------------------------------


@dataclass
class RpmInfo:
    """What read_rpm finds. header_start/header_end are the main header's byte range
    (createrepo's rpm:header-range); the payload runs from payload_offset to the end."""

    path: str
    signature: dict[int, object]
    header: dict[int, object]
    header_start: int
    header_end: int
    payload_offset: int
    size: int
    signature_types: dict[int, int] = field(default_factory=dict)
    header_types: dict[int, int] = field(default_factory=dict)

    def first(self, tag: int, default=None):
        """A tag's scalar value: the string itself, or an array's first element."""
        value = self.header.get(tag, default)
        if isinstance(value, list):
            return value[0] if value else default
        return value

    @property
    def name(self) -> str:
        return self.header[Tag.NAME]

    @property
    def evr(self) -> str:
        epoch = self.first(Tag.EPOCH)
        base = f"{self.header[Tag.VERSION]}-{self.header[Tag.RELEASE]}"
        return f"{epoch}:{base}" if epoch else base


def _read_exact(f, n: int, where: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise RocpkgInputError(where, f"truncated: wanted {n} bytes, got {len(data)}")
    return data


def _read_one_header(f, file_size: int, region_tag: int, max_tags: int, max_data: int,
                     where: str) -> DecodedHeader:
    start = f.tell()
    intro = _read_exact(f, 16, where)
    try:
        il, dl = header_sizes(intro, max_tags, max_data)
    except ValueError as exc:
        raise RocpkgInputError(where, str(exc)) from None
    rest = il * 16 + dl
    if start + 16 + rest > file_size:
        raise RocpkgInputError(where, f"header of {16 + rest} bytes runs past end of file")
    blob = intro + _read_exact(f, rest, where)
    try:
        return decode_header(blob, region_tag, max_tags, max_data)
    except ValueError as exc:
        raise RocpkgInputError(where, str(exc)) from None


def read_rpm(path: str | os.PathLike) -> RpmInfo:
    """Read the lead, signature and main header of an .rpm (not the payload).
    A corrupt or truncated file raises RocpkgInputError, never allocates more than the
    file holds."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        lead = _read_exact(f, LEAD_SIZE, path)
        if lead[:4] != LEAD_MAGIC:
            raise RocpkgInputError(path, "not an RPM file (bad lead magic)")
        sig = _read_one_header(f, file_size, SigTag.HEADERSIGNATURES, MAX_SIG_TAGS,
                               MAX_SIG_DATA, f"{path}: signature header")
        header_start = LEAD_SIZE + sig.length + _pad8(sig.length)
        if header_start > file_size:
            raise RocpkgInputError(path, "truncated after signature header")
        f.seek(header_start)
        hdr = _read_one_header(f, file_size, Tag.HEADERIMMUTABLE, MAX_TAGS, MAX_DATA,
                               f"{path}: main header")
        header_end = header_start + hdr.length
    return RpmInfo(path=path, signature=sig.values, header=hdr.values,
                   header_start=header_start, header_end=header_end,
                   payload_offset=header_end, size=file_size,
                   signature_types=sig.types, header_types=hdr.types)


def replace_signature(path: str | os.PathLike, extra_tags: dict[int, tuple[int, object]]) -> None:
    """Add or replace signature tags (e.g. RSAHEADER 268 with an OpenPGP signature
    packet) in place, shrinking RESERVEDSPACE so the file keeps its size and the main
    header and payload stay byte-identical (their digests stay valid)."""
    info = read_rpm(path)
    tags = {t: (info.signature_types[t], v) for t, v in info.signature.items()}
    tags.update(extra_tags)
    area = info.header_start - LEAD_SIZE
    try:
        blob = encode_signature(tags, area)
    except ValueError as exc:
        raise RocpkgInputError(os.fspath(path), str(exc)) from None
    with open(path, "r+b") as f:
        f.seek(LEAD_SIZE)
        f.write(blob)
