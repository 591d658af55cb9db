"""Native .deb writer and reader: streams payload files from the artifacts into
`debian-binary`, `control.tar.gz`, `data.tar.*` in one ar archive, no dpkg-deb, no
staging copy. Knows nothing of ROCm: it packs what the PackageSpec says.

Each source is read once. `md5sums` lives in control.tar, which must precede data.tar
in the ar archive, so control.tar.gz is written first with placeholder md5s in stored
deflate blocks (its length depends only on the tar's length), data.tar.<comp> streams
straight into the output while each file's md5 is taken, and then the control member
is rewritten in place with the real md5s and the data member's ar header is patched
with its size. The md5s are taken by a digest thread beside the compressor's workers;
the sha256 of the finished .deb by one pass over its (compressed) bytes (write_deb says
why no order avoids it).
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import io
import os
import re
import tarfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from rocpkg.formats import compression
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.filelist import PackageSources, checked_files, with_parents
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, BuiltPackage, FileEntry, PackageSpec
from rocpkg.formats.render import render_deb
from rocpkg.formats.tarinfo import root_tarinfo
from rocpkg.formats.deb.plugin import FORMAT, file_name
from rocpkg.formats.streams import CHUNK, AtomicOutput, DigestThread, digester, hash_open

AR_MAGIC = b"!<arch>\n"
AR_HEADER_SIZE = 60
AR_MAX_MEMBER_SIZE = 9_999_999_999      # the ar size field holds 10 decimal digits
DEBIAN_BINARY = b"2.0\n"
REQUIRED_CONTROL_FIELDS = ("Package", "Version", "Architecture", "Maintainer", "Description")


@dataclass(frozen=True)
class _DataEntry:
    """One data.tar member: a planned FileEntry, or a generated one with its bytes."""

    entry: FileEntry
    content: bytes | None = None


@dataclass(frozen=True)
class ArMember:
    """One member of an ar archive: its name and where its bytes are in the file."""

    name: str
    offset: int
    size: int
    mtime: int


# -- the data tree ---------------------------------------------------------------------


def _data_tree(spec: PackageSpec, doc_files: dict[str, bytes]) -> list[_DataEntry]:
    """Every data.tar member in order: `./`, missing ancestors as 0755 root dirs, the
    planned entries (the one normalised file list) and the generated doc files, sorted
    by path bytes (parents first)."""
    planned = checked_files(spec.name, spec.files)
    taken = {e.path for e in planned}
    collisions = [(f"{spec.name}: {path}", "collides with a generated Debian doc file")
                  for path in doc_files if path in taken]
    if collisions:
        raise RocpkgInputError(*collisions)
    generated = [FileEntry(path, FILE, 0o644, size=len(data)) for path, data in doc_files.items()]
    entries = with_parents(spec.name, planned + generated)
    return ([_DataEntry(FileEntry("/", DIR, 0o755))]
            + [_DataEntry(e, doc_files.get(e.path)) for e in entries])


def _tar_name(path: str) -> str:
    return "./" if path == "/" else "." + path


def _md5sums(tree: list[_DataEntry], digests: dict[str, str], conffiles: list[str]) -> bytes:
    """dh_md5sums' format and choice: regular files except conffiles, paths without '/'.
    A source not yet read gets 32 zeros: the line has the same length either way."""
    lines = []
    for item in tree:
        entry = item.entry
        if entry.type != FILE or entry.path in conffiles:
            continue
        md5 = (hashlib.md5(item.content, usedforsecurity=False).hexdigest()
               if item.content is not None else digests.get(entry.path, "0" * 32))
        lines.append(f"{md5}  {entry.path[1:]}\n")
    return "".join(lines).encode("utf-8")


# -- tar and compression -----------------------------------------------------------------


def _tarinfo(name: str, kind: bytes, mode: int, mtime: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    return root_tarinfo(name, kind, mode, mtime, size, linkname)


@functools.lru_cache(maxsize=4096)
def _tar_header(fields: tuple) -> bytes:
    """GNU-format header (dpkg rejects PAX) of _tarinfo's fields; sizes >= 8 GiB go
    base-256, long names into ././@LongLink records. The usual header (sizes under 8
    GiB) is packed directly: tarfile takes longer to make one than zstd takes to
    compress a small file, and a release has thousands. Kept: a release's packages
    repeat their directories (./opt/, ./opt/rocm-7.1.0/, ...) and doc dirs."""
    if _FAST_HEADERS:
        header = _gnu_header(*fields)
        if header is not None:
            return header
    return _tarinfo(*fields).tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


def _header_block(name: bytes, mode: int, size: int, mtime: int, kind: bytes, link: bytes, owner: bytes) -> bytes:
    """One 512-byte header block as tarfile packs it (names cut at 100 bytes)."""
    header = b"".join((name[:100].ljust(100, b"\0"), b"%07o\0" % (mode & 0o7777), b"0000000\0" * 2,
                       b"%011o\0" % size, b"%011o\0" % mtime, b" " * 8, kind, link[:100].ljust(100, b"\0"),
                       tarfile.GNU_MAGIC, owner.ljust(32, b"\0") * 2)).ljust(tarfile.BLOCKSIZE, b"\0")
    return header[:148] + b"%06o\0" % sum(header) + header[155:]


def _long_record(value: bytes, kind: bytes) -> bytes:
    """A GNU ././@LongLink record (kind L: the name, K: the link target) as tarfile
    writes it before a header whose name or link is over 100 bytes."""
    value += b"\0"
    return _header_block(b"././@LongLink", 0, len(value), 0, kind, b"", b"") + value + b"\0" * (-len(value) % tarfile.BLOCKSIZE)


def _gnu_header(name: str, kind: bytes, mode: int, mtime: int, size: int = 0, linkname: str = "") -> bytes | None:
    """tarfile's GNU header for owner root:root, with its long-name and long-link
    records, packed by hand; None where tarfile would encode a number otherwise."""
    if kind == tarfile.DIRTYPE and not name.endswith("/"):
        name += "/"
    if not (0 <= size < 8 ** 11 and 0 <= mtime < 8 ** 11):
        return None
    encoded, link = name.encode("utf-8"), linkname.encode("utf-8")
    records = (_long_record(link, tarfile.GNUTYPE_LONGLINK) if len(link) > 100 else b"") \
        + (_long_record(encoded, tarfile.GNUTYPE_LONGNAME) if len(encoded) > 100 else b"")
    return records + _header_block(encoded, mode, size, mtime, kind, link, b"root")


def _same_as_tarfile() -> bool:
    """Whether _gnu_header gives this Python's tarfile bytes (tarfile's device fields
    changed within 3.11): if not, every header comes from tarfile."""
    long = "./opt/" + "d/" * 60 + "x"
    probes = [("./opt/x", tarfile.REGTYPE, 0o644, 1700000000, 12345), ("./opt", tarfile.DIRTYPE, 0o755, 0),
              ("./opt/l", tarfile.SYMTYPE, 0o777, 5, 0, "x/y"), (long, tarfile.REGTYPE, 0o755, 7, 99),
              (long, tarfile.DIRTYPE, 0o755, 7), ("./opt/m", tarfile.SYMTYPE, 0o777, 5, 0, long),
              (long + "é", tarfile.SYMTYPE, 0o777, 5, 0, long + "/é")]
    return all(_gnu_header(*p) == _tarinfo(*p).tobuf(tarfile.GNU_FORMAT, "utf-8", "strict") for p in probes)


_FAST_HEADERS = _same_as_tarfile()


def _tar_padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _tar_end(offset: int) -> bytes:
    """Two zero blocks, then zeros up to a full 10 KiB record, as tar(1) writes."""
    offset += 2 * tarfile.BLOCKSIZE
    return b"\0" * (2 * tarfile.BLOCKSIZE + (-offset % tarfile.RECORDSIZE))


def _control_tar(control: str, scripts: dict[str, str], md5sums: bytes, conffiles: list[str],
                 mtime: int, shlibs: list[str] = ()) -> bytes:
    """control.tar: ./, control, md5sums, conffiles (if any), shlibs (if any), maintainer scripts."""
    members: list[tuple[str, bytes, int]] = [("./control", control.encode("utf-8"), 0o644),
                                              ("./md5sums", md5sums, 0o644)]
    if conffiles:
        members.append(("./conffiles", "".join(f"{p}\n" for p in conffiles).encode("utf-8"), 0o644))
    if shlibs:
        members.append(("./shlibs", "".join(f"{line}\n" for line in shlibs).encode("utf-8"), 0o644))
    for name in sorted(scripts):
        members.append((f"./{name}", scripts[name].encode("utf-8"), 0o755))
    out = io.BytesIO()
    out.write(_tar_header(("./", tarfile.DIRTYPE, 0o755, mtime)))
    for name, data, mode in members:
        out.write(_tar_header((name, tarfile.REGTYPE, mode, mtime, len(data))))
        out.write(data + _tar_padding(len(data)))
    # two zero blocks end the archive; no padding to a 10 KiB record: the member is
    # stored uncompressed (see _compress_control) and the readers do not need it
    out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    return out.getvalue()


def _compress_control(control_tar: bytes, stored: bool) -> bytes:
    """control.tar.gz in stored deflate blocks: its size then depends on the tar's length
    alone, so the member can be written before data.tar with placeholder md5sums and
    rewritten in place once they are known. (gzip is what every dpkg, apt and lintian
    reads; Debian 12's lintian rejects control.tar.zst and an uncompressed control.tar.
    The member is a few KiB: compressing it would save nothing worth a second read.)
    A package without source files knows its md5sums up front: its member is compressed."""
    return gzip.compress(control_tar, compresslevel=0 if stored else 9, mtime=0)


# -- data.tar ------------------------------------------------------------------


def _normalised_mode(mode: int) -> int:
    """Permission bits as declared, minus group/other write."""
    return mode & 0o7755


def _write_payload_file(tar_out, md5: DigestThread, sources: PackageSources, entry: FileEntry, sde: int) -> int:
    """Header + bytes of one source file (its md5 taken beside, by the digest thread);
    returns the tar bytes written."""
    with sources.open(entry) as source:
        header = _tar_header((_tar_name(entry.path), tarfile.REGTYPE,
                                      _normalised_mode(entry.mode), min(source.mtime, sde), entry.size))
        tar_out.write(header)
        source.copy_to(tar_out, (md5,), entry.path)
    padding = _tar_padding(entry.size)
    tar_out.write(padding)
    return len(header) + entry.size + len(padding)


def _write_data_tar(tar_out, sources: PackageSources, tree: list[_DataEntry], sde: int, threads: int) -> dict[str, str]:
    """Stream the whole data.tar into tar_out (a compressor); returns the md5 of every
    source file, taken on the way (streams.digester: md5 is slower than zstd -3, so
    beside the compressor's own workers when the package has cores to spare)."""
    offset = 0
    md5 = digester("md5", threads)
    try:
        for item in tree:
            offset += _write_data_item(tar_out, md5, sources, item, sde)
    except BaseException:
        md5.abandon()
        raise
    tar_out.write(_tar_end(offset))
    return md5.close()


def _write_data_item(tar_out, md5: DigestThread, sources: PackageSources, item: _DataEntry, sde: int) -> int:
    """One data.tar member; returns the bytes written."""
    entry = item.entry
    name = _tar_name(entry.path)
    if entry.type == FILE and item.content is None:
        return _write_payload_file(tar_out, md5, sources, entry, sde)
    if entry.type == FILE:
        header = _tar_header((name, tarfile.REGTYPE, _normalised_mode(entry.mode), sde, len(item.content)))
        block = header + item.content + _tar_padding(len(item.content))
    elif entry.type == DIR:
        block = _tar_header((name, tarfile.DIRTYPE, _normalised_mode(entry.mode), sde))
    else:
        block = _tar_header((name, tarfile.SYMTYPE, 0o777, sde, 0, entry.link_target))
    tar_out.write(block)
    return len(block)


# -- ar ---------------------------------------------------------------------------------


class _MemberTooLarge(Exception):
    """An ar member over the format's size limit (write_deb names the package)."""


def _ar_header(name: str, size: int, mtime: int) -> bytes:
    if size > AR_MAX_MEMBER_SIZE:
        raise _MemberTooLarge(f"{name} is {size} bytes, over the ar format's 10-digit limit "
                              f"of {AR_MAX_MEMBER_SIZE} bytes")
    header = f"{name:<16}{mtime:<12}{0:<6}{0:<6}{0o100644:<8o}{size:<10}`\n".encode("ascii")
    assert len(header) == AR_HEADER_SIZE
    return header


def _ar_member(out: BinaryIO, name: str, data: bytes, mtime: int) -> None:
    out.write(_ar_header(name, len(data), mtime))
    out.write(data + (b"\n" if len(data) % 2 else b""))


# -- the writer -------------------------------------------------------------------------


def write_deb(spec: PackageSpec, out_dir: str, options: BuildOptions) -> BuiltPackage:
    """Write `out_dir/<file_name(spec)>` atomically; bad input raises RocpkgInputError and
    leaves no file behind."""
    if spec.format != FORMAT.name:
        raise RocpkgInputError((spec.name, f"a {spec.format!r} spec given to the .deb writer"))
    if options.compression not in compression.SUFFIXES:
        raise RocpkgInputError((spec.name, f"unknown compression {options.compression!r} (zstd, xz, gzip)"))
    rendered = render_deb(spec, options)
    control_text = _checked_control(spec, rendered.control)
    tree = _data_tree(spec, rendered.doc_files)
    conffiles = [d.entry.path for d in tree if d.entry.type == FILE and d.entry.path.startswith("/etc/")]
    sources = PackageSources(spec.name, [d.entry for d in tree if d.content is None])

    has_sources = any(d.entry.type == FILE and d.content is None for d in tree)

    def control_member(digests: dict[str, str]) -> bytes:
        return _compress_control(_control_tar(control_text, rendered.scripts, _md5sums(tree, digests, conffiles),
                                              conffiles, options.source_date_epoch, spec.shlibs), stored=has_sources)

    path = os.path.join(out_dir, file_name(spec))
    with AtomicOutput(path, "w+b") as out, sources.checked():
        try:
            _write_ar(out, spec, sources, control_member, tree, options)
        except _MemberTooLarge as exc:
            raise RocpkgInputError((f"{spec.name}: {file_name(spec)}", str(exc))) from None
        # The .deb's sha256 (the Packages index and the manifest carry it) covers
        # control.tar.gz, which is final only once every md5 is known, i.e. after the
        # payload: no order takes it in the write pass. The cheapest is one pass over the
        # compressed bytes (smaller than the input) from the page cache, here.
        sha256 = hashlib.sha256()
        size = hash_open(out, 0, sha256)
    installed = spec.payload_size + sum(len(d) for d in rendered.doc_files.values())
    return BuiltPackage(spec=spec, path=path, size=size, sha256=sha256.hexdigest(),
                        installed_size=installed, metadata=rendered.control, sources=tuple(sources.found))


def _write_ar(out: BinaryIO, spec: PackageSpec, sources: PackageSources, control_member, tree: list[_DataEntry],
              options: BuildOptions) -> None:
    """The ar archive: debian-binary, control.tar.gz with placeholder md5sums, then
    data.tar.* compressed straight into `out`; then the data member's size and the real
    md5sums are patched in place (both keep their length)."""
    sde = options.source_date_epoch
    data_name = f"data.tar.{compression.SUFFIXES[options.compression]}"
    out.write(AR_MAGIC)
    _ar_member(out, "debian-binary", DEBIAN_BINARY, sde)
    control_at = out.tell()
    placeholder = control_member({})
    _ar_member(out, "control.tar.gz", placeholder, sde)
    data_header_at = out.tell()
    out.write(_ar_header(data_name, 0, sde))
    data_at = data_header_at + AR_HEADER_SIZE
    compressor = compression.compressor(options.compression, out, options, compression.DEB, spec.payload_size)
    digests = _write_data_tar(compressor, sources, tree, sde, compression.writer_threads(options.threads))
    compressor.close()
    data_size = out.tell() - data_at
    # no source file, no md5 to fill in: the placeholder is the member (not compressed again)
    control = control_member(digests) if digests else placeholder
    if len(control) != len(placeholder):
        raise AssertionError("control.tar.gz changed length when the md5sums were filled in")
    out.seek(control_at)
    _ar_member(out, "control.tar.gz", control, sde)
    data_header = _ar_header(data_name, data_size, sde)
    out.seek(data_header_at)
    out.write(data_header)
    out.seek(0, os.SEEK_END)
    if data_size % 2:
        out.write(b"\n")


# A line of a stanza as rocpkg renders it: `Name: value` (deb822(5): a name of printable
# ASCII but colon, not starting with # or -) or a continuation line (one space, then text),
# neither with whitespace at its end.
_FIELD_LINE = re.compile(r"(?P<name>[!-\x22$-,.-9;-~][!-9;-~]*): (?P<value>\S(?:.*\S)?)")
_CONTINUATION_LINE = re.compile(r" \S(?:.*\S)?")
# what str.splitlines() also breaks at (python-debian splits the text there): refused
_OTHER_LINE_BREAK = re.compile("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def _checked_control(spec: PackageSpec, text: str) -> str:
    """The rendered stanza, refused unless it is exactly one canonical deb822 paragraph
    with the required fields, each once, and the spec's own name and version (a template
    that broke the stanza is caught here). Canonical text is what python-debian's
    Deb822(text).dump() gives back, byte for byte (tests/test_deb.py holds it to that);
    checked here without python-debian so that a build's workers do not import it before
    their first write."""
    where = f"{spec.name}: control"
    lines = text.split("\n")
    odd = _OTHER_LINE_BREAK.search(text)
    if odd is not None:
        raise RocpkgInputError((where, f"rendered control holds a line break other than \\n: U+{ord(odd.group()):04X}"))
    if not text.endswith("\n") or "" in lines[:-1]:
        raise RocpkgInputError((where, "rendered control is not one stanza ending in a newline "
                                       f"(an empty line or none at the end: {text[-40:]!r})"))
    fields: dict[str, str] = {}        # lower-case name -> first line: names are case-insensitive
    for number, line in enumerate(lines[:-1], 1):
        found = _FIELD_LINE.fullmatch(line)
        if found is not None and found["name"].lower() not in fields:
            fields[found["name"].lower()] = found["value"]
        elif found is not None or number == 1 or _CONTINUATION_LINE.fullmatch(line) is None:
            problem = "repeats a field" if found is not None else "is not `Name: value` or a continuation line"
            raise RocpkgInputError((where, f"rendered control line {number} {problem}: {line[:80]!r}"))
    missing = [f for f in REQUIRED_CONTROL_FIELDS if f.lower() not in fields]
    if missing:
        raise RocpkgInputError((where, f"rendered control lacks {', '.join(missing)}"))
    if fields["package"] != spec.name or fields["version"] != spec.evr:
        raise RocpkgInputError((where, "rendered Package/Version differ from the plan"))
    return text


# -- the reader -------------------------------------------------------------------------


def iter_deb_members(path: str) -> Iterator[ArMember]:
    """The ar members of a .deb, in order, without reading their contents; a member whose
    size or date is not decimal digits, or whose bytes end past the file's, is bad input
    naming the file and the member."""
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        if f.read(len(AR_MAGIC)) != AR_MAGIC:
            raise RocpkgInputError((path, "not a .deb: no ar archive magic"))
        while header := f.read(AR_HEADER_SIZE):
            if len(header) != AR_HEADER_SIZE or header[58:60] != b"`\n":
                raise RocpkgInputError((path, f"corrupt ar member header at offset {f.tell() - len(header)}"))
            name = header[:16].decode("ascii", "replace").rstrip().rstrip("/")
            size, mtime, offset = header[48:58].strip(), header[16:28].strip() or b"0", f.tell()
            problem = next((f"its {what} {field.decode('ascii', 'replace')!r} is not decimal digits"
                            for what, field in (("size", size), ("date", mtime)) if not field.isdigit()), "") \
                or (offset + int(size) > end and f"its {int(size)} bytes end past the file's {end}")
            if problem:
                raise RocpkgInputError((path, f"ar member {name!r} at offset {offset - AR_HEADER_SIZE}: {problem}"))
            size, mtime = int(size), int(mtime)
            yield ArMember(name, offset, size, mtime)
            f.seek(offset + size + size % 2)


class _MemberReader(io.RawIOBase):
    """A read-only window over one ar member's bytes."""

    def __init__(self, f: BinaryIO, member: ArMember):
        self.f = f
        self.remaining = member.size
        f.seek(member.offset)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.remaining <= 0:
            return 0
        data = self.f.read(min(len(buffer), self.remaining))
        buffer[: len(data)] = data
        self.remaining -= len(data)
        return len(data)


@contextmanager
def open_deb_tar(path: str, prefix: str) -> Iterator[tarfile.TarFile]:
    """Stream the tar inside the member whose name starts with `prefix` (control.tar or
    data.tar), decompressing on the fly."""
    member = next((m for m in iter_deb_members(path) if m.name.startswith(prefix)), None)
    if member is None:
        raise RocpkgInputError((path, f"no {prefix}* member"))
    with open(path, "rb") as f:
        raw = io.BufferedReader(_MemberReader(f, member), CHUNK)
        stream = compression.open_decompressor(member.name[len(prefix):], raw, f"{path}: {member.name}")
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            yield tar


def read_deb_control_file(path: str, name: str) -> bytes | None:
    """The bytes of one control.tar file (control, md5sums, postinst...), or None."""
    with open_deb_tar(path, "control.tar") as tar:
        for info in tar:
            if info.name.removeprefix("./") == name and info.isfile():
                return tar.extractfile(info).read()
    return None


def read_deb_control(path: str):
    """The control stanza of a .deb (a python-debian Deb822)."""
    from debian.deb822 import Deb822   # here: a build's workers need not import python-debian

    data = read_deb_control_file(path, "control")
    if data is None:
        raise RocpkgInputError((path, "control.tar has no control file"))
    return Deb822(data.decode("utf-8"))


def parse_relations(text: str) -> list[str]:
    """A Depends-style field as its comma-separated relations (python-debian's parser;
    `a (>= 1) | b` stays one), each in canonical spelling."""
    if not text.strip():
        return []
    from debian.deb822 import PkgRelation

    return [PkgRelation.str([group]) for group in PkgRelation.parse_relations(text)]


def list_deb_files(path: str) -> list[tuple[str, int, int, str, str]]:
    """(install path, size, permission bits, FILE|DIR|SYMLINK|"hardlink"|"other",
    link target) of every data.tar member, streamed (the payload is never held)."""
    listing = []
    with open_deb_tar(path, "data.tar") as tar:
        for info in tar:
            name = "/" + info.name.removeprefix(".").strip("/")
            if info.isreg():
                kind = FILE
            elif info.isdir():
                kind = DIR
            elif info.issym():
                kind = SYMLINK
            elif info.islnk():
                kind = "hardlink"
            else:
                kind = "other"
            listing.append((name, info.size, info.mode, kind, info.linkname))
    return listing
