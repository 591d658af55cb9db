"""Native .deb writer and reader: streams payload files from the artifacts into
`debian-binary`, `control.tar.*`, `data.tar.*` in one ar archive, no dpkg-deb, no
staging copy. Knows nothing of ROCm: it packs what the PackageSpec says.

Why the payload is read twice but written once: `md5sums` lives in control.tar, which
must precede data.tar in the ar archive, and lintian refuses an uncompressed control.tar
(error `uses-no-compression-for-control-tarball`), so control.tar's size is unknown until
every md5 is. A first pass reads each source file for its md5 (files in parallel, it is
pure reading); the second pass streams them into data.tar.<comp>, written straight into
the output at its final offset, and checks each file is still the one the first pass
hashed. The data member's size is known only after compression: its ar header is written
with a placeholder and patched, so the sha256 of the finished .deb is taken by reading
the (compressed, just-written) output back once.
"""
from __future__ import annotations

import errno
import gzip
import hashlib
import io
import lzma
import os
import posixpath
import stat
import tarfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Iterator

import zstandard
from debian.deb822 import Deb822

from rocpkg.errors import RocpkgInputError
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, BuiltPackage, FileEntry, PackageSpec
from rocpkg.render import render_deb
from rocpkg.streams import CHUNK, AtomicOutput, HashingWriter, copy_stream

AR_MAGIC = b"!<arch>\n"
AR_HEADER_SIZE = 60
AR_MAX_MEMBER_SIZE = 9_999_999_999      # the ar size field holds 10 decimal digits
DEBIAN_BINARY = b"2.0\n"
REQUIRED_CONTROL_FIELDS = ("Package", "Version", "Architecture", "Maintainer", "Description")
COMPRESSIONS = {"zstd": "zst", "xz": "xz", "gzip": "gz"}
# zstd workers each hold about 3 jobs: 4 MiB jobs and at most 8 workers keep the writer
# under 200 MB of RSS on any machine (the default job size costs ~30 MB per worker). The
# output depends on the job size, never on the number of workers.
ZSTD_JOB_SIZE = 4 << 20
ZSTD_MAX_THREADS = 8


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


def _name_problem(path: str) -> str | None:
    """Why tar (or dpkg) can't hold this install path, or None."""
    if not path.startswith("/") or path != "/" and path.endswith("/"):
        return "must be an absolute path without a trailing slash"
    if "\n" in path or "\0" in path or "\r" in path:
        return "a file name that tar and dpkg can't hold (newline or NUL in it)"
    if posixpath.normpath(path) != path and path != "/":
        return "not a normalised path ('.', '..' or '//' in it)"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "a file name that is not valid UTF-8, which tar's GNU headers can't carry"
    return None


def _data_tree(spec: PackageSpec, doc_files: dict[str, bytes]) -> list[_DataEntry]:
    """Every data.tar member in order: `./`, missing ancestors as 0755 root dirs, the
    planned entries and the generated doc files, sorted by path bytes (parents first)."""
    problems: list[tuple[str, str]] = []
    entries: dict[str, _DataEntry] = {}
    for entry in spec.files:
        problem = _name_problem(entry.path)
        if entry.type not in (FILE, DIR, SYMLINK):
            problem = f"unknown entry type {entry.type!r}"
        elif entry.type == SYMLINK and (not entry.link_target or "\n" in entry.link_target
                                        or "\0" in entry.link_target):
            problem = f"symlink target {entry.link_target!r} can't be stored"
        elif entry.type == FILE and not entry.source:
            problem = "a file without a source path"
        elif entry.path in entries:
            problem = "listed twice"
        if problem:
            problems.append((f"{spec.name}: {entry.path}", problem))
            continue
        entries[entry.path] = _DataEntry(entry)
    for path, data in doc_files.items():
        if path in entries:
            problems.append((f"{spec.name}: {path}", "collides with a generated Debian doc file"))
            continue
        entries[path] = _DataEntry(FileEntry(path, FILE, 0o644, size=len(data)), data)
    for path in list(entries):
        parent = posixpath.dirname(path)
        while parent != "/":
            existing = entries.get(parent)
            if existing is None:
                entries[parent] = _DataEntry(FileEntry(parent, DIR, 0o755))
            elif existing.entry.type != DIR:
                problems.append((f"{spec.name}: {path}", f"its parent {parent} is not a directory"))
                break
            parent = posixpath.dirname(parent)
    if problems:
        raise RocpkgInputError(problems)
    entries["/"] = _DataEntry(FileEntry("/", DIR, 0o755))
    return [entries[p] for p in sorted(entries, key=lambda p: p.encode("utf-8"))]


def _tar_name(path: str) -> str:
    return "./" if path == "/" else "." + path


# -- reading sources ---------------------------------------------------------------------

_ZEROS = memoryview(bytes(CHUNK))


class _SourceChanged(Exception):
    """The source file is not the size it was planned (or first read) with."""


def _next_data(fd: int, position: int, size: int) -> int:
    """Offset of the next byte of data at or after position (size if only a hole is
    left). A file system that can't tell (EINVAL, EOPNOTSUPP) has no holes."""
    try:
        return min(os.lseek(fd, position, os.SEEK_DATA), size)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return size
        return position


def _next_hole(fd: int, position: int, size: int) -> int:
    try:
        return min(os.lseek(fd, position, os.SEEK_HOLE), size)
    except OSError:
        return size


def _source_chunks(source: BinaryIO, size: int) -> Iterator[bytes | memoryview]:
    """Exactly `size` bytes of an open file, in chunks of at most CHUNK. Holes of a sparse
    file come from a shared zero buffer instead of read(): the kernel would only hand back
    zeros, at a real cost for multi-GiB sparse files. Raises _SourceChanged if the file is
    shorter or longer than `size`."""
    fd = source.fileno()
    position = 0
    while position < size:
        data_at = _next_data(fd, position, size)
        while position < data_at:
            step = min(CHUNK, data_at - position)
            yield _ZEROS[:step]
            position += step
        if position >= size:
            break
        hole_at = _next_hole(fd, position, size)
        source.seek(position)
        while position < hole_at:
            chunk = source.read(min(CHUNK, hole_at - position))
            if not chunk:
                raise _SourceChanged(f"it ended at {position} bytes")
            yield chunk
            position += len(chunk)
    if os.fstat(fd).st_size != size:
        raise _SourceChanged(f"it has {os.fstat(fd).st_size} bytes now")


# -- before writing: the sources are there ----------------------------------------------


def _check_sources(spec: PackageSpec, tree: list[_DataEntry]) -> None:
    """Every planned source is a readable regular file of its planned size; every bad one
    is reported at once, before a byte is written. (Its md5 is taken while it streams into
    data.tar, and control.tar rewritten afterwards: one read of each source.)"""
    problems = []
    for item in tree:
        entry = item.entry
        if entry.type != FILE or item.content is not None:
            continue
        try:
            info = os.stat(entry.source)
        except FileNotFoundError:
            why = "the source file is missing (vanished since planning?)"
        except OSError as exc:
            why = f"the source file can't be read: {exc.strerror or exc}"
        else:
            if not stat.S_ISREG(info.st_mode):
                why = "the source is not a regular file"
            elif info.st_size != entry.size:
                why = f"the source file has {info.st_size} bytes, the plan says {entry.size} (changed since planning?)"
            elif not os.access(entry.source, os.R_OK):
                why = "the source file can't be read: permission denied"
            else:
                continue
        problems.append((f"{spec.name}: {entry.path}", f"{why} ({entry.source})"))
    if problems:
        raise RocpkgInputError(problems)


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
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.size = size
    info.linkname = linkname
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tar_header(info: tarfile.TarInfo) -> bytes:
    """GNU-format header (dpkg rejects PAX); sizes >= 8 GiB go base-256, long names
    into ././@LongLink records."""
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


def _tar_padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _tar_end(offset: int) -> bytes:
    """Two zero blocks, then zeros up to a full 10 KiB record, as tar(1) writes."""
    offset += 2 * tarfile.BLOCKSIZE
    return b"\0" * (2 * tarfile.BLOCKSIZE + (-offset % tarfile.RECORDSIZE))


class _XzWriter:
    def __init__(self, sink, preset: int):
        self.sink = sink
        self.compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=preset)

    def write(self, data) -> int:
        self.sink.write(self.compressor.compress(data))
        return len(data)

    def close(self) -> None:
        self.sink.write(self.compressor.flush())


def _compressor(kind: str, options: BuildOptions, sink):
    """A write()/close() stream compressing into sink; close() ends the stream without
    closing sink. zstd runs in worker threads with a fixed job size; gzip writes no
    name and mtime 0."""
    level = options.compression_level
    if kind == "zstd":
        threads = min(options.threads or os.cpu_count() or 1, ZSTD_MAX_THREADS)
        parameters = zstandard.ZstdCompressionParameters.from_level(
            max(1, min(level, 19)), threads=threads, job_size=ZSTD_JOB_SIZE,
            write_checksum=True)  # as dpkg-deb: dpkg then refuses a flipped byte
        compressor = zstandard.ZstdCompressor(compression_params=parameters)
        return compressor.stream_writer(sink, closefd=False)
    if kind == "xz":
        return _XzWriter(sink, max(0, min(level, 9)))
    if kind == "gzip":
        return gzip.GzipFile(filename="", mode="wb", fileobj=sink,
                             compresslevel=max(1, min(level, 9)), mtime=0)
    raise RocpkgInputError([("compression", f"unknown compression {kind!r} (zstd, xz, gzip)")])


def _control_tar(control: str, scripts: dict[str, str], md5sums: bytes, conffiles: list[str],
                 mtime: int) -> bytes:
    """control.tar: ./, control, md5sums, conffiles (if any), maintainer scripts."""
    members: list[tuple[str, bytes, int]] = [("./control", control.encode("utf-8"), 0o644),
                                              ("./md5sums", md5sums, 0o644)]
    if conffiles:
        members.append(("./conffiles", "".join(f"{p}\n" for p in conffiles).encode("utf-8"), 0o644))
    for name in sorted(scripts):
        members.append((f"./{name}", scripts[name].encode("utf-8"), 0o755))
    out = io.BytesIO()
    out.write(_tar_header(_tarinfo("./", tarfile.DIRTYPE, 0o755, mtime)))
    for name, data, mode in members:
        out.write(_tar_header(_tarinfo(name, tarfile.REGTYPE, mode, mtime, len(data))))
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


def _write_payload_file(tar_out, spec: PackageSpec, entry: FileEntry, sde: int) -> tuple[int, str]:
    """Header + bytes of one source file; returns the tar bytes written and the file's md5."""
    where = f"{spec.name}: {entry.path}"
    try:
        source = open(entry.source, "rb")
    except FileNotFoundError:
        raise RocpkgInputError([(where, f"the source file vanished while packing ({entry.source})")]) from None
    except OSError as exc:
        raise RocpkgInputError([(where, f"the source file can't be read: {exc.strerror} ({entry.source})")]) from None
    with source:
        info = os.fstat(source.fileno())
        if info.st_size != entry.size:
            raise RocpkgInputError([(where, f"the source file changed while packing: it has {info.st_size} "
                                            f"bytes, the plan says {entry.size} ({entry.source})")])
        mtime = min(int(info.st_mtime), sde)
        digest = hashlib.md5(usedforsecurity=False)
        header = _tar_header(_tarinfo(_tar_name(entry.path), tarfile.REGTYPE,
                                      _normalised_mode(entry.mode), mtime, entry.size))
        tar_out.write(header)
        try:
            for chunk in _source_chunks(source, entry.size):
                tar_out.write(chunk)
                digest.update(chunk)
        except _SourceChanged as exc:
            raise RocpkgInputError([(where, f"the source file changed while packing: {exc} ({entry.source})")]) from None
        except OSError as exc:
            raise RocpkgInputError([(where, f"the source file can't be read: {exc.strerror} ({entry.source})")]) from None
    padding = _tar_padding(entry.size)
    tar_out.write(padding)
    return len(header) + entry.size + len(padding), digest.hexdigest()


def _write_data_tar(tar_out, spec: PackageSpec, tree: list[_DataEntry], sde: int) -> dict[str, str]:
    """Stream the whole data.tar into tar_out (a compressor); returns the md5 of every
    source file, taken on the way."""
    offset = 0
    digests = {}
    for item in tree:
        entry = item.entry
        name = _tar_name(entry.path)
        if entry.type == FILE and item.content is None:
            written, digests[entry.path] = _write_payload_file(tar_out, spec, entry, sde)
            offset += written
            continue
        if entry.type == FILE:
            header = _tar_header(_tarinfo(name, tarfile.REGTYPE, _normalised_mode(entry.mode), sde, len(item.content)))
            block = header + item.content + _tar_padding(len(item.content))
        elif entry.type == DIR:
            block = _tar_header(_tarinfo(name, tarfile.DIRTYPE, _normalised_mode(entry.mode), sde))
        else:
            block = _tar_header(_tarinfo(name, tarfile.SYMTYPE, 0o777, sde, linkname=entry.link_target))
        tar_out.write(block)
        offset += len(block)
    tar_out.write(_tar_end(offset))
    return digests


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
    """Write `out_dir/<spec.filename>` atomically; bad input raises RocpkgInputError and
    leaves no file behind."""
    if spec.format != "deb":
        raise RocpkgInputError([(spec.name, f"a {spec.format!r} spec given to the .deb writer")])
    if options.compression not in COMPRESSIONS:
        raise RocpkgInputError([(spec.name, f"unknown compression {options.compression!r} (zstd, xz, gzip)")])
    rendered = render_deb(spec, options)
    control_text = _parse_control(spec, rendered.control).dump()
    tree = _data_tree(spec, rendered.doc_files)
    conffiles = [d.entry.path for d in tree if d.entry.type == FILE and d.entry.path.startswith("/etc/")]
    _check_sources(spec, tree)

    has_sources = any(d.entry.type == FILE and d.content is None for d in tree)

    def control_member(digests: dict[str, str]) -> bytes:
        return _compress_control(_control_tar(control_text, rendered.scripts, _md5sums(tree, digests, conffiles),
                                              conffiles, options.source_date_epoch), stored=has_sources)

    path = os.path.join(out_dir, spec.filename)
    with AtomicOutput(path, "w+b") as out:
        try:
            _write_ar(out, spec, control_member, tree, options)
        except _MemberTooLarge as exc:
            raise RocpkgInputError([(f"{spec.name}: {spec.filename}", str(exc))]) from None
        out.flush()
        out.seek(0)
        digest = HashingWriter(None, ("sha256",))
        copy_stream(out, digest)
    installed = spec.payload_size + sum(len(d) for d in rendered.doc_files.values())
    return BuiltPackage(spec=spec, path=path, size=digest.count, sha256=digest.hexdigest(),
                        installed_size=installed, metadata=rendered.control)


def _write_ar(out: BinaryIO, spec: PackageSpec, control_member, tree: list[_DataEntry],
              options: BuildOptions) -> None:
    """The ar archive: debian-binary, control.tar.gz with placeholder md5sums, then
    data.tar.* compressed straight into `out`; then the data member's size and the real
    md5sums are patched in place (both keep their length)."""
    sde = options.source_date_epoch
    data_name = f"data.tar.{COMPRESSIONS[options.compression]}"
    out.write(AR_MAGIC)
    _ar_member(out, "debian-binary", DEBIAN_BINARY, sde)
    control_at = out.tell()
    placeholder = control_member({})
    _ar_member(out, "control.tar.gz", placeholder, sde)
    data_header_at = out.tell()
    out.write(_ar_header(data_name, 0, sde))
    counted = HashingWriter(out, ())
    compressor = _compressor(options.compression, options, counted)
    digests = _write_data_tar(compressor, spec, tree, sde)
    compressor.close()
    control = control_member(digests)
    if len(control) != len(placeholder):
        raise AssertionError("control.tar.gz changed length when the md5sums were filled in")
    out.seek(control_at)
    _ar_member(out, "control.tar.gz", control, sde)
    data_header = _ar_header(data_name, counted.count, sde)
    out.seek(data_header_at)
    out.write(data_header)
    out.seek(0, os.SEEK_END)
    if counted.count % 2:
        out.write(b"\n")


def _parse_control(spec: PackageSpec, text: str) -> Deb822:
    """The rendered stanza as a Deb822: exactly one paragraph with the required fields
    and the spec's own name and version (a template that broke the stanza is caught here)."""
    paragraphs = list(Deb822.iter_paragraphs(text.splitlines(keepends=True)))
    where = f"{spec.name}: control"
    if len(paragraphs) != 1:
        raise RocpkgInputError([(where, f"rendered control has {len(paragraphs)} stanzas, not 1")])
    control = paragraphs[0]
    missing = [f for f in REQUIRED_CONTROL_FIELDS if not control.get(f, "").strip()]
    if missing:
        raise RocpkgInputError([(where, f"rendered control lacks {', '.join(missing)}")])
    if control["Package"] != spec.name or control["Version"] != spec.evr:
        raise RocpkgInputError([(where, "rendered Package/Version differ from the plan")])
    return control


# -- the reader -------------------------------------------------------------------------


def iter_deb_members(path: str) -> Iterator[ArMember]:
    """The ar members of a .deb, in order, without reading their contents."""
    with open(path, "rb") as f:
        if f.read(len(AR_MAGIC)) != AR_MAGIC:
            raise RocpkgInputError([(path, "not a .deb: no ar archive magic")])
        while header := f.read(AR_HEADER_SIZE):
            if len(header) != AR_HEADER_SIZE or header[58:60] != b"`\n":
                raise RocpkgInputError([(path, f"corrupt ar member header at offset {f.tell() - len(header)}")])
            name = header[:16].decode("ascii", "replace").rstrip().rstrip("/")
            size = int(header[48:58].decode("ascii").strip())
            mtime = int(header[16:28].decode("ascii").strip() or 0)
            offset = f.tell()
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
        raise RocpkgInputError([(path, f"no {prefix}* member")])
    with open(path, "rb") as f:
        raw = io.BufferedReader(_MemberReader(f, member), CHUNK)
        suffix = member.name[len(prefix):]
        if suffix == ".zst":
            stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        elif suffix == ".xz":
            stream = lzma.LZMAFile(raw)
        elif suffix == ".gz":
            stream = gzip.GzipFile(fileobj=raw, mode="rb")
        elif suffix == "":
            stream = raw
        else:
            raise RocpkgInputError([(path, f"unsupported member compression {member.name}")])
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            yield tar


def read_deb_control_file(path: str, name: str) -> bytes | None:
    """The bytes of one control.tar file (control, md5sums, postinst...), or None."""
    with open_deb_tar(path, "control.tar") as tar:
        for info in tar:
            if info.name.removeprefix("./") == name and info.isfile():
                return tar.extractfile(info).read()
    return None


def read_deb_control(path: str) -> Deb822:
    """The control stanza of a .deb."""
    data = read_deb_control_file(path, "control")
    if data is None:
        raise RocpkgInputError([(path, "control.tar has no control file")])
    return Deb822(data.decode("utf-8"))


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
