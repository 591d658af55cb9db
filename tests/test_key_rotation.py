"""Signing keys over the years: the key policy refuses what clients refuse before anything is
written; a rotation run as the README's sequence keeps apt, dnf and zypper clients holding
the old key, the new key or both updating at every step; setup packages named per channel
move a machine between channels with an ordinary install."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_run import refusal_lines, rocpkg, snapshot
from repo_helpers import META, AptClient, DnfClient, ZypperClient, write_chain, write_package
from test_signer_external import export_key, make_key, new_home

SDE = "1700000000"


def run_repo(out: Path, home: str, *keys: str, base_url: str | None = None) -> None:
    args = [a for k in keys for a in ("--sign-key", k)]
    result = rocpkg("repo", out, "--gpg-home", home, *args, "--base-url", base_url or f"file://{out}",
                    env={**os.environ, "SOURCE_DATE_EPOCH": SDE})
    assert result.returncode == 0, result.stdout + result.stderr


# -- the key policy --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def policy_keys():
    home = new_home()
    keys = {"rsa1024": (make_key(home, "small <small@example.invalid>", "rsa1024"), "RSA 1024 bits"),
            "dsa": (make_key(home, "dsa <dsa@example.invalid>", "dsa2048"), "DSA key"),
            "sha1": (make_key(home, "sha1 <sha1@example.invalid>", "rsa3072", "never", "--cert-digest-algo", "SHA1"),
                     "SHA-1 self-signature"),
            "expired": (make_key(home, "expired <expired@example.invalid>", "rsa3072", "1d",
                                 "--faked-system-time", "20240101T000000"), "expired on 2024-01-02"),
            "soon": (make_key(home, "soon <soon@example.invalid>", "rsa3072", "30d"), "")}
    return home, keys


@pytest.fixture
def plain_out(tmp_path) -> Path:
    out = tmp_path / "out"
    write_chain(out, "deb")
    return out


@pytest.mark.parametrize("kind", ["rsa1024", "dsa", "sha1", "expired"])
def test_a_key_clients_refuse_is_refused_before_anything_is_written(policy_keys, plain_out, kind):
    home, keys = policy_keys
    fpr, reason = keys[kind]
    before = snapshot(plain_out)
    result = rocpkg("repo", plain_out, "--gpg-home", home, "--sign-key", fpr, "--base-url", "https://example.org/r")
    errors = refusal_lines(result, [fpr, reason])
    assert len(errors) == 1
    assert snapshot(plain_out) == before


def test_a_weak_key_behind_an_external_signer_is_refused_from_its_public_key(policy_keys, plain_out, tmp_path):
    home, keys = policy_keys
    fpr, reason = keys["rsa1024"]
    public = export_key(home, fpr, tmp_path / "weak.asc")
    before = snapshot(plain_out)
    result = rocpkg("repo", plain_out, "--sign-key", fpr, "--gpg-program", "/bin/false", "--public-key", public)
    refusal_lines(result, [fpr, reason])
    assert snapshot(plain_out) == before


def test_a_key_expiring_within_90_days_signs_with_a_warning_naming_it(policy_keys, plain_out):
    home, keys = policy_keys
    fpr = keys["soon"][0]
    result = rocpkg("repo", plain_out, "--gpg-home", home, "--sign-key", fpr)
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("warning: signing key ") and fpr in line and "expires on" in line
               for line in result.stderr.splitlines()), result.stderr


def test_valid_until_dates_apts_release(policy_keys, plain_out):
    home, keys = policy_keys
    result = rocpkg("repo", plain_out, "--gpg-home", home, "--sign-key", keys["soon"][0], "--valid-until", "7d")
    assert result.returncode == 0, result.stderr
    assert "\nValid-Until: " in (plain_out / "deb/dists/stable/Release").read_text()
    bad = rocpkg("repo", plain_out, "--gpg-home", home, "--sign-key", keys["soon"][0], "--valid-until", "soon")
    refusal_lines(bad, ["--valid-until"])


# -- a rotation --------------------------------------------------------------------------------

class Clients:
    """An apt, a dnf and a zypper client holding the given keys (one root each, reused
    through every step). Their repository key file stands where the setup package puts it
    (dnf's and zypper's gpgkey=, apt's Signed-By): taking up the setup package replaces it."""

    def __init__(self, root: Path, out: Path, key_home: str, fingerprints: list[str]):
        root.mkdir(parents=True)
        self.root, self.out = root, out
        self.keyring, self.armored = root / "keyring.gpg", root / "key.asc"
        self.keyring.write_bytes(b"".join(export_key(key_home, f, root / "k", armored=False).read_bytes()
                                          for f in fingerprints))
        self.armored.write_bytes(b"".join(export_key(key_home, f, root / "k").read_bytes() for f in fingerprints))
        self.apt = AptClient(root / "apt", f"deb [signed-by={self.keyring}] file://{out / 'deb'} stable main\n")
        repo = root / "rocm.repo"
        repo.write_text("".join(f"gpgkey=file://{self.armored}\n" if line.startswith("gpgkey=") else line + "\n"
                                for line in (out / "rocm.repo").read_text().splitlines()))
        self.dnf = DnfClient(root / "dnf", repo, self.armored)
        self.zypper = ZypperClient(root / "zypper", [repo], self.armored)

    def update(self, package: str) -> list[str]:
        """Refresh every client and fetch or install package; the failures."""
        failed = []
        apt = self.apt.run("update")
        if apt.returncode != 0 or "W:" in apt.stdout + apt.stderr or \
                self.apt.run("install", "-y", "--download-only", package).returncode != 0:
            failed.append(f"apt: {apt.stdout[-600:]}{apt.stderr[-600:]}")
        dnf = self.dnf.run("--refresh", "install", package)
        if dnf.returncode != 0:
            failed.append(f"dnf: {dnf.stdout[-600:]}{dnf.stderr[-600:]}")
        self.zypper.run("refresh", "-f")
        zypper = self.zypper.run("install", package)
        if zypper.returncode != 0:
            failed.append(f"zypper: {zypper.stdout[-600:]}{zypper.stderr[-600:]}")
        return failed

    def take_setup_package(self) -> None:
        """What installing the new setup package does for the keys: apt fetches it through
        the signed index, dnf installs it (its header checked); their key files are then
        the ones it ships, and rpm trusts what they hold."""
        assert self.apt.run("update").returncode == 0
        for old in (self.root / "apt/downloads").glob("*.deb"):
            old.unlink()
        fetch = self.apt.run("download", "rocm-repo")
        assert fetch.returncode == 0, fetch.stdout + fetch.stderr
        deb = next((self.root / "apt/downloads").glob("rocm-repo_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(self.root / "deb-setup")], check=True)
        shutil.copy(self.root / "deb-setup/usr/share/keyrings/rocm-archive-keyring.gpg", self.keyring)
        install = self.dnf.run("--refresh", "install", "rocm-repo")
        assert install.returncode == 0, install.stdout + install.stderr
        shipped = self.dnf.root / "etc/pki/rpm-gpg/RPM-GPG-KEY-rocm"
        shutil.copy(shipped, self.armored)
        for root in (self.dnf.root, self.zypper.root):
            subprocess.run(["rpm", "--root", str(root), "--import", str(shipped)], check=True)


def _release(out: Path, name: str) -> str:
    """A new package in OUT (both formats), as a new release would add."""
    for fmt in ("deb", "rpm"):
        write_package(out, fmt, name, "all", [], {f"opt/rocm/share/{name}/README": name.encode()})
    return name


def test_clients_with_the_old_the_new_or_both_keys_keep_updating_through_a_rotation(tmp_path):
    home = new_home()
    old = make_key(home, "rocm 2023 <old@example.invalid>", "rsa3072", "never", "--faked-system-time",
                   "20230101T000000")
    new = make_key(home, "rocm 2026 <new@example.invalid>")
    out = tmp_path / "out"
    write_chain(out, "deb")
    write_chain(out, "rpm")
    run_repo(out, home, old)                               # before: the old key signs
    clients = {"old": Clients(tmp_path / "old", out, home, [old]),
               "both": Clients(tmp_path / "both", out, home, [old, new])}
    for who, c in clients.items():
        assert c.update(META) == [], who

    # 1. add the new key: every index signed by both, the setup package ships both
    run_repo(out, home, old, new)
    gpgv = subprocess.run(["gpgv", "--keyring", str(out / "rocm.gpg"), str(out / "deb/dists/stable/InRelease")],
                          capture_output=True, text=True)
    assert gpgv.stderr.count("Good signature") == 2, gpgv.stderr
    clients["new"] = Clients(tmp_path / "new", out, home, [new])
    extra = _release(out, "rocm-extra")                     # headers signed by the newest key
    run_repo(out, home, old, new)
    assert clients["both"].update(extra) == []
    # libzypp 17.25 checks the first signature's key only, and the old key's comes first:
    # a zypper client with nothing but the new key waits for the old key's drop (README)
    failed = clients["new"].update(extra)
    assert len(failed) == 1 and failed[0].startswith("zypper: ") and "old@example.invalid" in failed[0], failed
    # 2. the old-key clients take up the new setup package (signed by the key they hold)
    refused = clients["old"].dnf.run("--refresh", "install", extra)
    assert refused.returncode != 0                          # the new key is not theirs yet
    clients["old"].take_setup_package()
    assert clients["old"].update(extra) == []
    stale = Clients(tmp_path / "stale", out, home, [old])   # one that never takes it up

    # 3. drop the old key
    run_repo(out, home, new)
    later = _release(out, "rocm-later")
    run_repo(out, home, new)
    for who, c in clients.items():
        assert c.update(later) == [], who
        c.take_setup_package()
        assert c.update(later) == [], who
    assert "old@example.invalid" not in subprocess.run(
        ["gpg", "--show-keys", str(clients["both"].keyring)], capture_output=True, text=True).stdout
    assert stale.apt.run("update").returncode != 0 or "W:" in stale.apt.run("update").stdout


# -- setup packages per channel ---------------------------------------------------------------

def _channel_out(tmp_path: Path, channel: str, home: str, key: str) -> Path:
    from rocpkg.store.releases import ReleaseRecord, write_release

    out = tmp_path / channel          # a release of the channel, recorded (its packages do not matter here)
    for pool in ("deb/pool/main", "rpm/noarch"):
        (out / pool).mkdir(parents=True)
    write_release(str(out), ReleaseRecord("7.1.0", "1", formats=("deb", "rpm"), channel=channel), [])
    run_repo(out, home, key)
    return out


def test_installing_another_channels_setup_package_moves_the_machine(tmp_path):
    home = new_home()
    key = make_key(home, "rocm <rocm@example.invalid>")
    nightly, release = _channel_out(tmp_path, "nightly", home, key), _channel_out(tmp_path, "release", home, key)
    assert (nightly / "rocm-repo-nightly.deb").is_file() and (release / "rocm-repo-release.rpm").is_file()
    # dnf: an ordinary install of the release channel's package replaces the nightly one
    dnf = DnfClient(tmp_path / "dnf", nightly / "rocm.repo", nightly / "rocm.asc")
    for out, name in ((nightly, "nightly"), (release, "release")):
        install = dnf.run("install", str(out / f"rocm-repo-{name}.rpm"))
        assert install.returncode == 0, install.stdout + install.stderr
        assert dnf.installed() == {f"rocm-repo-{name}"}
        assert f"file://{out}/rpm" in (dnf.root / "etc/yum.repos.d/rocm.repo").read_text()
    zypper = ZypperClient(tmp_path / "zypper", [], nightly / "rocm.asc")
    for out, name in ((nightly, "nightly"), (release, "release")):
        install = zypper.run("install", str(out / f"rocm-repo-{name}.rpm"))
        assert install.returncode == 0, install.stdout + install.stderr
        assert zypper.installed() == {f"rocm-repo-{name}"}
        assert f"file://{out}/rpm" in (zypper.root / "etc/zypp/repos.d/rocm.repo").read_text()
    # dpkg (what apt runs): Conflicts + Replaces remove the nightly package, its source file taken over
    root = tmp_path / "deb-root"
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text("")
    for out, name in ((nightly, "nightly"), (release, "release")):
        install = subprocess.run(["dpkg", f"--root={root}", "--log=/dev/null", "--force-script-chrootless",
                                  "--force-not-root", "--force-confdef", "--force-confold", "-i",
                                  str(out / f"rocm-repo-{name}.deb")], capture_output=True, text=True)
        assert install.returncode == 0, install.stdout + install.stderr
        assert f"URIs: file://{out}/deb" in (root / "etc/apt/sources.list.d/rocm.sources").read_text()
    status = (root / "var/lib/dpkg/status").read_text()
    assert "Package: rocm-repo-release\nStatus: install ok installed" in status
    assert "Package: rocm-repo-nightly\nStatus: install ok installed" not in status


def test_a_key_or_url_change_is_a_new_version_and_one_version_is_one_content(tmp_path):
    from rocpkg.formats.rpm import package_from_header, read_rpm

    home = new_home()
    key, other = make_key(home, "a <a@example.invalid>"), make_key(home, "b <b@example.invalid>")
    out = _channel_out(tmp_path, "nightly", home, key)
    first = (out / "rocm-repo-nightly.rpm").read_bytes()
    run_repo(out, home, key)
    assert (out / "rocm-repo-nightly.rpm").read_bytes() == first          # nothing changed: the same package
    run_repo(out, home, key, other)
    record = package_from_header(read_rpm(str(out / "rocm-repo-nightly.rpm")))
    assert (record.name, record.version) == ("rocm-repo-nightly", "2")
    run_repo(out, home, key, other, base_url="https://example.org/rocm/nightly")
    assert package_from_header(read_rpm(str(out / "rocm-repo-nightly.rpm"))).version == "3"
    assert sorted(p.name for p in (out / "rpm/noarch").glob("rocm-repo-*.rpm")) == ["rocm-repo-nightly-3-1.noarch.rpm"]
    # the stable-name copies are OUT's own files: checked by verify, sent by publish
    from rocpkg.verify.integrity import check_integrity

    assert check_integrity(str(out), keyring=str(out / "rocm.gpg"), formats=["deb", "rpm"]) == []
    (out / "rocm-repo-nightly.deb").write_bytes(b"tampered")
    assert any("rocm-repo-nightly.deb" in str(p) for p in check_integrity(str(out), keyring=None, formats=["deb"]))
    run_repo(out, home, key, other, base_url="https://example.org/rocm/nightly")      # puts the copy back
    published = rocpkg("publish", out, tmp_path / "www")
    assert published.returncode == 0, published.stderr
    assert (tmp_path / "www/rocm-repo-nightly.deb").read_bytes() == (out / "rocm-repo-nightly.deb").read_bytes()
