"""OpenPGP framing and the signing-key policy, for rocpkg.formats.sign (no crypto: the
signatures themselves come from gpg or an external signer).

  packets / armor / dearmor   binary packets (RFC 4880 4.2) and ASCII armor (6.2)
  cleartext / cleartext_frame the cleartext signature framework (7): the text a text-mode
                              signature signs, and the document around it (InRelease)
  key_problems                what today's clients refuse in a signing key, what to warn of
"""
from __future__ import annotations

import base64
import re
import time

from rocpkg.errors import RocpkgInputError

RSA_ALGORITHMS = {"1", "2", "3"}     # OpenPGP public key algorithm ids (RFC 4880 9.1) of RSA
_REFUSED_ALGORITHMS = {"16": "Elgamal", "17": "DSA", "20": "Elgamal"}
_WEAK_DIGESTS = {"1": "MD5", "2": "SHA-1", "3": "RIPEMD-160"}
_HASH_NAMES = {1: "MD5", 2: "SHA1", 3: "RIPEMD160", 8: "SHA256", 9: "SHA384", 10: "SHA512", 11: "SHA224"}
MIN_RSA_BITS = 2048
EXPIRY_WARNING_DAYS = 90


# -- the key policy ------------------------------------------------------------------

def key_problems(keys, packets: list[bytes], *, now: int) -> tuple[list[str], list[str]]:
    """(what clients refuse, what to warn of) for each key: DSA or Elgamal, RSA under
    MIN_RSA_BITS, an expired or revoked key (refused: apt's sqv and RHEL 9's crypto policy
    reject them), a self-signature or subkey binding made with SHA-1 (or weaker; refused
    by sqv since 2026-02-01), a key expiring within EXPIRY_WARNING_DAYS (warned).
    packets: each key's binary public key, in the order of keys."""
    problems, warnings = [], []
    for facts, packet in zip(keys, packets):
        reasons = []
        primary = facts.keys[0]
        signing = [row for row in facts.keys[1:] if "s" in row[4] and row[5] not in ("e", "r")]
        if "s" in primary[4] or not signing:
            signing.insert(0, primary)
        for algorithm, bits, _created, _expires, _caps, _validity in [primary] + signing:
            if algorithm in _REFUSED_ALGORITHMS:
                reasons.append(f"{_REFUSED_ALGORITHMS[algorithm]} key (clients refuse DSA and Elgamal signatures)")
            elif algorithm in RSA_ALGORITHMS and bits < MIN_RSA_BITS:
                reasons.append(f"RSA {bits} bits (clients refuse RSA under {MIN_RSA_BITS} bits)")
        if primary[5] == "r":
            reasons.append("revoked")
        expiry = [row[3] for row in [primary] + signing if row[3]]
        if primary[5] == "e" or any(e <= now for e in expiry):
            reasons.append(f"expired on {time.strftime('%Y-%m-%d', time.gmtime(min(expiry or [now])))}")
        elif expiry and min(expiry) - now < EXPIRY_WARNING_DAYS * 86400:
            warnings.append(f"signing key {facts.name} expires on {time.strftime('%Y-%m-%d', time.gmtime(min(expiry)))}"
                            f" (in {(min(expiry) - now) // 86400} days): extend it (gpg --quick-set-expire) or "
                            f"rotate to a new key (README 'Signing key')")
        weak = _weak_self_signatures(packet, facts.fingerprint[-16:])
        if weak:
            reasons.append(f"{weak} self-signature or subkey binding (clients refuse SHA-1 since 2026-02-01; "
                           f"gpg --quick-set-expire with --digest-algo SHA256 makes new ones)")
        seen = []
        reasons = [r for r in reasons if not (r in seen or seen.append(r))]
        if reasons:
            problems.append(f"key {facts.name}: {', '.join(reasons)}")
    return problems, warnings


def _weak_self_signatures(key: bytes, key_id: str) -> str:
    """The weak digest ("SHA-1"...) of the newest self-signature of any of the key's user
    ids or subkeys, or of a signing subkey's back-signature; "" when none is weak."""
    newest: dict[int, tuple[int, int]] = {}      # component index -> (created, digest)
    component = -1
    weak = ""
    for tag, body, _raw in packets(key):
        if tag in (6, 13, 14, 17):
            component += 1
            continue
        if tag != 2 or not body or body[0] != 4:
            continue
        sig_class, digest, created, issuer, embedded = _signature_fields(body)
        if sig_class not in (0x10, 0x11, 0x12, 0x13, 0x18, 0x1F) or issuer.upper() not in ("", key_id.upper()):
            continue
        if created >= newest.get(component, (-1, 0))[0]:
            newest[component] = (created, digest)
        for inner in embedded:
            inner_digest = inner[3] if len(inner) > 3 and inner[0] == 4 else 0
            if str(inner_digest) in _WEAK_DIGESTS:
                weak = _WEAK_DIGESTS[str(inner_digest)]
    for _created, digest in newest.values():
        if str(digest) in _WEAK_DIGESTS:
            weak = weak or _WEAK_DIGESTS[str(digest)]
    return weak


def _signature_fields(body: bytes) -> tuple[int, int, int, str, list[bytes]]:
    """(class, digest algorithm, creation time, issuer key id hex, embedded signatures) of a v4 signature."""
    sig_class, digest = body[1], body[3]
    created, issuer, embedded = 0, "", []
    offset = 4
    for _area in range(2):
        if offset + 2 > len(body):
            break
        length = int.from_bytes(body[offset:offset + 2], "big")
        area = body[offset + 2:offset + 2 + length]
        offset += 2 + length
        i = 0
        while i < len(area):
            size, i = _subpacket_length(area, i)
            if size <= 0 or i + size > len(area):
                break
            kind, value = area[i] & 0x7F, area[i + 1:i + size]
            if kind == 2 and len(value) == 4:
                created = int.from_bytes(value, "big")
            elif kind == 16 and len(value) == 8:
                issuer = value.hex()
            elif kind == 33 and len(value) == 21:
                issuer = value[-8:].hex()
            elif kind == 32:
                embedded.append(value)
            i += size
    return sig_class, digest, created, issuer, embedded


def _subpacket_length(data: bytes, i: int) -> tuple[int, int]:
    first = data[i]
    if first < 192:
        return first, i + 1
    if first < 255:
        return ((first - 192) << 8) + data[i + 1] + 192, i + 2
    return int.from_bytes(data[i + 1:i + 5], "big"), i + 5


# -- OpenPGP framing --------------------------------------------------------------------

def packets(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(tag, body, raw packet) of each OpenPGP packet in data (RFC 4880 4.2); stops at
    anything it cannot frame."""
    found, i = [], 0
    while i < len(data):
        head = data[i]
        if not head & 0x80:
            break
        if head & 0x40:                                  # new format
            tag, j = head & 0x3F, i + 1
            if j >= len(data):
                break
            first = data[j]
            if first < 192:
                length, j = first, j + 1
            elif first < 224:
                length, j = ((first - 192) << 8) + data[j + 1] + 192, j + 2
            elif first == 255:
                length, j = int.from_bytes(data[j + 1:j + 5], "big"), j + 5
            else:
                break                                    # partial lengths: not in keys or signatures
        else:
            tag, kind = (head >> 2) & 0x0F, head & 0x03
            if kind == 3:
                break
            size = 1 << kind
            length, j = int.from_bytes(data[i + 1:i + 1 + size], "big"), i + 1 + size
        if j + length > len(data):
            break
        found.append((tag, data[j:j + length], data[i:j + length]))
        i = j + length
    return found


def signature_class(body: bytes) -> int:
    return body[1] if body and body[0] == 4 else body[2] if len(body) > 2 and body[0] == 3 else -1


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(data: bytes, kind: str) -> bytes:
    """ASCII armor (RFC 4880 6.2) of binary OpenPGP data; kind: "SIGNATURE", "PUBLIC KEY BLOCK"."""
    text = base64.b64encode(data).decode("ascii")
    lines = [text[i:i + 64] for i in range(0, len(text), 64)]
    checksum = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode("ascii")
    return (f"-----BEGIN PGP {kind}-----\n\n" + "\n".join(lines) + f"\n={checksum}\n-----END PGP {kind}-----\n").encode()


def dearmor(data: bytes, key: str) -> bytes:
    """The binary packets of the first armored signature block in data (a bare
    signature or a cleartext-signed document)."""
    text = data.decode("ascii", "replace")
    match = re.search(r"-----BEGIN PGP SIGNATURE-----\r?\n(.*?)-----END PGP SIGNATURE-----", text, re.DOTALL)
    if not match:
        raise RocpkgInputError(("--sign-key", f"the signer returned no armored signature for {key}"))
    body = match.group(1).split("\n\n", 1)[-1] if "\n\n" in match.group(1) else match.group(1)
    lines = [line.strip() for line in body.splitlines() if line.strip() and not line.startswith("=")]
    try:
        return base64.b64decode("".join(lines), validate=True)
    except ValueError:
        raise RocpkgInputError(("--sign-key", f"the signer returned a damaged signature for {key}")) from None


def cleartext(data: bytes) -> bytes:
    """The text a cleartext signature signs: each line without trailing spaces and tabs,
    no line end after the last (RFC 4880 7.1); LF line ends (a text-mode signature is
    computed over them as CR LF)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"\n".join(line.rstrip(b" \t\r") for line in lines)


def cleartext_frame(text: bytes, signatures: bytes) -> bytes:
    """A cleartext-signed document (RFC 4880 7): text dash-escaped, then the signatures
    armored; the Hash header names their digest algorithms."""
    hashes = []
    for tag, body, _raw in packets(signatures):
        if tag == 2 and body and body[0] == 4:
            name = _HASH_NAMES.get(body[3], "SHA256")
            if name not in hashes:
                hashes.append(name)
    escaped = b"\n".join(b"- " + line if line.startswith(b"-") else line for line in text.split(b"\n"))
    return (b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: " + ",".join(hashes).encode() + b"\n\n"
            + escaped + b"\n" + armor(signatures, "SIGNATURE"))
