"""Reading an .rpm: lead, signature header and main header (never more than the file
holds), the payload as rpm2cpio would stream it, and the in-place signature rewrite."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from rocpkg.formats.compression import open_decompressor
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.rpm.header import MAX_DATA, MAX_SIG_DATA, MAX_SIG_TAGS, MAX_TAGS, DecodedHeader, decode_header, header_sizes
from rocpkg.formats.rpm.signature import LEAD_MAGIC, LEAD_SIZE, encode_signature, pad8
from rocpkg.formats.rpm.tags import SigTag, Tag


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
        raise RocpkgInputError((where, f"truncated: wanted {n} bytes, got {len(data)}"))
    return data


def _read_one_header(f, file_size: int, region_tag: int, max_tags: int, max_data: int,
                     where: str) -> DecodedHeader:
    start = f.tell()
    intro = _read_exact(f, 16, where)
    try:
        il, dl = header_sizes(intro, max_tags, max_data)
    except ValueError as exc:
        raise RocpkgInputError((where, str(exc))) from None
    rest = il * 16 + dl
    if start + 16 + rest > file_size:
        raise RocpkgInputError((where, f"header of {16 + rest} bytes runs past end of file"))
    blob = intro + _read_exact(f, rest, where)
    try:
        return decode_header(blob, region_tag, max_tags, max_data)
    except ValueError as exc:
        raise RocpkgInputError((where, str(exc))) from None


def read_rpm(path: str | os.PathLike) -> RpmInfo:
    """Read the lead, signature and main header of an .rpm (not the payload).
    A corrupt or truncated file raises RocpkgInputError, never allocates more than the
    file holds."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        lead = _read_exact(f, LEAD_SIZE, path)
        if lead[:4] != LEAD_MAGIC:
            raise RocpkgInputError((path, "not an RPM file (bad lead magic)"))
        sig = _read_one_header(f, file_size, SigTag.HEADERSIGNATURES, MAX_SIG_TAGS,
                               MAX_SIG_DATA, f"{path}: signature header")
        header_start = LEAD_SIZE + sig.length + pad8(sig.length)
        if header_start > file_size:
            raise RocpkgInputError((path, "truncated after signature header"))
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
    blob = signature_area(read_rpm(path), extra_tags)
    with open(path, "r+b") as f:
        f.seek(LEAD_SIZE)
        f.write(blob)


def signature_area(info: RpmInfo, extra_tags: dict[int, tuple[int, object]]) -> bytes:
    """The bytes from the lead's end to the main header's start with extra_tags added to
    the signature header of the rpm read as info: the same length as before."""
    tags = {t: (info.signature_types[t], v) for t, v in info.signature.items()}
    tags.update(extra_tags)
    try:
        return encode_signature(tags, info.header_start - LEAD_SIZE)
    except ValueError as exc:
        raise RocpkgInputError((info.path, str(exc))) from None


def open_payload_stream(fh, compressor: str):
    """The decompressed cpio of an rpm whose file object sits at the payload offset."""
    return open_decompressor(compressor, fh, fh.name)
