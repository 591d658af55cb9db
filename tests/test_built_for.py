"""A package built for GPU targets says so where the package managers' tools can query it:
the .deb's `X-ROCm-Built-For` control field, which apt's Packages index carries
(`grep-dctrl -F X-ROCm-Built-For gfx1100`), and the .rpm capability `rocm-gfx(gfx1100)`
(`dnf repoquery --whatprovides`), for the device packages and the per-target and family
meta-packages; `rocpkg detect` finds the package to install by it when a release has no
family alias. Uses the small release of tests/links_release.py."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import cli_run
from links_release import RELEASE, TARGETS, built_release, rocpkg
from test_detect import fake_sysfs, gpu_properties

# what each format's query must find for gfx1100: device packages, per-target and family metas, the alias
EXPECTED = {"amdrocm-fft7.1-gfx1100", "amdrocm-blas7.1-gfx1100", "amdrocm7.1-gfx1100", "amdrocm7.1-gfx110x",
            "amdrocm-core7.1-gfx110x", "rocm-gfx110x"}
NOT_BUILT_FOR_A_TARGET = {"amdrocm-fft-host7.1", "amdrocm7.1", "amdrocm-core7.1-links", "amdrocm-runtime7.1"}


@pytest.fixture(scope="module")
def out(tmp_path_factory, shared_dir) -> Path:
    return built_release(tmp_path_factory, shared_dir, RELEASE)


def test_grep_dctrl_finds_the_gfx1100_packages_in_the_packages_index(out):
    if shutil.which("grep-dctrl") is None:
        pytest.skip("grep-dctrl is not installed (scripts/install-system-tools installs dctrl-tools)")
    index = next((out / "deb/dists").glob("*/main/binary-amd64/Packages"))
    found = subprocess.run(["grep-dctrl", "-F", "X-ROCm-Built-For", "-w", "gfx1100", "-n", "-s", "Package",
                            str(index)], capture_output=True, text=True, check=True).stdout.split()
    assert EXPECTED <= set(found), sorted(EXPECTED - set(found))
    assert not NOT_BUILT_FOR_A_TARGET & set(found)
    device = next((out / "deb/pool").rglob("amdrocm-fft7.1-gfx1100_*.deb"))
    field = subprocess.run(["dpkg-deb", "-f", str(device), "X-ROCm-Built-For"], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert field == "gfx1100"
    family = next((out / "deb/pool").rglob("amdrocm7.1-gfx110x_*.deb"))
    assert subprocess.run(["dpkg-deb", "-f", str(family), "X-ROCm-Built-For"], capture_output=True,
                          text=True).stdout.strip() == " ".join(TARGETS)


def test_dnf_repoquery_whatprovides_names_the_gfx1100_packages(out, tmp_path):
    if shutil.which("dnf") is None:
        pytest.skip("dnf is not installed")
    query = subprocess.run(["dnf", "-q", "repoquery", f"--setopt=cachedir={tmp_path}/cache",
                            f"--setopt=reposdir={tmp_path}/none", f"--repofrompath=rocm,file://{out}/rpm",
                            "--repo", "rocm", "--releasever=1", "--whatprovides", "rocm-gfx(gfx1100)",
                            "--qf", "%{name}"], capture_output=True, text=True)
    assert query.returncode == 0, query.stderr
    found = set(query.stdout.split())
    assert EXPECTED <= found, sorted(EXPECTED - found)
    assert not NOT_BUILT_FOR_A_TARGET & found


def test_detect_without_a_family_alias_names_the_package_built_for_the_target(tmp_path, shared_dir, out):
    """A release built without family aliases (settings.aliases false): detect, given the
    tree or the plan, finds the top meta-package built for the GPU's target."""
    work = tmp_path
    packages = json.loads((shared_dir / "fixtures/therock/package.json").read_text())
    config = work / "package.json"
    config.write_text(json.dumps({"settings": {"version": "7.1.0", "aliases": False}, "packages": packages}))
    artifacts = out.parent / "artifacts"                    # the shared release's artifacts
    tree = work / "out"
    rocpkg("build", "-q", "-c", config, "-a", artifacts, "-o", tree, "-j", "2")
    sysfs = fake_sysfs(tmp_path / "sysfs", [(gpu_properties(110000, 29772), "gfx1100\n")])
    for source in (("--repo", tree), ("-a", artifacts)):
        done = cli_run.rocpkg("detect", "--sysfs", sysfs, "-c", config, *source)
        assert done.returncode == 0, done.stderr
        assert "apt install amdrocm7.1-gfx1100" in done.stdout, done.stdout
        assert "dnf install amdrocm7.1-gfx1100" in done.stdout, done.stdout
        assert "rocm-gfx110x" not in done.stdout
    manifest = json.loads((tree / "manifest.json").read_text())
    device = next(e for e in manifest["packages"] if e["name"] == "amdrocm-fft7.1-gfx1100")
    assert device["built_for"] == ["gfx1100"]
