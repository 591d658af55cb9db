"""`rocpkg export OUT DEST NAME...`: an offline bundle. DEST becomes a self-contained APT
and DNF repository holding only the dependency closure of the named packages in OUT's
newest release (names as users type them, `rocm-gfx110x`, `rocm-gfx110X`, or a package.json
definition name, `rocm-core-devel`, for its unversioned package in each format), indexed and,
with a key, signed, with its client snippets (rocm.list, rocm.repo and the keys) pointing
at DEST itself; then DEST.tar (reproducible: sorted, dated SOURCE_DATE_EPOCH, owner root)
and DEST.tar.sha256 beside it. Dependencies no package of the release provides (libc6,
libc.so.6()(64bit)) are the installing system's. DEST is written under a temporary name
and renamed into place: an export either completes or leaves nothing.
"""
from __future__ import annotations

import difflib
import os
import re
import shutil
import tarfile
from dataclasses import dataclass, field

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.sign import ARMORED_KEY_NAME, KEYRING_NAME
from rocpkg.formats.streams import hash_file
from rocpkg.inputs.config import relation_names
from rocpkg.out import releases
from rocpkg.out.dates import published_source_date_epoch
from rocpkg.repo.urls import keyring_path, source_url


@dataclass
class ExportResult:
    dest: str
    tarball: str
    sha256: str
    size: int
    packages: dict[str, list[str]] = field(default_factory=dict)    # format -> names


def export_closure(out_dir: str, dest: str, names: list[str], *, signer=None, suite: str = "stable") -> ExportResult:
    """Write DEST (a new directory outside OUT) and DEST.tar, DEST.tar.sha256: the closure
    of `names` in OUT's newest release, indexed (signed with signer). Refuses an empty
    list, a name the release has not (with the closest ones), a DEST inside OUT or
    holding it, a DEST that exists."""
    out_dir, dest = os.path.abspath(out_dir), os.path.abspath(dest)
    _check_places(out_dir, dest)
    if not names:
        raise RocpkgInputError(("NAME", "name at least one package to export"))
    doc = releases.read_manifest(out_dir)
    if doc is None:
        raise RocpkgInputError((out_dir, "has no manifest.json: build a release into it first"))
    newest = [e for e in doc["packages"] if (e["version"], e["release"]) == (doc["version"], doc["release"])
              and e.get("kind") != releases.SETUP_KIND]
    closure = _closures(newest, names)
    urls = _snippet_urls(dest, signed=signer is not None)
    sde = published_source_date_epoch(out_dir)
    staging = f"{dest}.tmp-{os.getpid()}"
    try:
        _fill(out_dir, staging, urls, closure, signer, suite, sde)
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    tarball = f"{dest}.tar"
    _write_tarball(dest, tarball, sde or 0)
    digest = hash_file(tarball).hexdigest()
    with open(f"{tarball}.sha256", "w", encoding="utf-8") as fh:
        fh.write(f"{digest}  {os.path.basename(tarball)}\n")
    return ExportResult(dest, tarball, digest, os.path.getsize(tarball),
                        {fmt: sorted(e["name"] for e in entries) for fmt, entries in closure.items()})


def _check_places(out_dir: str, dest: str) -> None:
    real_out, real_dest = os.path.realpath(out_dir), os.path.realpath(dest)
    if not os.path.isdir(real_out):
        raise RocpkgInputError((out_dir, "no such directory"))
    if os.path.commonpath([real_out, real_dest]) in (real_out, real_dest):
        raise RocpkgInputError((dest, f"is {'OUT itself' if real_out == real_dest else 'inside OUT or holds it'}: "
                                      f"export into a directory of its own"))
    for path in (dest, f"{dest}.tar"):
        if os.path.lexists(path):
            raise RocpkgInputError((path, "exists: export into a new directory"))


# A name as the other format spells it: Debian's `-dev` for rpm's `-devel` (plan.naming's
# lower_devel), before the end, a `-` or the ABI of a versioned name (rocm-core-devel7.1).
_SPELLING = {"deb": (re.compile(r"-devel(?=$|-|\d)"), "-dev"), "rpm": (re.compile(r"-dev(?=$|-|\d)"), "-devel")}


def _spelled(name: str, fmt: str, table: dict[str, dict]) -> str | None:
    """The package of `table` (one format's packages, by lower-case name) that `name` means:
    the package of that name regardless of case (rocm-gfx110X), else its spelling in this
    format, so that a package.json definition name (rocm-core-devel) means its unversioned
    package in both formats (deb rocm-core-dev) and a Debian user's `-dev` the rpm's `-devel`."""
    name = name.lower()
    if name in table:
        return name
    pattern, spelling = _SPELLING[fmt]
    other = pattern.sub(spelling, name)
    return other if other in table else None


def _closures(entries: list[dict], names: list[str]) -> dict[str, list[dict]]:
    """format -> the entries of the named packages and everything they depend on in the
    release. A name means a package of each format as _spelled finds it."""
    by_name: dict[str, dict[str, dict]] = {}
    for e in entries:
        by_name.setdefault(e["format"], {})[e["name"].lower()] = e
    known = sorted({n for table in by_name.values() for n in table})
    unknown = [n for n in names if not any(_spelled(n, fmt, table) for fmt, table in by_name.items())]
    if unknown:
        raise RocpkgInputError(*[(n, "no package of that name in the release; closest: "
                                     + (", ".join(difflib.get_close_matches(n.lower(), known, n=5, cutoff=0.5))
                                        or "none")) for n in unknown])
    closure: dict[str, list[dict]] = {}
    for fmt, table in sorted(by_name.items()):
        todo = [found for found in (_spelled(n, fmt, table) for n in names) if found]
        seen: dict[str, dict] = {}
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen[name] = table[name]
            todo += [d.lower() for r in table[name].get("depends", []) for d in relation_names(r)
                     if d.lower() in table]
        closure[fmt] = [seen[n] for n in sorted(seen)]
    return closure


def _snippet_urls(dest: str, signed: bool) -> dict[str, str]:
    """What DEST's rocm.list and rocm.repo name (rocpkg.repo.urls), refused naming DEST
    before anything is written when apt, dnf or zypper could not read it."""
    return {"deb": source_url(os.path.join(dest, "deb"), dest), "rpm": source_url(os.path.join(dest, "rpm"), dest),
            "key": source_url(os.path.join(dest, ARMORED_KEY_NAME), dest),
            "keyring": keyring_path(os.path.join(dest, KEYRING_NAME), dest) if signed else ""}


def _fill(out_dir: str, staging: str, urls: dict[str, str], closure: dict[str, list[dict]], signer, suite: str,
          sde: int | None) -> None:
    from rocpkg.repo import apt as repo_apt
    from rocpkg.repo import dnf as repo_dnf

    for entries in closure.values():
        for e in entries:
            target = os.path.join(staging, e["file"])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(os.path.join(out_dir, e["file"]), target)
    if "deb" in closure:
        repo_apt.publish_apt(staging, suite=suite, signer=signer, source_date_epoch=sde)
        repo_apt.write_client_snippet(staging, suite=suite, base_url=urls["deb"], keyring=urls["keyring"])
    if "rpm" in closure:
        repo_dnf.publish_dnf(staging, signer=signer, source_date_epoch=sde, sign_packages=signer is not None)
        repo_dnf.write_client_snippet(staging, base_url=urls["rpm"], gpgkey_url=urls["key"])


def _write_tarball(dest: str, tarball: str, mtime: int) -> None:
    """DEST's files under one top directory, sorted, dated mtime, owned by root."""
    top = os.path.basename(dest)
    tmp = f"{tarball}.tmp-{os.getpid()}"
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for dirpath, dirnames, filenames in os.walk(dest):
                dirnames[:] = sorted(d for d in dirnames if d != ".rocpkg")     # the indexers' digest caches
                for name in [""] + sorted(filenames):
                    path = os.path.join(dirpath, name) if name else dirpath
                    rel = os.path.relpath(path, dest)
                    info = tar.gettarinfo(path, arcname=top if rel == "." else f"{top}/{rel}")
                    info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "root", "root"
                    if info.isfile():
                        with open(path, "rb") as fh:
                            tar.addfile(info, fh)
                    else:
                        tar.addfile(info)
        os.rename(tmp, tarball)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
