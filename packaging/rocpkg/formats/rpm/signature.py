"""The 96-byte lead and the signature header: a fixed-size slot between the lead and
the main header, filled with RESERVEDSPACE so that a later header signature fits in
place (what `rpmsign --addsign` relies on)."""
from __future__ import annotations

import hashlib
import struct

from rocpkg.formats.rpm.header import encode_header
from rocpkg.formats.rpm.tags import LARGE_SIZE, TYPE_BIN, TYPE_INT32, TYPE_INT64, TYPE_STRING, SigTag

LEAD_MAGIC = b"\xed\xab\xee\xdb"
LEAD_SIZE = 96
RESERVED_SPACE = 4128   # room for a later in-place header signature (RSA/EdDSA packet)


def encode_lead(nevr: str) -> bytes:
    """The 96-byte legacy lead: v3.0, binary, archnum 1, osnum 1, signature type 5."""
    name = nevr.encode("utf-8")[:65]
    return (LEAD_MAGIC + bytes([3, 0]) + struct.pack(">HH", 0, 1)
            + name.ljust(66, b"\0") + struct.pack(">HH", 1, 5) + b"\0" * 16)


def pad8(n: int) -> int:
    return -n % 8


def encode_signature(tags: dict[int, tuple[int, object]], area_size: int | None) -> bytes:
    """Signature header plus its padding to 8 bytes. With area_size, RESERVEDSPACE is
    sized so that the result is exactly area_size bytes (the signature sits between the
    lead and the main header, so its size can never change once written)."""
    tags = {t: v for t, v in tags.items() if t != SigTag.RESERVEDSPACE}
    if area_size is None:
        tags[SigTag.RESERVEDSPACE] = (TYPE_BIN, bytes(RESERVED_SPACE))
        blob = encode_header(tags, SigTag.HEADERSIGNATURES)
        return blob + bytes(pad8(len(blob)))
    bare = encode_header(tags, SigTag.HEADERSIGNATURES)
    if len(bare) + pad8(len(bare)) == area_size:
        return bare + bytes(pad8(len(bare)))
    # Adding RESERVEDSPACE costs one index entry plus its bytes; alignment of later
    # entries can shift by a few bytes, so search a small window around the estimate.
    estimate = area_size - len(bare) - 16
    for reserved in range(estimate, max(estimate - 24, 0), -1):
        tags[SigTag.RESERVEDSPACE] = (TYPE_BIN, bytes(reserved))
        blob = encode_header(tags, SigTag.HEADERSIGNATURES)
        if len(blob) + pad8(len(blob)) == area_size:
            return blob + bytes(pad8(len(blob)))
    raise ValueError(f"signature tags do not fit the {area_size}-byte signature area")


def signature_tags(header: bytes, size: int, payload_size: int) -> dict:
    """The digests and sizes rpm checks: over the main header (SHA1, SHA256), the size of
    header and payload, and the uncompressed payload's size. No v3 MD5 over header and
    payload: the header's PAYLOADDIGEST covers the payload (rpm >= 4.14, write_rpm)."""
    tags = {SigTag.SHA1: (TYPE_STRING, hashlib.sha1(header).hexdigest()),
            SigTag.SHA256: (TYPE_STRING, hashlib.sha256(header).hexdigest())}
    if size >= LARGE_SIZE:
        tags[SigTag.LONGSIZE] = (TYPE_INT64, [size])
    else:
        tags[SigTag.SIZE] = (TYPE_INT32, [size])
    if payload_size >= LARGE_SIZE:
        tags[SigTag.LONGARCHIVESIZE] = (TYPE_INT64, [payload_size])
    else:
        tags[SigTag.PAYLOADSIZE] = (TYPE_INT32, [payload_size])
    return tags

