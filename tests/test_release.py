"""Whole releases through the real tools: every .deb and .rpm planned from the bundled
package.json and from TheRock's real one (with sample artifacts) is read, linted,
installed into a throwaway root and removed by dpkg and rpm themselves."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import rpmfile

from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config, relation_names
from rocpkg.formats.deb import write_deb
from rocpkg.model import FILE, BuildOptions
from rocpkg.plan.make import make_plan
from rocpkg.formats.rpm import write_rpm
from rocpkg.inputs.sample import make_sample_artifacts
from test_deb import throwaway_root
from test_rpm import base_system_spec

REPO = Path(__file__).resolve().parents[1]
SDE = 1700000000
TARGETS = ["gfx942", "gfx1100", "gfx1101"]


def run(*cmd, check=True, **kw):
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, **kw)
    if check:
        assert result.returncode == 0, f"{' '.join(map(str, cmd))[:300]}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def build_release(config, out: Path, formats, compression="zstd"):
    artifacts = out / "artifacts"
    make_sample_artifacts(artifacts, config, targets=TARGETS)
    plan = make_plan(config, scan(artifacts))
    options = BuildOptions(source_date_epoch=SDE, compression=compression)
    built = {}
    for fmt in formats:
        writer = write_deb if fmt == "deb" else write_rpm
        built[fmt] = [Path(writer(spec, str(out / fmt), options).path) for spec in plan.packages[fmt]]
    return plan, built


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    return build_release(load_config(None), tmp_path_factory.mktemp("bundled"), ("deb", "rpm"))


@pytest.fixture(scope="module")
def therock(tmp_path_factory, shared_dir):
    source = shared_dir / "fixtures" / "therock" / "package.json"
    out = tmp_path_factory.mktemp("therock")
    shutil.copy(source, out / "package.json")
    # xz: Debian 12's lintian predates zstd members (dpkg itself reads both)
    return build_release(load_config(out / "package.json"), out, ("deb", "rpm"), compression="xz")


def external_names(plan, fmt) -> list[str]:
    """First alternative of every relation the release does not satisfy: the base system."""
    names = set(plan.by_name(fmt))
    found = set()
    for spec in plan.packages[fmt]:
        for rel in spec.depends + spec.pre_depends:
            alts = relation_names(rel)
            if not any(a in names for a in alts):
                found.add(alts[0])
    return sorted(found)


def installed_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "opt").rglob("*") if not p.is_dir()) \
        if (root / "opt").exists() else []


@pytest.mark.parametrize("release", ["bundled", "therock"])
def test_every_deb_is_read_by_dpkg_deb(release, request):
    plan, built = request.getfixturevalue(release)
    specs = plan.by_name("deb")
    for path in built["deb"]:
        info = run("dpkg-deb", "--info", path).stdout
        name = path.name.split("_")[0]
        assert f" Package: {name}\n" in info and " Version: 7.1.0-1\n" in info
        listing = run("dpkg-deb", "--contents", path).stdout
        for f in specs[name].files:
            if f.type == FILE:
                assert f".{f.path}" in listing


@pytest.mark.parametrize("release", ["bundled", "therock"])
def test_the_whole_deb_release_installs_and_removes_with_dpkg(release, request, tmp_path):
    plan, built = request.getfixturevalue(release)
    # the base system at a version high enough for every versioned system dependency
    root = throwaway_root(tmp_path / "root", external_names(plan, "deb"), version="9999")
    dpkg = ["dpkg", "--root", root, "--force-script-chrootless"]
    run(*dpkg, "-i", *built["deb"])
    status = run("dpkg-query", "--admindir", root / "var/lib/dpkg", "-W", "-f", "${Package} ${Status}\n").stdout
    assert status.count("install ok installed") == len(built["deb"]) + len(external_names(plan, "deb"))
    shipped = sorted(f.path.lstrip("/") for s in plan.packages["deb"] for f in s.files if f.type == FILE)
    assert [p for p in installed_files(root) if p in set(shipped)] == shipped
    run(*dpkg, "--purge", *[p.name.split("_")[0] for p in built["deb"]])
    assert installed_files(root) == []


@pytest.mark.parametrize("release", ["bundled", "therock"])
def test_lintian_reports_no_error_on_the_release(release, request, tmp_path):
    plan, built = request.getfixturevalue(release)
    debs = built["deb"]
    if release == "bundled":  # Debian 12's lintian cannot read zstd members: lint an xz build
        options = BuildOptions(source_date_epoch=SDE, compression="xz")
        debs = [Path(write_deb(s, str(tmp_path), options).path) for s in plan.packages["deb"]]
    result = run("lintian", "--fail-on", "error", "--suppress-tags-from-file", REPO / "lintian-overrides.txt",
                 *debs, check=False)
    errors = [line for line in result.stdout.splitlines() if line.startswith("E:")]
    assert errors == [] and result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.parametrize("release", ["bundled", "therock"])
def test_every_rpm_passes_rpm_k_and_reads_back(release, request):
    plan, built = request.getfixturevalue(release)
    specs = plan.by_name("rpm")
    for path in built["rpm"]:
        assert "digests OK" in run("rpm", "-K", "--nosignature", path).stdout
        with rpmfile.open(path) as rpm:
            name = rpm.headers["name"].decode()
            assert name in specs
            members = {m.name.lstrip(".") for m in rpm.getmembers()}
            assert {f.path for f in specs[name].files if f.type == FILE} <= members
    info = run("rpm", "-qpi", built["rpm"][0]).stdout
    assert "Version     : 7.1.0" in info and "Release     : 1" in info


@pytest.mark.parametrize("release", ["bundled", "therock"])
def test_rpmlint_reports_no_error_on_the_release(release, request):
    plan, built = request.getfixturevalue(release)
    result = run("rpmlint", "--ignore-unused-rpmlintrc", "-r", REPO / "rpmlint" / "rocpkg.rpmlintrc", *built["rpm"],
                 check=False)
    assert " 0 errors" in result.stdout, result.stdout[-4000:]


def test_the_bundled_rpm_release_installs_verifies_and_erases(bundled, tmp_path):
    plan, built = bundled
    root = tmp_path / "root"
    run("rpm", "--root", root, "--initdb")
    base = base_system_spec(str(tmp_path))
    base.provides = base.provides + [n for n in external_names(plan, "rpm") if n not in ("glibc",)] + \
        ["python3 = 3.11"]
    base_rpm = write_rpm(base, str(tmp_path / "base"), BuildOptions(source_date_epoch=SDE)).path
    run("rpm", "--root", root, "-i", base_rpm)
    run("rpm", "--root", root, "-i", *built["rpm"])  # dependencies checked: no --nodeps
    assert run("rpm", "--root", root, "-qa").stdout.count("\n") == len(built["rpm"]) + 1
    verify = run("rpm", "--root", root, "-Va", check=False)
    assert verify.stdout == "" and verify.returncode == 0, verify.stdout + verify.stderr
    shipped = sorted(f.path.lstrip("/") for s in plan.packages["rpm"] for f in s.files if f.type == FILE)
    assert [p for p in installed_files(root) if p in set(shipped)] == shipped
    run("rpm", "--root", root, "-e", *[s.name for s in plan.packages["rpm"]])
    assert installed_files(root) == []


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_two_builds_of_a_release_are_byte_identical(fmt, bundled, tmp_path):
    plan, built = bundled
    options = BuildOptions(source_date_epoch=SDE)
    writer = write_deb if fmt == "deb" else write_rpm
    for spec, first in zip(plan.packages[fmt], built[fmt]):
        again = Path(writer(spec, str(tmp_path), options).path)
        assert again.read_bytes() == first.read_bytes(), spec.name
