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

import calendar
import enum
import hashlib
import lzma
import os
import struct
import time
import gzip
import zlib
from dataclasses import dataclass, field

import zstandard

from rocpkg.errors import RocpkgInputError
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, BuiltPackage, FileEntry, PackageSpec
from rocpkg.render import render_spec
from rocpkg.streams import AtomicOutput, HashingWriter, copy_stream, hash_file, read_exact

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
    SOURCEPACKAGE = 1106
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
    SUPPLEMENTNAME = 5052
    SUPPLEMENTVERSION = 5053
    SUPPLEMENTFLAGS = 5054
    ENHANCENAME = 5055
    ENHANCEVERSION = 5056
    ENHANCEFLAGS = 5057
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
RPMSENSE_POSTTRANS = 1 << 5
RPMSENSE_PREREQ = 1 << 6
RPMSENSE_PRETRANS = 1 << 7
RPMSENSE_INTERP = 1 << 8
RPMSENSE_SCRIPT_PRE = 1 << 9
RPMSENSE_SCRIPT_POST = 1 << 10
RPMSENSE_SCRIPT_PREUN = 1 << 11
RPMSENSE_SCRIPT_POSTUN = 1 << 12
RPMSENSE_RPMLIB = 1 << 24

# File flags / verify flags / digest algorithms
RPMFILE_NONE = 0
RPMFILE_CONFIG = 1 << 0
RPMFILE_DOC = 1 << 1
RPMFILE_GHOST = 1 << 6
RPMFILE_LICENSE = 1 << 7
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


# ---------------------------------------------------------------------------
# 3. cpio
# ---------------------------------------------------------------------------

CPIO_NEWC_MAGIC = b"070701"
CPIO_STRIPPED_MAGIC = b"07070X"
CPIO_TRAILER = b"TRAILER!!!\0"
CPIO_FILESIZE_MAX = 0xFFFFFFFF


class CpioWriter:
    """rpm's cpio payload. newc entries carry "./path" and stat fields; in the stripped
    form (07070X, rpm >= 4.12, used whenever the header has LONGFILESIZES) an entry is
    just the file's index in the header, which holds all the metadata. Both forms pad
    each header and each file's data to 4 bytes and end with a newc TRAILER!!!."""

    def __init__(self, sink, stripped: bool):
        self.sink = sink
        self.stripped = stripped
        self.offset = 0
        self.data_left = 0

    def _write(self, data: bytes) -> None:
        self.sink.write(data)
        self.offset += len(data)

    def _pad(self) -> None:
        if self.offset % 4:
            self._write(b"\0" * (-self.offset % 4))

    def add(self, index: int, path: str, mode: int, size: int, mtime: int, inode: int) -> None:
        """Start entry `index` (position in the header's file list); exactly `size`
        data bytes must follow through write_data()."""
        if self.data_left:
            raise ValueError(f"previous cpio entry is {self.data_left} bytes short")
        self._pad()
        if self.stripped:
            self._write(CPIO_STRIPPED_MAGIC + b"%08x" % index)
        else:
            if size >= CPIO_FILESIZE_MAX:
                raise ValueError(f"{path}: too large for a newc cpio entry")
            name = b"." + path.encode("utf-8", "surrogateescape") + b"\0"
            fields = (inode, mode, 0, 0, 1, mtime, size, 0, 0, 0, 0, len(name), 0)
            self._write(CPIO_NEWC_MAGIC + b"".join(b"%08x" % v for v in fields) + name)
        self._pad()
        self.data_left = size

    def write_data(self, data) -> int:
        if len(data) > self.data_left:
            raise ValueError("cpio entry data longer than declared")
        self.sink.write(data)
        self.offset += len(data)
        self.data_left -= len(data)
        return len(data)

    # file-like face for streams.copy_stream
    write = write_data

    def finish(self) -> None:
        if self.data_left:
            raise ValueError(f"last cpio entry is {self.data_left} bytes short")
        self._pad()
        fields = (0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len(CPIO_TRAILER), 0)
        self._write(CPIO_NEWC_MAGIC + b"".join(b"%08x" % v for v in fields) + CPIO_TRAILER)
        self._pad()


# ---------------------------------------------------------------------------
# 4. lead + signature header
# ---------------------------------------------------------------------------

LEAD_MAGIC = b"\xed\xab\xee\xdb"
LEAD_SIZE = 96
RESERVED_SPACE = 4128   # room for a later in-place header signature (RSA/EdDSA packet)


# -- cpio reader: the payload as rpm2cpio would stream it ----------------------------------


def open_payload_stream(fh, compressor: str):
    """The decompressed cpio of an rpm whose file object sits at the payload offset."""
    if compressor == "zstd":
        return zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
    if compressor in ("xz", "lzma"):
        return lzma.LZMAFile(fh)
    if compressor == "gzip":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    raise RocpkgInputError(fh.name, f"unsupported payload compressor {compressor!r}")


def skip_cpio_pad(stream, consumed: int) -> None:
    """cpio pads every header and every file's data to 4 bytes."""
    if consumed % 4:
        read_exact(stream, 4 - consumed % 4)


def iter_cpio(stream, by_index: dict[int, FileEntry]):
    """(header index or None, install path, data size) per cpio entry, stream positioned at
    the entry's data. Both of rpm's forms: newc ("./path" and stat fields) and stripped
    (07070X + the file's index in the header, which holds everything else)."""
    paths = {fe.path: i for i, fe in by_index.items()}
    while True:
        magic = read_exact(stream, 6)
        if magic == b"07070X":
            index = int(read_exact(stream, 8), 16)
            skip_cpio_pad(stream, 14)
            fe = by_index.get(index)
            if fe is None:
                raise ValueError(f"stripped cpio entry {index} is not in the header's file list")
            size = fe.size if fe.type == FILE else len(fe.link_target.encode()) if fe.type == SYMLINK else 0
            yield index, fe.path, size
        elif magic == b"070701":
            fields = read_exact(stream, 104)
            size = int(fields[48:56], 16)
            namesize = int(fields[88:96], 16)
            name = read_exact(stream, namesize).rstrip(b"\0").decode("utf-8", "surrogateescape")
            skip_cpio_pad(stream, 110 + namesize)
            if name == "TRAILER!!!":
                return
            path = "/" + name.removeprefix(".").strip("/")
            yield paths.get(path), path, size
        else:
            raise ValueError(f"bad cpio magic {magic!r}")


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


# ---------------------------------------------------------------------------
# 6. writer: rendered spec text -> header tags; files -> cpio
# ---------------------------------------------------------------------------

@dataclass
class ParsedSpec:
    """What the writer takes from the rendered spec (templates/rpm/spec.j2)."""

    preamble: dict[str, str]
    relations: dict[str, list[tuple[str, int, str]]]    # Requires/... -> (name, flags, version)
    description: str
    scripts: dict[str, tuple[str, str]]                 # "post" -> (program, body)
    changelog: list[tuple[int, str, str]]               # (time, name line, text)


SCRIPT_SECTIONS = ("pre", "post", "preun", "postun")
_SECTIONS = ("description", "files", "changelog") + SCRIPT_SECTIONS
_RELATION_KEYS = ("requires", "recommends", "suggests", "provides", "conflicts", "obsoletes")
_SCRIPT_SENSE = {"pre": RPMSENSE_SCRIPT_PRE, "post": RPMSENSE_SCRIPT_POST,
                 "preun": RPMSENSE_SCRIPT_PREUN, "postun": RPMSENSE_SCRIPT_POSTUN}
_OPERATORS = {"<": RPMSENSE_LESS, ">": RPMSENSE_GREATER, "=": RPMSENSE_EQUAL,
              "==": RPMSENSE_EQUAL, "<=": RPMSENSE_LESS | RPMSENSE_EQUAL,
              ">=": RPMSENSE_GREATER | RPMSENSE_EQUAL}


def parse_relation(text: str) -> tuple[str, int, str]:
    """`name`, `name >= 1.0`, `name = 7.1.0-1`, rich `(a or b)` -> (name, flags, version).
    A rich dependency stays one name string with flags 0, as rpmbuild stores it."""
    text = text.strip()
    if not text:
        raise ValueError("empty relation")
    if text.startswith("("):
        if text.count("(") != text.count(")") or not text.endswith(")"):
            raise ValueError(f"unbalanced rich dependency: {text}")
        return text, RPMSENSE_ANY, ""
    parts = text.split()
    if len(parts) == 1:
        return parts[0], RPMSENSE_ANY, ""
    if len(parts) == 3 and parts[1] in _OPERATORS:
        return parts[0], _OPERATORS[parts[1]], parts[2]
    raise ValueError(f"cannot parse relation: {text}")


def _split_relations(value: str) -> list[str]:
    """Split a relation line on commas outside parentheses."""
    items, depth, current = [], 0, ""
    for ch in value:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def _changelog_time(header_line: str) -> int:
    """`* Thu Jan 01 1970 ...` -> noon UTC of that day (rpm keeps day resolution)."""
    fields = header_line.lstrip("*").split()
    stamp = time.strptime(" ".join(fields[:4]), "%a %b %d %Y")
    return calendar.timegm(stamp) + 12 * 3600


def parse_spec(text: str) -> ParsedSpec:
    """Parse the subset of spec syntax that spec.j2 renders: `Key: value` preamble,
    %description, %pre/%post/%preun/%postun (optionally `-p <prog>`), %files (ignored:
    the file list comes from the plan) and %changelog."""
    preamble: dict[str, str] = {}
    relations: dict[str, list] = {k: [] for k in _RELATION_KEYS}
    sections: dict[str, list[str]] = {}
    programs: dict[str, str] = {}
    current = None
    for lineno, line in enumerate(text.splitlines(), 1):
        word = line.split()[0] if line.split() else ""
        if word.startswith("%") and word[1:] in _SECTIONS:
            current = word[1:]
            if current in sections:
                raise ValueError(f"spec line {lineno}: section %{current} repeated")
            sections[current] = []
            args = line.split()[1:]
            programs[current] = args[1] if args[:1] == ["-p"] and len(args) > 1 else "/bin/sh"
            continue
        if current is not None:
            sections[current].append(line)
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"spec line {lineno}: expected `Key: value`: {line!r}")
        key, value = key.strip(), value.strip()
        base, _, qualifier = key.partition("(")
        if base.lower() in _RELATION_KEYS:
            sense = _SCRIPT_SENSE.get(qualifier.rstrip(")").strip(), 0) if qualifier else 0
            for item in _split_relations(value):
                name, flags, version = parse_relation(item)
                relations[base.lower()].append((name, flags | sense, version))
        else:
            preamble[key.lower()] = value
    scripts = {}
    for name in SCRIPT_SECTIONS:
        if name in sections:
            body = "\n".join(sections[name]).strip("\n")
            if body.strip() or programs[name] != "/bin/sh":
                scripts[name] = (programs[name], body + "\n" if body else "")
    changelog = []
    entry = None
    for line in sections.get("changelog", []):
        if line.startswith("*"):
            entry = [_changelog_time(line), " ".join(line.lstrip("*").split()[4:]), []]
            changelog.append(entry)
        elif entry is not None and line.strip():
            entry[2].append(line)
    description = "\n".join(sections.get("description", [])).strip("\n")
    return ParsedSpec(preamble, relations, description, scripts,
                      [(t, n, "\n".join(body)) for t, n, body in changelog])


# Directories that belong to the base system (filesystem package): never owned here.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt",
    "/root", "/run", "/sbin", "/srv", "/tmp", "/usr", "/usr/bin", "/usr/include",
    "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/sbin", "/usr/share",
    "/usr/share/doc", "/usr/share/man", "/usr/src", "/var", "/etc/ld.so.conf.d",
})
BUILDHOST = "localhost"
RPMVERSION = "4.18.0"       # the rpm feature level this writer follows
_LARGE = 0xFFFFFFFF         # UINT32_MAX: from here on, 64-bit size tags and stripped cpio
_S_IFDIR, _S_IFREG, _S_IFLNK = 0o040000, 0o100000, 0o120000


def _rpmlib(feature: str, version: str) -> tuple[str, int, str]:
    return (f"rpmlib({feature})", RPMSENSE_RPMLIB | RPMSENSE_LESS | RPMSENSE_EQUAL, version)


def _relation_tags(relations, name_tag, flags_tag, version_tag) -> dict:
    if not relations:
        return {}
    return {name_tag: (TYPE_STRING_ARRAY, [r[0] for r in relations]),
            flags_tag: (TYPE_INT32, [r[1] for r in relations]),
            version_tag: (TYPE_STRING_ARRAY, [r[2] for r in relations])}


def _sorted_unique(relations) -> list[tuple[str, int, str]]:
    """rpm keeps dependency sets sorted and without duplicates."""
    return sorted(set(relations), key=lambda r: (r[0].encode(), r[2], r[1]))


def checked_files(spec: PackageSpec) -> list[FileEntry]:
    """The spec's files sorted as rpm sorts them (bytewise by path), after refusing what
    rpm would mis-install: relative or unnormalised paths, duplicates, system dirs."""
    problems = []
    seen = set()
    for entry in spec.files:
        where = f"{spec.name}: {entry.path}"
        parts = entry.path.split("/")
        if not entry.path.startswith("/") or entry.path.endswith("/") or \
                any(p in ("", ".", "..") for p in parts[1:]):
            problems.append((where, "path must be absolute and normalised"))
        elif entry.path in seen:
            problems.append((where, "listed twice"))
        elif entry.type == DIR and entry.path in SYSTEM_DIRS:
            problems.append((where, "system directory must not be owned by a package"))
        elif entry.type not in (FILE, DIR, SYMLINK):
            problems.append((where, f"unknown file type {entry.type!r}"))
        elif entry.type == SYMLINK and not entry.link_target:
            problems.append((where, "symlink without a target"))
        elif entry.type == FILE and not entry.source:
            problems.append((where, "file without a source"))
        seen.add(entry.path)
    if problems:
        raise RocpkgInputError(problems)
    return sorted(spec.files, key=lambda e: e.path.encode("utf-8", "surrogateescape"))


def check_sources(spec: PackageSpec, files: list[FileEntry]) -> None:
    """Before a byte is written: every regular file's source is readable and has its planned
    size; every problem is reported at once. (Its SHA-256 is taken while it streams into the
    payload, and the header rewritten afterwards: one read of each source.)"""
    problems = []
    for entry in files:
        if entry.type != FILE:
            continue
        try:
            size = os.stat(entry.source).st_size
        except OSError as exc:
            problems.append((f"{spec.name}: {entry.path}", f"cannot read {entry.source}: {exc.strerror}"))
            continue
        if not os.access(entry.source, os.R_OK):
            problems.append((f"{spec.name}: {entry.path}", f"cannot read {entry.source}: permission denied"))
        elif size != entry.size:
            problems.append((f"{spec.name}: {entry.path}", f"{entry.source} has {size} bytes, planned {entry.size}"))
    if problems:
        raise RocpkgInputError(problems)


def _entry_size(entry: FileEntry) -> int:
    if entry.type == FILE:
        return entry.size
    if entry.type == SYMLINK:
        return len(entry.link_target.encode("utf-8", "surrogateescape"))
    return 0


def _entry_mode(entry: FileEntry) -> int:
    kind = _S_IFREG if entry.type == FILE else _S_IFDIR if entry.type == DIR else _S_IFLNK
    perms = 0o777 if kind == _S_IFLNK else entry.mode & 0o7777
    return kind | perms


def file_tags(files: list[FileEntry], digests: dict[str, str], mtime: int, large: bool) -> dict:
    """DIRNAMES/BASENAMES/DIRINDEXES and the per-file arrays rpm, dnf and rpmlint read."""
    if not files:
        return {}
    dirnames: list[str] = []
    dir_index: dict[str, int] = {}
    basenames, dirindexes = [], []
    for entry in files:
        parent, _, base = entry.path.rpartition("/")
        parent += "/"
        if parent not in dir_index:
            dir_index[parent] = len(dirnames)
            dirnames.append(parent)
        basenames.append(base)
        dirindexes.append(dir_index[parent])
    n = len(files)
    classes = ["", "directory"]
    sizes = [_entry_size(e) for e in files]
    tags = {
        Tag.FILEMODES: (TYPE_INT16, [_entry_mode(e) for e in files]),
        Tag.FILERDEVS: (TYPE_INT16, [0] * n),
        Tag.FILEMTIMES: (TYPE_INT32, [mtime] * n),
        Tag.FILEDIGESTS: (TYPE_STRING_ARRAY, [digests.get(e.path, "") if e.type == FILE else ""
                                              for e in files]),
        Tag.FILELINKTOS: (TYPE_STRING_ARRAY, [e.link_target if e.type == SYMLINK else ""
                                              for e in files]),
        Tag.FILEFLAGS: (TYPE_INT32, [RPMFILE_NONE] * n),
        Tag.FILEUSERNAME: (TYPE_STRING_ARRAY, ["root"] * n),
        Tag.FILEGROUPNAME: (TYPE_STRING_ARRAY, ["root"] * n),
        Tag.FILEVERIFYFLAGS: (TYPE_INT32, [RPMVERIFY_ALL] * n),
        Tag.FILEDEVICES: (TYPE_INT32, [1] * n),
        Tag.FILEINODES: (TYPE_INT32, list(range(1, n + 1))),
        Tag.FILELANGS: (TYPE_STRING_ARRAY, [""] * n),
        Tag.FILECOLORS: (TYPE_INT32, [0] * n),
        Tag.FILECLASS: (TYPE_INT32, [1 if e.type == DIR else 0 for e in files]),
        Tag.CLASSDICT: (TYPE_STRING_ARRAY, classes),
        Tag.DIRINDEXES: (TYPE_INT32, dirindexes),
        Tag.BASENAMES: (TYPE_STRING_ARRAY, basenames),
        Tag.DIRNAMES: (TYPE_STRING_ARRAY, dirnames),
        Tag.FILEDIGESTALGO: (TYPE_INT32, [PGPHASHALGO_SHA256]),
    }
    if large:
        tags[Tag.LONGFILESIZES] = (TYPE_INT64, sizes)
    else:
        tags[Tag.FILESIZES] = (TYPE_INT32, sizes)
    return tags


def _i18n(text: str) -> tuple[int, list[str]]:
    return (TYPE_I18NSTRING, [text])


def build_header(spec: PackageSpec, parsed: ParsedSpec, options: BuildOptions,
                 files: list[FileEntry], digests: dict[str, str],
                 payload_digest: str, payload_digest_alt: str) -> dict:
    """Every main-header tag, from the parsed spec text (metadata) and the plan (files).
    Digests are fixed-length hex, so a placeholder header has the final header's size."""
    pre = parsed.preamble
    for key in ("name", "version", "release", "summary", "license"):
        if not pre.get(key):
            raise RocpkgInputError(spec.name, f"rendered spec has no {key.capitalize()}")
    name, version, release = pre["name"], pre["version"], pre["release"]
    if not pre.get("epoch", "0").isdigit():
        raise RocpkgInputError(spec.name, f"rendered spec has a bad Epoch: {pre['epoch']!r}")
    epoch = int(pre.get("epoch", "0"))
    evr = f"{epoch}:{version}-{release}" if epoch else f"{version}-{release}"
    sizes = [_entry_size(e) for e in files]
    large = any(s >= _LARGE for s in sizes)
    total = sum(sizes)

    provides = list(parsed.relations["provides"]) + [(name, RPMSENSE_EQUAL, evr)]
    if spec.arch == "x86_64":
        provides.append((f"{name}(x86-64)", RPMSENSE_EQUAL, evr))
    requires = list(parsed.relations["requires"])
    for script, (program, _body) in parsed.scripts.items():
        if program.startswith("/"):
            requires.append((program, RPMSENSE_INTERP | _SCRIPT_SENSE[script], ""))
    requires += [_rpmlib("CompressedFileNames", "3.0.4-1"), _rpmlib("FileDigests", "4.6.0-1"),
                 _rpmlib("PayloadFilesHavePrefix", "4.0-1")]
    if options.compression == "zstd":
        requires.append(_rpmlib("PayloadIsZstd", "5.4.18-1"))
    elif options.compression == "xz":
        requires.append(_rpmlib("PayloadIsXz", "5.2-1"))
    all_relations = [r for key in _RELATION_KEYS for r in parsed.relations[key]]
    if any(r[0].startswith("(") for r in all_relations):
        requires.append(_rpmlib("RichDependencies", "4.12.0-1"))
    if large:
        requires.append(_rpmlib("LargeFiles", "4.12.0-1"))

    tags = {
        Tag.HEADERI18NTABLE: (TYPE_STRING_ARRAY, ["C"]),
        Tag.NAME: (TYPE_STRING, name),
        Tag.VERSION: (TYPE_STRING, version),
        Tag.RELEASE: (TYPE_STRING, release),
        Tag.SUMMARY: _i18n(pre["summary"]),
        Tag.DESCRIPTION: _i18n(parsed.description or pre["summary"]),
        Tag.BUILDTIME: (TYPE_INT32, [options.source_date_epoch]),
        Tag.BUILDHOST: (TYPE_STRING, BUILDHOST),
        Tag.LICENSE: (TYPE_STRING, pre["license"]),
        Tag.GROUP: _i18n(pre.get("group") or "Unspecified"),
        Tag.OS: (TYPE_STRING, "linux"),
        Tag.ARCH: (TYPE_STRING, spec.arch),
        Tag.SOURCERPM: (TYPE_STRING, f"{name}-{version}-{release}.src.rpm"),
        Tag.RPMVERSION: (TYPE_STRING, RPMVERSION),
        Tag.PAYLOADFORMAT: (TYPE_STRING, "cpio"),
        Tag.PAYLOADCOMPRESSOR: (TYPE_STRING, options.compression),
        Tag.PAYLOADFLAGS: (TYPE_STRING, str(options.compression_level)),
        Tag.PLATFORM: (TYPE_STRING, f"{spec.arch}-pc-linux-gnu"),
        Tag.ENCODING: (TYPE_STRING, "utf-8"),
        Tag.PAYLOADDIGEST: (TYPE_STRING_ARRAY, [payload_digest]),
        Tag.PAYLOADDIGESTALGO: (TYPE_INT32, [PGPHASHALGO_SHA256]),
        Tag.PAYLOADDIGESTALT: (TYPE_STRING_ARRAY, [payload_digest_alt]),
    }
    if epoch:
        tags[Tag.EPOCH] = (TYPE_INT32, [epoch])
    if total >= _LARGE:
        tags[Tag.LONGSIZE] = (TYPE_INT64, [total])
    else:
        tags[Tag.SIZE] = (TYPE_INT32, [total])
    for key, tag in (("vendor", Tag.VENDOR), ("url", Tag.URL), ("packager", Tag.PACKAGER)):
        if pre.get(key):
            tags[tag] = (TYPE_STRING, pre[key])
    script_tags = {"pre": (Tag.PREIN, Tag.PREINPROG), "post": (Tag.POSTIN, Tag.POSTINPROG),
                   "preun": (Tag.PREUN, Tag.PREUNPROG), "postun": (Tag.POSTUN, Tag.POSTUNPROG)}
    for script, (program, body) in parsed.scripts.items():
        body_tag, prog_tag = script_tags[script]
        if body:
            tags[body_tag] = (TYPE_STRING, body)
        tags[prog_tag] = (TYPE_STRING, program)
    if parsed.changelog:
        tags[Tag.CHANGELOGTIME] = (TYPE_INT32, [c[0] for c in parsed.changelog])
        tags[Tag.CHANGELOGNAME] = (TYPE_STRING_ARRAY, [c[1] for c in parsed.changelog])
        tags[Tag.CHANGELOGTEXT] = (TYPE_STRING_ARRAY, [c[2] for c in parsed.changelog])
    tags.update(_relation_tags(_sorted_unique(provides), Tag.PROVIDENAME, Tag.PROVIDEFLAGS,
                               Tag.PROVIDEVERSION))
    tags.update(_relation_tags(_sorted_unique(requires), Tag.REQUIRENAME, Tag.REQUIREFLAGS,
                               Tag.REQUIREVERSION))
    for key, (n_tag, f_tag, v_tag) in {
        "conflicts": (Tag.CONFLICTNAME, Tag.CONFLICTFLAGS, Tag.CONFLICTVERSION),
        "obsoletes": (Tag.OBSOLETENAME, Tag.OBSOLETEFLAGS, Tag.OBSOLETEVERSION),
        "recommends": (Tag.RECOMMENDNAME, Tag.RECOMMENDFLAGS, Tag.RECOMMENDVERSION),
        "suggests": (Tag.SUGGESTNAME, Tag.SUGGESTFLAGS, Tag.SUGGESTVERSION),
    }.items():
        tags.update(_relation_tags(_sorted_unique(parsed.relations[key]), n_tag, f_tag, v_tag))
    tags.update(file_tags(files, digests, options.source_date_epoch, large))
    return tags


# zstd workers each hold a few jobs: 4 MiB jobs and at most 8 workers bound the writer's
# memory on any machine. Output depends on the job size, never on the worker count.
ZSTD_JOB_SIZE = 4 << 20
ZSTD_MAX_THREADS = 8


class _Compressor:
    """One face (write/finish) over zstd, xz and gzip streams into a sink."""

    def __init__(self, sink, options):
        self.sink = sink
        self.kind = options.compression
        level = options.compression_level
        if self.kind == "zstd":
            threads = min(options.threads or os.cpu_count() or 1, ZSTD_MAX_THREADS)
            parameters = zstandard.ZstdCompressionParameters.from_level(
                max(1, min(level, 19)), threads=threads, job_size=ZSTD_JOB_SIZE)
            self.stream = zstandard.ZstdCompressor(compression_params=parameters).stream_writer(
                sink, closefd=False, write_return_read=True)
        elif self.kind == "xz":
            self.obj = lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32,
                                           preset=level)
        elif self.kind == "gzip":
            self.obj = zlib.compressobj(level, zlib.DEFLATED, 31)
        else:
            raise RocpkgInputError("compression", f"unsupported: {self.kind!r} (zstd, xz, gzip)")

    def write(self, data) -> int:
        if self.kind == "zstd":
            self.stream.write(data)
        else:
            out = self.obj.compress(data)
            if out:
                self.sink.write(out)
        return len(data)

    def finish(self) -> None:
        if self.kind == "zstd":
            self.stream.flush(zstandard.FLUSH_FRAME)
        else:
            self.sink.write(self.obj.flush())


def _stream_payload(spec, files, payload_sink, large: bool, mtime: int) -> dict[str, str]:
    """The cpio archive of every entry, file bytes streamed from the sources; returns the
    SHA-256 of each regular file, taken on the way (the header's FILEDIGESTS)."""
    digests = {}
    cpio = CpioWriter(payload_sink, stripped=large)
    for index, entry in enumerate(files):
        size = _entry_size(entry)
        cpio.add(index, entry.path, _entry_mode(entry), size, mtime, index + 1)
        if entry.type == SYMLINK:
            cpio.write_data(entry.link_target.encode("utf-8", "surrogateescape"))
        elif entry.type == FILE:
            where = f"{spec.name}: {entry.path}"
            try:
                with open(entry.source, "rb") as src:
                    hashed = HashingWriter(cpio, ("sha256",))
                    copy_stream(src, hashed, size)
                    digests[entry.path] = hashed.hexdigest()
                    if src.read(1):
                        raise RocpkgInputError(where, f"{entry.source} grew while being packed")
            except EOFError:
                raise RocpkgInputError(where, f"{entry.source} shrank while being packed") from None
            except OSError as exc:
                raise RocpkgInputError(where, f"{entry.source} vanished or unreadable: "
                                       f"{exc.strerror}") from None
    cpio.finish()
    return digests


def _signature_tags(header: bytes, md5: bytes, size: int, payload_size: int) -> dict:
    tags = {SigTag.SHA1: (TYPE_STRING, hashlib.sha1(header).hexdigest()),
            SigTag.SHA256: (TYPE_STRING, hashlib.sha256(header).hexdigest()),
            SigTag.MD5: (TYPE_BIN, md5)}
    if size >= _LARGE:
        tags[SigTag.LONGSIZE] = (TYPE_INT64, [size])
    else:
        tags[SigTag.SIZE] = (TYPE_INT32, [size])
    if payload_size >= _LARGE:
        tags[SigTag.LONGARCHIVESIZE] = (TYPE_INT64, [payload_size])
    else:
        tags[SigTag.PAYLOADSIZE] = (TYPE_INT32, [payload_size])
    return tags


def write_rpm(spec: PackageSpec, out_dir: str, options: BuildOptions) -> BuiltPackage:
    """Write out_dir/<spec.filename>, streaming: (1) check the sources; (2) lead,
    placeholder signature, placeholder header (every digest zeros: digests are fixed-length
    hex, so the header's length does not depend on them), then the compressed cpio while
    hashing each file and both streams; (3) rewrite the header with the real file and
    payload digests (same length); (4) compute the signature (reading the payload back
    for MD5) and rewrite it in its fixed-size slot. Each source is read once. Written
    through AtomicOutput: a failure leaves no partial file."""
    if spec.format != "rpm":
        raise RocpkgInputError(spec.name, f"not an rpm spec (format {spec.format!r})")
    try:
        spec_text = render_spec(spec, options)
        parsed = parse_spec(spec_text)
    except ValueError as exc:
        raise RocpkgInputError(f"{spec.name}: spec", str(exc)) from None
    files = checked_files(spec)
    check_sources(spec, files)
    large = any(_entry_size(e) >= _LARGE for e in files)
    placeholder = "0" * 64
    placeholders = {e.path: placeholder for e in files if e.type == FILE}
    header_tags = build_header(spec, parsed, options, files, placeholders, placeholder, placeholder)
    header = encode_header(header_tags, Tag.HEADERIMMUTABLE)
    # The largest signature this package can need fixes the size of its slot.
    sig_area = len(encode_signature(_signature_tags(header, bytes(16), _LARGE + 1, _LARGE + 1),
                                    None))
    nevr = f"{parsed.preamble['name']}-{spec.evr}"
    path = os.path.join(out_dir, spec.filename)
    with AtomicOutput(path, "w+b") as out:
        out.write(encode_lead(nevr))
        out.write(bytes(sig_area))
        header_start = out.tell()
        out.write(header)
        payload_start = out.tell()
        compressed = HashingWriter(out, ("sha256",))
        compressor = _Compressor(compressed, options)
        uncompressed = HashingWriter(compressor, ("sha256",))
        digests = _stream_payload(spec, files, uncompressed, large, options.source_date_epoch)
        compressor.finish()
        header_tags = build_header(spec, parsed, options, files, digests,
                                   compressed.hexdigest(), uncompressed.hexdigest())
        final_header = encode_header(header_tags, Tag.HEADERIMMUTABLE)
        if len(final_header) != len(header):
            raise AssertionError("rpm header changed length when digests were filled in")
        out.seek(header_start)
        out.write(final_header)
        md5 = hashlib.md5(final_header)
        out.seek(payload_start)
        while chunk := out.read(1 << 20):
            md5.update(chunk)
        sig = encode_signature(_signature_tags(final_header, md5.digest(),
                                               len(final_header) + compressed.count,
                                               uncompressed.count), sig_area)
        if len(sig) != sig_area:
            raise AssertionError("rpm signature changed length")
        out.seek(LEAD_SIZE)
        out.write(sig)
        out.flush()
    whole = hash_file(path)
    return BuiltPackage(spec=spec, path=path, size=whole.count, sha256=whole.hexdigest(),
                        installed_size=sum(_entry_size(e) for e in files), metadata=spec_text)
