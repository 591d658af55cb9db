"""`rocpkg demo OUT`: a newcomer gets a signed APT and DNF repository of a sample release
in under a minute, and the commands it prints work: apt and dnf install the family
package of a gfx110X card and no other target's kernels."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repo_helpers import AptClient, DnfClient, planned_installs, stand_in_repository
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.plan.graphs import closure
from rocpkg.plan.make import make_plan

# What a distribution's base repository provides and the release depends on (rocm-llvm's
# RPMRequires, rocm-smi's python3): stand-ins for the OS repo an empty installroot lacks.
RPM_BASE = [("glibc", "2.38"), ("libstdc++", "13.2"), ("python3", "3.12")]
# What the release's ELF files need of them (their rpm Requires, rocpkg.plan.shlibs).
RPM_BASE_PROVIDES = {"glibc": ["libc.so.6()(64bit)"]}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("demo") / "out"
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rocpkg.cli", "demo", str(out)], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    print(f"\nrocpkg demo took {elapsed:.1f} s ({os.cpu_count()} CPUs)")
    assert result.returncode == 0, result.stdout + result.stderr
    yield out, result
    subprocess.run(["gpgconf", "--homedir", str(out / "gnupg"), "--kill", "all"], capture_output=True)


def test_demo_builds_both_formats_signed_repositories_and_says_how_to_install(demo):
    out, result = demo
    manifest = json.loads((out / "manifest.json").read_text())
    formats = {e["format"] for e in manifest["packages"]}
    targets = {e["target"] for e in manifest["packages"] if e["kind"] == "device"}
    assert formats == {"deb", "rpm"}
    assert {"gfx942", "gfx1100", "gfx1101"} <= targets
    for signed in ("deb/dists/stable/InRelease", "deb/dists/stable/Release.gpg", "rpm/repodata/repomd.xml.asc",
                   "rocm.gpg", "rocm.asc", "rocm.list", "rocm.repo"):
        assert (out / signed).is_file(), signed
    assert "verify: ok" in result.stdout
    assert "sudo apt install rocm-gfx110x" in result.stdout
    assert "sudo dnf install rocm-gfx110X" in result.stdout
    assert f"sudo cp {out}/rocm.list /etc/apt/sources.list.d/rocm.list" in result.stdout


def planned_closure(out: Path, fmt: str, root: str) -> set[str]:
    """What the plan says `install root` must bring, computed offline from the demo's artifacts."""
    plan = make_plan(load_config(None), scan(out / "artifacts"))
    return set(closure(plan.by_name(fmt), root)[0])


def test_apt_installs_the_gfx110x_family_from_the_demo_repository(demo, tmp_path):
    out, _ = demo
    line = (out / "rocm.list").read_text().replace("/usr/share/keyrings/rocm.gpg", str(out / "rocm.gpg"))
    apt = AptClient(tmp_path / "apt", line)
    # this machine's own dpkg status: the system libraries the release depends on are there
    shutil.copy("/var/lib/dpkg/status", tmp_path / "apt/var/lib/dpkg/status")
    update = apt.run("update")
    assert update.returncode == 0 and "NO_PUBKEY" not in update.stderr, update.stdout + update.stderr
    install = apt.run("install", "-s", "rocm-gfx110x")
    assert install.returncode == 0, install.stdout + install.stderr
    installs = planned_installs(install.stdout)
    assert {"rocm-gfx110x", "rocm7.1-gfx110x", "rocm-blas7.1-gfx1100", "rocm-blas7.1-gfx1101",
            "rocm-blas-host7.1"} <= installs
    assert not [name for name in installs if "gfx942" in name or "gfx120" in name]
    assert installs == planned_closure(out, "deb", "rocm-gfx110x")


def base_repository(root: Path) -> Path:
    """An unsigned repository of empty stand-ins for the OS packages, and its .repo file."""
    return stand_in_repository(root, [(name, version, RPM_BASE_PROVIDES.get(name, [])) for name, version in RPM_BASE])


def test_dnf_installs_the_gfx110X_family_with_signatures_checked(demo, tmp_path):
    out, _ = demo
    dnf = DnfClient(tmp_path / "dnf", out / "rocm.repo", out / "rocm.asc")
    shutil.copy(base_repository(tmp_path / "base"), dnf.reposdir / "base.repo")
    install = dnf.run("install", "rocm-gfx110X")
    assert install.returncode == 0, install.stdout + install.stderr
    installed = dnf.installed()
    assert {"rocm-gfx110x", "rocm7.1-gfx110x", "rocm-blas7.1-gfx1100", "rocm-blas7.1-gfx1101",
            "rocm-blas-host7.1"} <= installed
    assert not [name for name in installed if "gfx942" in name or "gfx120" in name]
    assert installed - {name for name, _ in RPM_BASE} == planned_closure(out, "rpm", "rocm-gfx110x")
    kpack = dnf.root / "opt/rocm/core-7.1"
    assert list(kpack.rglob("*_gfx1100.kpack")) and not list(kpack.rglob("*_gfx942.kpack"))


def test_a_second_demo_into_its_directory_starts_afresh_and_another_directory_is_refused(demo, tmp_path):
    """Last in this file: it runs the demo into the shared OUT again. A demo's OUT is
    emptied (its key kept) and built anew; a directory that holds no demo is never touched."""
    out, first = demo
    again = subprocess.run([sys.executable, "-m", "rocpkg.cli", "demo", str(out)], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "verify: ok" in again.stdout
    signed_with = [line for line in first.stdout.splitlines() if line.startswith("signed with")]
    assert signed_with and signed_with == [line for line in again.stdout.splitlines() if line.startswith("signed with")]

    mine = tmp_path / "mine"
    (mine / "artifacts").mkdir(parents=True)
    (mine / "artifacts" / "keep.txt").write_text("a user's file\n")
    refused = subprocess.run([sys.executable, "-m", "rocpkg.cli", "demo", str(mine)], capture_output=True, text=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "holds no earlier rocpkg demo" in refused.stderr
    assert (mine / "artifacts" / "keep.txt").read_text() == "a user's file\n"
    assert sorted(p.name for p in mine.iterdir()) == ["artifacts"]
