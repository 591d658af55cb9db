"""Install-tree parity with TheRock (issue 14): two releases side by side switch /opt/rocm
by priority, removing the newer falls back to the older, removing both leaves nothing;
in-release dependencies are pinned; the links live in ONE package per release."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.formats.deb import write_deb
from rocpkg.model import DIR, BuildOptions
from rocpkg.plan.make import make_plan
from rocpkg.formats.rpm import write_rpm
from rocpkg.inputs.sample import make_sample_artifacts
from test_deb import dpkg, throwaway_root
from test_rpm import base_system_spec, empty_rpm_root
from test_rpm import run as rpm_run

TARGETS = ["gfx942", "gfx1100"]


def small_config(path: Path) -> Path:
    """A runtime library, a per-target library and TheRock's core meta-package (Postinstall)."""
    lib = {"Package": "amdrocm-runtime", "Description_Short": "runtime", "Gfxarch": False,
           "Artifactory": [{"Artifact": "core-runtime", "Artifact_Subdir": [
               {"Name": "rocr", "Components": ["lib", "run"]}]}]}
    blas = {"Package": "amdrocm-blas", "Description_Short": "blas", "Gfxarch": True,
            "Artifactory": [{"Artifact": "blas", "Artifact_Subdir": [{"Name": "rocBLAS", "Components": ["lib"]}]}]}
    core = {"Package": "amdrocm-core", "Description_Short": "core", "Metapackage": True, "Gfxarch": True,
            "Postinstall": True, "DEBDepends": ["amdrocm-runtime", "amdrocm-blas"],
            "RPMRequires": ["amdrocm-runtime", "amdrocm-blas"]}
    path.write_text(json.dumps({"settings": {"maintainer": "T <t@example.org>"}, "packages": [lib, blas, core]}))
    return path


def release(tmp: Path, version: str, fmt: str):
    config = load_config(small_config(tmp / "package.json"))
    artifacts = tmp / "artifacts"
    if not artifacts.exists():
        make_sample_artifacts(artifacts, config, targets=TARGETS, size_mb=0.05)
    plan = make_plan(config, scan(artifacts), version=version, formats=(fmt,))
    writer = write_deb if fmt == "deb" else write_rpm
    options = BuildOptions(source_date_epoch=1700000000)
    return plan, {s.name: writer(s, str(tmp / fmt / version), options).path for s in plan.packages[fmt]}


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parity")
    return {fmt: {v: release(tmp, v, fmt) for v in ("7.1.0", "7.2.0")} for fmt in ("deb", "rpm")}


def test_in_release_dependencies_are_pinned(releases):
    plan, _ = releases["deb"]["7.1.0"]
    runtime = plan.by_name("deb")["amdrocm-runtime7.1"]
    assert all(d in runtime.depends or d.startswith("libc6") for d in runtime.depends)
    links = plan.by_name("deb")["amdrocm-core7.1-links"]
    assert "amdrocm-runtime7.1 (= 7.1.0-1)" in links.depends
    rpm_plan, _ = releases["rpm"]["7.1.0"]
    assert "amdrocm-runtime7.1 = 7.1.0-1" in rpm_plan.by_name("rpm")["amdrocm-core7.1-links"].depends


def test_the_links_package_and_every_package_with_files_carry_the_alternatives(releases):
    plan, _ = releases["deb"]["7.1.0"]
    carriers = {s.name for s in plan.packages["deb"] if s.scripts.get("postrm") == "postrm.j2" and s.links}
    with_files = {s.name for s in plan.packages["deb"] if any(f.type != DIR for f in s.files) and s.kind != "debug"}
    assert carriers == with_files | {"amdrocm-core7.1-links"}
    variants = [s for s in plan.packages["deb"] if s.name in {f"amdrocm-core7.1-{t}" for t in TARGETS}]
    assert variants and all("amdrocm-core7.1-links (= 7.1.0-1)" in s.depends for s in variants)


def test_packages_own_opt_rocm_but_never_opt(releases):
    for fmt in ("deb", "rpm"):
        plan, _ = releases[fmt]["7.1.0"]
        for spec in plan.packages[fmt]:
            dirs = {f.path for f in spec.files if f.type == DIR}
            assert "/opt" not in dirs
            if spec.files:
                assert "/opt/rocm" in dirs, spec.name


def core(root: Path) -> str:
    return os.readlink(root / "etc/alternatives/core")


def test_two_deb_releases_switch_opt_rocm_by_priority(releases, tmp_path):
    root = throwaway_root(tmp_path / "root", ("libc6",), version="9999")
    old, new = releases["deb"]["7.1.0"][1], releases["deb"]["7.2.0"][1]
    dpkg(root, "-i", *old.values())
    assert core(root) == "/opt/rocm/core-7.1"
    dpkg(root, "-i", *new.values())
    assert core(root) == "/opt/rocm/core-7.2"                              # the newest wins
    assert os.readlink(root / "etc/alternatives/core-7") == "/opt/rocm/core-7.2"
    assert os.readlink(root / "etc/alternatives/rocm-lib") == "/opt/rocm/core-7.2/lib"
    assert os.readlink(root / "opt/rocm/lib") == "/etc/alternatives/rocm-lib"
    gone = ["amdrocm-core7.1-gfx942", "amdrocm-core7.1-gfx94x", "amdrocm-core7.1"]
    dpkg(root, "-r", *gone)                                                # one variant goes, gfx1100 stays
    assert "/opt/rocm/core-7.1\n" in (root / "var/lib/dpkg/alternatives/core").read_text()
    dpkg(root, "--purge", *new)      # with the unversioned names and aliases, now 7.2's
    assert core(root) == "/opt/rocm/core-7.1"                              # falls back
    dpkg(root, "--purge", *[n for n in old if n not in gone and n not in new], *gone)
    assert list((root / "opt").iterdir()) == []                            # nothing left, /opt kept
    assert not (root / "etc/alternatives/core").exists()


def test_two_rpm_releases_switch_opt_rocm_by_priority(releases, tmp_path):
    root = Path(empty_rpm_root(tmp_path / "root"))
    base = write_rpm(base_system_spec(str(tmp_path)), str(tmp_path), BuildOptions(source_date_epoch=1700000000)).path
    old, new = releases["rpm"]["7.1.0"][1], releases["rpm"]["7.2.0"][1]
    rpm = ["rpm", "--root", str(root)]
    rpm_run(*rpm, "-i", "--nodeps", base, *old.values())
    rpm_run(*rpm, "-U", "--nodeps", *new.values())   # the unversioned names and aliases upgrade
    assert core(root) == "/opt/rocm/core-7.2"
    rpm_run(*rpm, "-e", "--nodeps", *new)
    assert core(root) == "/opt/rocm/core-7.1"
    rpm_run(*rpm, "-e", "--nodeps", *[n for n in old if n not in new])
    assert not (root / "opt/rocm").exists()                                # rpm owned it: removed
    assert not (root / "etc/alternatives/core").exists()
