"""write_pacman: a PackageSpec -> one `.pkg.tar.zst` as makepkg writes it: one compressed
tar of `.BUILDINFO`, `.INSTALL` (when the package has scripts), `.MTREE` and `.PKGINFO`,
then the files, every member owned by root (uid/gid 0), sorted bytewise, mtimes clamped
to SOURCE_DATE_EPOCH. Knows nothing of ROCm: it packs what the PackageSpec says.

Each source is read once, streamed through formats.streams.SourceFile (patches applied
there). The .MTREE, which precedes the files, holds each file's md5 and sha256, known only
once the file has streamed past: so the files' part of the tar is compressed first into an
unnamed temporary file beside the output (O_TMPFILE: nothing is left behind by a crash),
then the metadata members are compressed into the output and the files' compressed bytes
copied after them, the whole file's sha256 taken on the way. Two compressed streams one
after the other are one stream to every reader (zstd frames, gzip members, xz streams),
and the tar inside them is one archive. Memory stays flat in the payload size."""
from __future__ import annotations

import hashlib
import lzma
import os
import tempfile
from dataclasses import dataclass, field

import rocpkg
from rocpkg.errors import RocpkgInputError
from rocpkg.formats import compression
from rocpkg.formats.filelist import PackageSources, checked_files
from rocpkg.formats.pacman import mtree, rules, tar
from rocpkg.formats.pacman.templates import render
from rocpkg.formats.render import SCRIPT_NAMES, check_metadata, deb_synopsis, render_script
from rocpkg.formats.streams import CHUNK, AtomicOutput, HashingWriter, digester
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, BuiltPackage, FileEntry, PackageSpec

# zstd as a run of independent frames (threads do not change the bytes), each with its
# content checksum as the zstd tool writes it; libarchive reads a run of frames as one stream.
PACMAN = compression.Flavour(xz_check=lzma.CHECK_CRC64, zlib_gzip_header=False, zstd_checksum=True,
                             zstd_frames=True)
# Debian script name -> the .INSTALL functions that run it (templates/pacman/INSTALL.j2)
INSTALL_FUNCTIONS = {"preinst": ("pre_install", "pre_upgrade"), "postinst": ("post_install", "post_upgrade"),
                     "prerm": ("pre_remove",), "postrm": ("post_remove",)}
META_MEMBERS = (".BUILDINFO", ".INSTALL", ".MTREE", ".PKGINFO")   # bytewise order, before the files


@dataclass(frozen=True)
class PkgInfo:
    """Every .PKGINFO value, in pacman's syntax, each on one line."""

    name: str
    version: str
    desc: str
    url: str
    builddate: int
    packager: str
    size: int
    arch: str
    licenses: list[str] = field(default_factory=list)
    replaces: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    backup: list[str] = field(default_factory=list)
    depends: list[str] = field(default_factory=list)
    optdepends: list[str] = field(default_factory=list)


def filename(spec: PackageSpec, options: BuildOptions) -> str:
    """The package's file name (rules.package_filename)."""
    return rules.package_filename(spec.name, spec.version, spec.release, spec.arch, spec.epoch, options.compression)


def _checked(spec: PackageSpec, field_name: str, value: str, canonical) -> list[tuple[str, str]]:
    """A problem when value is not already in pacman's spelling (the plan applies rules)."""
    try:
        if canonical(value) == value:
            return []
        return [(f"{spec.name}: {field_name}", f"{value!r} is not in pacman's syntax ({canonical(value)!r} is)")]
    except RocpkgInputError as exc:
        return [(f"{spec.name}: {field_name}", what) for _, what in exc.problems]


def pkginfo(spec: PackageSpec, options: BuildOptions, files: list[FileEntry]) -> PkgInfo:
    """The .PKGINFO values of a spec whose names, version and relations are pacman's
    (the plan applies formats.pacman.rules); every value not so is refused at once.
    Mapping of the neutral relation kinds: depends and pre_depends -> depend, recommends
    and suggests -> optdepend, conflicts and breaks -> conflict, obsoletes -> replaces
    (pacman's replaces is rpm's Obsoletes; Debian's Replaces has no pacman meaning)."""
    check_metadata(spec)
    problems = []
    problems += [(spec.name, rules.name_problem(spec.name))] if rules.name_problem(spec.name) else []
    problems += _checked(spec, "version", spec.version, rules.pkgver)
    problems += _checked(spec, "release", spec.release, rules.pkgrel)
    problems += _checked(spec, "arch", spec.arch, rules.architecture)
    if not isinstance(spec.epoch, int) or spec.epoch < 0:
        problems.append((f"{spec.name}: epoch", f"{spec.epoch!r} is not a non-negative integer"))
    kinds = ("depends", "pre_depends", "recommends", "suggests", "conflicts", "breaks", "provides", "obsoletes")
    for kind in kinds:
        for value in getattr(spec, kind):
            problems += _checked(spec, kind, value, rules.relation)
    unknown = sorted(set(spec.scripts) - set(INSTALL_FUNCTIONS))
    problems += [(spec.name, f"unknown maintainer script {unknown[0]!r}")] if unknown else []
    if problems:
        raise RocpkgInputError(*problems)
    return PkgInfo(
        name=spec.name, version=rules.full_version(spec.version, spec.release, spec.epoch),
        desc=deb_synopsis(spec.summary or spec.name), url=spec.homepage, builddate=options.source_date_epoch,
        packager=" ".join((spec.maintainer or spec.vendor or "Unknown Packager").split()),
        size=sum(e.size for e in files if e.type == FILE), arch=spec.arch,
        licenses=[" ".join(spec.license.split()) or "unknown"], replaces=list(spec.obsoletes),
        conflicts=_unique(spec.conflicts + spec.breaks), provides=list(spec.provides),
        backup=[e.path[1:] for e in files if e.type == FILE and e.path.startswith("/etc/")],
        depends=_unique(spec.pre_depends + spec.depends), optdepends=_unique(spec.recommends + spec.suggests))


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def install_script(spec: PackageSpec, options: BuildOptions) -> str:
    """The .INSTALL text ("" without scripts): each Debian-named script's shared body as
    the pacman functions of the same events (INSTALL_FUNCTIONS)."""
    functions = []
    for name in SCRIPT_NAMES:
        if name in spec.scripts:
            first, *others = INSTALL_FUNCTIONS[name]
            functions.append((first, render_script(name, spec, options).strip("\n")))
            functions += [(other, f'{first} "$@"') for other in others]
    return render("pacman/INSTALL.j2", functions=functions) if functions else ""


def with_all_parents(files: list[FileEntry]) -> list[FileEntry]:
    """The entries plus every missing ancestor up to (not including) "/", as 0755
    directories, sorted bytewise: makepkg packs every directory of $pkgdir (usr/, opt/...),
    and pacman keeps a directory other packages still hold."""
    entries = {e.path: e for e in files}
    for path in list(entries):
        parent = path.rpartition("/")[0]
        while parent and parent not in entries:
            entries[parent] = FileEntry(parent, DIR, 0o755)
            parent = parent.rpartition("/")[0]
    return [entries[p] for p in sorted(entries, key=lambda p: p.encode("utf-8", "surrogateescape"))]


def _mode(entry: FileEntry) -> int:
    return 0o777 if entry.type == SYMLINK else entry.mode & 0o7755


def _write_files(sink, sources: PackageSources, tree: list[FileEntry], sde: int,
                 threads: int) -> tuple[list[mtree.MtreeEntry], int]:
    """The files' tar members into sink; returns their mtree entries and the bytes written."""
    md5, sha256 = digester("md5", threads), digester("sha256", threads)
    entries, offset, mtimes = [], 0, {}
    try:
        for entry in tree:
            name = entry.path[1:]
            if entry.type == DIR:
                block = tar.header(name, tar.DIR, _mode(entry), sde)
            elif entry.type == SYMLINK:
                block = tar.header(name, tar.SYM, 0o777, sde, 0, entry.link_target)
            else:
                offset += _write_file(sink, sources, entry, sde, md5, sha256, mtimes)
                continue
            sink.write(block)
            offset += len(block)
    except BaseException:
        md5.abandon()
        sha256.abandon()
        raise
    md5s, sha256s = md5.close(), sha256.close()
    for entry in tree:
        kind = {FILE: "file", DIR: "dir", SYMLINK: "link"}[entry.type]
        entries.append(mtree.MtreeEntry(entry.path[1:], kind, _mode(entry), entry.size if entry.type == FILE else 0,
                                        mtimes.get(entry.path, sde), md5s.get(entry.path, ""),
                                        sha256s.get(entry.path, ""), entry.link_target))
    return entries, offset


def _write_file(sink, sources: PackageSources, entry: FileEntry, sde: int, md5, sha256, mtimes: dict) -> int:
    with sources.open(entry) as source:
        mtime = mtimes[entry.path] = min(source.mtime, sde)
        header = tar.header(entry.path[1:], tar.REG, _mode(entry), mtime, entry.size)
        sink.write(header)
        source.copy_to(sink, (md5, sha256), entry.path)
    pad = tar.padding(entry.size)
    sink.write(pad)
    return len(header) + entry.size + len(pad)


def _meta_members(texts: dict[str, bytes], files: list[mtree.MtreeEntry], sde: int) -> bytes:
    """The metadata members in bytewise order; the .MTREE lists the others and the files."""
    listed = [mtree.MtreeEntry(name, "file", 0o644, len(data), sde, hashlib.md5(data, usedforsecurity=False).hexdigest(),
                               hashlib.sha256(data).hexdigest()) for name, data in sorted(texts.items())]
    members = dict(texts, **{".MTREE": mtree.render(listed + files)})
    return b"".join(tar.member(name, members[name], sde) for name in META_MEMBERS if name in members)


def write_pacman(spec: PackageSpec, out_dir: str, options: BuildOptions) -> BuiltPackage:
    """Write `out_dir/<filename(spec, options)>` atomically; bad input raises
    RocpkgInputError and leaves no file behind. metadata is the .PKGINFO text."""
    if spec.format != rules.FORMAT:
        raise RocpkgInputError((spec.name, f"a {spec.format!r} spec given to the pacman writer"))
    if options.compression not in compression.SUFFIXES:
        raise RocpkgInputError((spec.name, f"unknown compression {options.compression!r} (zstd, xz, gzip)"))
    files = checked_files(spec.name, spec.files)
    info = pkginfo(spec, options, files)
    tree = with_all_parents(files)
    sources = PackageSources(spec.name, files)
    sde = options.source_date_epoch
    texts = {".PKGINFO": render("pacman/PKGINFO.j2", info=info).encode("utf-8"),
             ".BUILDINFO": render("pacman/BUILDINFO.j2", info=info, tool_version=rocpkg.__version__).encode("utf-8")}
    script = install_script(spec, options)
    if script:
        texts[".INSTALL"] = script.encode("utf-8")
    threads = compression.writer_threads(options.threads)
    path = os.path.join(out_dir, filename(spec, options))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryFile(dir=out_dir) as payload, sources.checked():
        compressor = compression.compressor(options.compression, payload, options, PACMAN)
        listed, size = _write_files(compressor, sources, tree, sde, threads)
        meta = _meta_members(texts, listed, sde)
        compressor.write(tar.end(len(meta) + size))
        compressor.close()
        with AtomicOutput(path, "wb") as out:
            whole = HashingWriter(out)
            head = compression.compressor(options.compression, whole, options, PACMAN)
            head.write(meta)
            head.close()
            payload.seek(0)
            while chunk := payload.read(CHUNK):
                whole.write(chunk)
    return BuiltPackage(spec=spec, path=path, size=whole.count, sha256=whole.hexdigest(),
                        installed_size=info.size, metadata=texts[".PKGINFO"].decode("utf-8"),
                        sources=tuple(sources.found))
