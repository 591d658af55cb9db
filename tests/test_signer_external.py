"""Signing where the key is not: `rocpkg repo --gpg-program gpgshim` and `--signing-server
URL` sign through TheRock's signing server on 127.0.0.1 (its keyring holds the key; rocpkg's
own GnuPG home holds no secret key), and the clients that check signatures accept what it
made: apt with Signed-By, dnf with gpgcheck and repo_gpgcheck, zypper, `rpm -K`, `sqv` on
Release.gpg, gpgv on InRelease. A gpg-compatible program that makes text-mode signatures
gives an InRelease built from detached signatures (rocpkg.formats.sign); gpgshim, which
makes binary ones only, gives Release.gpg alone, and apt reads that."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from cli_run import rocpkg
from repo_helpers import GPG_HOMES, META, META_CLOSURE, AptClient, DnfClient, ZypperClient, write_chain

SDE = "1700000000"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_home() -> str:
    """A short GnuPG home (gpg-agent's socket path), its agent stopped by conftest."""
    home = tempfile.mkdtemp(prefix="g", dir="/tmp")
    GPG_HOMES.append(home)
    return home


def make_key(home: str, uid: str, algo: str = "rsa3072", expire: str = "never", *extra: str) -> str:
    """A new unprotected signing key in home; returns its fingerprint."""
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", *extra, "--quick-gen-key", uid, algo,
                    "sign", expire], check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--homedir", home, "--with-colons", "--list-keys", uid], check=True,
                             capture_output=True, text=True).stdout
    return [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")][0]


def export_key(home: str, fingerprint: str, path: Path, armored: bool = True) -> Path:
    path.write_bytes(subprocess.run(["gpg", "--homedir", home, "--export"] + (["--armor"] if armored else [])
                                    + [fingerprint], check=True, capture_output=True).stdout)
    return path


class SigningServer:
    """TheRock's signing-server.py on 127.0.0.1 with one key, and its gpgshim, copied from
    the shared reference into a temporary directory."""

    def __init__(self, reference: Path, work: Path):
        self.dir = work / "therock"
        shutil.copytree(reference, self.dir)
        self.home = new_home()
        self.fingerprint = make_key(self.home, "TheRock test <therock@example.invalid>")
        self.public = export_key(self.home, self.fingerprint, work / "therock.asc")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}/sign"
        env = {**os.environ, "GNUPGHOME": self.home, "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen([sys.executable, str(self.dir / "server/signing-server.py"), "--host",
                                      "127.0.0.1", "--port", str(port), "--keyring", self.home],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if json.loads(r.read())["status"] == "ok":
                        break
            except OSError:
                time.sleep(0.1)
        else:
            self.close()
            pytest.fail("the signing server did not start")
        self.shim = self.dir / "gpgshim"

    def env(self) -> dict[str, str]:
        return {**os.environ, "GPG_SIGNING_SERVER": self.url, "SOURCE_DATE_EPOCH": SDE}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    candidate = Path(os.environ["SHARED_DIR"]) if os.environ.get("SHARED_DIR") else \
        Path(__file__).resolve().parent.parent.parent / "shared"
    reference = candidate / "reference/therock-signing"
    if not (reference / "gpgshim").is_file():
        pytest.skip(f"TheRock's signing reference not found at {reference}")
    server = SigningServer(reference, tmp_path_factory.mktemp("therock"))
    yield server
    server.close()


def _signed_out(work: Path, server: SigningServer, *how: str) -> tuple[Path, str]:
    """The test chain in both formats, indexed and signed through `how`, with rocpkg's
    GnuPG home empty; returns OUT and that home."""
    out = work / "out"
    write_chain(out, "deb")
    write_chain(out, "rpm")
    home = new_home()
    result = rocpkg("repo", out, "--sign-key", server.fingerprint, *how, "--public-key", server.public,
                    env={**server.env(), "GNUPGHOME": home})
    assert result.returncode == 0, result.stdout + result.stderr
    assert server.fingerprint in result.stdout
    secret = subprocess.run(["gpg", "--homedir", home, "--with-colons", "--list-secret-keys"],
                            capture_output=True, text=True).stdout
    assert "sec:" not in secret         # the key never was on this side
    return out, home


@pytest.fixture(scope="module")
def via_shim(server, tmp_path_factory) -> Path:
    return _signed_out(tmp_path_factory.mktemp("shim"), server, "--gpg-program", str(server.shim))[0]


@pytest.fixture(scope="module")
def via_server(server, tmp_path_factory) -> Path:
    return _signed_out(tmp_path_factory.mktemp("server"), server, "--signing-server", server.url)[0]


def integrity_problems(out: Path) -> list:
    """What `rocpkg verify OUT --keyring OUT/rocm.gpg` finds in the indexes and their signatures."""
    from rocpkg.verify.integrity import check_integrity

    return check_integrity(str(out), keyring=str(out / "rocm.gpg"), formats=["deb", "rpm"])


def _suite(out: Path) -> Path:
    return out / "deb/dists/stable"


def sqv(keyring: Path, signature: Path, data: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sqv", "--keyring", str(keyring), str(signature), str(data)], capture_output=True,
                          text=True)


def test_gpgshim_signs_release_gpg_that_sqv_verifies_and_writes_no_inrelease(via_shim, server):
    check = sqv(via_shim / "rocm.gpg", _suite(via_shim) / "Release.gpg", _suite(via_shim) / "Release")
    assert check.returncode == 0 and server.fingerprint in check.stdout, check.stderr
    assert not (_suite(via_shim) / "InRelease").exists()      # gpgshim makes no text-mode signature
    tampered = via_shim.parent / "Release.tampered"
    tampered.write_bytes((_suite(via_shim) / "Release").read_bytes().replace(b"rocpkg", b"rocpkx", 1))
    assert sqv(via_shim / "rocm.gpg", _suite(via_shim) / "Release.gpg", tampered).returncode != 0


def test_apt_with_signed_by_installs_from_the_gpgshim_signed_repository(via_shim, tmp_path):
    apt = AptClient(tmp_path, f"deb [signed-by={via_shim / 'rocm.gpg'}] file://{via_shim / 'deb'} stable main\n")
    update = apt.run("update")
    assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    install = apt.run("install", "-y", "--download-only", META)
    assert install.returncode == 0, install.stdout + install.stderr


def test_apt_refuses_it_with_another_key(via_shim, server, tmp_path):
    other = new_home()
    fpr = make_key(other, "other <o@example.invalid>")
    wrong = export_key(other, fpr, tmp_path / "other.gpg", armored=False)
    apt = AptClient(tmp_path / "apt", f"deb [signed-by={wrong}] file://{via_shim / 'deb'} stable main\n")
    update = apt.run("update")
    assert "NO_PUBKEY" in update.stdout + update.stderr or "not signed" in update.stdout + update.stderr


def test_rpm_k_accepts_the_gpgshim_signed_headers(via_shim, tmp_path):
    subprocess.run(["rpm", "--root", str(tmp_path), "--import", str(via_shim / "rocm.asc")], check=True)
    rpms = sorted((via_shim / "rpm").rglob("*.rpm"))
    assert rpms
    for path in rpms:
        check = subprocess.run(["rpm", "--root", str(tmp_path), "-K", str(path)], capture_output=True, text=True)
        assert check.returncode == 0 and "signatures OK" in check.stdout, check.stdout + check.stderr


def test_dnf_with_gpgcheck_and_repo_gpgcheck_installs_from_it(via_shim, tmp_path):
    repo = (via_shim / "rocm.repo").read_text()
    assert "gpgcheck=1" in repo and "repo_gpgcheck=1" in repo
    dnf = DnfClient(tmp_path, via_shim / "rocm.repo", via_shim / "rocm.asc")
    install = dnf.run("install", META)
    assert install.returncode == 0, install.stdout + install.stderr
    assert dnf.installed() == META_CLOSURE


def test_zypper_installs_from_it(via_shim, tmp_path):
    zypper = ZypperClient(tmp_path, [via_shim / "rocm.repo"], via_shim / "rocm.asc")
    install = zypper.run("install", META)
    assert install.returncode == 0, install.stdout + install.stderr
    assert zypper.installed() == META_CLOSURE


def test_the_signing_server_api_makes_inrelease_that_gpgv_and_apt_accept(via_server, server, tmp_path):
    inrelease = _suite(via_server) / "InRelease"
    check = subprocess.run(["gpgv", "--keyring", str(via_server / "rocm.gpg"), str(inrelease)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert sqv(via_server / "rocm.gpg", _suite(via_server) / "Release.gpg", _suite(via_server) / "Release").returncode == 0
    assert integrity_problems(via_server) == []
    apt = AptClient(tmp_path, f"deb [signed-by={via_server / 'rocm.gpg'}] file://{via_server / 'deb'} stable main\n")
    update = apt.run("update")
    assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    assert list((tmp_path / "var/lib/apt/lists").glob("*_InRelease"))


# -- InRelease from detached text-mode signatures: a gpg-compatible program ----------------

@pytest.fixture(scope="module")
def via_program(tmp_path_factory):
    """Two keys kept in a home rocpkg is not given, signed with through a gpg wrapper
    (as a smartcard or HSM front end would be): InRelease is rocpkg's cleartext frame."""
    work = tmp_path_factory.mktemp("program")
    keys = new_home()
    old = make_key(keys, "old <old@example.invalid>")
    time.sleep(1.1)                                      # the new key is the newer one
    new = make_key(keys, "new <new@example.invalid>")
    wrapper = work / "signer"
    wrapper.write_text(f"#!/bin/sh\nexec gpg --homedir {keys} --pinentry-mode loopback \"$@\"\n")
    wrapper.chmod(0o755)
    public = export_key(keys, old, work / "old.asc")
    public_new = export_key(keys, new, work / "new.asc")
    out = work / "out"
    write_chain(out, "deb")
    write_chain(out, "rpm")
    result = rocpkg("repo", out, "--sign-key", old, "--sign-key", new, "--gpg-program", wrapper,
                    "--public-key", public, "--public-key", public_new, env={**os.environ, "GNUPGHOME": new_home()})
    assert result.returncode == 0, result.stdout + result.stderr
    return out, keys, old, new


def test_inrelease_from_detached_text_signatures_verifies_with_gpgv_sqv_and_apt(via_program, tmp_path):
    out, keys, old, new = via_program
    inrelease = _suite(out) / "InRelease"
    text = inrelease.read_bytes()
    assert text.startswith(b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n")
    signature = b"-----BEGIN PGP SIGNATURE-----" + text.split(b"-----BEGIN PGP SIGNATURE-----")[1]
    packets = subprocess.run(["gpg", "--list-packets"], input=signature.decode(), capture_output=True, text=True,
                             env={**os.environ, "GNUPGHOME": new_home()}).stdout
    assert packets.count("sigclass 0x01") == 2             # a text-mode signature by each key
    for fpr in (old, new):
        ring = export_key(keys, fpr, tmp_path / f"{fpr}.gpg", armored=False)
        check = subprocess.run(["gpgv", "--keyring", str(ring), str(inrelease)], capture_output=True, text=True)
        assert "Good signature" in check.stderr and "BAD" not in check.stderr, check.stderr   # the other: no key
        # what apt does with sqv: the signed text and the signature apart
        body = text.split(b"\n\n", 1)[1].split(b"\n-----BEGIN PGP SIGNATURE-----")[0]
        (tmp_path / "content").write_bytes(body)
        (tmp_path / "sig.asc").write_bytes(signature)
        assert sqv(ring, tmp_path / "sig.asc", tmp_path / "content").returncode == 0
        apt = AptClient(tmp_path / fpr, f"deb [signed-by={ring}] file://{out / 'deb'} stable main\n")
        update = apt.run("update")
        assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    both = subprocess.run(["gpgv", "--keyring", str(out / "rocm.gpg"), str(inrelease)], capture_output=True, text=True)
    assert both.returncode == 0 and both.stderr.count("Good signature") == 2, both.stderr
    assert integrity_problems(out) == []


def test_rpm_headers_carry_the_newest_keys_signature_only(via_program, tmp_path):
    out, keys, old, new = via_program
    rpm = sorted((out / "rpm").rglob("*.rpm"))[0]
    subprocess.run(["rpm", "--root", str(tmp_path), "--import", str(export_key(keys, new, tmp_path / "n.asc"))],
                   check=True)
    assert "signatures OK" in subprocess.run(["rpm", "--root", str(tmp_path), "-K", str(rpm)],
                                             capture_output=True, text=True).stdout


def test_a_signer_is_plain_data_that_signs_in_another_process(via_program, tmp_path):
    """Build workers sign RPM headers through a pickled copy of the Signer."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from rocpkg.formats.sign import Signer

    out, keys, old, new = via_program
    signer = Signer(None, [old, new], program=str(out.parent / "signer"),
                    public_keys=[out.parent / "old.asc", out.parent / "new.asc"])
    assert signer.newest.fingerprint == new and signer.fingerprints == (old, new)
    copy = pickle.loads(pickle.dumps(signer))
    with ProcessPoolExecutor(1) as pool:
        signature = pool.submit(copy.detached_binary, b"header bytes").result()
    (tmp_path / "data").write_bytes(b"header bytes")
    (tmp_path / "data.sig").write_bytes(signature)
    ring = export_key(keys, new, tmp_path / "new.gpg", armored=False)
    assert sqv(ring, tmp_path / "data.sig", tmp_path / "data").returncode == 0
