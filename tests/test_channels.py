"""Release channels in one OUT: versions derived per channel that dpkg and rpm order alike
(proved with the real tools), the version-order check of build and verify, and apt and dnf
upgrading one series dev -> nightly -> prerelease -> release from a signed repository."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_helpers import AptClient, DnfClient, kill_gpg_agent, make_signer
from rocpkg.inputs.channels import channel_version
from rocpkg.inputs.config import load_config
from rocpkg.errors import RocpkgInputError
from rocpkg.store.releases import ReleaseRecord, manifest_releases, read_manifest
from rocpkg.inputs.sample import make_sample_artifacts
from rocpkg.builder.version_order import order_problems, version_order_refusals
from test_demo import base_repository
from test_versions import dpkg_signs, rpm_signs

DAY = 86400
JAN_1 = 1767225600          # 2026-01-01 00:00 UTC


def tiny_config(path: Path) -> Path:
    """The bundled package list cut to rocm-fft (per target) and the top meta-package rocm."""
    doc = json.loads((Path(__file__).resolve().parents[1] / "package.json").read_text())
    doc["packages"] = [p for p in doc["packages"] if p["Package"] in ("rocm-fft", "rocm")]
    for p in doc["packages"]:
        p["DEBDepends"] = p["RPMRequires"] = ["rocm-fft"] if p["Package"] == "rocm" else []
    path.write_text(json.dumps(doc))
    return path


class Tree:
    """One OUT, a tiny package list and its sample artifacts for gfx942."""

    def __init__(self, root: Path, signer_home: str | None = None, key: str | None = None):
        self.config = tiny_config(root / "package.json")
        self.artifacts = root / "artifacts"
        make_sample_artifacts(self.artifacts, load_config(str(self.config)), targets=["gfx942"], size_mb=0.05)
        self.out = root / "out"
        self.sign = ["--gpg-home", signer_home, "--sign-key", key] if key else []

    def build(self, *args, day: int = 0, repo: bool = False) -> subprocess.CompletedProcess:
        """rocpkg build into OUT with SOURCE_DATE_EPOCH `day` days after 2026-01-01."""
        cmd = [sys.executable, "-m", "rocpkg.cli", "build", "-q", "-c", self.config, "-a", self.artifacts,
               "-o", self.out, "-j", "2", *args, *(["--repo", *self.sign] if repo else [])]
        return subprocess.run(list(map(str, cmd)), capture_output=True, text=True,
                              env={**os.environ, "SOURCE_DATE_EPOCH": str(JAN_1 + day * DAY)})

    def ids(self) -> list[str]:
        return [r.id for r in manifest_releases(read_manifest(self.out))]

    def records(self) -> dict[str, ReleaseRecord]:
        return {r.id: r for r in manifest_releases(read_manifest(self.out))}


# -- versions of a channel ------------------------------------------------------------------

def test_channel_versions_from_a_base_version_date_and_number():
    assert channel_version("7.1.0", "nightly", "2026-01-03", None) == "7.1.0~20260103"
    assert channel_version("7.1.0", "dev", "2026-01-02", None) == "7.1.0~20260102~dev"
    assert channel_version("7.1.0", "dev", "2026-01-02", 3) == "7.1.0~20260102~dev3"
    assert channel_version("7.1.0", "prerelease", "2026-01-10", 1) == "7.1.0~20260110.rc1"
    assert channel_version("7.1.0", "release", None, None) == "7.1.0"
    for args, where in [(("7.1.0~rc1", "nightly", "2026-01-03", None), "--version"),
                        (("7.1.0", "weekly", "2026-01-03", None), "--channel"),
                        (("7.1.0", "nightly", "2026-02-30", None), "--date"),
                        (("7.1.0", "nightly", "20260103", None), "--date"),
                        (("7.1.0", "nightly", None, None), "--date"),
                        (("7.1.0", "prerelease", "2026-01-10", None), "--number"),
                        (("7.1.0", "nightly", "2026-01-03", 2), "--number")]:
        with pytest.raises(RocpkgInputError) as err:
            channel_version(*args)
        assert err.value.problems[0][0] == where, args


def test_the_channel_forms_upgrade_in_both_tools_and_therocks_do_not(tmp_path):
    """dev -> nightly -> prerelease -> release, over days and on one day, as dpkg and rpm
    themselves order them; TheRock's ~devYYYYMMDD and ~rcN against a nightly: the tools disagree."""
    path = [channel_version("7.1.0", "dev", "2026-01-02", None), channel_version("7.1.0", "dev", "2026-01-02", 2),
            channel_version("7.1.0", "nightly", "2026-01-02", None),
            channel_version("7.1.0", "dev", "2026-01-03", None),
            channel_version("7.1.0", "nightly", "2026-01-03", None),
            channel_version("7.1.0", "prerelease", "2026-01-03", 1),
            channel_version("7.1.0", "prerelease", "2026-01-03", 2),
            channel_version("7.1.0", "nightly", "2026-01-04", None),
            channel_version("7.1.0", "prerelease", "2026-01-10", 3), "7.1.0"]
    pairs = [(f"{a}-1", f"{b}-1") for i, a in enumerate(path) for b in path[i + 1:]]
    assert dpkg_signs(pairs, tmp_path) == [-1] * len(pairs)
    assert rpm_signs(pairs, tmp_path) == [-1] * len(pairs)
    therock = [("7.1.0~dev20260102-1", "7.1.0~20260103-1"), ("7.1.0~rc1-1", "7.1.0~20260103-1")]
    assert dpkg_signs(therock, tmp_path) == [1, 1] and rpm_signs(therock, tmp_path) == [-1, -1]


# -- the version-order check ----------------------------------------------------------------

def _record(version, release="1", date=0, **kw):
    return ReleaseRecord(version, release, date=date, **kw)


def test_version_order_is_checked_within_a_series_only_and_names_both_versions_and_the_rule():
    out = [_record("7.1.0~dev20260102", date=1), _record("7.0.5", date=2)]
    [refusal] = version_order_refusals(out, "7.1.0~20260103", "1")
    assert refusal.check == "version-order"
    assert "7.1.0~20260103-1 sorts below 7.1.0~dev20260102-1 in OUT for dpkg" in refusal.what
    assert "a letter sorts after a digit run" in refusal.what and "apt would never upgrade to it" in refusal.what
    assert "the formats disagree" in refusal.what
    assert version_order_refusals(out, "7.0.4", "9") and not version_order_refusals(out, "7.0.6", "1")
    assert not version_order_refusals(out, "7.1.0~dev20260102", "1")         # a rebuild
    assert not version_order_refusals(out + [_record("7.1.0", date=3)], "7.1.0~dev20260102", "1")
    assert not version_order_refusals(out, "7.2.0~20250101", "1")            # another series
    assert not version_order_refusals([_record("7.1.0", epoch=1)], "7.1.1", "1", epoch=1)
    [epoch] = version_order_refusals([_record("7.1.0", epoch=1)], "7.1.1", "1")
    assert "the epoch decides first (0 < 1)" in epoch.what


def test_verify_order_problems_follow_the_build_dates():
    records = [_record("7.1.0", date=3), _record("7.1.0~20260110.rc1", date=4), _record("7.0.9", date=5)]
    [problem] = order_problems(records)
    assert problem.check == "version-order" and problem.package == "release 7.1.0~20260110.rc1-1"
    assert "sorts below 7.1.0-1 in OUT for dpkg" in problem.message and "for rpm" in problem.message
    assert order_problems(sorted(records, key=lambda r: r.date)[:1] + records[2:]) == []


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return Tree(tmp_path_factory.mktemp("channels"))


def test_a_nightly_dpkg_sorts_below_the_dev_build_is_refused_then_allowed_and_recorded(tree):
    assert tree.build("--version", "7.1.0~dev20260102", day=1).returncode == 0
    before = (tree.out / "manifest.json").read_bytes()
    refused = tree.build("--version", "7.1.0~20260103", day=2)
    assert refused.returncode == 2, refused.stderr
    assert "[version-order]" in refused.stderr and "--allow version-order" in refused.stderr
    assert "7.1.0~20260103-1 sorts below 7.1.0~dev20260102-1 in OUT for dpkg" in refused.stderr
    assert (tree.out / "manifest.json").read_bytes() == before
    assert not list(tree.out.rglob("*20260103*"))
    allowed = tree.build("--version", "7.1.0~20260103", "--allow", "version-order", day=2)
    assert allowed.returncode == 0, allowed.stderr
    assert "allowed: release 7.1.0~20260103-1" in allowed.stderr
    record = tree.records()["7.1.0~20260103-1"]
    assert [a["check"] for a in record.allowed] == ["version-order"]
    verify = subprocess.run([sys.executable, "-m", "rocpkg.cli", "verify", str(tree.out), "-q"],
                            capture_output=True, text=True)
    assert verify.returncode == 2 and "version-order" not in verify.stdout
    assert "release 7.1.0~20260103-1" in verify.stderr and "(built with --allow version-order)" in verify.stderr


def test_dev_prerelease_release_are_accepted_a_later_prerelease_refused_an_older_series_accepted(tmp_path):
    tree = Tree(tmp_path)
    steps = [("dev", "2026-01-02", []), ("prerelease", "2026-01-09", ["--number", "1"]), ("release", None, [])]
    for day, (channel, date, extra) in enumerate(steps, start=1):
        dated = ["--date", date] if date else []
        result = tree.build("--version", "7.1.0", "--channel", channel, *dated, *extra, day=day)
        assert result.returncode == 0, result.stderr
    assert tree.ids() == ["7.1.0~20260102~dev-1", "7.1.0~20260109.rc1-1", "7.1.0-1"]
    assert [r.channel for r in tree.records().values()] == ["dev", "prerelease", "release"]
    late = tree.build("--version", "7.1.0", "--channel", "prerelease", "--date", "2026-01-12", "--number", "2", day=5)
    assert late.returncode == 2 and "7.1.0~20260112.rc2-1 sorts below 7.1.0-1 in OUT for dpkg" in late.stderr
    assert "for rpm" in late.stderr and "[version-order]" in late.stderr
    maintenance = tree.build("--version", "7.0.9", day=6)
    assert maintenance.returncode == 0, maintenance.stderr
    assert "7.0.9-1" in tree.ids()
    verify = subprocess.run([sys.executable, "-m", "rocpkg.cli", "verify", str(tree.out), "-q"],
                            capture_output=True, text=True)
    assert "version-order" not in verify.stderr, verify.stderr


def test_a_channel_setting_derives_the_version_and_date_comes_from_source_date_epoch(tmp_path):
    tree = Tree(tmp_path)
    doc = json.loads(tree.config.read_text())
    doc["settings"]["channel"] = "nightly"
    tree.config.write_text(json.dumps(doc))
    assert tree.build(day=2).returncode == 0
    assert tree.ids() == ["7.1.0~20260103-1"] and tree.records()["7.1.0~20260103-1"].channel == "nightly"
    doc["settings"]["channel"] = "weekly"
    tree.config.write_text(json.dumps(doc))
    bad = tree.build(day=3)
    assert bad.returncode == 2 and "settings.channel" in bad.stderr
    del doc["settings"]["channel"]
    tree.config.write_text(json.dumps(doc))
    alone = tree.build("--date", "2026-01-05", day=3)
    assert alone.returncode == 2 and "--date" in alone.stderr


def test_plan_and_verify_of_the_plan_take_the_channel_build_takes(tmp_path):
    """One command line moves between plan, verify -a and build: --channel derives the same
    version in each; verify OUT refuses it (a built release records its channel)."""
    tree = Tree(tmp_path)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(JAN_1 + 2 * DAY)}
    common = ["-c", tree.config, "-a", tree.artifacts, "--channel", "prerelease", "--number", "2"]
    plan = subprocess.run([sys.executable, "-m", "rocpkg.cli", "plan", *map(str, common), "--json", "--no-files"],
                          capture_output=True, text=True, env=env)
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    version = "7.1.0~20260103.rc2"
    assert doc["version"] == version and {p["version"] for p in doc["packages"]} == {version}
    verify = subprocess.run([sys.executable, "-m", "rocpkg.cli", "verify", *map(str, common)],
                            capture_output=True, text=True, env=env)
    assert verify.returncode == 0 and "OK: no problem found" in verify.stdout, verify.stdout + verify.stderr
    assert tree.build("--channel", "prerelease", "--number", "2", day=2).returncode == 0
    assert tree.ids() == [f"{version}-1"]
    refused = subprocess.run([sys.executable, "-m", "rocpkg.cli", "verify", str(tree.out), "--channel", "nightly"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "error: --channel: applies to the plan of -c/-a" in refused.stderr


def test_a_release_without_a_channel_writes_the_manifest_as_before(tmp_path):
    tree = Tree(tmp_path)
    assert tree.build("--version", "7.1.0", day=1).returncode == 0
    [record] = json.loads((tree.out / "manifest.json").read_text())["releases"]
    assert "channel" not in record and "epoch" not in record


# -- apt and dnf upgrade through one series ---------------------------------------------------

@pytest.fixture(scope="module")
def key():
    signer, home = make_signer()
    yield signer, home
    kill_gpg_agent(home)


class Installed:
    """A throwaway root that apt resolves against and dpkg installs into, and a dnf
    installroot, both fed from OUT's signed repositories."""

    def __init__(self, root: Path, out: Path):
        self.target = root / "target"
        for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "opt"):
            (self.target / d).mkdir(parents=True)
        # the system package the host library needs, as a bare system has it
        (self.target / "var/lib/dpkg/status").write_text(
            "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\nArchitecture: amd64\n"
            "Maintainer: t <t@example.org>\nDescription: stand-in\n")
        line = (out / "rocm.list").read_text().replace("/usr/share/keyrings/rocm.gpg", str(out / "rocm.gpg"))
        self.apt = AptClient(root / "apt", line, status_file=self.target / "var/lib/dpkg/status")
        self.dnf = DnfClient(root / "dnf", out / "rocm.repo", out / "rocm.asc")
        shutil.copy(base_repository(root / "base"), self.dnf.reposdir / "base.repo")

    def apt_get(self, name: str) -> str:
        """apt picks what to install or upgrade for `name`, downloads it (hash-checked) and
        dpkg installs it; returns the version of `name` now installed."""
        assert self.apt.run("update").returncode == 0
        planned = self.apt.run("-s", "install", name)
        assert planned.returncode == 0, planned.stdout + planned.stderr
        names = [line.split()[1] for line in planned.stdout.splitlines() if line.startswith("Inst ")]
        downloads = self.apt.root / "downloads"
        for old in downloads.glob("*.deb"):
            old.unlink()
        assert self.apt.run("download", *names).returncode == 0
        install = subprocess.run(["dpkg", f"--root={self.target}", "--force-script-chrootless", "-i",
                                  *map(str, sorted(downloads.glob("*.deb")))], capture_output=True, text=True)
        assert install.returncode == 0, install.stderr
        query = subprocess.run(["dpkg-query", f"--root={self.target}", "-W", "-f", "${Version}", name],
                               capture_output=True, text=True, check=True)
        return query.stdout

    def dnf_get(self, name: str, first: bool) -> str:
        run = self.dnf.run("--refresh", "install" if first else "upgrade", name)
        assert run.returncode == 0, run.stdout + run.stderr
        query = subprocess.run(["rpm", "--root", str(self.dnf.root), "-q", "--qf", "%{VERSION}-%{RELEASE}", name],
                               capture_output=True, text=True, check=True)
        return query.stdout


def test_apt_and_dnf_upgrade_one_series_from_dev_to_nightly_to_prerelease_to_release(tmp_path, key):
    signer, home = key
    tree = Tree(tmp_path, home, signer.key_id)
    steps = [("dev", "2026-01-02", []), ("nightly", "2026-01-03", []),
             ("prerelease", "2026-01-09", ["--number", "1"]), ("release", None, [])]
    installed = None
    for day, (channel, date, extra) in enumerate(steps, start=1):
        dated = ["--date", date] if date else []
        result = tree.build("--version", "7.1.0", "--channel", channel, *dated, *extra, day=day, repo=True)
        assert result.returncode == 0, result.stderr
        newest = tree.ids()[-1]
        installed = installed or Installed(tmp_path / "clients", tree.out)
        assert installed.apt_get("rocm") == newest, channel
        assert installed.dnf_get("rocm", first=day == 1) == newest, channel
    assert newest == "7.1.0-1"


# -- retention by channel ---------------------------------------------------------------------

def test_a_policy_removes_by_channel_age_and_count_never_the_newest_of_a_series():
    from rocpkg.repo.retention import parse_policy, policy_now, releases_to_remove

    day = lambda n: JAN_1 + n * DAY  # noqa: E731
    records = [_record("7.1.0~20260102~dev", date=day(1)), _record("7.1.0~20260103", date=day(2)),
               _record("7.1.0~20260104", date=day(3)), _record("7.1.0~20260105", date=day(4)),
               _record("7.1.0~20260301.rc1", date=day(59)), _record("7.1.0~rc2", date=day(60), channel="prerelease"),
               _record("7.0.9", date=day(5)), _record("7.0.10~20260107~dev", date=day(6)),
               _record("7.0.8~odd", date=day(7)), _record("7.2.0~20250101", date=0)]
    policy = parse_policy("dev=30d,nightly=2,prerelease=2y,release=all")
    assert policy.days == {"dev": 30, "prerelease": 730} and policy.counts == {"nightly": 2}
    removed = [r.id for r in releases_to_remove(records, policy)]
    assert removed == ["7.1.0~20260102~dev-1", "7.1.0~20260103-1"]    # 7.0.10's dev build is its series' newest
    assert [r.id for r in releases_to_remove(records, policy, ["7.1.0~20260103-1"])] == ["7.1.0~20260102~dev-1"]
    assert [r.id for r in releases_to_remove(records, parse_policy("nightly=0,release=0"))] == \
        ["7.0.9-1", "7.1.0~20260103-1", "7.1.0~20260104-1", "7.1.0~20260105-1"]
    assert [r.id for r in releases_to_remove(records, parse_policy("dev=1d", now=day(400)))] == \
        ["7.1.0~20260102~dev-1"]
    assert policy_now(records, {"SOURCE_DATE_EPOCH": "5"}) == (5, "SOURCE_DATE_EPOCH")
    assert policy_now(records, {}) == (day(60), "the newest release's date")
    for bad in ("weekly=3", "dev=30q", "dev=30s", "dev=all,dev=2", "nightly"):
        with pytest.raises(RocpkgInputError):
            parse_policy(bad)


# (build day, base version, channel, extra options): ten releases of two series, in date order
TEN = [(1, "7.1.0", "dev", []), (2, "7.1.0", "nightly", []), (3, "7.1.0", "dev", []), (4, "7.1.0", "nightly", []),
       (5, "7.0.9", "release", []), (6, "7.0.10", "dev", []), (59, "7.1.0", "nightly", []),
       (60, "7.1.0", "prerelease", ["--number", "1"]), (61, "7.1.0", "nightly", []), (62, "7.1.0", "dev", [])]


def test_prune_by_policy_in_a_repository_of_ten_dated_releases_then_apt_and_dnf_install_each_series(tmp_path, key):
    signer, home = key
    tree = Tree(tmp_path, home, signer.key_id)
    for day, base, channel, extra in TEN:
        result = tree.build("--version", base, "--channel", channel, *extra, day=day)
        assert result.returncode == 0, result.stderr
    assert len(tree.ids()) == 10
    cli = [sys.executable, "-m", "rocpkg.cli"]
    sign = ["--gpg-home", home, "--sign-key", signer.key_id]
    subprocess.run([*cli, "repo", str(tree.out), *sign], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    prune = subprocess.run([*cli, "prune", str(tree.out), "--policy", "dev=30d,nightly=2,prerelease=2y,release=all",
                            *sign], capture_output=True, text=True, env=env)
    assert prune.returncode == 0, prune.stderr
    assert "ages count back from 2026-03-04 (the newest release's date)" in prune.stderr
    gone = ["7.1.0~20260102~dev-1", "7.1.0~20260103-1", "7.1.0~20260104~dev-1", "7.1.0~20260105-1"]
    assert f"removed 4 releases ({', '.join(gone)})" in prune.stdout
    assert tree.ids() == ["7.0.9-1", "7.0.10~20260107~dev-1", "7.1.0~20260301-1", "7.1.0~20260302.rc1-1",
                          "7.1.0~20260303-1", "7.1.0~20260304~dev-1"]
    assert not [p for p in tree.out.rglob("*") if any(g.rsplit("-", 1)[0] in p.name for g in gone)]
    clients = Installed(tmp_path / "clients", tree.out)
    assert clients.apt_get("rocm7.1") == "7.1.0~20260304~dev-1"
    assert clients.apt_get("rocm7.0") == "7.0.10~20260107~dev-1"
    assert clients.dnf_get("rocm7.1", first=True) == "7.1.0~20260304~dev-1"
    assert clients.dnf_get("rocm7.0", first=True) == "7.0.10~20260107~dev-1"


# -- the names users are told to type ----------------------------------------------------------

def test_unversioned_target_names_point_at_the_newest_release_in_both_formats(tmp_path, key):
    """settings.unversioned_targets: rocm-gfx942 (and the family name, here the alias
    rocm-gfx94x already) at each release's version; a maintenance release of an older
    series built later does not take them over, since its version sorts below."""
    signer, home = key
    tree = Tree(tmp_path, home, signer.key_id)
    doc = json.loads(tree.config.read_text())
    doc["settings"]["unversioned_targets"] = True
    tree.config.write_text(json.dumps(doc))
    for day, args in [(1, ["--version", "7.1.0", "--channel", "nightly"]), (2, ["--version", "7.1.0"]),
                      (3, ["--version", "7.0.9"])]:
        result = tree.build(*args, day=day, repo=True)
        assert result.returncode == 0, result.stderr
    names = {p.name for p in (tree.out / "deb/pool/main").iterdir()}
    assert {"rocm-gfx942_7.1.0~20260102-1_all.deb", "rocm-gfx942_7.1.0-1_all.deb", "rocm-gfx942_7.0.9-1_all.deb",
            "rocm-gfx94x_7.1.0-1_all.deb"} <= names
    assert not [n for n in names if n.startswith("rocm-gfx94x_") and n.count("gfx94x") > 1]
    clients = Installed(tmp_path / "clients", tree.out)
    assert clients.apt_get("rocm-gfx942") == "7.1.0-1"
    assert clients.dnf_get("rocm-gfx942", first=True) == "7.1.0-1"
    installed = subprocess.run(["rpm", "--root", str(clients.dnf.root), "-q", "rocm7.1-gfx942", "rocm-fft7.1-gfx942"],
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout
    verify = subprocess.run([sys.executable, "-m", "rocpkg.cli", "verify", str(tree.out), "-q"],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
