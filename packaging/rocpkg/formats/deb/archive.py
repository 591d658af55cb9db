"""APT repository index: OUT/deb/pool/main/*.deb -> OUT/deb/dists/<suite>/ (Packages,
Packages.gz, Packages.xz, by-hash copies, Release, InRelease, Release.gpg).

The pool is the truth: every publish indexes everything in it, so adding packages to a
published repository keeps the old ones listed. A package whose name, version and
architecture are already published with other bytes is refused, never overwritten.
Publishing follows the Debian archive (and aptly) model: content-addressed by-hash files
first, then each index renamed into place, the signed Release files last — a reader sees
either the old repository or the new one, and old by-hash files stay for readers that
fetched the old Release.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import io
import lzma
import os
import time
from email.utils import formatdate, parsedate_to_datetime

from debian import deb822
from debian.debian_support import Version

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.deb import read_deb_control
from rocpkg.formats.deb.plugin import SNIPPET
from rocpkg.formats.indexes import Rehash
from rocpkg.formats.sign import KEYRING_NAME, Signer
from rocpkg.formats.streams import AtomicOutput, remove_file
from rocpkg.formats.urls import keyring_path, source_url

COMPONENT = "main"
DEFAULT_ARCHITECTURES = ("amd64",)
# Release lists every index under these hashes; by-hash copies exist for each, since apt
# fetches by-hash/<strongest listed hash>/<digest>.
RELEASE_HASHES = (("SHA256", "sha256"), ("SHA512", "sha512"))
# Packages fields the indexer adds to a .deb's control stanza (dpkg-scanpackages' names).
INDEX_FIELDS = ("Filename", "Size", "SHA256")


def publish_apt(out_dir: str | os.PathLike, *, suite: str = "stable", codename: str | None = None,
                origin: str = "rocpkg", label: str | None = None,
                architectures: tuple[str, ...] = DEFAULT_ARCHITECTURES,
                signer: Signer | None = None,
                source_date_epoch: int | None = None, digests=None) -> list[str]:
    """Index OUT/deb/pool into OUT/deb/dists/<suite>; sign it when a signer is given.

    Returns the paths written. Raises RocpkgInputError for an unreadable .deb or a
    package already published with different bytes (all such problems at once).
    source_date_epoch dates the index; the caller resolves SOURCE_DATE_EPOCH
    (rocpkg.store.dates.published_source_date_epoch), None means now. digests: the source
    of the packages' SHA-256 (sha256(path, key) -> (hex, size); save() once the index is
    written), None to hash every package.
    """
    if signer is not None:
        signer.check()              # an unusable key fails here, before any work
    deb_root = os.path.join(os.fspath(out_dir), "deb")
    suite_dir = os.path.join(deb_root, "dists", suite)
    # apt ignores a Release dated before the one it holds: never go back in time.
    now = int(time.time()) if source_date_epoch is None else int(source_date_epoch)
    date = max(now, _published_date(suite_dir))

    digests = Rehash() if digests is None else digests
    stanzas = _collect(lambda root, rel: _packages_stanza(root, rel, digests), deb_root,
                       _pool_files(deb_root))
    previous = _published_packages(suite_dir)
    _refuse_conflicts(deb_root, stanzas, previous)

    arches = sorted(set(architectures)
                    | {s["Architecture"] for s in stanzas if s["Architecture"] != "all"}
                    | _published_architectures(suite_dir))
    stanzas.sort(key=functools.cmp_to_key(_stanza_order))

    written: list[str] = []
    listed: list[tuple[str, bytes]] = []        # (path relative to suite dir, bytes)
    for arch in arches:
        members = [s for s in stanzas if s["Architecture"] in (arch, "all")]
        index_dir = f"{COMPONENT}/binary-{arch}"
        plain = b"\n".join(s.dump().encode("utf-8") for s in members)
        for name, data in (("Packages", plain), ("Packages.gz", _gzip(plain)),
                           ("Packages.xz", _xz(plain))):
            listed.append((f"{index_dir}/{name}", data))
            written += _write_by_hash(os.path.join(suite_dir, index_dir), data)

    valid_for = getattr(signer, "valid_for", None)
    release = _release(listed, suite=suite, codename=codename or suite, origin=origin,
                       label=label or origin, arches=arches, date=date,
                       valid_until=max(date, int(time.time())) + valid_for if valid_for else None)
    release_bytes = release.dump().encode("utf-8")
    signed = []
    if signer is not None:      # before anything is renamed: a signing failure changes nothing
        signed = [("Release.gpg", signer.detached_armored(release_bytes)),
                  ("InRelease", signer.clearsign(release_bytes))]
        if not signed[1][1]:    # a signer without text-mode signatures: apt reads Release + Release.gpg
            signed.pop()

    # Indexes renamed into place only once every by-hash copy exists, the Release files last.
    for rel, data in listed + [("Release", release_bytes)] + signed:
        written.append(_write(os.path.join(suite_dir, rel), data))
    if signer is None:
        _remove_stale_signatures(suite_dir)
    else:
        if len(signed) == 1:
            _remove_stale_signatures(suite_dir, ("InRelease",))
        written += signer.export_public_keys(out_dir)
    digests.save()
    return written


def write_client_snippet(out_dir: str | os.PathLike, suite: str = "stable",
                         base_url: str | None = None,
                         keyring: str = f"/usr/share/keyrings/{KEYRING_NAME}") -> str:
    """Write OUT/rocm.list, the one-line apt source for this repository. base_url is a
    URL or an absolute local path of the deb/ directory; it defaults to file://<absolute
    OUT>/deb; either is written as rocpkg.formats.urls.source_url makes it (or refused).
    The line says what is true on disk: `signed-by` the exported key when the suite has
    an InRelease and OUT the key, else `trusted=yes` (the CLI warns). Returns the path."""
    out_dir = os.fspath(out_dir)
    url = source_url(base_url or os.path.join(os.path.abspath(out_dir), "deb"))
    signed = os.path.isfile(os.path.join(out_dir, "deb", "dists", suite, "InRelease")) \
        and os.path.isfile(os.path.join(out_dir, KEYRING_NAME))
    trust = f"signed-by={keyring_path(keyring)}" if signed else "trusted=yes"
    line = f"deb [{trust}] {url} {suite} {COMPONENT}\n"
    return _write(os.path.join(out_dir, SNIPPET), line.encode("utf-8"))


# -- pool -> Packages stanzas ----------------------------------------------------------

def _pool_files(deb_root: str) -> list[str]:
    """Every .deb under pool/, as paths relative to the repository root, sorted."""
    found = []
    pool = os.path.join(deb_root, "pool")
    for dirpath, dirnames, filenames in os.walk(pool):
        dirnames.sort()
        for name in filenames:
            if name.endswith(".deb"):
                found.append(os.path.relpath(os.path.join(dirpath, name), deb_root))
    return sorted(found)


def _packages_stanza(deb_root: str, rel: str, digests) -> deb822.Packages:
    """The .deb's own control stanza plus where it is and what its bytes hash to."""
    path = os.path.join(deb_root, rel)
    control = _read_control(path)
    for field in ("Package", "Version", "Architecture"):
        if not control.get(field):
            raise RocpkgInputError((path, f"control stanza has no {field} field"))
    filename = rel.replace(os.sep, "/")
    sha256, size = digests.sha256(path, filename)
    index = {"Filename": filename, "Size": str(size), "SHA256": sha256}
    stanza = deb822.Packages()
    for key, value in control.items():
        if key == "Description":
            stanza.update(index)
        if key not in index:
            stanza[key] = value
    stanza.update({k: v for k, v in index.items() if k not in stanza})
    return stanza


def _collect(read, root: str, rels: list[str]) -> list:
    """read(root, rel) for each file, reporting every unreadable one at once."""
    results, problems = [], []
    for rel in rels:
        try:
            results.append(read(root, rel))
        except RocpkgInputError as exc:
            problems += exc.problems
    if problems:
        raise RocpkgInputError(*problems)
    return results


def _read_control(path: str) -> deb822.Deb822:
    try:
        return read_deb_control(path)
    except RocpkgInputError:
        raise
    except Exception as exc:  # tar, ar and decompressor errors on a damaged archive
        raise RocpkgInputError((path, f"not a readable .deb: {exc}")) from None


def _stanza_order(a: deb822.Packages, b: deb822.Packages) -> int:
    """Name, then Debian version order, then architecture: a stable, reviewable index."""
    if a["Package"] != b["Package"]:
        return -1 if a["Package"] < b["Package"] else 1
    va, vb = Version(a["Version"]), Version(b["Version"])
    if va != vb:
        return -1 if va < vb else 1
    return (a["Architecture"] > b["Architecture"]) - (a["Architecture"] < b["Architecture"])


# -- what is already published ---------------------------------------------------------

def _published_packages(suite_dir: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(Package, Version, Architecture) -> (Filename, SHA256) from the current indexes."""
    published: dict[tuple[str, str, str], tuple[str, str]] = {}
    component_dir = os.path.join(suite_dir, COMPONENT)
    if not os.path.isdir(component_dir):
        return published
    for entry in sorted(os.listdir(component_dir)):
        index = os.path.join(component_dir, entry, "Packages")
        if not entry.startswith("binary-") or not os.path.isfile(index):
            continue
        try:
            with open(index, encoding="utf-8") as f:
                for stanza in deb822.Packages.iter_paragraphs(f, use_apt_pkg=False):
                    key = (stanza["Package"], stanza["Version"], stanza["Architecture"])
                    published[key] = (stanza.get("Filename", ""), stanza.get("SHA256", ""))
        except (ValueError, KeyError):  # damaged (not UTF-8, a stanza cut short): written anew
            continue
    return published


def _published_release(suite_dir: str) -> deb822.Release:
    release = os.path.join(suite_dir, "Release")
    if not os.path.isfile(release):
        return deb822.Release()
    try:
        with open(release, encoding="utf-8") as f:
            return deb822.Release(f)
    except ValueError:      # damaged (not UTF-8): written anew, as if there were none
        return deb822.Release()


def _published_architectures(suite_dir: str) -> set[str]:
    return set(_published_release(suite_dir).get("Architectures", "").split())


def _published_date(suite_dir: str) -> int:
    date = _published_release(suite_dir).get("Date")
    try:
        return int(parsedate_to_datetime(date).timestamp()) if date else 0
    except (TypeError, ValueError):
        return 0


def _refuse_conflicts(deb_root: str, stanzas: list[deb822.Packages],
                      published: dict[tuple[str, str, str], tuple[str, str]]) -> None:
    """Same name, version and architecture must mean the same bytes: in the pool, and
    against what the previous index published."""
    problems = []
    seen: dict[tuple[str, str, str], deb822.Packages] = {}
    for stanza in stanzas:
        key = (stanza["Package"], stanza["Version"], stanza["Architecture"])
        label = f"{key[0]} {key[1]} {key[2]}"
        if key in seen:
            first = seen[key]
            problems.append((os.path.join(deb_root, stanza["Filename"]),
                             f"{label} is also in {first['Filename']} (sha256 {first['SHA256']}); "
                             f"one package version per architecture"))
            continue
        seen[key] = stanza
        old = published.get(key)
        if old and old[1] != stanza["SHA256"]:
            problems.append((os.path.join(deb_root, stanza["Filename"]),
                             f"{label} has sha256 {stanza['SHA256']} but the published "
                             f"{old[0]} has sha256 {old[1]}; refusing to replace a published "
                             f"package (bump the version or release)"))
    if problems:
        raise RocpkgInputError(*problems)


# -- index files -----------------------------------------------------------------------

def _release(listed: list[tuple[str, bytes]], *, suite: str, codename: str, origin: str,
             label: str, arches: list[str], date: int, valid_until: int | None = None) -> deb822.Release:
    release = deb822.Release()
    release["Origin"] = origin
    release["Label"] = label
    release["Suite"] = suite
    release["Codename"] = codename
    release["Date"] = formatdate(date, usegmt=True)
    if valid_until is not None:
        release["Valid-Until"] = formatdate(valid_until, usegmt=True)
    release["Architectures"] = " ".join(arches)
    release["Components"] = COMPONENT
    release["Acquire-By-Hash"] = "yes"
    for field, algorithm in RELEASE_HASHES:
        release[field] = [{algorithm: hashlib.new(algorithm, data).hexdigest(),
                           "size": str(len(data)), "name": rel} for rel, data in listed]
    return release


def _gzip(data: bytes) -> bytes:
    """gzip with no name and mtime 0: the same bytes every run."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def _xz(data: bytes) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)


def _write_by_hash(index_dir: str, data: bytes) -> list[str]:
    """by-hash/<HASH>/<digest> copies; content-addressed, so existing ones stay as they are."""
    written = []
    for field, algorithm in RELEASE_HASHES:
        path = os.path.join(index_dir, "by-hash", field, hashlib.new(algorithm, data).hexdigest())
        if not os.path.exists(path):
            written.append(_write(path, data))
    return written


def _write(path: str, data: bytes) -> str:
    with AtomicOutput(path) as f:
        f.write(data)
    return path


def _remove_stale_signatures(suite_dir: str, names=("InRelease", "Release.gpg")) -> None:
    """An unsigned publish (or one without InRelease) must not leave a signature over some
    older Release behind."""
    for name in names:
        remove_file(os.path.join(suite_dir, name))
