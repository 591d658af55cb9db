"""The setup package of a signed repository, `<top>-repo` (top: the release's top
meta-package, `amdrocm` for TheRock's config), one .deb and one .rpm: installing it is
the whole of a client's setup, signature checks on.

  deb: /etc/apt/sources.list.d/<top>.sources (deb822, Signed-By the keyring it ships)
       /usr/share/keyrings/<top>-archive-keyring.gpg (binary; a name apart from the
       amdgpu driver's rocm.gpg)
  rpm: /etc/yum.repos.d/<top>.repo (dnf), /etc/zypp/repos.d/<top>.repo (zypper, with
       pkg_gpgcheck), /etc/pki/rpm-gpg/RPM-GPG-KEY-<top> (armored)

Files under /etc are conffiles / %config(noreplace): a user's edits survive an upgrade.
The packages sit in the pool like any other (deb/pool/main/, rpm/noarch/), so a new key
reaches clients by `apt upgrade` / `dnf upgrade`; manifest.json records them with kind
"setup", in no release. Their version is a counter: a setup package whose files would
be the same is left as it is (its description carries a digest of its files), one whose
files change (a new key, URL or suite) is written as the next version and replaces the
old one. Copies under stable names, OUT/<top>-repo.deb and OUT/<top>-repo.rpm, are the
first download. An unsigned repository gets none: a setup package never turns checks off.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.deb import read_deb_control, write_deb
from rocpkg.formats.preflight import DEB_NAME
from rocpkg.formats.rpm import package_from_header, read_rpm, write_rpm
from rocpkg.formats.sign import Signer
from rocpkg.formats.streams import AtomicOutput, copy_stream, hash_file
from rocpkg.inputs.config import relation_names
from rocpkg.model import FILE, KIND_FILES, BuildOptions, FileEntry, PackageSpec
from rocpkg.out import releases
from rocpkg.out.journal import active_change
from rocpkg.repo.urls import source_url

DEFAULT_TOP = "rocm"        # an OUT whose manifest names no top meta-package
COMPONENT = "main"
# where each format's setup package goes in OUT, as the builder places packages
POOL = {"deb": os.path.join("deb", "pool", "main"), "rpm": os.path.join("rpm", "noarch")}
ARCH = {"deb": "all", "rpm": "noarch"}
_DIGEST_RE = re.compile(r"Files digest: ([0-9a-f]{64})")


@dataclass(frozen=True)
class SetupPackage:
    """One setup package in OUT: what it is, its path relative to OUT, its stable-name copy."""

    format: str
    name: str
    version: str
    file: str

    @property
    def stable_name(self) -> str:
        return f"{self.name}.{self.format}"


def top_metapackage(out_dir: str) -> str:
    """The release's top meta-package as the planner chose it: of the meta-packages with
    no target or family that no other package depends on, the shortest name (then the
    first); DEFAULT_TOP when the manifest records none. It names files, a .repo section and
    a package of both formats: one that is no Debian package name is refused."""
    entries = (releases.read_manifest(out_dir) or {}).get("packages", [])
    depended = {name for e in entries for r in e.get("depends", []) for name in relation_names(r)}
    roots = [e["name"] for e in entries if e.get("kind") == "meta" and not e.get("target")
             and not e.get("family") and e["name"] not in depended]
    top = min(roots, key=lambda n: (len(n), n)) if roots else DEFAULT_TOP
    if not DEB_NAME.fullmatch(top):
        raise RocpkgInputError((os.path.join(out_dir, releases.MANIFEST),
                                f"top meta-package {top!r} is not a package name (lower-case letters, digits, + - .)"))
    return top


def setup_files(fmt: str, top: str, *, base_url: str, suite: str, signer: Signer) -> dict[str, bytes]:
    """Install path -> bytes of the files `<top>-repo` ships in one format. base_url is
    the repository's root (deb/ and rpm/ below it), written as rocpkg.repo.urls.source_url
    makes it (or refused)."""
    from rocpkg.repo.dnf import repo_file_text

    base_url = source_url(base_url, "--base-url")
    if fmt == "deb":
        keyring = f"/usr/share/keyrings/{top}-archive-keyring.gpg"
        sources = (f"Types: deb\nURIs: {base_url}/deb\nSuites: {suite}\nComponents: {COMPONENT}\n"
                   f"Signed-By: {keyring}\n")
        return {f"/etc/apt/sources.list.d/{top}.sources": sources.encode(),
                keyring: signer.public_key(armored=False)}
    key_path = f"/etc/pki/rpm-gpg/RPM-GPG-KEY-{top}"
    name = f"{top} packages"
    return {f"/etc/yum.repos.d/{top}.repo":
            repo_file_text(top, name, f"{base_url}/rpm", f"file://{key_path}", zypper=False).encode(),
            f"/etc/zypp/repos.d/{top}.repo":
            repo_file_text(top, name, f"{base_url}/rpm", f"file://{key_path}", zypper=True).encode(),
            key_path: signer.public_key(armored=True)}


def files_digest(files: dict[str, bytes]) -> str:
    """SHA-256 over the files' paths and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{len(files[path])}\0".encode() + files[path])
    return digest.hexdigest()


def write_setup_packages(out_dir: str, *, formats: list[str], base_url: str, suite: str,
                         signer: Signer | None, source_date_epoch: int | None) -> list[SetupPackage]:
    """Write (or keep, when its files are unchanged) `<top>-repo` of each format into
    OUT's pool, before it is indexed. Refuses an unsigned repository. Runs inside the
    caller's journaled change of OUT (an old version it replaces is set aside until the
    change is complete). Returns the packages, for record_setup_packages (once indexed
    and signed) and copy_stable_names."""
    if signer is None:
        raise RocpkgInputError(("--sign-key", "a setup package is written only for a signed repository: "
                                              "give --sign-key, or leave out --base-url"))
    top = top_metapackage(out_dir)
    packages = [_write_one(out_dir, fmt, top, setup_files(fmt, top, base_url=base_url, suite=suite, signer=signer),
                           source_date_epoch) for fmt in formats]
    _set_entries(out_dir, packages, [])      # the versions replaced are gone before anything reads the manifest
    return packages


def copy_stable_names(out_dir: str, packages: list[SetupPackage]) -> list[str]:
    """Copy each setup package (as indexed: the RPM header-signed) to OUT/<top>-repo.<fmt>."""
    paths = []
    for package in packages:
        path = os.path.join(out_dir, package.stable_name)
        with open(os.path.join(out_dir, package.file), "rb") as src, AtomicOutput(path) as dst:
            copy_stream(src, dst)
        paths.append(path)
    return paths


def _write_one(out_dir: str, fmt: str, top: str, files: dict[str, bytes],
               source_date_epoch: int | None) -> SetupPackage:
    name, digest = f"{top}-repo", files_digest(files)
    pool = os.path.join(out_dir, POOL[fmt])
    existing = _existing(pool, fmt, name)
    current = next((p for p in existing if p[2] == digest), None)
    if current is not None:
        path, version = current[0], current[1]
    else:
        version = max((int(v) for _, v, _ in existing if v.isdigit()), default=0) + 1
        path = _build(pool, fmt, name, str(version), files, digest, source_date_epoch)
    change = active_change(out_dir)
    for old, _, _ in existing:
        if old != path:
            if change is not None:
                change.set_aside(old)
            else:
                os.unlink(old)
    return SetupPackage(fmt, name, str(version), os.path.relpath(path, out_dir).replace(os.sep, "/"))


def _existing(pool: str, fmt: str, name: str) -> list[tuple[str, str, str]]:
    """(path, version, files digest) of each package named `name` in the pool."""
    if not os.path.isdir(pool):
        return []
    prefix = f"{name}_" if fmt == "deb" else f"{name}-"
    found = []
    for entry in sorted(os.listdir(pool)):
        if not (entry.startswith(prefix) and entry.endswith(f".{fmt}")):
            continue
        path = os.path.join(pool, entry)
        if fmt == "deb":
            control = read_deb_control(path)
            if control.get("Package") != name:
                continue
            version, description = control.get("Version", "").split("-")[0], control.get("Description", "")
        else:
            record = package_from_header(read_rpm(path))
            if record.name != name:
                continue
            version, description = record.version, record.description
        match = _DIGEST_RE.search(description)
        found.append((path, version, match.group(1) if match else ""))
    return found


def _build(pool: str, fmt: str, name: str, version: str, files: dict[str, bytes], digest: str,
           source_date_epoch: int | None) -> str:
    """Write the package with the format's writer, its files staged in a temporary
    directory; it owns its files only, none of the system directories they are in."""
    os.makedirs(pool, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="rocpkg-setup-")
    try:
        entries: dict[str, FileEntry] = {}
        for index, (path, data) in enumerate(sorted(files.items())):
            source = os.path.join(staging, str(index))
            with open(source, "wb") as fh:
                fh.write(data)
            entries[path] = FileEntry(path, FILE, 0o644, source, len(data))
        spec = PackageSpec(
            format=fmt, name=name, version=version, release="1", arch=ARCH[fmt], kind=KIND_FILES,
            summary=f"{name.removesuffix('-repo')} package repository configuration and signing key",
            description=(f"Configures {'APT' if fmt == 'deb' else 'DNF and zypper'} to install packages from "
                         f"this repository, with its signing key, every signature check on.\n\n"
                         f"Files digest: {digest}"),
            maintainer="rocpkg <rocpkg@localhost>", vendor="rocpkg", license="MIT", section="admin",
            files=[entries[p] for p in sorted(entries)])
        writer = write_deb if fmt == "deb" else write_rpm
        return writer(spec, pool, BuildOptions(source_date_epoch=source_date_epoch or 0)).path
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def record_setup_packages(out_dir: str, packages: list[SetupPackage]) -> None:
    """Put the setup packages' entries (kind "setup", in no release) in manifest.json in
    place of earlier ones, with the bytes they have once indexed (an RPM is header-signed
    in place). An OUT without a manifest, a bare pool, has nothing to record them in."""
    _set_entries(out_dir, packages, [
               {"name": p.name, "format": p.format, "version": p.version, "release": "1", "arch": ARCH[p.format],
                "kind": releases.SETUP_KIND, "target": "", "family": "", "file": p.file,
                "size": os.path.getsize(os.path.join(out_dir, p.file)),
                "sha256": hash_file(os.path.join(out_dir, p.file)).hexdigest(), "depends": []}
               for p in packages])


def _set_entries(out_dir: str, packages: list[SetupPackage], entries: list[dict]) -> None:
    """manifest.json with the packages' names' setup entries replaced by entries."""
    doc = releases.read_manifest(out_dir)
    if doc is None:
        return
    names = {(p.format, p.name) for p in packages}
    kept = [e for e in doc["packages"] if e.get("kind") != releases.SETUP_KIND or (e["format"], e["name"]) not in names]
    doc["packages"] = sorted(kept + entries,
                             key=lambda e: (e["format"], e["name"], e["version"], e["release"], e["file"]))
    releases.write_manifest(out_dir, doc)
