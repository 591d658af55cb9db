"""Signatures a maintainer's key makes through rocpkg verify with the tools end users
run: gpgv for APT and repomd.xml, rpm -K for package headers."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from repo_helpers import write_package
from rocpkg.formats import rpm
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.rpm import SigTag
from rocpkg.formats.sign import Signer, sign_rpm_header

SDE = 1700000000
RELEASE_TEXT = b"Origin: rocpkg\nSuite: stable\n"


@pytest.fixture
def keyring(signer, tmp_path) -> Path:
    [binary, armored] = map(Path, signer.export_public_keys(tmp_path))
    return binary


def gpgv(keyring: Path, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["gpgv", "--keyring", str(keyring), *map(str, files)], capture_output=True, text=True)


def test_clearsigned_text_verifies_and_carries_the_text(signer, keyring, tmp_path):
    inrelease = tmp_path / "InRelease"
    inrelease.write_bytes(signer.clearsign(RELEASE_TEXT))
    assert gpgv(keyring, inrelease).returncode == 0
    assert b"\nOrigin: rocpkg\nSuite: stable\n" in inrelease.read_bytes()


def test_detached_armored_signature_verifies_and_catches_a_change(signer, keyring, tmp_path):
    data, signature = tmp_path / "Release", tmp_path / "Release.gpg"
    data.write_bytes(RELEASE_TEXT)
    signature.write_bytes(signer.detached_armored(RELEASE_TEXT))
    assert signature.read_bytes().startswith(b"-----BEGIN PGP SIGNATURE-----")
    assert gpgv(keyring, signature, data).returncode == 0
    data.write_bytes(RELEASE_TEXT + b"Label: changed\n")
    assert gpgv(keyring, signature, data).returncode != 0


def test_public_keys_are_exported_for_apt_and_for_dnf(signer, tmp_path):
    binary, armored = map(Path, signer.export_public_keys(tmp_path))
    assert (binary.name, armored.name) == ("rocm.gpg", "rocm.asc")
    assert armored.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    listing = subprocess.run(["gpg", "--show-keys", "--with-colons", str(binary)], capture_output=True, text=True)
    assert f"fpr:::::::::{signer.fingerprint}:" in listing.stdout


def test_signatures_made_at_a_fixed_time_are_reproducible(signer):
    assert signer.detached_armored(RELEASE_TEXT) == signer.detached_armored(RELEASE_TEXT)
    assert signer.clearsign(RELEASE_TEXT) == signer.clearsign(RELEASE_TEXT)


def test_rpm_header_signature_is_accepted_by_rpm_with_the_key_imported(signer, tmp_path):
    package = write_package(tmp_path / "out", "rpm", "rocm-host", "amd64", [],
                            {"opt/rocm/lib/librocm.so.7": b"\x7fELF host\n"})
    before = rpm.read_rpm(package)
    signed_part = package.read_bytes()[before.header_start:]
    assert sign_rpm_header(package, signer) is True
    after = rpm.read_rpm(package)
    assert SigTag.RSA in after.signature and signer.rpm_header_signature_tag == SigTag.RSA
    assert package.read_bytes()[after.header_start:] == signed_part   # header and payload untouched
    root = tmp_path / "root"
    subprocess.run(["rpm", "--root", str(root), "--import", str(Path(signer.export_public_keys(tmp_path)[1]))],
                   check=True, capture_output=True)
    check = subprocess.run(["rpm", "--root", str(root), "-K", str(package)], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.strip().endswith("digests signatures OK"), check.stdout
    info = subprocess.run(["rpm", "-qp", "--qf", "%{RSAHEADER:pgpsig}", str(package)], capture_output=True, text=True)
    assert info.stdout.startswith("RSA/SHA256") and signer.fingerprint[-16:].lower() in info.stdout


def test_rpm_signed_header_without_the_key_is_not_trusted(signer, tmp_path):
    package = write_package(tmp_path / "out", "rpm", "rocm-host", "amd64", [],
                            {"opt/rocm/lib/librocm.so.7": b"\x7fELF host\n"})
    sign_rpm_header(package, signer)
    (tmp_path / "empty-root").mkdir()
    check = subprocess.run(["rpm", "--root", str(tmp_path / "empty-root"), "-Kv", str(package)],
                           capture_output=True, text=True)
    assert check.returncode != 0 and "NOKEY" in check.stdout


def test_an_already_signed_rpm_is_left_as_it_is(signer, tmp_path):
    package = write_package(tmp_path / "out", "rpm", "rocm-host", "amd64", [],
                            {"opt/rocm/lib/librocm.so.7": b"\x7fELF host\n"})
    sign_rpm_header(package, signer)
    digest = hashlib.sha256(package.read_bytes()).hexdigest()
    assert sign_rpm_header(package, signer) is False
    assert hashlib.sha256(package.read_bytes()).hexdigest() == digest


def test_a_key_that_is_not_there_is_bad_input_naming_it(signer):
    missing = Signer(signer.gnupg_home, "nobody@example.org")
    with pytest.raises(RocpkgInputError, match="nobody@example.org"):
        missing.clearsign(RELEASE_TEXT)


def test_a_passphrase_protected_eddsa_key_signs_with_its_passphrase_only(tmp_path):
    home = tempfile.mkdtemp(prefix="g", dir="/tmp")
    Path(home, "gpg-agent.conf").write_text("s2k-count 65536\n")   # no key-stretching calibration
    try:
        subprocess.run(["gpg", "--homedir", home, "--batch", "--pinentry-mode", "loopback", "--passphrase",
                        "s3cret", "--quick-gen-key", "protected <p@example.org>", "ed25519", "sign", "never"],
                       check=True, capture_output=True)
        with pytest.raises(RocpkgInputError, match="could not sign"):
            Signer(home, "p@example.org", passphrase="wrong").clearsign(RELEASE_TEXT)
        eddsa = Signer(home, "p@example.org", passphrase="s3cret")
        assert eddsa.clearsign(RELEASE_TEXT).startswith(b"-----BEGIN PGP SIGNED MESSAGE-----")
        assert eddsa.rpm_header_signature_tag == SigTag.DSA      # rpm files EdDSA with DSA
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
