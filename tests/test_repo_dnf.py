"""A maintainer publishes a DNF repository with rocpkg; dnf installs from it with
signatures enforced, and the metadata says what createrepo_c would say."""
from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from repo_helpers import (CHAIN, META, META_CLOSURE, DnfClient,
                          rpmbuild_package, write_chain, write_package)
from rocpkg.formats.rpm import repodata as repo_dnf
from rocpkg.cli.main import main
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.sign import Signer

SDE = 1700000000
REPO = "{http://linux.duke.edu/metadata/repo}"


@pytest.fixture
def repo(tmp_path, signer) -> Path:
    """OUT with the test chain written by rocpkg's RPM writer and published, signed."""
    out = tmp_path / "out"
    write_chain(out, "rpm")
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=True)
    return out


def dnf_client(out: Path, root: Path) -> DnfClient:
    return DnfClient(root, Path(repo_dnf.write_client_snippet(out)), out / "rocm.asc")


def repomd_records(rpm_root: Path) -> dict[str, ET.Element]:
    root = ET.parse(rpm_root / "repodata/repomd.xml").getroot()
    return {d.get("type"): d for d in root.iter(f"{REPO}data")}


def metadata(rpm_root: Path, kind: str) -> ET.Element:
    href = repomd_records(rpm_root)[kind].find(f"{REPO}location").get("href")
    return ET.fromstring(gzip.decompress((rpm_root / href).read_bytes()))


def canonical(elem: ET.Element):
    """An element as comparable data: tag, attributes, text, children in order; the
    file's own mtime (time/@file) left out, as it says when a copy was made."""
    attrs = {k: v for k, v in elem.attrib.items() if not (elem.tag.endswith("}time") and k == "file")}
    children = sorted(canonical(c) for c in elem) if elem.tag.endswith(("}metadata", "}filelists", "}otherdata")) \
        else [canonical(c) for c in elem]
    return (elem.tag, sorted(attrs.items()), (elem.text or "").strip(), children)


def createrepo_c(rpm_root: Path, output: Path) -> Path:
    output.mkdir()
    subprocess.run(["createrepo_c", "--quiet", "--no-database", "--outputdir", str(output), str(rpm_root)],
                   check=True, capture_output=True)
    return output


def test_dnf_installs_the_meta_package_closure_with_signatures_checked(repo, tmp_path):
    dnf = dnf_client(repo, tmp_path / "client")
    install = dnf.run("install", META)
    assert install.returncode == 0, install.stdout + install.stderr
    assert dnf.installed() == META_CLOSURE
    assert (dnf.root / "opt/rocm/lib/.kpack/rocm_gfx1100.kpack").is_file()


def test_dnf_installs_the_family_alias_by_its_provide(repo, tmp_path):
    dnf = dnf_client(repo, tmp_path / "client")
    install = dnf.run("install", "rocm-gfx110X")
    assert install.returncode == 0, install.stdout + install.stderr
    assert dnf.installed() == META_CLOSURE


def test_dnf_refuses_packages_published_without_header_signatures(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "rpm")
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=False)
    install = dnf_client(out, tmp_path / "client").run("install", META)
    assert install.returncode != 0
    assert "is not signed" in install.stdout + install.stderr


def test_dnf_refuses_metadata_changed_after_signing(repo, tmp_path):
    repomd = repo / "rpm/repodata/repomd.xml"
    repomd.write_text(repomd.read_text().replace("<revision>", "<revision>1"))
    install = dnf_client(repo, tmp_path / "client").run("install", META)
    assert install.returncode != 0
    assert "repomd.xml GPG signature verification error" in install.stdout + install.stderr


@pytest.mark.parametrize("kind", ["primary", "filelists", "other"])
def test_metadata_agrees_with_createrepo_c_for_rocpkg_rpms(repo, tmp_path, kind):
    reference = createrepo_c(repo / "rpm", tmp_path / "reference")
    assert canonical(metadata(repo / "rpm", kind)) == canonical(metadata(reference, kind))


@pytest.mark.parametrize("kind", ["primary", "filelists", "other"])
def test_metadata_agrees_with_createrepo_c_for_rpmbuild_rpms(tmp_path, kind):
    """rpmbuild adds what rocpkg's writer does not: scriptlet requires (pre="1"),
    rpmlib() requires, weak dependencies, a changelog of its own."""
    out = tmp_path / "out"
    rpmbuild_package(out, "rocm-tools", "amd64", [], {"opt/rocm/bin/rocm-smi": b"#!/bin/sh\n",
                                                      "etc/rocm/rocm.conf": b"x=1\n"},
                     extra_preamble="Recommends: rocm-docs >= 7\nSuggests: rocm-extra\n"
                                    "Conflicts: rocm-old < 1:6.0-2\nObsoletes: rocm-tools-legacy\n"
                                    "Provides: rocm-cli = 7.1\nRequires: /bin/sh\n",
                     post="/sbin/ldconfig || :")
    repo_dnf.publish_dnf(out, source_date_epoch=SDE)
    reference = createrepo_c(out / "rpm", tmp_path / "reference")
    assert canonical(metadata(out / "rpm", kind)) == canonical(metadata(reference, kind))


def test_repomd_lists_each_metadata_file_with_its_checksums_and_sizes(repo):
    rpm_root = repo / "rpm"
    records = repomd_records(rpm_root)
    assert set(records) == {"primary", "filelists", "other"}
    for kind, record in records.items():
        href = record.find(f"{REPO}location").get("href")
        packed = (rpm_root / href).read_bytes()
        opened = gzip.decompress(packed)
        assert href == f"repodata/{hashlib.sha256(packed).hexdigest()}-{kind}.xml.gz"
        assert record.findtext(f"{REPO}checksum") == hashlib.sha256(packed).hexdigest()
        assert record.findtext(f"{REPO}open-checksum") == hashlib.sha256(opened).hexdigest()
        assert int(record.findtext(f"{REPO}size")) == len(packed)
        assert int(record.findtext(f"{REPO}open-size")) == len(opened)
        assert int(record.findtext(f"{REPO}timestamp")) == SDE


def test_repomd_signature_verifies_against_the_exported_key(repo, tmp_path):
    keyring = tmp_path / "keyring.gpg"
    subprocess.run(["gpg", "--dearmor", "-o", str(keyring), str(repo / "rocm.asc")], check=True,
                   capture_output=True)
    verify = subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / "rpm/repodata/repomd.xml.asc"),
                             str(repo / "rpm/repodata/repomd.xml")], capture_output=True)
    assert verify.returncode == 0, verify.stderr


def test_publishing_again_after_adding_a_package_keeps_the_published_ones(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "rpm", chain=CHAIN[:4])
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=True)
    first = {k: r.find(f"{REPO}location").get("href") for k, r in repomd_records(out / "rpm").items()}
    write_chain(out, "rpm", chain=CHAIN[4:])
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE + 60, sign_packages=True)
    names = {p.findtext("{http://linux.duke.edu/metadata/common}name") for p in metadata(out / "rpm", "primary")}
    assert names == {name for name, *_ in CHAIN}
    # readers that fetched the first repomd.xml can still fetch what it lists
    assert all((out / "rpm" / href).is_file() for href in first.values())
    dnf = dnf_client(out, tmp_path / "client")
    install = dnf.run("install", "rocm-docs", META)
    assert install.returncode == 0, install.stdout + install.stderr
    assert dnf.installed() == META_CLOSURE | {"rocm-docs"}


def test_same_nevra_with_other_bytes_is_refused(repo, signer):
    repodata = repo / "rpm/repodata"
    before = {p.name: p.read_bytes() for p in repodata.iterdir()}
    write_package(repo, "rpm", "rocm-host", "amd64", [], {"opt/rocm/lib/librocm.so.7": b"other bytes\n"})
    with pytest.raises(RocpkgInputError) as refused:
        repo_dnf.publish_dnf(repo, signer=signer, source_date_epoch=SDE, sign_packages=True)
    [(where, what)] = refused.value.problems
    assert where == str(repo / "rpm/x86_64/rocm-host-7.1.0-1.x86_64.rpm")
    assert "rocm-host-0:7.1.0-1.x86_64" in what and "published x86_64/rocm-host-7.1.0-1.x86_64.rpm" in what
    assert {p.name: p.read_bytes() for p in repodata.iterdir()} == before


def test_publishing_the_same_rpms_twice_gives_identical_bytes(repo, tmp_path, signer):
    again = tmp_path / "again"
    shutil.copytree(repo / "rpm", again / "rpm", ignore=shutil.ignore_patterns("repodata"))
    repo_dnf.publish_dnf(again, signer=signer, source_date_epoch=SDE, sign_packages=True)
    ours = sorted(p.name for p in (repo / "rpm/repodata").iterdir())
    assert sorted(p.name for p in (again / "rpm/repodata").iterdir()) == ours
    for name in ours:
        assert (again / "rpm/repodata" / name).read_bytes() == (repo / "rpm/repodata" / name).read_bytes()


def test_client_snippet_turns_every_signature_check_on(repo):
    text = Path(repo_dnf.write_client_snippet(repo)).read_text()
    assert text.splitlines() == ["[rocm]", "name=ROCm packages built by rocpkg",
                                 f"baseurl=file://{repo}/rpm", "enabled=1", "gpgcheck=1",
                                 "repo_gpgcheck=1", "pkg_gpgcheck=1", f"gpgkey=file://{repo}/rocm.asc"]


def test_rocpkg_repo_command_signs_packages_and_metadata_for_dnf(tmp_path, signer, capsys):
    out = tmp_path / "out"
    write_chain(out, "rpm")
    assert main(["repo", str(out), "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]) == 0
    assert "dnf:" in capsys.readouterr().out
    dnf = DnfClient(tmp_path / "client", out / "rocm.repo", out / "rocm.asc")   # the written .repo, as is
    install = dnf.run("install", META)
    assert install.returncode == 0, install.stdout + install.stderr
    assert dnf.installed() == META_CLOSURE


def test_rocpkg_repo_command_with_a_missing_key_exits_2_naming_it(tmp_path, signer, capsys):
    out = tmp_path / "out"
    write_chain(out, "rpm")
    assert main(["repo", str(out), "--gpg-home", signer.gnupg_home, "--sign-key", "nobody@example.org"]) == 2
    assert "error: --sign-key: no secret key 'nobody@example.org'" in capsys.readouterr().err
    assert not (out / "rpm/repodata").exists()


def test_a_publish_that_fails_to_sign_leaves_the_published_repository_as_it_was(repo, tmp_path, signer):
    class BrokenSigner(Signer):
        def detached_armored(self, data: bytes) -> bytes:
            raise RocpkgInputError(("--sign-key", "the smartcard was unplugged"))

    repodata = repo / "rpm/repodata"
    before = {p.name: p.read_bytes() for p in repodata.iterdir()}
    write_package(repo, "rpm", "rocm-extra", "all", [], {})
    with pytest.raises(RocpkgInputError, match="unplugged"):
        repo_dnf.publish_dnf(repo, signer=BrokenSigner(signer.gnupg_home, signer.key_id), source_date_epoch=SDE)
    after = {p.name: p.read_bytes() for p in repodata.iterdir()}
    assert all(after[name] == data for name, data in before.items())
    dnf = dnf_client(repo, tmp_path / "client")
    install = dnf.run("install", META)
    assert install.returncode == 0, install.stdout + install.stderr


def test_signing_a_repository_first_published_unsigned_signs_its_packages(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "rpm")
    repo_dnf.publish_dnf(out, source_date_epoch=SDE)
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=True)
    dnf = dnf_client(out, tmp_path / "client")
    install = dnf.run("install", META)
    assert install.returncode == 0, install.stdout + install.stderr


def test_unreadable_rpms_are_all_named_and_nothing_is_published(repo, signer):
    repodata = repo / "rpm/repodata"
    before = {p.name: p.read_bytes() for p in repodata.iterdir()}
    host = repo / "rpm/x86_64/rocm-host-7.1.0-1.x86_64.rpm"
    (repo / "rpm/x86_64/truncated-1-1.x86_64.rpm").write_bytes(host.read_bytes()[:200])
    (repo / "rpm/noarch/not-an-rpm-1-1.noarch.rpm").write_bytes(b"hello\n")
    with pytest.raises(RocpkgInputError) as refused:
        repo_dnf.publish_dnf(repo, signer=signer, source_date_epoch=SDE, sign_packages=True)
    assert sorted(where.split(":")[0] for where, _ in refused.value.problems) == \
        [str(repo / "rpm/noarch/not-an-rpm-1-1.noarch.rpm"), str(repo / "rpm/x86_64/truncated-1-1.x86_64.rpm")]
    assert {p.name: p.read_bytes() for p in repodata.iterdir()} == before
