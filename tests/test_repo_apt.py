"""A maintainer publishes an APT repository with rocpkg; end users' apt trusts it,
installs a meta package's exact closure, and refuses tampered packages."""
from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from debian import deb822

from repo_helpers import (CHAIN, META, META_CLOSURE, AptClient, apt_source_line,
                          planned_installs, write_chain, write_package)
from rocpkg.formats.deb import archive as repo_apt
from rocpkg.cli.main import main
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.sign import Signer

SDE = 1700000000


@pytest.fixture
def repo(tmp_path, signer) -> Path:
    """OUT with the test chain built and published, signed."""
    out = tmp_path / "out"
    write_chain(out, "deb")
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE)
    return out


def client(out: Path, root: Path, suite: str = "stable") -> AptClient:
    return AptClient(root, apt_source_line(out, out / "rocm.gpg", suite))


def packages_index(out: Path, arch: str = "amd64") -> list[deb822.Packages]:
    with open(out / f"deb/dists/stable/main/binary-{arch}/Packages", encoding="utf-8") as f:
        return list(deb822.Packages.iter_paragraphs(f, use_apt_pkg=False))


def test_apt_update_from_the_signed_repository_is_clean(repo, tmp_path):
    apt = client(repo, tmp_path / "client")
    update = apt.run("update")
    assert update.returncode == 0, update.stderr
    assert "W:" not in update.stderr and "E:" not in update.stderr, update.stderr
    assert "stable/main amd64 Packages" in update.stdout


def test_apt_refuses_the_repository_when_published_without_a_key(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "deb")
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE)
    repo_apt.publish_apt(out, signer=None, source_date_epoch=SDE)   # drops the signatures
    update = client(out, tmp_path / "client").run("update")
    assert update.returncode != 0
    assert "is not signed" in update.stderr


def test_meta_package_resolves_to_exactly_its_planned_closure(repo, tmp_path):
    apt = client(repo, tmp_path / "client")
    assert apt.run("update").returncode == 0
    simulation = apt.run("-s", "install", META)
    assert simulation.returncode == 0, simulation.stderr
    assert planned_installs(simulation.stdout) == META_CLOSURE


def test_downloaded_closure_installs_into_a_throwaway_root(repo, tmp_path):
    apt = client(repo, tmp_path / "client")
    assert apt.run("update").returncode == 0
    closure = planned_installs(apt.run("-s", "install", META).stdout)
    download = apt.run("download", *sorted(closure))         # checked against the index hashes
    assert download.returncode == 0, download.stderr
    debs = sorted((tmp_path / "client/downloads").glob("*.deb"))
    assert len(debs) == len(META_CLOSURE)
    target = tmp_path / "target"
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "opt"):  # /opt: base-files makes it everywhere
        (target / d).mkdir(parents=True)
    (target / "var/lib/dpkg/status").write_text("")
    install = subprocess.run(["dpkg", f"--root={target}", "--force-script-chrootless", "-i", *map(str, debs)],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    assert (target / "opt/rocm/lib/.kpack/rocm_gfx1100.kpack").is_file()
    assert not (target / "opt/rocm/lib/.kpack/rocm_gfx942.kpack").exists()


def test_a_deb_altered_after_publishing_is_refused_with_a_hash_mismatch(repo, tmp_path):
    apt = client(repo, tmp_path / "client")
    assert apt.run("update").returncode == 0
    deb = repo / "deb/pool/main/rocm-host_7.1.0-1_amd64.deb"
    data = bytearray(deb.read_bytes())
    data[-5] ^= 0xFF                        # same size, other bytes
    deb.write_bytes(bytes(data))
    download = apt.run("download", "rocm-host")
    assert download.returncode != 0
    assert "Hash Sum mismatch" in download.stderr


def test_packages_stanza_is_the_control_stanza_plus_where_and_what_hash(repo):
    deb = repo / "deb/pool/main/rocm-gfx110x_7.1.0-1_all.deb"
    control = deb822.Deb822(subprocess.run(["dpkg-deb", "--field", str(deb)], check=True,
                                           capture_output=True, text=True).stdout)
    stanza = next(s for s in packages_index(repo) if s["Package"] == META)
    assert {k: stanza[k] for k in control} == dict(control)
    assert stanza["Filename"] == "pool/main/rocm-gfx110x_7.1.0-1_all.deb"
    assert int(stanza["Size"]) == deb.stat().st_size
    assert stanza["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()


def test_release_lists_every_index_under_sha256_and_sha512_with_by_hash_copies(repo):
    suite = repo / "deb/dists/stable"
    release = deb822.Release((suite / "Release").read_text())
    assert release["Suite"] == "stable" and release["Components"] == "main"
    assert release["Architectures"] == "amd64"
    assert release["Acquire-By-Hash"] == "yes"
    assert release["Date"] == "Tue, 14 Nov 2023 22:13:20 GMT"
    names = {"main/binary-amd64/Packages", "main/binary-amd64/Packages.gz", "main/binary-amd64/Packages.xz"}
    for field, algorithm in (("SHA256", "sha256"), ("SHA512", "sha512")):
        assert {e["name"] for e in release[field]} == names
        for entry in release[field]:
            data = (suite / entry["name"]).read_bytes()
            assert hashlib.new(algorithm, data).hexdigest() == entry[algorithm]
            assert len(data) == int(entry["size"])
            by_hash = suite / Path(entry["name"]).parent / "by-hash" / field / entry[algorithm]
            assert by_hash.read_bytes() == data
    plain = (suite / "main/binary-amd64/Packages").read_bytes()
    assert gzip.decompress((suite / "main/binary-amd64/Packages.gz").read_bytes()) == plain
    assert lzma.decompress((suite / "main/binary-amd64/Packages.xz").read_bytes()) == plain


def test_inrelease_and_release_gpg_verify_against_the_exported_keyring(repo, tmp_path):
    suite = repo / "deb/dists/stable"
    keyring = repo / "rocm.gpg"
    inrelease = subprocess.run(["gpgv", "--keyring", str(keyring), str(suite / "InRelease")],
                               capture_output=True)
    detached = subprocess.run(["gpgv", "--keyring", str(keyring), str(suite / "Release.gpg"),
                               str(suite / "Release")], capture_output=True)
    assert inrelease.returncode == 0, inrelease.stderr
    assert detached.returncode == 0, detached.stderr


def test_architecture_all_packages_are_listed_in_every_architecture_index(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "deb")
    write_package(out, "deb", "rocm-host", "arm64", [], {"opt/rocm/lib/librocm.so.7": b"arm\n"})
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE)
    release = deb822.Release((out / "deb/dists/stable/Release").read_text())
    assert release["Architectures"] == "amd64 arm64"
    arm64 = {(s["Package"], s["Architecture"]) for s in packages_index(out, "arm64")}
    amd64 = {(s["Package"], s["Architecture"]) for s in packages_index(out, "amd64")}
    assert arm64 == {("rocm-host", "arm64"), ("rocm-gfx110x", "all"), ("rocm-docs", "all")}
    assert ("rocm-docs", "all") in amd64 and ("rocm-host", "arm64") not in amd64


def test_publishing_again_after_adding_a_package_keeps_the_published_ones(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "deb", chain=CHAIN[:4])
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE)
    first_release = (out / "deb/dists/stable/Release").read_bytes()
    write_chain(out, "deb", chain=CHAIN[4:])
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE + 60)
    listed = {s["Package"] for s in packages_index(out)}
    assert listed == {name for name, *_ in CHAIN}
    apt = client(out, tmp_path / "client")
    assert apt.run("update").returncode == 0
    assert apt.run("-s", "install", "rocm-docs", META).returncode == 0
    # readers holding the first Release can still fetch what it names, by hash
    for entry in deb822.Release(first_release.decode())["SHA256"]:
        index_dir = out / "deb/dists/stable" / Path(entry["name"]).parent
        assert (index_dir / "by-hash/SHA256" / entry["sha256"]).is_file()


def test_same_name_version_and_arch_with_other_bytes_is_refused(repo, signer):
    suite = repo / "deb/dists/stable"
    before = {p.name: p.read_bytes() for p in suite.iterdir() if p.is_file()}
    write_package(repo, "deb", "rocm-host", "amd64", [],
                  {"opt/rocm/lib/librocm.so.7": b"rebuilt with other bytes\n"})
    with pytest.raises(RocpkgInputError) as refused:
        repo_apt.publish_apt(repo, signer=signer, source_date_epoch=SDE)
    [(where, what)] = refused.value.problems
    assert where == str(repo / "deb/pool/main/rocm-host_7.1.0-1_amd64.deb")
    assert "rocm-host 7.1.0-1 amd64" in what and "published pool/main/rocm-host_7.1.0-1_amd64.deb" in what
    assert {p.name: p.read_bytes() for p in suite.iterdir() if p.is_file()} == before


def test_two_pool_files_with_one_name_version_and_arch_are_refused(repo, signer):
    shutil.copy(repo / "deb/pool/main/rocm-host_7.1.0-1_amd64.deb", repo / "deb/pool/main/copy-of-host.deb")
    with pytest.raises(RocpkgInputError, match="rocm-host 7.1.0-1 amd64 is also in"):
        repo_apt.publish_apt(repo, signer=signer, source_date_epoch=SDE)


def test_publishing_the_same_pool_twice_gives_identical_bytes(repo, tmp_path, signer):
    again = tmp_path / "again"
    shutil.copytree(repo / "deb/pool", again / "deb/pool")
    repo_apt.publish_apt(again, signer=signer, source_date_epoch=SDE)
    for name in ("Release", "InRelease", "Release.gpg", "main/binary-amd64/Packages.gz",
                 "main/binary-amd64/Packages.xz"):
        assert (again / "deb/dists/stable" / name).read_bytes() == \
            (repo / "deb/dists/stable" / name).read_bytes(), name


def test_client_snippet_points_apt_at_the_repository_with_its_keyring(repo, tmp_path):
    path = repo_apt.write_client_snippet(repo, suite="stable")
    assert Path(path).read_text() == \
        f"deb [signed-by=/usr/share/keyrings/rocm.gpg] file://{repo}/deb stable main\n"
    url = repo_apt.write_client_snippet(repo, base_url="https://repo.example.org/rocm/deb")
    assert Path(url).read_text().split()[2] == "https://repo.example.org/rocm/deb"


def test_rocpkg_repo_command_publishes_a_signed_repository_apt_accepts(tmp_path, signer, capsys):
    out = tmp_path / "out"
    write_chain(out, "deb")
    assert main(["repo", str(out), "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]) == 0
    assert f"signed by {signer.fingerprint}" in capsys.readouterr().out
    assert (out / "rocm.list").read_text() == \
        f"deb [signed-by=/usr/share/keyrings/rocm.gpg] file://{out}/deb stable main\n"
    update = client(out, tmp_path / "client").run("update")
    assert update.returncode == 0 and "W:" not in update.stderr, update.stderr


def test_rocpkg_repo_command_reports_a_replaced_package_with_exit_2(repo, signer, capsys):
    write_package(repo, "deb", "rocm-host", "amd64", [], {"opt/rocm/lib/librocm.so.7": b"other\n"})
    assert main(["repo", str(repo), "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {repo}/deb/pool/main/rocm-host_7.1.0-1_amd64.deb: rocm-host 7.1.0-1 amd64 has sha256")


def test_a_later_publish_with_an_older_date_still_reaches_apt_clients(tmp_path, signer):
    """apt silently keeps a Release newer than the one offered; the Date never goes back."""
    out = tmp_path / "out"
    write_chain(out, "deb", chain=CHAIN[:4])
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE)
    apt = client(out, tmp_path / "client")
    assert apt.run("update").returncode == 0
    write_chain(out, "deb", chain=CHAIN[4:])
    repo_apt.publish_apt(out, signer=signer, source_date_epoch=SDE - 86400)
    assert deb822.Release((out / "deb/dists/stable/Release").read_text())["Date"] == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert apt.run("update").returncode == 0
    assert "Inst rocm-docs" in apt.run("-s", "install", "rocm-docs").stdout


def test_a_publish_that_fails_to_sign_leaves_the_published_repository_as_it_was(repo, tmp_path, signer):
    class BrokenSigner(Signer):
        def clearsign(self, data: bytes) -> bytes:
            raise RocpkgInputError(("--sign-key", "the smartcard was unplugged"))

    suite = repo / "deb/dists/stable"
    before = {p.relative_to(suite): p.read_bytes() for p in suite.rglob("*") if p.is_file()}
    write_package(repo, "deb", "rocm-extra", "all", [], {})
    with pytest.raises(RocpkgInputError, match="unplugged"):
        repo_apt.publish_apt(repo, signer=BrokenSigner(signer.gnupg_home, signer.key_id), source_date_epoch=SDE)
    after = {p.relative_to(suite): p.read_bytes() for p in suite.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if "by-hash" not in k.parts} == \
        {k: v for k, v in before.items() if "by-hash" not in k.parts}
    assert all(after[k] == v for k, v in before.items())      # new by-hash files only added
    apt = client(repo, tmp_path / "client")
    assert apt.run("update").returncode == 0
    assert planned_installs(apt.run("-s", "install", META).stdout) == META_CLOSURE


def test_apt_fetches_the_indexes_by_hash(repo, tmp_path):
    for index in (repo / "deb/dists/stable/main/binary-amd64").glob("Packages*"):
        index.unlink()                     # only by-hash/ copies left to fetch
    apt = client(repo, tmp_path / "client")
    update = apt.run("update")
    assert update.returncode == 0 and "W:" not in update.stderr, update.stderr
    assert planned_installs(apt.run("-s", "install", META).stdout) == META_CLOSURE


def test_unreadable_debs_in_the_pool_are_all_named_and_nothing_is_published(repo, signer):
    suite = repo / "deb/dists/stable"
    before = {p.relative_to(suite): p.read_bytes() for p in suite.rglob("*") if p.is_file()}
    pool = repo / "deb/pool/main"
    (pool / "truncated_1_amd64.deb").write_bytes((pool / "rocm-host_7.1.0-1_amd64.deb").read_bytes()[:300])
    (pool / "not-a-deb_1_all.deb").write_bytes(b"hello\n")
    with pytest.raises(RocpkgInputError) as refused:
        repo_apt.publish_apt(repo, signer=signer, source_date_epoch=SDE)
    assert sorted(where for where, _ in refused.value.problems) == \
        [str(pool / "not-a-deb_1_all.deb"), str(pool / "truncated_1_amd64.deb")]
    assert {p.relative_to(suite): p.read_bytes() for p in suite.rglob("*") if p.is_file()} == before
