"""The Arch Linux format's repository (rocpkg.formats.plugin.Repository): each directory
OUT/pacman/<arch>/ is one pacman repository, its database named after the suite
(`<suite>.db` and `<suite>.files`, as repo-add writes them: rocpkg.formats.pacman.index),
with a detached signature beside each package and each database file when signed. The
client's part is OUT/rocm.pacman.conf, a pacman.conf section `[<suite>]` whose
`Server = <url>/$arch` names the tree.

No setup package: pacman has no drop-in directory for repositories (the section goes into
/etc/pacman.conf) and a key is trusted with pacman-key, not by installing a file.

A database holds one version of each name, so an older release's package is in the tree
but in no index, and that is no stale index (stale). A package whose file name the
published database lists with other bytes is refused, as the other formats refuse one."""
from __future__ import annotations

import os
import stat
import time

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.indexes import IndexEntry, IndexFile, Rehash, Signature, damaged_index
from rocpkg.formats.pacman.plugin import SNIPPET, SUFFIX
from rocpkg.formats.pacman.rules import ROOT, vercmp
from rocpkg.formats.streams import HashingWriter, copy_stream, remove_file, write_atomic
from rocpkg.formats.urls import source_url

# a database's files in publish's order: each signature before what it signs, `<repo>.db` (what pacman reads) last
DATABASE_FILES = (".files.tar.zst.sig", ".files.tar.zst", ".files.sig", ".files",
                  ".db.tar.zst.sig", ".db.tar.zst", ".db.sig", ".db")


def _listing(path: str, want_dir: bool) -> list[str]:
    """Names in a directory that are directories (want_dir) or regular files, never
    symlinks, sorted; [] when it is no directory."""
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        mode = os.lstat(os.path.join(path, name)).st_mode
        if (stat.S_ISDIR(mode) if want_dir else stat.S_ISREG(mode)):
            found.append(name)
    return sorted(found)


def arch_dirs(out_dir: str) -> list[str]:
    """The repositories of the tree: the directories of OUT/pacman/."""
    return _listing(os.path.join(out_dir, ROOT), True)


def databases(out_dir: str, arch: str) -> list[str]:
    """The repository names whose `<name>.db` is in OUT/pacman/<arch>/."""
    return [n[:-3] for n in _listing(os.path.join(out_dir, ROOT, arch), False) if n.endswith(".db")]


def packages(out_dir: str, arch: str) -> list[str]:
    """The package files in OUT/pacman/<arch>/."""
    return [n for n in _listing(os.path.join(out_dir, ROOT, arch), False) if n.endswith(SUFFIX)]


def _first(desc: dict[str, list[str]], section: str) -> str:
    return (desc.get(section) or [""])[0]


def _published(path: str) -> dict[str, str]:
    """File name -> SHA-256 of each package the database at path lists ({} when there is
    none, or a damaged one: it is written anew)."""
    from rocpkg.formats.pacman.index import read_database

    try:
        with open(path, "rb") as fh:
            return {_first(d, "FILENAME"): _first(d, "SHA256SUM") for d in read_database(fh, path)}
    except (OSError, RocpkgInputError):
        return {}


class PacmanRepository:
    """rocpkg.formats.plugin.Repository over OUT/pacman/ (the Protocol states each method's contract)."""

    clients = "pacman"

    def index(self, out_dir, *, suite, signer, source_date_epoch, digests, change, rewritten=None):
        from rocpkg.formats.pacman.index import database_names, write_database

        database_names(suite)       # a suite pacman cannot name a repository by is refused first
        digests = Rehash() if digests is None else digests
        if signer is not None:
            signer.check()
        problems = []
        for arch in arch_dirs(out_dir):
            published = _published(os.path.join(out_dir, ROOT, arch, f"{suite}.db"))
            for name in packages(out_dir, arch):
                path = os.path.join(out_dir, ROOT, arch, name)
                sha256, _ = digests.sha256(path, f"{arch}/{name}")
                if published.get(name, sha256) != sha256:
                    problems.append((path, f"has sha256 {sha256} but the published {suite}.db lists it with sha256 "
                                           f"{published[name]}; refusing to replace a published package (bump the "
                                           f"version or release)"))
        if problems:
            raise RocpkgInputError(*problems)
        when = int(time.time()) if source_date_epoch is None else int(source_date_epoch)
        written = []
        for arch in arch_dirs(out_dir):
            repo_dir = os.path.join(out_dir, ROOT, arch)
            held = packages(out_dir, arch)
            for name in _listing(repo_dir, False):      # a signature whose package is gone (pruned) goes too
                if name.endswith(SUFFIX + ".sig") and name[:-4] not in held:
                    remove_file(os.path.join(repo_dir, name))
            written += write_database(repo_dir, suite, held, signer=signer, source_date_epoch=when)
        digests.save()
        if signer is not None:
            written += signer.export_public_keys(out_dir)
        return written

    def write_snippet(self, out_dir, *, suite, url, key_url=None, keyring=None):
        from rocpkg.formats.sign import KEYRING_NAME

        url = source_url(url)
        arches = arch_dirs(out_dir)
        signed = bool(arches) and os.path.isfile(os.path.join(out_dir, KEYRING_NAME)) and \
            all(os.path.isfile(os.path.join(out_dir, ROOT, arch, f"{suite}.db.sig")) for arch in arches)
        level = "Required" if signed else "Optional TrustAll"
        path = os.path.join(out_dir, SNIPPET)
        write_atomic(path, f"[{suite}]\nSigLevel = {level}\nServer = {url}/$arch\n".encode("utf-8"))
        return path

    def summary(self, out_dir, suite):
        return f"pacman: {os.path.join(out_dir, ROOT)} ({suite}.db; section [{suite}] in {SNIPPET})"

    def client_setup(self, out_dir, *, suite, snippet, keyring):
        lines = ["Arch Linux (pacman):"]
        if keyring:
            lines += [f"sudo pacman-key --add {os.path.join(out_dir, 'rocm.asc')}",
                      "sudo pacman-key --lsign-key <the key's fingerprint>"]
        return lines + [f"cat {snippet} | sudo tee -a /etc/pacman.conf", "sudo pacman -Sy"]

    def indexed(self, out_dir):
        return any(databases(out_dir, arch) for arch in arch_dirs(out_dir))

    def entries(self, out_dir, opener):
        from rocpkg.formats.pacman.index import read_database

        entries = []
        for arch in arch_dirs(out_dir):
            for repo in databases(out_dir, arch):
                rel = f"{ROOT}/{arch}/{repo}.db"
                with damaged_index(os.path.join(out_dir, rel)), opener(rel) as fh:
                    for desc in read_database(fh, os.path.join(out_dir, rel)):
                        version, _, release = _first(desc, "VERSION").rpartition("-")
                        entries.append(IndexEntry(ROOT, _first(desc, "NAME"), version, release, _first(desc, "ARCH"),
                                                  f"{ROOT}/{arch}/{_first(desc, 'FILENAME')}", rel,
                                                  int(_first(desc, "CSIZE") or -1), _first(desc, "SHA256SUM")))
        return entries

    def index_files(self, out_dir, opener):
        found = []
        for arch in arch_dirs(out_dir):
            top = f"{ROOT}/{arch}"
            for repo in databases(out_dir, arch):
                for kind in ("db", "files"):
                    copy = f"{top}/{repo}.{kind}"
                    found += [IndexFile(copy), IndexFile(f"{copy}.sig"), IndexFile(f"{copy}.tar.zst.sig")]
                    whole = _digest(out_dir, copy, opener)
                    found.append(IndexFile(f"{copy}.tar.zst", f"{repo}.{kind}", *whole, required=False) if whole
                                 else IndexFile(f"{copy}.tar.zst"))
            found += [IndexFile(f"{top}/{name}.sig") for name in packages(out_dir, arch)]
        return found

    def signatures(self, out_dir):
        found = []
        for arch in arch_dirs(out_dir):
            top = f"{ROOT}/{arch}"
            for repo in databases(out_dir, arch):
                found += [Signature(f"{top}/{repo}{suffix}.sig", f"{top}/{repo}{suffix}")
                          for suffix in DATABASE_FILES if not suffix.endswith(".sig")]
        return found    # (each package's own: the database lists its SHA-256, and pacman checks its %PGPSIG%)

    def named_by_digest(self, rel):
        return None

    def publish_stage(self, rel):
        name = rel.rsplit("/", 1)[-1]
        if name.endswith((SUFFIX, SUFFIX + ".sig")):
            return 0, 0
        rank = next((i for i, suffix in enumerate(DATABASE_FILES) if name.endswith(suffix)), None)
        return (1, 0) if rank is None else (2, rank)

    def stale(self, unlisted, listed):
        newest: dict[str, str] = {}
        for entry in listed:
            held = newest.get(entry.name)
            full = f"{entry.version}-{entry.release}"
            if held is None or vercmp(full, held) > 0:
                newest[entry.name] = full
        return [ref for ref in unlisted
                if ref.name not in newest or vercmp(newest[ref.name], f"{ref.version}-{ref.release}") <= 0]

    def setup_files(self, top, *, url, suite, signer):
        return {}

    def setup_package(self, path):
        from rocpkg.formats.pacman.read import read_pacman_info

        package = read_pacman_info(path)
        return package.first("pkgname"), package.first("pkgver").rpartition("-")[0], package.first("pkgdesc")


def _digest(out_dir: str, rel: str, opener) -> tuple[int, str] | None:
    """(size, sha256) of one of the tree's files, None when it is not there."""
    if not os.path.isfile(os.path.join(out_dir, rel)):
        return None
    whole = HashingWriter(None)
    with opener(rel) as fh:
        copy_stream(fh, whole)
    return whole.count, whole.hexdigest()


REPOSITORY = PacmanRepository()
