"""Arch Linux packages (rocpkg.formats.pacman), judged by the real tools: pacman's own
`vercmp` on the channel versions' mapping, `pacman -Qip` and `bsdtar` on the packages,
`repo-add` writing the same database entries, and pacman installing the family
meta-package from a signed repository into a fresh root (SigLevel = Required), refusing a
package changed after signing and a database without its signature."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from repo_helpers import CHAIN, META, META_CLOSURE, SOURCE_DATE_EPOCH, package_spec

from rocpkg.errors import RocpkgInputError
from rocpkg.formats import versions
from rocpkg.formats.pacman import (architecture, package_filename, package_name, pin, pkgver, pool_dir,
                                   read_pacman, read_pacman_info, relation, relations, vercmp, write_database,
                                   write_pacman)
from rocpkg.formats.pacman.tar import header as tar_header
from rocpkg.inputs.channels import channel_version
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, FileEntry, PackageSpec

TOOLS = ("pacman", "pacman-key", "repo-add", "vercmp", "bsdtar")
needs_pacman = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                  reason="pacman, pacman-key, repo-add, vercmp or bsdtar missing "
                                         "(scripts/install-system-tools installs them)")
OPTIONS = BuildOptions(source_date_epoch=SOURCE_DATE_EPOCH)


def pacman_spec(sources: Path, name: str, arch: str, depends: list[str], files: dict[str, bytes],
                **kw) -> PackageSpec:
    """The repository tests' package as the plan would hand it to the pacman writer: the
    Debian spec with the pacman rules applied to its names, version, relations and arch."""
    deb = package_spec("deb", sources, name, arch, depends, files, **kw)
    provides = [pin("rocm-gfx110X", deb.version, deb.release)] if name == META else []
    return dataclasses.replace(deb, format="pacman", name=package_name(deb.name), version=pkgver(deb.version),
                               arch=architecture(deb.arch), depends=relations(deb.depends), provides=provides)


def write_chain(out: Path, chain=CHAIN, **kw) -> list[Path]:
    written = []
    for entry in chain:
        spec = pacman_spec(out.parent / "artifacts", *entry, **kw)
        written.append(Path(write_pacman(spec, str(out / pool_dir(spec.arch)), OPTIONS).path))
    return written


def run(*args, check: bool = True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, **kw)
    if check:
        assert done.returncode == 0, f"{args[0]}: {done.stdout}\n{done.stderr}"
    return done


# -- the rules -------------------------------------------------------------------------------

def test_names_versions_relations_and_files_in_pacman_syntax():
    assert package_name("rocm-gfx110X") == "rocm-gfx110x"
    assert pkgver("7.1.0") == "7.1.0"
    assert pkgver("7.1.0~rc1") == "7.1.0rc1"
    assert pkgver("7.1.0~20260301") == "7.1.0pre20260301"
    assert pkgver("7.1.0~20260301.rc2") == "7.1.0pre20260301.rc2"
    assert pkgver("7.1.0~20260301~dev3") == "7.1.0pre20260301dev3"
    assert pkgver(pkgver("7.1.0~20260301~dev")) == "7.1.0pre20260301dev"
    assert relation("rocm-host (>= 7.1.0~rc1-1) | rocm-other") == "rocm-host>=7.1.0rc1-1"
    assert relation("a (<< 2:1.0)") == "a<2:1.0"
    assert relation("Rocm-Core:any") == "rocm-core"
    assert relation("rocm-host=7.1.0-1") == "rocm-host=7.1.0-1"
    assert relations(["a (= 1.0-1)", "a=1.0-1", "b"]) == ["a=1.0-1", "b"]
    assert pin("rocm", "7.1.0~20260301", "1", epoch=2) == "rocm=2:7.1.0pre20260301-1"
    assert architecture("amd64") == architecture("x86_64") == "x86_64"
    assert architecture("all") == architecture("noarch") == "any"
    assert package_filename("rocm", "7.1.0", "1", "all") == "rocm-7.1.0-1-any.pkg.tar.zst"
    assert package_filename("rocm", "7.1.0", "2", "amd64", epoch=1, compression="xz") == \
        "rocm-1:7.1.0-2-x86_64.pkg.tar.xz"
    assert pool_dir("any") == pool_dir("x86_64") == "pacman/x86_64"
    for bad, call in (("-rocm", package_name), (".rocm", package_name), ("röcm", package_name),
                      ("7.1-0", pkgver), ("7.1:0", pkgver), ("7.1 0", pkgver), ("7.1/0", pkgver), ("7.1~", pkgver),
                      ("a (>= 1.0", relation), ("sparc", architecture)):
        with pytest.raises(RocpkgInputError):
            call(bad)


def channel_versions() -> list[str]:
    """Every channel's versions of two base versions over three dates, in dpkg's order."""
    found = []
    for base in ("7.1.0", "7.1.1", "7.10.0"):
        found.append(channel_version(base, "release", None, None))
        for date in ("2026-02-28", "2026-03-01", "2026-12-31"):
            found.append(channel_version(base, "nightly", date, None))
            found += [channel_version(base, "dev", date, n) for n in (None, 1, 2, 10)]
            found += [channel_version(base, "prerelease", date, n) for n in (0, 1, 2, 10)]
    order = versions.dpkg_compare
    import functools
    return sorted(set(found), key=functools.cmp_to_key(lambda a, b: order(a, b).sign))


@needs_pacman
def test_mapped_channel_versions_keep_their_order_for_pacmans_vercmp():
    """The channels' versions, mapped, sort in pacman's `vercmp` as the originals do in
    dpkg (and rpm), and rocpkg's vercmp (held to pacman's below) says so for every pair."""
    ordered = channel_versions()
    mapped = [f"{pkgver(v)}-1" for v in ordered]
    neighbours = list(zip(mapped, mapped[1:]))
    script = "".join(f"vercmp '{a}' '{b}'\n" for a, b in neighbours)
    assert run("sh", input=script).stdout.split() == ["-1"] * len(neighbours)     # sorted: a total order
    for (i, a), (j, b) in itertools.combinations(enumerate(mapped), 2):
        assert vercmp(a, b) == versions.dpkg_compare(ordered[i] + "-1", ordered[j] + "-1").sign == -1, (a, b)
        assert vercmp(b, a) == 1


@needs_pacman
def test_vercmp_is_pacmans_on_odd_versions():
    samples = ["1.0", "1.0.0", "1.0a", "1.0.a", "1.0_a", "1.0rc1", "1.0.rc1", "1.0+1", "1:1.0", "2:0.1", "1.0-1",
               "1.0-2", "1.0-1.1", "01.0", "1.00", "a", "1", "1..0", "1.0b", "1.0B", "abc1", "1.0~1", "r123.abc"]
    pairs = list(itertools.product(samples, repeat=2))
    script = "".join(f"vercmp '{a}' '{b}'\n" for a, b in pairs)
    answers = [int(x) for x in run("sh", input=script).stdout.split()]
    assert [vercmp(a, b) for a, b in pairs] == answers


# -- the writer ----------------------------------------------------------------------------------

def full_spec(tmp: Path) -> PackageSpec:
    """A package with each kind of entry: directories, files (one executable, one /etc
    config, one name that mtree must quote), a symlink, a patched file, scripts."""
    src = tmp / "src"
    src.mkdir(parents=True, exist_ok=True)
    data = {"lib": b"\x7fELF library " * 1000, "conf": b"key=1\n", "tool": b"#!/bin/sh\necho tool\n",
            "odd": b"quoted\n"}
    for name, content in data.items():
        (src / name).write_bytes(content)
    files = [FileEntry("/etc/rocm", DIR, 0o755), FileEntry("/etc/rocm/rocm.conf", FILE, 0o644, str(src / "conf"), 6),
             FileEntry("/opt/rocm-7.1.0", DIR, 0o755), FileEntry("/opt/rocm-7.1.0/bin", DIR, 0o755),
             FileEntry("/opt/rocm-7.1.0/bin/tool", FILE, 0o755, str(src / "tool"), len(data["tool"])),
             FileEntry("/opt/rocm-7.1.0/lib", DIR, 0o755),
             FileEntry("/opt/rocm-7.1.0/lib/a b#=\\é", FILE, 0o644, str(src / "odd"), 7),
             FileEntry("/opt/rocm-7.1.0/lib/librocm.so", SYMLINK, 0o777, link_target="librocm.so.7"),
             FileEntry("/opt/rocm-7.1.0/lib/librocm.so.7", FILE, 0o644, str(src / "lib"), len(data["lib"]),
                       patches=((4, b"PATCHED"),))]
    return PackageSpec(format="pacman", name="rocm-core", version="7.1.0pre20260301", release="1", arch="x86_64",
                       kind="files", summary="ROCm core  runtime", description="The core.", maintainer="T <t@e.org>",
                       license="MIT", homepage="https://example.org/rocm", depends=["glibc", "rocm-base>=7.1.0-1"],
                       recommends=["rocm-docs"], breaks=["rocm-old"], obsoletes=["rocm-legacy"],
                       provides=["rocm-runtime=7.1.0pre20260301-1"],
                       scripts={"postinst": "ldconfig.j2", "prerm": "prerm.j2", "postrm": "postrm.j2"},
                       files=files, prefix="/opt/rocm-7.1.0")


@needs_pacman
def test_package_reads_back_with_pacman_bsdtar_and_rocpkg(tmp_path):
    spec = full_spec(tmp_path)
    built = write_pacman(spec, str(tmp_path / "out"), OPTIONS)
    assert Path(built.path).name == "rocm-core-7.1.0pre20260301-1-x86_64.pkg.tar.zst"
    assert built.sha256 == hashlib.sha256(Path(built.path).read_bytes()).hexdigest()
    assert built.size == Path(built.path).stat().st_size
    assert os.listdir(tmp_path / "out") == [Path(built.path).name]          # no temporary left
    info = run("pacman", "-Qip", built.path).stdout
    for line in ("Name            : rocm-core", "Version         : 7.1.0pre20260301-1",
                 "Depends On      : glibc  rocm-base>=7.1.0-1", "Provides        : rocm-runtime=7.1.0pre20260301-1",
                 "Conflicts With  : rocm-old", "Replaces        : rocm-legacy", "Install Script  : Yes",
                 "Description     : ROCm core runtime", "Architecture    : x86_64"):
        assert line in info, info
    assert "rocm-docs" in info.split("Optional Deps   :")[1].splitlines()[0]
    listing = run("bsdtar", "-tvf", built.path).stdout.splitlines()
    names = [line.split(None, 8)[8] for line in listing]
    assert names[:4] == [".BUILDINFO", ".INSTALL", ".MTREE", ".PKGINFO"]
    assert names[4:7] == ["etc/", "etc/rocm/", "etc/rocm/rocm.conf"]
    assert "opt/" in names and "opt/rocm-7.1.0/lib/librocm.so -> librocm.so.7" in names
    assert all(" root   root " in line for line in listing)
    assert next(line for line in listing if line.endswith("bin/tool")).startswith("-rwxr-xr-x")
    # pacman's own check of the payload against the .MTREE, after installing it into a root
    root = tmp_path / "root"
    (root / "var/lib/pacman").mkdir(parents=True)
    run("pacman", "-U", "--noconfirm", "-dd", "--root", root, "--dbpath", root / "var/lib/pacman",
        "--config", "/dev/null", "--cachedir", tmp_path / "cache", "--logfile", tmp_path / "log", built.path)
    assert (root / "opt/rocm-7.1.0/lib/librocm.so.7").read_bytes()[:11] == b"\x7fELFPATCHED"
    assert os.readlink(root / "opt/rocm-7.1.0/lib/librocm.so") == "librocm.so.7"
    assert (root / "opt/rocm-7.1.0/lib/a b#=\\é").read_bytes() == b"quoted\n"
    checked = run("pacman", "-Qkk", "--root", root, "--dbpath", root / "var/lib/pacman", "--config", "/dev/null",
                  "rocm-core", check=False)
    assert "0 altered files" in checked.stdout, checked.stdout + checked.stderr
    assert "backup = etc/rocm/rocm.conf" in built.metadata

    seen = {}
    package = read_pacman(built.path, lambda f, reader: seen.__setitem__(f.path, reader.read(11)))
    assert seen["/opt/rocm-7.1.0/lib/librocm.so.7"] == b"\x7fELFPATCHED"
    assert package.first("pkgver") == "7.1.0pre20260301-1"
    assert package.info["depend"] == ["glibc", "rocm-base>=7.1.0-1"]
    assert package.pkginfo == built.metadata
    assert "post_install()" in package.install and "pre_remove()" in package.install
    kinds = {f.path: (f.type, f.mode, f.size, f.link) for f in package.files}
    assert kinds["/opt"] == (DIR, 0o755, 0, "")
    assert kinds["/opt/rocm-7.1.0/bin/tool"][:2] == (FILE, 0o755)
    assert kinds["/opt/rocm-7.1.0/lib/librocm.so"] == (SYMLINK, 0o777, 0, "librocm.so.7")
    head = read_pacman_info(built.path)
    assert [(f.path, f.type) for f in head.files] == [(f.path, f.type) for f in package.files]


def test_same_spec_same_bytes_whatever_the_threads_and_compression_reads_back(tmp_path):
    spec = full_spec(tmp_path)
    first = write_pacman(spec, str(tmp_path / "a"), dataclasses.replace(OPTIONS, threads=1))
    second = write_pacman(spec, str(tmp_path / "b"), dataclasses.replace(OPTIONS, threads=4))
    assert first.sha256 == second.sha256
    for kind in ("xz", "gzip"):
        other = write_pacman(spec, str(tmp_path / kind), dataclasses.replace(OPTIONS, compression=kind))
        assert read_pacman(other.path).pkginfo == first.metadata


@pytest.mark.parametrize("change, named", [
    (dict(version="7.1.0~rc1"), "version"), (dict(name="Rocm-Core"), "Rocm-Core"),
    (dict(depends=["rocm-base (>= 7.1.0-1)"]), "depends"), (dict(arch="amd64"), "arch"),
    (dict(release="1~x"), "release"), (dict(scripts={"config": "ldconfig.j2"}), "config"),
    (dict(format="deb"), "pacman writer"), (dict(summary="two\nlines"), "summary"),
])
def test_a_spec_not_in_pacman_syntax_is_refused_and_writes_nothing(tmp_path, change, named):
    spec = dataclasses.replace(full_spec(tmp_path), **change)
    with pytest.raises(RocpkgInputError) as refused:
        write_pacman(spec, str(tmp_path / "out"), OPTIONS)
    assert named in str(refused.value.problems)
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_source_changed_since_planning_leaves_no_file(tmp_path):
    spec = full_spec(tmp_path)
    (tmp_path / "src" / "lib").write_bytes(b"shorter")
    (tmp_path / "out").mkdir()
    with pytest.raises(RocpkgInputError) as refused:
        write_pacman(spec, str(tmp_path / "out"), OPTIONS)
    assert "/opt/rocm-7.1.0/lib/librocm.so.7" in str(refused.value.problems)
    assert os.listdir(tmp_path / "out") == []


# -- the reader on hostile packages ---------------------------------------------------------------

def tar_package(path: Path, members: list[tuple[str, bytes, bytes, str]]) -> Path:
    """A gzip'd tar of (name, type, data, link) members, written by hand."""
    import gzip
    body = b""
    for name, kind, data, link in members:
        body += tar_header(name, kind, 0o644, 0, len(data), link) + data + b"\0" * (-len(data) % 512)
    path.write_bytes(gzip.compress(body + b"\0" * 1024))
    return path


@pytest.mark.parametrize("members, why", [
    ([(".PKGINFO", b"0", b"pkgname = a\npkgver = 1-1\narch = any\n", ""), ("../../etc/x", b"0", b"x", "")],
     "not a plain relative path"),
    ([(".PKGINFO", b"0", b"pkgname = a\npkgver = 1-1\narch = any\n", ""), ("/etc/x", b"0", b"x", "")],
     "outside the package root"),
    ([(".PKGINFO", b"0", b"pkgname = a\n" * 200000, "")], "at most"),
    ([("opt/x", b"0", b"x", "")], "no .PKGINFO"),
    ([(".PKGINFO", b"0", b"pkgname = a\npkgver = 1-1\narch = any\n", ""), ("dev", b"3", b"", "")], "type"),
    ([(".PKGINFO", b"0", b"pkgname = a\npkgver = 1-1\narch = any\n", ""), ("opt/hard", b"1", b"", "x")], "type"),
])
def test_a_hostile_package_is_refused_with_its_reason(tmp_path, members, why):
    package = tar_package(tmp_path / "bad.pkg.tar.gz", members)
    with pytest.raises(RocpkgInputError) as refused:
        read_pacman(package)
    assert why in str(refused.value.problems)


def test_a_payload_that_differs_from_its_mtree_is_refused(tmp_path):
    built = write_pacman(full_spec(tmp_path), str(tmp_path / "out"), dataclasses.replace(OPTIONS, compression="gzip"))
    import gzip
    raw = bytearray(gzip.decompress(Path(built.path).read_bytes()))
    at = raw.index(b"\x7fELF library")
    raw[at + 20] ^= 1
    changed = tmp_path / "changed.pkg.tar.gz"
    changed.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(RocpkgInputError) as refused:
        read_pacman(changed)
    assert "librocm.so.7" in str(refused.value.problems) and "digests" in str(refused.value.problems)
    truncated = tmp_path / "cut.pkg.tar.zst"
    truncated.write_bytes(Path(built.path).read_bytes()[:300])
    with pytest.raises(RocpkgInputError):
        read_pacman(truncated)
    link = tmp_path / "link.pkg.tar.zst"
    link.symlink_to(built.path)
    with pytest.raises(RocpkgInputError):
        read_pacman(link)


# -- the repository database ------------------------------------------------------------------------

def entries_of(database: Path, out: Path) -> dict[str, str]:
    """Every file of an extracted database: `<entry>/desc` -> text."""
    out.mkdir()
    run("bsdtar", "-xf", database, "-C", out)
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}


@needs_pacman
def test_database_is_what_repo_add_writes_and_the_same_bytes_again(tmp_path, signer):
    packages = write_chain(tmp_path / "out")
    repo = packages[0].parent
    written = write_database(repo, "rocm", [p.name for p in packages], signer=signer,
                             source_date_epoch=SOURCE_DATE_EPOCH)
    names = {Path(p).name for p in written}
    assert {"rocm.db", "rocm.db.tar.zst", "rocm.db.sig", "rocm.files", "rocm.files.tar.zst.sig"} <= names
    assert {p.name + ".sig" for p in packages} <= names
    assert (repo / "rocm.db").read_bytes() == (repo / "rocm.db.tar.zst").read_bytes()
    first = {p: Path(p).read_bytes() for p in written}
    write_database(repo, "rocm", [p.name for p in packages], signer=signer, source_date_epoch=SOURCE_DATE_EPOCH)
    assert {p: Path(p).read_bytes() for p in written} == first

    theirs = tmp_path / "repo-add"
    theirs.mkdir()
    for path in packages:
        shutil.copy(path, theirs)
        shutil.copy(str(path) + ".sig", theirs)
    run("repo-add", "-q", theirs / "rocm.db.tar.zst", *sorted(theirs.glob("*.pkg.tar.zst")))
    for kind in ("db", "files"):
        ours = entries_of(repo / f"rocm.{kind}.tar.zst", tmp_path / f"ours-{kind}")
        want = entries_of(theirs / f"rocm.{kind}.tar.zst", tmp_path / f"theirs-{kind}")
        assert ours == want
    assert "%PGPSIG%" in ours[f"{META}-7.1.0-1/desc"]


@needs_pacman
def test_database_keeps_the_newest_version_of_a_name_and_refuses_two_files_of_one(tmp_path):
    out = tmp_path / "out"
    old = write_chain(out, chain=CHAIN[:1], version="7.1.0~20260301")
    new = write_chain(out, chain=CHAIN[:1], version="7.1.0")
    write_database(old[0].parent, "rocm", [old[0].name, new[0].name], source_date_epoch=SOURCE_DATE_EPOCH)
    listed = entries_of(old[0].parent / "rocm.db", tmp_path / "db")
    assert list(listed) == ["rocm-host-7.1.0-1/desc"]
    twin = new[0].parent / new[0].name.replace("x86_64", "any")
    shutil.copy(new[0], twin)
    with pytest.raises(RocpkgInputError) as refused:
        write_database(old[0].parent, "rocm", [new[0].name, twin.name])
    assert "rocm-host 7.1.0-1" in str(refused.value.problems)
    with pytest.raises(RocpkgInputError):
        write_database(old[0].parent, "rocm", ["/etc/passwd"])


# -- the end to end: pacman installs from the signed repository --------------------------------------

class Pacman:
    """pacman confined to root/: its own database, cache, log, config and keyring, which
    trusts only the repository's key (lsigned)."""

    def __init__(self, tmp: Path, repo_dir: Path, signer):
        self.root, self.gpgdir, self.config = tmp / "root", tmp / "gnupg", tmp / "pacman.conf"
        (self.root / "var/lib/pacman").mkdir(parents=True)
        self.config.write_text("[options]\nArchitecture = x86_64\nSigLevel = Required\n"
                               f"[rocm]\nServer = file://{repo_dir.parent}/$arch\n")
        run("pacman-key", "--gpgdir", self.gpgdir, "--init")
        key = tmp / "rocm.asc"
        key.write_bytes(signer.public_key(armored=True))
        run("pacman-key", "--gpgdir", self.gpgdir, "--add", key)
        run("pacman-key", "--gpgdir", self.gpgdir, "--lsign-key", signer.fingerprint)

    def run(self, *args, check: bool = False) -> subprocess.CompletedProcess:
        return run("pacman", "--noconfirm", "--root", self.root, "--dbpath", self.root / "var/lib/pacman",
                   "--config", self.config, "--gpgdir", self.gpgdir, "--cachedir", self.root / "cache",
                   "--logfile", self.root / "pacman.log", *args, check=check)

    def installed(self) -> set[str]:
        return {line.split()[0] for line in self.run("-Q").stdout.splitlines()}

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", str(self.gpgdir), "--kill", "all"], capture_output=True)


@pytest.fixture
def signed_repo(tmp_path, signer):
    packages = write_chain(tmp_path / "out")
    repo = packages[0].parent
    write_database(repo, "rocm", [p.name for p in packages], signer=signer, source_date_epoch=SOURCE_DATE_EPOCH)
    client = Pacman(tmp_path, repo, signer)
    yield repo, client
    client.close()


@needs_pacman
def test_pacman_installs_the_family_from_the_signed_repository(signed_repo):
    repo, pacman = signed_repo
    done = pacman.run("-Sy", META)
    assert done.returncode == 0, done.stdout + done.stderr
    assert pacman.installed() == META_CLOSURE
    root = pacman.root
    assert (root / "opt/rocm/lib/.kpack/rocm_gfx1100.kpack").read_bytes() == b"KPAK device code gfx1100\n"
    assert (root / "opt/rocm/lib/librocm.so.7").exists()
    assert not (root / "opt/rocm/lib/.kpack/rocm_gfx942.kpack").exists()
    provides = pacman.run("-Sp", "rocm-gfx110x", "--print-format", "%n %v")
    assert provides.stdout.strip().endswith("rocm-gfx110x 7.1.0-1")


@needs_pacman
def test_pacman_refuses_a_package_changed_after_signing(signed_repo):
    repo, pacman = signed_repo
    package = repo / package_filename("rocm-host", "7.1.0", "1", "x86_64")
    data = bytearray(package.read_bytes())
    data[-40] ^= 0xFF
    package.write_bytes(bytes(data))
    done = pacman.run("-Sy", META)
    assert done.returncode != 0
    assert "rocm-host" in done.stderr and "invalid or corrupted package" in done.stderr, done.stderr
    assert not (pacman.root / "opt/rocm/lib/librocm.so.7").exists()
    assert "rocm-host" not in pacman.installed()
    # the file itself, beside its detached signature: pacman -U checks that signature
    done = pacman.run("-U", "-dd", package)
    assert done.returncode != 0
    assert "invalid or corrupted package (PGP signature)" in done.stderr, done.stderr
    assert "rocm-host" not in pacman.installed()


@needs_pacman
def test_pacman_refuses_a_database_changed_after_signing_or_unsigned(signed_repo):
    repo, pacman = signed_repo
    signature = (repo / "rocm.db.sig").read_bytes()
    # the database written again, unsigned and without one package, under the old signature
    packages = sorted(p.name for p in repo.glob("*.pkg.tar.zst"))
    write_database(repo, "rocm", packages[1:], source_date_epoch=SOURCE_DATE_EPOCH)
    (repo / "rocm.db.sig").write_bytes(signature)
    done = pacman.run("-Sy", META)
    assert done.returncode != 0
    assert "rocm: signature from" in done.stderr and "is invalid" in done.stderr, done.stderr
    os.unlink(repo / "rocm.db.sig")
    done = pacman.run("-Sy", META)
    assert done.returncode != 0 and "rocm.db.sig" in done.stderr
    assert pacman.installed() == set()
