"""One schema for what rocpkg reads back of its own records: OUT/manifest.json and the
shard parts OUT/manifest.d/shard-I-of-N.json (rocpkg-manifest/1), checked whole before
any command acts on them. A record is as hostile as an input: every field has its type
and range, every package path is relative, stays inside OUT and lies under its format's
tree (a `../x` or `/dev/zero` is refused, never opened or moved). A problem is bad input
naming the file and the field (`manifest.json: packages[3].size: ...`).
"""
from __future__ import annotations

import os
import re

from rocpkg.formats.registry import NAMES as FORMATS
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import deb_version_problem, rpm_version_problem
from rocpkg.store.outdir import MANIFEST_PARTS
from rocpkg.store.files import parts_of, read_json

SCHEMA = "rocpkg-manifest/1"
MAX_SHARDS = 10_000             # build's --shard I/N takes the same bound
MAX_DATE = (1 << 32) - 1        # rpm's 32-bit time tags; tar and ar hold more
MAX_SIZE = (1 << 63) - 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _one_of(quote: str = "'") -> str:
    """The registered formats, as an error says what it wants: 'deb' or 'rpm'."""
    names = [f"{quote}{name}{quote}" for name in FORMATS]
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


class _Problem(Exception):
    def __init__(self, field: str, what: str):
        super().__init__(field, what)
        self.field, self.what = field, what


def _text(value, field: str, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value) \
            or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise _Problem(field, f"wants {'a' if empty else 'a non-empty'} one-line string, got {_shown(value)}")
    return value


def _integer(value, field: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _Problem(field, f"wants an integer from {low} to {high}, got {_shown(value)}")
    return value


def _list(value, field: str) -> list:
    if not isinstance(value, list):
        raise _Problem(field, f"wants a list, got {_shown(value)}")
    return value


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _package_path(value, field: str, fmt: str | None = None) -> str:
    path = _text(value, field, empty=False)
    try:
        parts = parts_of(path, field)
    except RocpkgInputError:
        raise _Problem(field, f"{path!r} is not a path inside OUT") from None
    if parts[0] not in ((fmt,) if fmt else FORMATS) or len(parts) < 2:
        raise _Problem(field, f"{path!r} is not under {fmt or _one_of('')}/")
    return path


def _package(entry, field: str) -> None:
    if not isinstance(entry, dict):
        raise _Problem(field, f"wants an object, got {_shown(entry)}")
    if entry.get("format") not in FORMATS:
        raise _Problem(f"{field}.format", f"wants {_one_of()}, got {_shown(entry.get('format'))}")
    for key in ("name", "version", "release"):
        _text(entry.get(key), f"{field}.{key}", empty=key == "release")
    _package_path(entry.get("file"), f"{field}.file", entry["format"])
    _integer(entry.get("size"), f"{field}.size", 0, MAX_SIZE)
    if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
        raise _Problem(f"{field}.sha256", f"wants 64 hex digits, got {_shown(entry.get('sha256'))}")
    for key in ("arch", "kind", "target", "family"):
        if entry.get(key) is not None:
            _text(entry[key], f"{field}.{key}")
    for key in ("depends", "built_for"):
        for index, item in enumerate(_list(entry.get(key, []), f"{field}.{key}")):
            _text(item, f"{field}.{key}[{index}]")


def _release(record, field: str) -> None:
    if not isinstance(record, dict):
        raise _Problem(field, f"wants an object, got {_shown(record)}")
    version = _text(record.get("version"), f"{field}.version", empty=False)
    release = _text(record.get("release"), f"{field}.release", empty=False)
    for key, value, full in (("version", version, f"{version}-1"), ("release", release, f"1-{release}")):
        if ":" in full or deb_version_problem(full) or rpm_version_problem(full):
            # every release rocpkg builds has a version and release both dpkg and rpm take
            raise _Problem(f"{field}.{key}", f"wants a package {key} dpkg and rpm take, got {_shown(value)}")
    for key in ("id", "plan", "kpack_lookup", "channel", "variant"):
        if key in record:
            _text(record[key], f"{field}.{key}")
    for key in ("targets", "formats"):
        for index, item in enumerate(_list(record.get(key, []), f"{field}.{key}")):
            _text(item, f"{field}.{key}[{index}]")
    for index, item in enumerate(_list(record.get("formats", []), f"{field}.formats")):
        if item not in FORMATS:
            raise _Problem(f"{field}.formats[{index}]", f"wants {_one_of()}, got {_shown(item)}")
    _list(record.get("allowed", []), f"{field}.allowed")
    for index, item in enumerate(_list(record.get("files", []), f"{field}.files")):
        _package_path(item, f"{field}.files[{index}]")
    for key in ("date", "epoch"):
        if record.get(key) is not None:
            _integer(record[key], f"{field}.{key}", 0, MAX_DATE)


def _document(doc) -> None:
    if not isinstance(doc, dict):
        raise _Problem("(document)", f"wants an object, got {_shown(doc)}")
    for key in ("version", "release", "plan"):
        if key in doc:
            _text(doc[key], key)
    for index, entry in enumerate(_list(doc.get("packages"), "packages")):
        _package(entry, f"packages[{index}]")
    for index, record in enumerate(_list(doc.get("releases", []), "releases")):
        _release(record, f"releases[{index}]")
    if "shard" in doc:
        shard = _list(doc["shard"], "shard")
        if len(shard) != 2:
            raise _Problem("shard", f"wants [I, N], got {_shown(shard)}")
        count = _integer(shard[1], "shard[1]", 1, MAX_SHARDS)
        _integer(shard[0], "shard[0]", 1, count)
    if "release_record" in doc:
        _release(doc["release_record"], "release_record")


def check_manifest(doc, where: str) -> dict:
    """doc when it is a whole rocpkg-manifest/1 document (or shard part); bad input naming
    where and the field otherwise."""
    try:
        _document(doc)
    except _Problem as problem:
        raise RocpkgInputError((f"{where}: {problem.field}", problem.what)) from None
    return doc


def read_parts(out_dir: str) -> list[tuple[str, dict]]:
    """(name, document) of every shard part in OUT/manifest.d, in name order, each read as
    OUT's own files are and checked whole; [] when there are none."""
    parts_dir = os.path.join(out_dir, MANIFEST_PARTS)
    try:
        names = sorted(n for n in os.listdir(parts_dir) if re.fullmatch(r"shard-\d+-of-\d+\.json", n))
    except (FileNotFoundError, NotADirectoryError):
        return []
    docs = []
    for name in names:
        path = os.path.join(parts_dir, name)
        doc = read_json(out_dir, f"{MANIFEST_PARTS}/{name}", "manifest part")
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "shard" not in doc \
                or not all(isinstance(doc.get(k), str) for k in ("plan", "version", "release")):
            raise RocpkgInputError((path, f"not a {SCHEMA} manifest part"))
        docs.append((name, check_manifest(doc, path)))
    return docs
