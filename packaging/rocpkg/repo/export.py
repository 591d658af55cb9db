"""`rocpkg export OUT DEST NAME...`: an offline bundle. DEST becomes a self-contained
repository of each format OUT holds (APT, DNF, pacman) holding only the dependency closure
of the named packages (names as users type them, `rocm-gfx110x`, `rocm-gfx110X`, or a
package.json definition name, `rocm-core-devel`, for its unversioned package in each
format), each found in the newest of OUT's releases that holds it (a normal release and its
ASAN build are two releases), indexed through the format's Repository and, with a key,
signed, with its client snippets (rocm.list, rocm.repo... and the keys) pointing at DEST itself; then DEST.tar (reproducible: sorted, dated
SOURCE_DATE_EPOCH, owner root) and DEST.tar.sha256 beside it. Dependencies no package of
the release provides (libc6, libc.so.6()(64bit)) are the installing system's.

OUT is read as every command reads it: under its lock, after an interrupted change was
rolled back (rocpkg.store.journal.recover), its package files opened as OUT's own
(rocpkg.store.files: no symlink followed, regular files only) and hashed as they are copied:
a file whose bytes are not the ones manifest.json recorded, or that an index of OUT lists
with other bytes, is refused, never bundled, indexed or signed.

DEST, DEST.tar and DEST.tar.sha256 are written under temporary names (`*.tmp-<pid>`,
created exclusively: never through a symlink) and put in place only once all three are
whole, each without replacing anything there: an export either completes or leaves none
of them.
"""
from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import tarfile
from dataclasses import dataclass, field

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import suite_problem
from rocpkg.formats.registry import REGISTERED
from rocpkg.formats.sign import ARMORED_KEY_NAME, KEYRING_NAME
from rocpkg.formats.streams import HashingWriter, copy_stream
from rocpkg.formats.urls import keyring_path, source_url
from rocpkg.inputs.config import relation_names
from rocpkg.store import releases
from rocpkg.store.dates import published_source_date_epoch
from rocpkg.store.files import open_file
from rocpkg.store.indexes import published_entries
from rocpkg.store.journal import recover
from rocpkg.store.outdir import OutLock


@dataclass
class ExportResult:
    dest: str
    tarball: str
    sha256: str
    size: int
    packages: dict[str, list[str]] = field(default_factory=dict)    # format -> names


def export_closure(out_dir: str, dest: str, names: list[str], *, signer=None, suite: str = "stable") -> ExportResult:
    """Write DEST (a new directory outside OUT) and DEST.tar, DEST.tar.sha256: the closure
    of `names` (module doc), indexed (signed with signer). Refuses a suite that is not one
    directory name, an empty list, a name no release has (with the closest ones), a DEST
    inside OUT or holding it, a DEST, DEST.tar or DEST.tar.sha256 that exists, a package
    file that is not what OUT recorded; nothing is written then."""
    out_dir, dest = os.path.abspath(out_dir), os.path.abspath(dest)
    problem = suite_problem(suite)
    if problem:
        raise RocpkgInputError(("--suite", problem))
    _check_places(out_dir, dest)
    if not names:
        raise RocpkgInputError(("NAME", "name at least one package to export"))
    urls = _snippet_urls(dest, signed=signer is not None)
    with OutLock(out_dir):          # no rocpkg command changes OUT while it is read
        recover(out_dir)            # what a killed command left half-changed, rolled back first
        doc = releases.read_manifest(out_dir)
        if doc is None:
            raise RocpkgInputError((out_dir, "has no manifest.json: build a release into it first"))
        closure = _closures(_release_entries(doc), names)
        _refuse_unindexed_bytes(out_dir, closure)
        return _write_bundle(out_dir, dest, urls, closure, signer, suite, published_source_date_epoch(out_dir))


def _check_places(out_dir: str, dest: str) -> None:
    real_out, real_dest = os.path.realpath(out_dir), os.path.realpath(dest)
    if not os.path.isdir(real_out):
        raise RocpkgInputError((out_dir, "no such directory"))
    if os.path.commonpath([real_out, real_dest]) in (real_out, real_dest):
        raise RocpkgInputError((dest, f"is {'OUT itself' if real_out == real_dest else 'inside OUT or holds it'}: "
                                      f"export into a directory of its own"))
    for path in (dest, f"{dest}.tar", f"{dest}.tar.sha256"):
        if os.path.islink(path):
            raise RocpkgInputError((path, "is a symlink: export never writes through one; export into a new "
                                          "directory"))
        if os.path.lexists(path):
            raise RocpkgInputError((path, "exists: export into a new directory"))
    if not os.path.isdir(os.path.dirname(dest)):
        raise RocpkgInputError((os.path.dirname(dest), "no such directory: DEST's parent must exist"))


def _release_entries(doc: dict) -> list[list[dict]]:
    """The package entries of each release manifest.json records, newest release first
    (rocpkg.store.releases.release_order); the setup packages belong to none."""
    by_file = {e["file"]: e for e in doc["packages"] if e.get("kind") != releases.SETUP_KIND}
    return [[by_file[f] for f in record.files if f in by_file]
            for record in reversed(releases.manifest_releases(doc))]


# A name as the other spelling writes it: `-dev` in a format that lowers `-devel` to Debian's
# `-dev` (Format.lower_devel), `-devel` in the others; before the end, a `-` or the ABI of a
# versioned name (rocm-core-devel7.1).
_SPELLING = {True: (re.compile(r"-devel(?=$|-|\d)"), "-dev"), False: (re.compile(r"-dev(?=$|-|\d)"), "-devel")}


def _spelled(name: str, fmt: str, table: dict[str, dict]) -> str | None:
    """The package of `table` (one format's packages, by lower-case name) that `name` means:
    the package of that name regardless of case (rocm-gfx110X), else its spelling in this
    format, so that a package.json definition name (rocm-core-devel) means its unversioned
    package in both formats (deb rocm-core-dev) and a Debian user's `-dev` the rpm's `-devel`."""
    name = name.lower()
    if name in table:
        return name
    pattern, spelling = _SPELLING[REGISTERED[fmt].lower_devel]
    other = pattern.sub(spelling, name)
    return other if other in table else None


def _closures(per_release: list[list[dict]], names: list[str]) -> dict[str, list[dict]]:
    """format -> the entries of the named packages and everything they depend on. A name
    means a package of each format as _spelled finds it, in the newest release (first in
    per_release) that holds one; its dependencies are that release's packages."""
    tables: list[dict[str, dict[str, dict]]] = []       # per release: format -> lower-case name -> entry
    for entries in per_release:
        by_name: dict[str, dict[str, dict]] = {}
        for e in entries:
            by_name.setdefault(e["format"], {})[e["name"].lower()] = e
        tables.append(by_name)
    known = sorted({n for by_name in tables for table in by_name.values() for n in table})
    unknown = [n for n in names if not any(_spelled(n, fmt, table) for by_name in tables
                                           for fmt, table in by_name.items())]
    if unknown:
        raise RocpkgInputError(*[(n, "no package of that name in any release of OUT; closest: "
                                     + (", ".join(difflib.get_close_matches(n.lower(), known, n=5, cutoff=0.5))
                                        or "none")) for n in unknown])
    closure: dict[str, list[dict]] = {}
    for fmt in sorted({fmt for by_name in tables for fmt in by_name}):
        seen: dict[str, dict] = {}          # file -> entry
        for n in names:
            table = next((by_name[fmt] for by_name in tables if _spelled(n, fmt, by_name.get(fmt, {}))), None)
            todo = [_spelled(n, fmt, table)] if table else []
            done: set[str] = set()
            while todo:
                name = todo.pop()
                if name in done:
                    continue
                done.add(name)
                seen[table[name]["file"]] = table[name]
                todo += [d.lower() for r in table[name].get("depends", []) for d in relation_names(r)
                         if d.lower() in table]
        if seen:
            closure[fmt] = sorted(seen.values(), key=lambda e: (e["name"], e["file"]))
    return closure


def _refuse_unindexed_bytes(out_dir: str, closure: dict[str, list[dict]]) -> None:
    """Refuse a package of the closure that an index of OUT (APT Packages, DNF primary)
    lists with other bytes than manifest.json records: verify's index-mismatch."""
    wanted = {e["file"]: e for entries in closure.values() for e in entries}
    problems = [(os.path.join(out_dir, listed.file),
                 f"{listed.index} lists {listed.size} bytes, sha256 {listed.sha256}, but manifest.json recorded "
                 f"{wanted[listed.file]['size']} bytes, sha256 {wanted[listed.file]['sha256']}: refusing to export "
                 f"it (rocpkg verify OUT)")
                for listed in published_entries(out_dir) if listed.file in wanted
                and (listed.size, listed.sha256) != (wanted[listed.file]["size"], wanted[listed.file]["sha256"])]
    if problems:
        raise RocpkgInputError(*dict.fromkeys(problems))


def _write_bundle(out_dir: str, dest: str, urls: dict[str, str], closure: dict[str, list[dict]], signer, suite: str,
                  sde: int | None) -> ExportResult:
    """DEST, DEST.tar and DEST.tar.sha256 written under temporary names, then put in place
    (module doc); on any failure every one of them this run made is removed again."""
    tarball, sums = f"{dest}.tar", f"{dest}.tar.sha256"
    staging, tar_tmp, sums_tmp = (f"{path}.tmp-{os.getpid()}" for path in (dest, tarball, sums))
    made: list[str] = []        # what this export made, removed again when it fails
    try:
        try:
            os.mkdir(staging, 0o755)
        except OSError as exc:
            raise RocpkgInputError((staging, f"cannot make it: {exc.strerror}")) from None
        made.append(staging)
        try:
            _fill(out_dir, staging, urls, closure, signer, suite, sde)
            _fsync_tree(staging)
        except OSError as exc:      # a full disk, a size limit: named, and nothing left behind
            raise RocpkgInputError((exc.filename or dest, f"cannot write the bundle: {exc.strerror or exc}")) \
                from None
        digest = _write_new(tar_tmp, tarball, lambda out: _write_tarball(staging, out, os.path.basename(dest),
                                                                         sde or 0))
        made.append(tar_tmp)
        _write_new(sums_tmp, sums, lambda out: out.write(f"{digest.hexdigest()}  {os.path.basename(tarball)}\n"
                                                         .encode()))
        made.append(sums_tmp)
        for tmp, final in ((staging, dest), (tar_tmp, tarball), (sums_tmp, sums)):
            _place(tmp, final, made)
        _fsync_dir(os.path.dirname(dest))
    except BaseException:
        for path in reversed(made):
            _remove(path)
        raise
    return ExportResult(dest, tarball, digest.hexdigest(), digest.count,
                        {fmt: sorted({e["name"] for e in entries}) for fmt, entries in closure.items()})


def _snippet_urls(dest: str, signed: bool) -> dict[str, str]:
    """What DEST's client snippets name (rocpkg.formats.urls): each format's tree, by its
    name, "key" and "keyring"; refused naming DEST before anything is written when a client
    could not read it."""
    return {**{fmt: source_url(os.path.join(dest, fmt), dest) for fmt in REGISTERED},
            "key": source_url(os.path.join(dest, ARMORED_KEY_NAME), dest),
            "keyring": keyring_path(os.path.join(dest, KEYRING_NAME), dest) if signed else ""}


def _fill(out_dir: str, staging: str, urls: dict[str, str], closure: dict[str, list[dict]], signer, suite: str,
          sde: int | None) -> None:
    """staging as DEST's tree: the closure's package files (checked as _copy_recorded
    checks them, every problem at once, before anything is indexed or signed), the
    indexes and the client snippets that name DEST."""
    problems = []
    for entries in closure.values():
        for e in entries:
            problems += _copy_recorded(out_dir, staging, e)
    if problems:
        raise RocpkgInputError(*problems)
    for fmt, form in REGISTERED.items():
        if fmt in closure:
            form.repo.index(staging, suite=suite, signer=signer, source_date_epoch=sde,
                            digests=None, change=None)
            form.repo.write_snippet(staging, suite=suite, url=urls[fmt], key_url=urls["key"],
                                    keyring=urls["keyring"] or None)


def _copy_recorded(out_dir: str, staging: str, entry: dict) -> list[tuple[str, str]]:
    """Copy one package file of OUT into staging, read as OUT's own (rocpkg.store.files) and
    hashed as it is copied; problems when its bytes are not those manifest.json recorded."""
    source = os.path.join(out_dir, entry["file"])
    try:
        fin = open_file(out_dir, entry["file"])
    except FileNotFoundError:
        return [(source, "manifest.json lists it but it is not in OUT (rocpkg verify OUT)")]
    except RocpkgInputError as exc:     # a symlink in its path, a FIFO: never followed or read
        return exc.problems
    with fin:
        size = os.fstat(fin.fileno()).st_size
        if size == entry["size"]:
            target = os.path.join(staging, entry["file"])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "xb") as fout:
                copied = HashingWriter(fout)
                copy_stream(fin, copied)
            size, sha256 = copied.count, copied.hexdigest()
    if size == entry["size"] and sha256 == entry["sha256"]:
        return []
    found = f"{size} bytes, sha256 {sha256}" if size == entry["size"] else f"{size} bytes"
    return [(source, f"{found}, but manifest.json recorded {entry['size']} bytes, sha256 {entry['sha256']}: "
                     f"tampered; refusing to export it (rocpkg verify OUT)")]


def _write_tarball(src: str, out, top: str, mtime: int) -> HashingWriter:
    """src's files as one top directory `top` into the open file out, sorted, dated mtime,
    owned by root; the tarball's digest, read back."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames[:] = sorted(d for d in dirnames if d != ".rocpkg")     # rocpkg's private directory: no part of a bundle
            for name in [""] + sorted(filenames):
                path = os.path.join(dirpath, name) if name else dirpath
                rel = os.path.relpath(path, src)
                info = tar.gettarinfo(path, arcname=top if rel == "." else f"{top}/{rel}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "root", "root"
                if info.isfile():
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
    out.flush()
    out.seek(0)
    digest = HashingWriter(None)
    copy_stream(out, digest)
    return digest


def _write_new(path: str, final: str, fill):
    """fill(file) into path, a new file (created exclusively: never an existing one, never
    through a symlink), flushed and fsynced; removed again when anything fails, which is
    bad input naming final. Returns what fill returns."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RocpkgInputError((path, f"cannot create it: {exc.strerror}")) from None
    try:
        with os.fdopen(fd, "w+b") as out:
            result = fill(out)
            out.flush()
            os.fsync(out.fileno())
        return result
    except BaseException as exc:
        _remove(path)
        if isinstance(exc, OSError):
            raise RocpkgInputError((final, f"cannot write it: {exc.strerror or exc}")) from None
        raise


def _place(tmp: str, final: str, made: list[str]) -> None:
    """tmp renamed (a directory) or linked (a file) to final without replacing anything
    there; made, the list of what to remove on failure, follows."""
    try:
        if os.path.isdir(tmp):
            if os.path.lexists(final):      # rename would replace an empty directory
                raise FileExistsError(17, os.strerror(17))
            os.rename(tmp, final)
        else:
            os.link(tmp, final, follow_symlinks=False)
    except OSError as exc:
        raise RocpkgInputError((final, f"cannot put it in place: {exc.strerror or exc}")) from None
    made[made.index(tmp)] = final
    if not os.path.isdir(final):
        os.unlink(tmp)


def _remove(path: str) -> None:
    """A file or directory tree this export made; a symlink is removed, never followed."""
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _fsync_tree(root: str) -> None:
    """Every file and directory under root on disk before it is renamed into place."""
    for dirpath, _dirs, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(dirpath)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
