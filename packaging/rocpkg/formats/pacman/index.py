"""A pacman repository database as repo-add writes it, from the packages in one repository
directory (OUT/pacman/<arch>/: packages, signatures and database side by side):

  <repo>.db.tar.zst      one `<pkgname>-<version>/desc` per package (repo-add's fields, in
                         its order, each only when it has a value)
  <repo>.files.tar.zst   the same entries, each with a `files` list (%FILES%: the paths,
                         directories ending in '/', sorted bytewise)
  <repo>.db, <repo>.files   copies of the two (repo-add makes symlinks: a copy serves the
                         same over plain HTTP and object stores, and OUT holds no symlinks)
  <pkg>.sig, <repo>.db.tar.zst.sig, <repo>.files.tar.zst.sig (and their copies beside
                         <repo>.db / <repo>.files): detached binary OpenPGP signatures,
                         when a signer is given; the package's is also %PGPSIG% (base64)

Each package's metadata comes from its own .PKGINFO and its file list from its .MTREE,
both read from the head of its stream (read_pacman_info), as repo-add reads them with
bsdtar. A database holds one version per name: the newest by pacman's vercmp (two files of
one name and version are refused). Same packages, same SOURCE_DATE_EPOCH and same key give
the same bytes. Every file is written whole or not at all (formats.streams.write_atomic);
the database itself is written after everything it refers to. read_database reads a
database back (each entry's desc), bounded, as hostile as any input."""
from __future__ import annotations

import base64
import hashlib
import io
import mmap
import os
import re
import stat
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

from rocpkg.errors import RocpkgInputError
from rocpkg.formats import compression
from rocpkg.formats.pacman import rules, tar
from rocpkg.formats.pacman.read import PacmanPackage, read_pacman_info
from rocpkg.formats.pacman.write import PACMAN
from rocpkg.formats.sign import Signer
from rocpkg.formats.streams import CHUNK, remove_file, write_atomic

MAX_DESC = 1 << 20              # one entry's desc read back

DB_SUFFIX = ".tar.zst"
DB_LEVEL = 9
MAX_SIGNATURE = 16384           # repo-add refuses a larger package signature
_REPO_NAME = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_@+.-]*")
# desc sections in repo-add's order -> the .PKGINFO key they come from ("" = computed);
# a scalar takes the key's last value (repo-add's `declare`), a list all of them
_DESC = (("FILENAME", ""), ("NAME", "pkgname"), ("BASE", "pkgbase"), ("VERSION", "pkgver"), ("DESC", "pkgdesc"),
         ("GROUPS", "group"), ("CSIZE", ""), ("ISIZE", "size"), ("MD5SUM", ""), ("SHA256SUM", ""), ("PGPSIG", ""),
         ("URL", "url"), ("LICENSE", "license"), ("ARCH", "arch"), ("BUILDDATE", "builddate"),
         ("PACKAGER", "packager"), ("REPLACES", "replaces"), ("CONFLICTS", "conflict"), ("PROVIDES", "provides"),
         ("DEPENDS", "depend"), ("OPTDEPENDS", "optdepend"), ("MAKEDEPENDS", "makedepend"),
         ("CHECKDEPENDS", "checkdepend"))
_LISTS = {"group", "license", "replaces", "conflict", "provides", "depend", "optdepend", "makedepend", "checkdepend"}


@dataclass(frozen=True)
class _Entry:
    filename: str
    package: PacmanPackage
    csize: int
    md5: str
    sha256: str
    signature: bytes

    @property
    def name(self) -> str:
        return self.package.info["pkgname"][-1]

    @property
    def version(self) -> str:
        return self.package.info["pkgver"][-1]


def database_names(repo_name: str) -> dict[str, str]:
    """The files a database of repo_name consists of (signatures: each name + ".sig")."""
    if not _REPO_NAME.fullmatch(repo_name):
        raise RocpkgInputError((repo_name, "not a pacman repository name: letters, digits and _@+.- only"))
    return {"db": f"{repo_name}.db{DB_SUFFIX}", "db_copy": f"{repo_name}.db",
            "files": f"{repo_name}.files{DB_SUFFIX}", "files_copy": f"{repo_name}.files"}


def _open_map(path: str):
    """The file mapped read-only (opened without following a symlink, regular only)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RocpkgInputError((path, f"can't be opened: {exc.strerror}")) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            raise RocpkgInputError((path, "not a regular, non-empty file"))
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _entry(repo_dir: str, filename: str, signer: Signer | None) -> _Entry:
    path = os.path.join(repo_dir, filename)
    package = read_pacman_info(path)
    mapped = _open_map(path)
    try:
        md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
        view = memoryview(mapped)
        for at in range(0, len(mapped), CHUNK):
            md5.update(view[at:at + CHUNK])
            sha256.update(view[at:at + CHUNK])
        view.release()
        # gpg reads the package from the mapping: it is never copied into memory
        signature = signer.detached_binary(mapped) if signer is not None else b""
        size = len(mapped)
    finally:
        mapped.close()
    if len(signature) > MAX_SIGNATURE:
        raise RocpkgInputError((path, f"its signature is {len(signature)} bytes (pacman takes at most {MAX_SIGNATURE})"))
    return _Entry(filename, package, size, md5.hexdigest(), sha256.hexdigest(), signature)


def desc_text(entry: _Entry) -> str:
    """One package's `desc`, as repo-add's db_write_entry writes it."""
    computed = {"FILENAME": entry.filename, "CSIZE": str(entry.csize), "MD5SUM": entry.md5,
                "SHA256SUM": entry.sha256, "PGPSIG": base64.b64encode(entry.signature).decode("ascii")}
    sections = []
    for section, key in _DESC:
        if not key:
            values = [computed[section]]
        else:
            found = [" ".join(v.split()) for v in entry.package.info.get(key, [])]
            values = found if key in _LISTS else found[-1:]
        values = [v for v in values if v]
        if values:
            sections.append(f"%{section}%\n" + "".join(f"{v}\n" for v in values) + "\n")
    return "".join(sections)


def files_text(entry: _Entry) -> str:
    """One package's `files`: %FILES% and its paths, directories with a trailing '/'."""
    paths = {f.path[1:] + ("/" if f.type == "dir" else "") for f in entry.package.files}
    return "%FILES%\n" + "".join(f"{p}\n" for p in sorted(paths, key=lambda p: p.encode("utf-8", "surrogateescape")))


def _database(entries: list[_Entry], with_files: bool, mtime: int) -> bytes:
    """The compressed tar of every entry's directory, desc (and files)."""
    chunks, offset = [], 0
    for entry in entries:
        folder = f"{entry.name}-{entry.version}"
        members = [tar.header(folder, tar.DIR, 0o755, mtime),
                   tar.member(f"{folder}/desc", desc_text(entry).encode("utf-8"), mtime)]
        if with_files:
            members.append(tar.member(f"{folder}/files", files_text(entry).encode("utf-8"), mtime))
        for block in members:
            chunks.append(block)
            offset += len(block)
    chunks.append(tar.end(offset))
    out = _Collect()
    compressor = compression.Compressor("zstd", out, DB_LEVEL, 1, PACMAN)
    compressor.write(b"".join(chunks))
    compressor.close()
    return b"".join(out.parts)


class _Collect:
    def __init__(self):
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)


def _newest(entries: list[_Entry]) -> list[_Entry]:
    """One entry per name, the newest by vercmp, sorted by name; one name and version in
    two files is refused."""
    chosen: dict[str, _Entry] = {}
    problems = []
    for entry in entries:
        held = chosen.get(entry.name)
        if held is None:
            chosen[entry.name] = entry
            continue
        order = rules.vercmp(entry.version, held.version)
        if order == 0:
            problems.append((entry.filename, f"{entry.name} {entry.version} is also {held.filename}"))
        elif order > 0:
            chosen[entry.name] = entry
    if problems:
        raise RocpkgInputError(*problems)
    return [chosen[n] for n in sorted(chosen, key=lambda n: n.encode("utf-8"))]


def _remove(path: str) -> None:
    remove_file(path)


def write_database(repo_dir: str | os.PathLike, repo_name: str, packages, signer: Signer | None = None,
                   source_date_epoch: int = 0) -> list[str]:
    """Write repo_name's database into repo_dir for `packages` (file names of packages in
    repo_dir, or paths to them there); with a signer, sign each package and the database
    files (stale signatures are removed without one). Returns the paths written. A package
    that can't be read, lies outside repo_dir or repeats another's name and version is bad
    input (every such problem at once, nothing written)."""
    repo_dir = os.path.abspath(os.fspath(repo_dir))
    names = database_names(repo_name)
    if signer is not None:
        signer.check()
    filenames, problems = [], []
    for given in packages:
        path = os.path.abspath(os.path.join(repo_dir, os.fspath(given)))
        if os.path.dirname(path) != repo_dir:
            problems.append((os.fspath(given), f"not a package in the repository directory {repo_dir}"))
        else:
            filenames.append(os.path.basename(path))
    entries = []
    for filename in sorted(set(filenames)):
        try:
            entries.append(_entry(repo_dir, filename, signer))
        except RocpkgInputError as exc:
            problems += exc.problems
    if problems:
        raise RocpkgInputError(*problems)
    listed = _newest(entries)
    written = []
    for entry in entries:
        sig = os.path.join(repo_dir, entry.filename + ".sig")
        if signer is not None:
            write_atomic(sig, entry.signature)
            written.append(sig)
        else:
            _remove(sig)
    for kind in ("files", "db"):
        data = _database(listed, kind == "files", source_date_epoch)
        signature = signer.detached_binary(data) if signer is not None else None
        for name in (names[kind], names[f"{kind}_copy"]):
            path = os.path.join(repo_dir, name)
            if signature is not None:
                write_atomic(path + ".sig", signature)
                written.append(path + ".sig")
            else:
                _remove(path + ".sig")
            write_atomic(path, data)
            written.append(path)
    return written


def parse_desc(text: str) -> dict[str, list[str]]:
    """A desc's sections: `%NAME%` -> its value lines (a blank line ends a section)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.split("\n"):
        if len(line) > 2 and line.startswith("%") and line.endswith("%"):
            current = sections.setdefault(line[1:-1], [])
        elif not line:
            current = None
        elif current is not None:
            current.append(line)
    return sections


def read_database(stream: BinaryIO, where: str) -> list[dict[str, list[str]]]:
    """Each entry's desc sections of a database (a zstd'd tar stream, as write_database
    writes it), in its order; bad input naming `where` when it is not one."""
    try:
        reader = io.BufferedReader(compression.open_decompressor("zstd", stream, where), CHUNK)
        descs = []
        for member, body in tar.iter_members(reader, where):
            if member.kind == tar.REG and member.name.count("/") == 1 and member.name.endswith("/desc"):
                descs.append(parse_desc(body.read_all(MAX_DESC, member.name).decode("utf-8")))
        return descs
    except (zstandard.ZstdError, UnicodeDecodeError) as exc:
        raise RocpkgInputError((where, f"not a pacman database: {exc}")) from None
