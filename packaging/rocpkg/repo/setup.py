"""The setup package of a signed repository, `<top>-repo-<channel>` (top: the release's top
meta-package, `amdrocm` for TheRock's config; channel: that of OUT's newest release,
rocpkg.inputs.channels; `<top>-repo` when no release names one), one of each format that
has one (its Repository's setup_files: none for pacman): installing it is the whole of a
client's setup, signature checks on.

  deb: /etc/apt/sources.list.d/<top>.sources (deb822, Signed-By the keyring it ships)
       /usr/share/keyrings/<top>-archive-keyring.gpg (binary; a name apart from the
       amdgpu driver's rocm.gpg)
  rpm: /etc/yum.repos.d/<top>.repo (dnf), /etc/zypp/repos.d/<top>.repo (zypper, with
       pkg_gpgcheck), /etc/pki/rpm-gpg/RPM-GPG-KEY-<top> (armored)

Files under /etc are conffiles / %config(noreplace): a user's edits survive an upgrade.
The packages sit in the pool like any other architecture-independent package of their
format (deb/pool/main/, rpm/noarch/), so a new key reaches clients by `apt upgrade` /
`dnf upgrade`; manifest.json records them with kind "setup", in no release. Their version is a counter: a setup package whose files would
be the same is left as it is (its description carries a digest of its files), one whose
files change (a new key, URL or suite) is written as the next version and replaces the
old one. Its files are every signing key (a key rotation ships the old and the new), and
with several keys its RPM header is signed by the oldest, the one every client set up
before the rotation already trusts. Copies under stable names,
OUT/<name>.<format> (OUT/rocm-repo-nightly.deb), are the first download. An unsigned
repository gets none: a setup package never turns checks off.

Identity: the setup packages of one top for different channels configure the same files,
so each conflicts with, replaces and obsoletes the others (and the channel-less
`<top>-repo`): installing another channel's setup package is an ordinary install that moves
the machine over (apt, dnf and zypper remove the one it replaces). One name and version
is never two contents: within OUT the version is a counter over the files' digest (the
relations included), and each channel's name is its own.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.plugin import Format
from rocpkg.formats.registry import REGISTERED
from rocpkg.formats.sign import Signer
from rocpkg.formats.streams import AtomicOutput, copy_stream, hash_file, make_dirs
from rocpkg.formats.urls import source_url
from rocpkg.inputs.channels import CHANNELS
from rocpkg.inputs.config import relation_names
from rocpkg.model import FILE, KIND_FILES, BuildOptions, FileEntry, PackageSpec
from rocpkg.store import releases
from rocpkg.store.journal import active_change

DEFAULT_TOP = "rocm"        # an OUT whose manifest names no top meta-package
_DIGEST_RE = re.compile(r"Files digest: ([0-9a-f]{64})")


@dataclass(frozen=True)
class SetupPackage:
    """One setup package in OUT: what it is, its path relative to OUT, its stable-name copy."""

    format: str
    name: str
    version: str
    file: str
    arch: str

    @property
    def stable_name(self) -> str:
        return f"{self.name}.{self.format}"


def top_metapackage(out_dir: str) -> str:
    """The release's top meta-package as the planner chose it: of the meta-packages with
    no target or family that no other package depends on, the shortest name (then the
    first); DEFAULT_TOP when the manifest records none. It names files, a .repo section and
    a package of every format: one that is not a package name in each is refused."""
    entries = (releases.read_manifest(out_dir) or {}).get("packages", [])
    depended = {name for e in entries for r in e.get("depends", []) for name in relation_names(r)}
    roots = [e["name"] for e in entries if e.get("kind") == "meta" and not e.get("target")
             and not e.get("family") and e["name"] not in depended]
    top = min(roots, key=lambda n: (len(n), n)) if roots else DEFAULT_TOP
    if not all(form.name_rule.fullmatch(top) for form in REGISTERED.values()):
        raise RocpkgInputError((os.path.join(out_dir, releases.MANIFEST),
                                f"top meta-package {top!r} is not a package name (lower-case letters, digits, + - .)"))
    return top


def setup_files(fmt: str, top: str, *, base_url: str, suite: str, signer: Signer) -> dict[str, bytes]:
    """Install path -> bytes of the files `<top>-repo` ships in one format ({}: the format
    has no setup package). base_url is the repository's root (each format's tree below it),
    written as rocpkg.formats.urls.source_url makes it (or refused)."""
    base_url = source_url(base_url, "--base-url")
    return REGISTERED[fmt].repo.setup_files(top, url=f"{base_url}/{fmt}", suite=suite, signer=signer)


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
    files = {fmt: setup_files(fmt, top, base_url=base_url, suite=suite, signer=signer) for fmt in formats}
    identity = setup_identity(top, out_channel(out_dir))
    packages = [_write_one(out_dir, REGISTERED[fmt], identity, files[fmt], source_date_epoch, signer)
                for fmt in formats if files[fmt]]
    _set_entries(out_dir, packages, [])      # the versions replaced are gone before anything reads the manifest
    return packages


@dataclass(frozen=True)
class SetupIdentity:
    """A setup package's name and the names of the setup packages it takes the place of."""

    name: str
    replaces: tuple[str, ...]


def out_channel(out_dir: str) -> str:
    """The channel of OUT's newest release ("" when it names none, or OUT has no release)."""
    records = releases.manifest_releases(releases.read_manifest(out_dir))
    return max(records, key=releases.release_order).channel if records else ""


def setup_identity(top: str, channel: str) -> SetupIdentity:
    """`<top>-repo-<channel>` (`<top>-repo` without a channel), replacing the other channels'."""
    names = [f"{top}-repo"] + [f"{top}-repo-{c}" for c in CHANNELS]
    name = f"{top}-repo-{channel}" if channel else f"{top}-repo"
    return SetupIdentity(name, tuple(n for n in names if n != name) if channel else ())


def copy_stable_names(out_dir: str, packages: list[SetupPackage]) -> list[str]:
    """Copy each setup package (as indexed: the RPM header-signed) to OUT/<top>-repo.<fmt>."""
    paths = []
    for package in packages:
        path = os.path.join(out_dir, package.stable_name)
        with open(os.path.join(out_dir, package.file), "rb") as src, AtomicOutput(path) as dst:
            copy_stream(src, dst)
        paths.append(path)
    return paths


def _write_one(out_dir: str, form: Format, identity: SetupIdentity, files: dict[str, bytes],
               source_date_epoch: int | None, signer: Signer) -> SetupPackage:
    name = identity.name
    digest = files_digest({**files, "\0replaces": " ".join(identity.replaces).encode()} if identity.replaces else files)
    probe = _spec(form, identity, "0", files, digest, "")
    pool = os.path.join(out_dir, form.name, form.pool(probe))
    existing = _existing(pool, form, name)
    current = next((p for p in existing if p[2] == digest), None)
    if current is not None:
        path, version = current[0], current[1]
    else:
        version = max((int(v) for _, v, _ in existing if v.isdigit()), default=0) + 1
        path = _build(pool, form, identity, str(version), files, digest, source_date_epoch)
        if len(signer.fingerprints) > 1 and form.sign_in_place:   # by the key every client holds
            form.load(form.sign_in_place)(path, signer.only(signer.oldest.fingerprint))
    change = active_change(out_dir)
    for old, _, _ in existing:
        if old != path:
            if change is not None:
                change.set_aside(old)
            else:
                os.unlink(old)
    return SetupPackage(form.name, name, str(version), os.path.relpath(path, out_dir).replace(os.sep, "/"),
                        probe.arch)


def _existing(pool: str, form: Format, name: str) -> list[tuple[str, str, str]]:
    """(path, version, files digest) of each package named `name` in the pool."""
    if not os.path.isdir(pool):
        return []
    found = []
    for entry in sorted(os.listdir(pool)):
        if not (entry.startswith(name) and entry.endswith(form.suffix)):
            continue
        path = os.path.join(pool, entry)
        named, version, description = form.repo.setup_package(path)
        if named != name:
            continue
        match = _DIGEST_RE.search(description)
        found.append((path, version, match.group(1) if match else ""))
    return found


def _spec(form: Format, identity: SetupIdentity, version: str, files: dict[str, bytes], digest: str,
          staging: str) -> PackageSpec:
    """The setup package as the format's writer takes it: architecture-independent, owning
    its files only (staged as staging/<n>), none of the system directories they are in."""
    entries = [FileEntry(path, FILE, 0o644, os.path.join(staging, str(index)), len(data))
               for index, (path, data) in enumerate(sorted(files.items()))]
    name, others = identity.name, list(identity.replaces)
    return PackageSpec(
        format=form.name, name=name, version=version, release="1", arch=form.arch(True, {}, {}), kind=KIND_FILES,
        summary=f"{name.removesuffix('-repo')} package repository configuration and signing key",
        description=(f"Configures {form.repo.clients} to install packages from "
                     f"this repository, with its signing key, every signature check on.\n\n"
                     f"Files digest: {digest}"),
        maintainer="rocpkg <rocpkg@localhost>", vendor="rocpkg", license="MIT", section="admin",
        conflicts=others, replaces=others, obsoletes=others, files=entries)


def _build(pool: str, form: Format, identity: SetupIdentity, version: str, files: dict[str, bytes], digest: str,
           source_date_epoch: int | None) -> str:
    """Write the package with the format's writer, its files staged in a temporary directory."""
    make_dirs(pool)
    staging = tempfile.mkdtemp(prefix="rocpkg-setup-")
    try:
        for index, (_path, data) in enumerate(sorted(files.items())):
            with open(os.path.join(staging, str(index)), "wb") as fh:
                fh.write(data)
        spec = _spec(form, identity, version, files, digest, staging)
        return form.write(spec, pool, BuildOptions(source_date_epoch=source_date_epoch or 0)).path
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def record_setup_packages(out_dir: str, packages: list[SetupPackage]) -> None:
    """Put the setup packages' entries (kind "setup", in no release) in manifest.json in
    place of earlier ones, with the bytes they have once indexed (an RPM is header-signed
    in place). An OUT without a manifest, a bare pool, has nothing to record them in."""
    _set_entries(out_dir, packages, [
               {"name": p.name, "format": p.format, "version": p.version, "release": "1", "arch": p.arch,
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
