"""Shared by the repository and signing tests: a throwaway signing key, a small package
chain (meta -> host + device), and apt / dnf clients isolated in a temporary root."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rocpkg.formats.deb import write_deb
from rocpkg.model import DIR, FILE, KIND_FILES, KIND_META, BuildOptions, FileEntry, PackageSpec
from rocpkg.formats.rpm import write_rpm
from rocpkg.formats.sign import Signer

VERSION, RELEASE = "7.1.0", "1"
SOURCE_DATE_EPOCH = 1700000000
KEY_UID = "rocpkg test <t@example.org>"


# GnuPG homes made outside tmp_path (for a short socket path): conftest stops their agents
# at the end of the session, whatever a test left behind.
GPG_HOMES: list[str] = []


def make_signer(signature_time: int | None = None) -> tuple[Signer, str]:
    """A fresh unprotected RSA key in a short GNUPGHOME (gpg-agent's socket path must
    stay under ~100 bytes). Returns the signer and its home; call kill_gpg_agent(home)."""
    home = tempfile.mkdtemp(prefix="g", dir="/tmp")
    GPG_HOMES.append(home)
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "",
                    "--quick-gen-key", KEY_UID, "rsa3072", "sign", "never"],
                   check=True, capture_output=True)
    return Signer(home, "t@example.org", signature_time=signature_time), home


def kill_gpg_agent(home: str) -> None:
    subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


# -- the package chain ------------------------------------------------------------------
# rocm-gfx110x (meta, all) -> rocm-host + rocm-device-gfx1100 -> rocm-host
# rocm-docs (all) and rocm-device-gfx942 are published but outside that closure.

CHAIN = [
    # name, arch, depends, payload files {relative path: bytes}
    ("rocm-host", "amd64", [], {"opt/rocm/lib/librocm.so.7": b"\x7fELF host library\n",
                                "opt/rocm/bin/rocminfo": b"#!/bin/sh\necho rocm\n"}),
    ("rocm-device-gfx1100", "amd64", ["rocm-host"],
     {"opt/rocm/lib/.kpack/rocm_gfx1100.kpack": b"KPAK device code gfx1100\n"}),
    ("rocm-device-gfx942", "amd64", ["rocm-host"],
     {"opt/rocm/lib/.kpack/rocm_gfx942.kpack": b"KPAK device code gfx942\n"}),
    ("rocm-gfx110x", "all", ["rocm-host", "rocm-device-gfx1100"], {}),
    ("rocm-docs", "all", [], {"opt/rocm/share/doc/rocm/README": b"docs\n"}),
]
META = "rocm-gfx110x"
META_CLOSURE = {"rocm-gfx110x", "rocm-host", "rocm-device-gfx1100"}


FORMAT_ARCH = {"deb": {"amd64": "amd64", "all": "all", "arm64": "arm64"},
               "rpm": {"amd64": "x86_64", "all": "noarch", "arm64": "aarch64"}}


def package_spec(fmt: str, sources: Path, name: str, arch: str, depends: list[str],
                 files: dict[str, bytes], version: str = VERSION, release: str = RELEASE) -> PackageSpec:
    """A PackageSpec as the planner would hand it to the writers: relations in the
    format's syntax, owned directories from the install prefix down, payload files
    written under sources/."""
    evr = f"{version}-{release}"
    relation = "{} (= %s)" % evr if fmt == "deb" else "{} = %s" % evr
    entries: dict[str, FileEntry] = {}
    for rel, data in files.items():
        source = sources / name / rel
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(data)
        parts = Path(rel).parts
        for depth in range(2, len(parts)):                 # /opt/rocm and below, never /opt
            path = "/" + "/".join(parts[:depth])
            entries[path] = FileEntry(path, DIR, 0o755)
        mode = 0o755 if "/bin/" in f"/{rel}" else 0o644
        entries[f"/{rel}"] = FileEntry(f"/{rel}", FILE, mode, str(source), len(data))
    provides = [f"rocm-gfx110X = {evr}"] if fmt == "rpm" and name == META else []
    return PackageSpec(
        format=fmt, name=name, version=version, release=release, arch=FORMAT_ARCH[fmt][arch],
        kind=KIND_META if not files else KIND_FILES, summary=f"{name} test package",
        description="Part of the rocpkg repository tests.", maintainer="rocpkg test <t@example.org>",
        vendor="rocpkg", license="MIT", homepage="https://example.org/rocm",
        depends=[relation.format(d) for d in depends], provides=provides,
        files=[entries[p] for p in sorted(entries)])


def write_package(out_dir: Path, fmt: str, *entry, **kw) -> Path:
    """Write one package with rocpkg's own writer where the DESIGN puts it
    (OUT/deb/pool/main/, OUT/rpm/<arch>/)."""
    spec = package_spec(fmt, out_dir.parent / "artifacts", *entry, **kw)
    if fmt == "deb":
        target, writer = out_dir / "deb" / "pool" / "main", write_deb
    else:
        target, writer = out_dir / "rpm" / spec.arch, write_rpm
    target.mkdir(parents=True, exist_ok=True)
    return Path(writer(spec, str(target), BuildOptions(source_date_epoch=SOURCE_DATE_EPOCH)).path)


def write_chain(out_dir: Path, fmt: str, chain=CHAIN, **kw) -> list[Path]:
    return [write_package(out_dir, fmt, *entry, **kw) for entry in chain]


# -- an isolated apt ----------------------------------------------------------------------

class AptClient:
    """apt-get confined to root/: its own sources, lists, cache and an empty dpkg status.
    Signatures are enforced: the only trusted key is the one in the source's signed-by."""

    def __init__(self, root: Path, source_line: str, status_file: Path | None = None):
        """status_file: the dpkg status apt resolves against; default an empty one (a
        bare system), /var/lib/dpkg/status lets system dependencies (libc6...) resolve."""
        self.root = root
        for d in ("etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d",
                  "etc/apt/trusted.gpg.d", "var/lib/apt/lists/partial",
                  "var/cache/apt/archives/partial", "var/lib/dpkg", "downloads"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "var/lib/dpkg/status").write_text("")
        (root / "etc/apt/sources.list").write_text(source_line)
        self.options = {
            "Dir": str(root), "Dir::Etc": str(root / "etc/apt"),
            "Dir::Etc::sourcelist": str(root / "etc/apt/sources.list"),
            "Dir::Etc::sourceparts": str(root / "etc/apt/sources.list.d"),
            "Dir::Etc::trusted": str(root / "etc/apt/trusted.gpg"),
            "Dir::Etc::trustedparts": str(root / "etc/apt/trusted.gpg.d"),
            "Dir::Etc::preferencesparts": str(root / "etc/apt/preferences.d"),
            "Dir::State": str(root / "var/lib/apt"),
            "Dir::State::status": str(status_file or root / "var/lib/dpkg/status"),
            "Dir::Cache": str(root / "var/cache/apt"),
            "Dir::Log": str(root / "var/log/apt"),
            "APT::Architecture": "amd64", "APT::Architectures": "amd64",
            "APT::Sandbox::User": "root", "Debug::NoLocking": "1",
            "Acquire::Languages": "none", "APT::Get::List-Cleanup": "0",
        }

    def run(self, *args: str, cwd: Path | None = None, wrapper: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        """apt-get with args; wrapper: a command line apt-get runs under (unshare ...)."""
        cmd = [*wrapper, "apt-get", "-q"]
        for key, value in self.options.items():
            cmd += ["-o", f"{key}={value}"]
        return subprocess.run(cmd + list(args), capture_output=True, text=True,
                              cwd=cwd or self.root / "downloads",
                              env={**os.environ, "LC_ALL": "C"})


def apt_source_line(out_dir: Path, keyring: Path, suite: str = "stable") -> str:
    return f"deb [signed-by={keyring}] file://{out_dir / 'deb'} {suite} main\n"


def planned_installs(simulation_stdout: str) -> set[str]:
    """Package names from `apt-get -s install` 'Inst <name> (...)' lines."""
    return {line.split()[1] for line in simulation_stdout.splitlines() if line.startswith("Inst ")}


# -- RPMs -------------------------------------------------------------------------------------

def rpmbuild_package(out_dir: Path, name: str, arch: str, depends: list[str], files: dict[str, bytes],
              version: str = VERSION, release: str = RELEASE, extra_preamble: str = "",
              post: str = "") -> Path:
    """An .rpm built by rpmbuild into OUT/rpm/<arch>/: the reference the indexer is held
    to, with what rpmbuild adds on its own (rpmlib() and scriptlet requires)."""
    rpm_arch = FORMAT_ARCH["rpm"][arch]
    top = Path(tempfile.mkdtemp(prefix="rpmtop"))
    try:
        src = top / "payload"
        for rel, data in files.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes(data)
        requires = "".join(f"Requires: {d} = {version}-{release}\n" for d in depends)
        install = "".join(f"install -D -m 0644 {src / rel} %{{buildroot}}/{rel}\n" for rel in files)
        file_list = "".join(f"/{rel}\n" for rel in files)
        spec = top / f"{name}.spec"
        spec.write_text(
            f"Name: {name}\nVersion: {version}\nRelease: {release}\nSummary: {name} test package\n"
            f"License: MIT\nURL: https://example.org/rocm\nBuildArch: {rpm_arch}\n{requires}"
            f"{extra_preamble}"
            f"\n%description\n{name} test package.\nPart of the rocpkg repository tests.\n"
            f"\n%install\n{install}"
            + (f"\n%post\n{post}\n" if post else "")
            + f"\n%files\n{file_list}"
            f"\n%changelog\n* Tue Nov 14 2023 rocpkg test <t@example.org> - {version}-{release}\n"
            f"- Test build of {name}.\n")
        subprocess.run(["rpmbuild", "-bb", "--quiet", "--target", rpm_arch,
                        "--define", f"_topdir {top}", "--define", f"_rpmdir {out_dir / 'rpm'}",
                        "--define", "_buildhost rocpkg-test",
                        "--define", "source_date_epoch_from_changelog 1",
                        "--define", "use_source_date_epoch_as_buildtime 1",
                        "--define", "__os_install_post %{nil}", "--define", "debug_package %{nil}",
                        str(spec)], check=True, capture_output=True,
                       env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"})
        return out_dir / "rpm" / rpm_arch / f"{name}-{version}-{release}.{rpm_arch}.rpm"
    finally:
        shutil.rmtree(top)




# -- an isolated dnf --------------------------------------------------------------------------

class DnfClient:
    """dnf installing into root/ from the repositories in reposdir/ only, with package
    and metadata signatures checked (gpgcheck=1, repo_gpgcheck=1 in the .repo file and
    here); the repository key is imported into root's rpm database first."""

    def __init__(self, root: Path, repo_file: Path, key: Path):
        self.root = root / "installroot"
        self.reposdir = root / "repos"
        self.config = root / "dnf.conf"
        self.root.mkdir(parents=True)
        self.reposdir.mkdir()
        shutil.copy(repo_file, self.reposdir / repo_file.name)
        self.config.write_text(f"[main]\ngpgcheck=1\nrepo_gpgcheck=1\ninstall_weak_deps=False\n"
                               f"reposdir={self.reposdir}\ncachedir={root / 'cache'}\n")
        subprocess.run(["rpm", "--root", str(self.root), "--import", str(key)], check=True,
                       capture_output=True)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = ["dnf", "-y", "--config", str(self.config), "--installroot", str(self.root),
               f"--setopt=reposdir={self.reposdir}", "--releasever=1",
               "--setopt=install_weak_deps=False", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})

    def installed(self) -> set[str]:
        query = subprocess.run(["rpm", "--root", str(self.root), "-qa", "--qf", "%{NAME}\\n"],
                               check=True, capture_output=True, text=True)
        return {n for n in query.stdout.split() if n != "gpg-pubkey"}


# -- an isolated zypper -----------------------------------------------------------------------

class ZypperClient:
    """zypper installing into root/ (its repos.d, caches and rpm database all under it) from
    the .repo files given; the repository key is imported into root's rpm database first
    (key None: zypper must find it itself, and --gpg-auto-import-keys lets it import it)."""

    def __init__(self, root: Path, repo_files: list[Path], key: Path | None):
        self.root = root
        self.auto_import = key is None
        repos = root / "etc/zypp/repos.d"
        repos.mkdir(parents=True, exist_ok=True)
        for repo_file in repo_files:
            shutil.copy(repo_file, repos / repo_file.name)
        if key is not None:
            subprocess.run(["rpm", "--root", str(root), "--import", str(key)], check=True, capture_output=True)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = ["zypper", "--root", str(self.root), "--non-interactive"]
        if self.auto_import:
            cmd.append("--gpg-auto-import-keys")
        return subprocess.run(cmd + list(args), capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})

    def installed(self) -> set[str]:
        query = subprocess.run(["rpm", "--root", str(self.root), "-qa", "--qf", "%{NAME}\\n"],
                               check=True, capture_output=True, text=True)
        return {n for n in query.stdout.split() if n != "gpg-pubkey"}


def stand_in_repository(root: Path, packages: list[tuple[str, str, list[str]]], repo_id: str = "base") -> Path:
    """An unsigned repository of empty stand-ins for OS packages, (name, version, provides)
    each, under root/rpm, and its .repo file root/<repo_id>.repo."""
    from rocpkg.formats.rpm import repodata as repo_dnf

    (root / "rpm/x86_64").mkdir(parents=True, exist_ok=True)
    for name, version, provides in packages:
        spec = PackageSpec(format="rpm", name=name, version=version, release="1", arch="x86_64", kind=KIND_META,
                           summary=f"{name} stand-in", description="Stands in for the OS package.",
                           maintainer="t <t@example.org>", license="MIT", provides=list(provides))
        write_rpm(spec, str(root / "rpm/x86_64"), BuildOptions(source_date_epoch=SOURCE_DATE_EPOCH))
    repo_dnf.publish_dnf(root)
    repo_file = root / f"{repo_id}.repo"
    repo_file.write_text(f"[{repo_id}]\nname={repo_id}\nbaseurl=file://{root}/rpm\ngpgcheck=0\nrepo_gpgcheck=0\n")
    return repo_file


def differing_signatures(first: Path, second: Path, digests: tuple[dict, dict], home: str) -> str:
    """Why two trees that should be byte-identical are not, for the files whose bytes
    differ (`digests`: each tree's rel -> sha256): each RPM's header signatures as
    (class, digest algorithm, creation time, issuer) in both, with the signing key's
    listing. Reproducible signatures are a promise; a rare difference is diagnosed from this."""
    from rocpkg.formats.openpgp import _signature_fields, packets
    from rocpkg.formats.rpm.read import read_rpm
    from rocpkg.formats.rpm.tags import SigTag

    def described(path: Path) -> str:
        if not path.is_file():
            return "missing"
        if path.suffix != ".rpm":
            return f"{path.stat().st_size} bytes"
        info = read_rpm(path)
        found = [(tag.name, _signature_fields(body)[:4]) for tag in (SigTag.RSA, SigTag.DSA)
                 if tag in info.signature for kind, body, _ in packets(bytes(info.signature[tag])) if kind == 2]
        return f"{info.size} bytes, header signatures {found or 'none'}"

    lines = [f"{rel}: {described(first / rel)} | {described(second / rel)}"
             for rel in sorted(set(digests[0]) | set(digests[1])) if digests[0].get(rel) != digests[1].get(rel)]
    keys = subprocess.run(["gpg", "--homedir", home, "--with-colons", "--list-keys"], capture_output=True, text=True)
    return "\n".join(lines + ["key: " + " ".join(line for line in keys.stdout.splitlines()
                                                  if line.startswith(("pub", "sub")))])
