"""A package's .MTREE: the mtree(5) text makepkg has bsdtar write (keywords type, uid, gid,
mode, time, size, md5digest, sha256digest, link under one `/set`), gzip'd, and its parse
back for verify. Names are quoted as libarchive quotes them: every byte outside its safe
set (space, `#`, `=`, `\\`, control and non-ASCII bytes) as a backslash and three octal
digits."""
from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass

from rocpkg.errors import RocpkgInputError

SET_LINE = "/set type=file uid=0 gid=0 mode=644"
_UNSAFE = frozenset(b" #=\\\x7f") | frozenset(range(0x20)) | frozenset(range(0x80, 0x100))
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class MtreeEntry:
    """One line: path relative to the root ("./" stripped), type ("file", "dir", "link"),
    permission bits, size, mtime, digests (files), link target (links)."""

    path: str
    type: str
    mode: int
    size: int = 0
    time: int = 0
    md5: str = ""
    sha256: str = ""
    link: str = ""


def quote(name: str) -> str:
    """libarchive's mtree_quote of a name's UTF-8 bytes."""
    raw = name.encode("utf-8", "surrogateescape")
    return "".join(f"\\{b:03o}" if b in _UNSAFE else chr(b) for b in raw)


def unquote(text: str) -> str:
    raw = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)
    return raw.encode("latin-1").decode("utf-8", "surrogateescape")


def line(entry: MtreeEntry) -> str:
    """One entry's line, keywords in bsdtar's order; mode only where it is not the /set's."""
    words = [f"./{quote(entry.path)}", f"time={entry.time}.0"]
    if entry.mode != 0o644 or entry.type != "file":
        words.append(f"mode={entry.mode:o}")
    if entry.type == "file":
        words += [f"size={entry.size}", f"md5digest={entry.md5}", f"sha256digest={entry.sha256}"]
    else:
        words.append(f"type={entry.type}")
    if entry.type == "link":
        words.append(f"link={quote(entry.link)}")
    return " ".join(words)


def render(entries: list[MtreeEntry]) -> bytes:
    """The gzip'd .MTREE (gzip -n: no name, mtime 0) of entries in their order."""
    text = "#mtree\n" + SET_LINE + "\n" + "".join(line(e) + "\n" for e in entries)
    return gzip.compress(text.encode("ascii"), compresslevel=9, mtime=0)


def parse(data: bytes, where: str, limit: int) -> list[MtreeEntry]:
    """The entries of a gzip'd .MTREE, its text at most limit bytes (a hostile package's
    gzip bomb is refused, not inflated)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        text = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise RocpkgInputError((where, f".MTREE is not gzip data: {exc}")) from None
    if len(text) > limit:
        raise RocpkgInputError((where, f".MTREE inflates to over {limit} bytes"))
    try:
        lines = text.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise RocpkgInputError((where, ".MTREE is not ASCII text")) from None
    defaults: dict[str, str] = {}
    entries = []
    for number, raw in enumerate(lines, 1):
        if not raw or raw.startswith("#"):
            continue
        words = raw.split()
        keywords = dict(w.partition("=")[::2] for w in words[1:])
        if words[0] == "/set":
            defaults.update(keywords)
            continue
        if words[0] == "/unset":
            for key in words[1:]:
                defaults.pop(key, None)
            continue
        values = {**defaults, **keywords}
        try:
            entries.append(MtreeEntry(
                path=unquote(words[0]).removeprefix("./"), type=values.get("type", "file"),
                mode=int(values.get("mode", "0"), 8), size=int(values.get("size", "0")),
                time=int(float(values.get("time", "0"))), md5=values.get("md5digest", ""),
                sha256=values.get("sha256digest", ""), link=unquote(values.get("link", ""))))
        except ValueError:
            raise RocpkgInputError((where, f".MTREE line {number} does not parse: {raw[:80]!r}")) from None
    return entries
