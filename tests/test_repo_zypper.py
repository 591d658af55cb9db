"""zypper (libzypp, as on SLES) installs from a repository `rocpkg repo` signed, with the
signatures of the metadata and of every package checked, and refuses what is unsigned
or changed after signing."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repo_helpers import META_CLOSURE, ZypperClient, write_chain
from rocpkg.cli.main import main
from rocpkg.formats.rpm import repodata as repo_dnf

SDE = 1700000000

pytestmark = pytest.mark.skipif(shutil.which("zypper") is None, reason="zypper is not installed")


@pytest.fixture
def signed_out(tmp_path, signer) -> Path:
    """OUT with the test chain, indexed and signed by `rocpkg repo`."""
    out = tmp_path / "out"
    write_chain(out, "rpm")
    assert main(["repo", str(out), "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]) == 0
    return out


def _refused(result: subprocess.CompletedProcess, client: ZypperClient, why: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert why in output, output
    assert client.installed() == set()


def test_zypper_installs_the_family_alias_with_every_signature_checked(signed_out, tmp_path):
    zypper = ZypperClient(tmp_path / "root", [signed_out / "rocm.repo"], signed_out / "rocm.asc")
    install = zypper.run("install", "rocm-gfx110X")
    assert install.returncode == 0, install.stdout + install.stderr
    assert zypper.installed() == META_CLOSURE
    assert (zypper.root / "opt/rocm/lib/.kpack/rocm_gfx1100.kpack").is_file()
    assert "pkg_gpgcheck=1" in (signed_out / "rocm.repo").read_text()


def test_repomd_xml_key_is_the_key_that_signed_the_metadata(signed_out, tmp_path):
    repodata = signed_out / "rpm/repodata"
    assert (repodata / "repomd.xml.key").read_bytes() == (signed_out / "rocm.asc").read_bytes()
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--dearmor", "--output", str(keyring), str(repodata / "repomd.xml.key")], check=True)
    gpgv = subprocess.run(["gpgv", "--keyring", str(keyring), str(repodata / "repomd.xml.asc"),
                           str(repodata / "repomd.xml")], capture_output=True)
    assert gpgv.returncode == 0, gpgv.stderr


def test_zypper_imports_the_published_key_when_told_to(signed_out, tmp_path):
    zypper = ZypperClient(tmp_path / "root", [signed_out / "rocm.repo"], key=None)
    install = zypper.run("install", "rocm-gfx110X")
    assert install.returncode == 0, install.stdout + install.stderr
    assert zypper.installed() == META_CLOSURE


def test_an_unsigned_index_publishes_no_key_beside_it(signed_out):
    repo_dnf.publish_dnf(signed_out, source_date_epoch=SDE)
    assert not (signed_out / "rpm/repodata/repomd.xml.key").exists()
    assert not (signed_out / "rpm/repodata/repomd.xml.asc").exists()


def test_zypper_refuses_packages_published_without_signatures(tmp_path, signer):
    out = tmp_path / "out"
    write_chain(out, "rpm")
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=False)
    repo_dnf.write_client_snippet(out)
    zypper = ZypperClient(tmp_path / "root", [out / "rocm.repo"], out / "rocm.asc")
    _refused(zypper.run("install", "rocm-gfx110X"), zypper, "Signature verification failed")


def test_zypper_refuses_a_package_changed_after_signing(tmp_path, signer):
    """The changed package is indexed again (its checksum agrees with the signed
    metadata): only its own signature can catch it."""
    out = tmp_path / "out"
    write_chain(out, "rpm")
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=True)
    host = next((out / "rpm/x86_64").glob("rocm-host-*.rpm"))
    data = bytearray(host.read_bytes())
    data[-1] ^= 0xFF                 # the last byte of the compressed payload
    host.write_bytes(bytes(data))
    shutil.rmtree(out / "rpm/repodata")
    repo_dnf.publish_dnf(out, signer=signer, source_date_epoch=SDE, sign_packages=True)
    repo_dnf.write_client_snippet(out)
    zypper = ZypperClient(tmp_path / "root", [out / "rocm.repo"], out / "rocm.asc")
    _refused(zypper.run("install", "rocm-gfx110X"), zypper, "Signature verification failed")


def test_zypper_refuses_metadata_changed_after_signing(signed_out, tmp_path):
    repomd = signed_out / "rpm/repodata/repomd.xml"
    repomd.write_text(repomd.read_text().replace("<revision>", "<revision>1"))
    zypper = ZypperClient(tmp_path / "root", [signed_out / "rocm.repo"], signed_out / "rocm.asc")
    _refused(zypper.run("install", "rocm-gfx110X"), zypper, "Signature verification failed for file 'repomd.xml'")
