"""What `rocpkg publish` owns in a destination: the publish record, and where a
destination may not be.

The record, DEST/.rocpkg-publish.json (schema rocpkg-publish/1), lists every file that
publishes of an OUT put into DEST, with its size and SHA-256, and names the OUT it came
from (host and path, for people: a later publish from another checkout of the same
repository is the normal case in CI). Publish removes only files the record lists and
OUT no longer has, and only while they still hold the bytes recorded; everything else in
DEST (a web root's index.html, .well-known/, another team's objects) is never touched.
A destination without a record has nothing of rocpkg's to remove: the first publish
into a non-empty destination merges (writes the names OUT publishes, removes nothing).
A record that names another OUT path is refused unless the publish adopts the
destination (--adopt): removing what another OUT put there takes a decision.

The record is read as hostile as OUT: bounded, strict JSON, every path relative and
inside DEST; a damaged record is bad input, and publish then changes nothing.
"""
from __future__ import annotations

import json
import os
import re
import socket

from rocpkg.errors import RocpkgInputError
from rocpkg.store.files import parse_json, parts_of

RECORD = ".rocpkg-publish.json"
SCHEMA = "rocpkg-publish/1"
RECORD_LIMIT = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MD5 = re.compile(r"[0-9a-f]{32}")


def parse_record(data: bytes | None, where: str) -> dict[str, tuple[int, str, str]]:
    """rel -> (size, sha256, md5) of a record's bytes (None: no record, nothing owned)."""
    if data is None:
        return {}
    if len(data) > RECORD_LIMIT:
        raise RocpkgInputError((where, f"more than {RECORD_LIMIT} bytes: not a publish record rocpkg wrote"))
    doc = parse_json(data, where, "publish record")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("files"), dict):
        raise RocpkgInputError((where, f"not a {SCHEMA} publish record (remove it only if rocpkg "
                                       f"never published into this destination)"))
    owned = {}
    for rel, entry in doc["files"].items():
        field = f"{where}: files[{rel!r}]"
        parts_of(rel, field)
        if rel == RECORD:
            raise RocpkgInputError((field, "names the record itself"))
        if not isinstance(entry, dict) or type(entry.get("size")) is not int or not 0 <= entry["size"] < 1 << 63 \
                or not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]) \
                or not isinstance(entry.get("md5"), str) or not _MD5.fullmatch(entry["md5"]):
            raise RocpkgInputError((field, "wants {\"size\": a byte count, \"sha256\": 64 hex digits, "
                                           "\"md5\": 32 hex digits}"))
        owned[rel] = (entry["size"], entry["sha256"], entry["md5"])
    return owned


def record_origin(data: bytes | None, where: str) -> str | None:
    """The OUT path a record names as where its files came from (None: no record, or one
    that names none); read after parse_record accepted the same bytes."""
    if data is None:
        return None
    origin = parse_json(data, where, "publish record").get("origin")
    out = origin.get("out") if isinstance(origin, dict) else None
    if out is not None and (not isinstance(out, str) or not out.isprintable() or len(out) > 4096):
        raise RocpkgInputError((f"{where}: origin.out", "wants the path of an OUT"))
    return out


def record_bytes(out_dir: str, owned: dict[str, tuple[int, str, str]]) -> bytes:
    doc = {"schema": SCHEMA, "origin": {"host": socket.gethostname(), "out": out_dir},
           "files": {rel: {"size": size, "sha256": sha, "md5": md5} for rel, (size, sha, md5) in sorted(owned.items())}}
    return json.dumps(doc, indent=1).encode() + b"\n"


def _ancestors(path: str) -> list[str]:
    """path and every directory above it, nearest first."""
    found = [path]
    while os.path.dirname(found[-1]) != found[-1]:
        found.append(os.path.dirname(found[-1]))
    return found


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refuse_overlap(out_dir: str, dest: str, command: str = "publish", source: str = "OUT") -> None:
    """DEST equal to OUT, inside it, holding it, or any of these through a symlink, a bind
    mount or another name of the same directory is bad input: publishing (command; source:
    what OUT is called in its message) would copy OUT into itself or rewrite OUT's own files."""
    out_real, dest_real = os.path.realpath(out_dir), os.path.realpath(dest)
    why = None
    if dest_real == out_real or any(_same(a, out_real) for a in _ancestors(dest_real)):
        why = f"is {source} itself or inside it" if dest_real != out_real else f"is {source} itself"
    elif any(_same(a, dest_real) for a in _ancestors(out_real)):
        why = f"holds {source} ({source} is inside it)"
    if why:
        raise RocpkgInputError((dest, f"{why}: {command} into a directory apart from {out_dir}"))
