"""Installing one component of a release links /opt/rocm to it, as the meta-packages do:
`apt install amdrocm-fft7.1-gfx1100` alone (TheRock's package list) leaves /opt/rocm/core and
/opt/rocm/lib pointing into /opt/rocm/core-7.1, with dpkg and with rpm; a link that cannot be
made (a file in the way) fails the install with a message that names it; removing the
release's last package removes its links, and a newer release keeps its priority.

One small release of TheRock's list (gfx1100 only), built once for the module and shared
with the other tests of the release on a user's machine (tests/links_release.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from links_release import RELEASE, built_release, installed_links
from rocpkg.formats.rpm import write_rpm
from rocpkg.model import BuildOptions
from test_asan_release import closure
from test_deb import dpkg, throwaway_root
from test_rpm import base_system_spec, empty_rpm_root
from test_rpm import run as rpm_run

COMPONENT = "amdrocm-fft7.1-gfx1100"
PREFIX = "/opt/rocm/core-7.1"


@pytest.fixture(scope="module")
def out(tmp_path_factory, shared_dir) -> Path:
    return built_release(tmp_path_factory, shared_dir, RELEASE)


def deb_root(out: Path, path: Path) -> tuple[Path, list[Path]]:
    """A throwaway dpkg root with the OS packages the component's closure names, and that closure."""
    from rocpkg.inputs.config import relation_names
    from test_asan_release import release_entries

    debs = closure(out, "7.1.0-1", "deb", [COMPONENT])
    entries = release_entries(out, "7.1.0-1", "deb")
    external = sorted({relation_names(r)[0] for e in entries.values() for r in e.get("depends", [])} - set(entries))
    root = throwaway_root(path, external, version="9999")
    (root / "usr/bin").mkdir(parents=True)          # every system has it (/usr/bin/hipcc is a slave)
    return root, debs


def test_one_deb_component_links_the_release_and_its_removal_unlinks_it(out, tmp_path):
    root, debs = deb_root(out, tmp_path / "root")
    names = [p.name.split("_")[0] for p in debs]
    assert COMPONENT in names and "amdrocm-core7.1-links" not in names      # no meta-package, no links package
    dpkg(root, "-i", *map(str, debs))
    found = installed_links(root)
    assert found["core"] == PREFIX and found["core-7"] == PREFIX
    assert found["rocm-lib"] == f"{PREFIX}/lib"
    assert os.readlink(root / "opt/rocm/lib") == "/etc/alternatives/rocm-lib"
    assert (root / PREFIX.lstrip("/") / "lib").is_dir()
    assert os.readlink(root / "opt/rocm/core") == "/etc/alternatives/core"
    dpkg(root, "--purge", COMPONENT)                        # the release is still there: links stay
    assert installed_links(root)["core"] == PREFIX
    dpkg(root, "--purge", *[n for n in names if n != COMPONENT])
    assert installed_links(root) == {} and not (root / "opt/rocm").exists()


def test_a_file_in_the_way_of_a_link_fails_the_deb_install_naming_it(out, tmp_path):
    import subprocess

    root, debs = deb_root(out, tmp_path / "root")
    (root / "opt/rocm").mkdir(parents=True)
    (root / "opt/rocm/lib").write_text("not a link\n")
    done = subprocess.run(["dpkg", "--root", str(root), "--force-script-chrootless", "-i", *map(str, debs)],
                          capture_output=True, text=True)
    assert done.returncode != 0, done.stdout + done.stderr
    assert f"cannot link /opt/rocm/lib to {PREFIX}/lib" in done.stderr, done.stderr
    audit = subprocess.run(["dpkg", "--root", str(root), "--audit"], capture_output=True, text=True)
    assert "not fully installed" in audit.stdout or "half configured" in audit.stdout, audit.stdout
    (root / "opt/rocm/lib").unlink()                       # moved away: configuring again finishes
    again = subprocess.run(["dpkg", "--root", str(root), "--force-script-chrootless", "--configure", "-a"],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert installed_links(root)["rocm-lib"] == f"{PREFIX}/lib"


def rpm_root(tmp_path: Path) -> tuple[str, list[str]]:
    root = empty_rpm_root(tmp_path / "root")
    base = write_rpm(base_system_spec(str(tmp_path)), str(tmp_path), BuildOptions(source_date_epoch=1700000000)).path
    return root, ["rpm", "--root", root, base]


def test_one_rpm_component_links_the_release_and_a_file_in_the_way_fails_its_scriptlet(out, tmp_path):
    root, (rpm, flag, path, base) = rpm_root(tmp_path)
    rpms = closure(out, "7.1.0-1", "rpm", [COMPONENT])
    rpm_run(rpm, flag, path, "-i", "--nodeps", base, *map(str, rpms))
    found = installed_links(Path(root))
    assert found["core"] == PREFIX and found["rocm-lib"] == f"{PREFIX}/lib"
    erase = rpm_run(rpm, flag, path, "-e", "--nodeps", *[p.name.rsplit("-", 2)[0] for p in rpms], check=False)
    assert erase.returncode == 0, erase.stdout + erase.stderr
    assert "core" not in installed_links(Path(root))
    (Path(root) / "opt/rocm").mkdir(parents=True, exist_ok=True)
    (Path(root) / "opt/rocm/lib").write_text("not a link\n")
    failed = rpm_run(rpm, flag, path, "-i", "--nodeps", *map(str, rpms), check=False)
    # rpm reports a %post that exits non-zero and keeps the package (rpm's rule; dpkg fails the install)
    assert f"cannot link /opt/rocm/lib to {PREFIX}/lib" in failed.stderr, failed.stderr
    assert f"%post({COMPONENT}-7.1.0-1.x86_64) scriptlet failed, exit status 1" in failed.stderr, failed.stderr
