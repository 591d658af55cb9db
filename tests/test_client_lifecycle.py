"""A release's life on a user's machine, with the real package managers.

deb: in a fresh Debian bookworm root (mmdebstrap, as tests/test_fresh_root.py), TheRock's own
install test, then a host respin (7.1.0-2), a patch release (7.1.1-1) and a downgrade back
(apt-get --allow-downgrades) with the links and `dpkg --audit` checked after each step, then
TheRock's own uninstall test (apt autoremove: nothing named rocm left, the prefix gone) and the
links gone with the release; the same install and uninstall tests for the ASAN release.

rpm: the same steps with dnf (--installroot) and zypper (--root) in an installroot on this
machine: install TheRock's metapackages, respin, patch release, downgrade (`dnf downgrade`,
`zypper install --oldpackage`), remove them as TheRock's uninstall test does (`dnf remove`,
`zypper remove --clean-deps`), then the ASAN release in the same root; the links and
`rpm --root R -Va` checked after each step. TheRock's install and uninstall tests themselves,
as they call dnf (profile almalinux9), pass in the Debian root.

The respin models a host-only respin as rocpkg can make one: every package at 7.1.0-2, the
device packages' files unchanged (checked below), since device packages pin their host
package's exact version.

The release is the small one of tests/links_release.py, signed and served over HTTP on
127.0.0.1; each step serves the repository that step needs at the same URL."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fresh_roots import RepositoryServer, Root, place_install_test, server  # noqa: F401 (a fixture)
from links_release import ASAN, PATCH, RELEASE, RESPIN, Build, built_release, installed_links, rocpkg
from repo_helpers import DnfClient, ZypperClient, stand_in_repository
from rocpkg.formats.rpm import write_rpm
from rocpkg.formats.rpm.repodata import repo_file_text
from rocpkg.model import BuildOptions
from test_fresh_root import ALMALINUX9_BASE, debian_root, stand_in_os_repository  # noqa: F401 - a fixture
from test_rpm import base_system_spec, empty_rpm_root

UNINSTALL_TEST = "reference/therock-install-test/native_linux_package_uninstall_test.py"
COMMON = "reference/therock-install-test/native_linux_package_test_common.py"
# Each build's prefix and the name of its /opt/rocm/<name> link: the variant's, or the release's.
PREFIX = {b.id: "/opt/rocm/core-7.1" for b in (RELEASE, RESPIN, PATCH)} | {ASAN.id: "/opt/rocm/core-asan-7.1"}
LINK = {b.id: "core" for b in (RELEASE, RESPIN, PATCH)} | {ASAN.id: "core-asan"}


@pytest.fixture(scope="module")
def repositories(tmp_path_factory, shared_dir, server, signer):
    """builds -> a signed copy of the OUT holding them, served at server.url(name) on demand."""
    made: dict[tuple[Build, ...], Path] = {}

    def repository(*builds: Build) -> Path:
        if builds not in made:
            out = tmp_path_factory.mktemp("signed") / "out"
            shutil.copytree(built_release(tmp_path_factory, shared_dir, *builds), out, symlinks=True)
            rocpkg("repo", out, "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id)
            made[builds] = out
        return made[builds]
    return repository


@pytest.fixture
def fresh_root(debian_root, tmp_path):  # noqa: F811 - the imported fixture
    root = Root(debian_root, tmp_path / "root")
    yield root
    root.remove()


def output(result: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(map(str, result.args))}\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"


def therock(root: Root, shared_dir: Path, url: str, build: Build, test: str,
            profile: str = "debian12") -> subprocess.CompletedProcess:
    """TheRock's install test (sanity) or uninstall test, unchanged, in root, for gfx1100, with
    apt (profile debian12) or dnf (almalinux9)."""
    placed = "/root/therock-install-test/native_linux_package_install_test.py"
    script = placed if (root / placed).exists() else place_install_test(shared_dir, root)
    for extra in (UNINSTALL_TEST, COMMON):
        shutil.copy(shared_dir / extra, root / str(Path(script).parent) / Path(extra).name)
    variant = ("--build-variant", "asan") if build is ASAN else ()
    common = ("--os-profile", profile, "--gfx-arch", "gfx1100", "--install-prefix", PREFIX[build.id], *variant)
    if test == "install":
        pool = "deb" if profile == "debian12" else "rpm"
        args = (script, "--test-type", "sanity", "--repo-url", f"{url}/{pool}", "--gpg-key-url", f"{url}/rocm.asc",
                "--release-type", "release", "--rocm-version", "7.1.0", *common)
    else:
        args = (str(Path(script).parent / Path(UNINSTALL_TEST).name), "--rocm-version", "7.1", *common)
    started = time.perf_counter()
    ran = root.run("python3", *args, timeout=1800)
    print(f"\nTheRock {test} test, {profile}, {build.id}: {time.perf_counter() - started:.0f} s")
    assert ran.returncode == 0, output(ran)
    return ran


def audit(root: Root) -> None:
    checked = root.run("dpkg", "--audit")
    assert checked.returncode == 0 and not checked.stdout.strip(), output(checked)


def rocm_versions(root: Root) -> dict[str, str]:
    query = root.run("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n")
    return {p: v for s, p, v in (line.split() for line in query.stdout.splitlines()) if s == "ii" and "rocm" in p}


def linked(root: Root, build: Build = RELEASE) -> None:
    linked_at(root.path, build)


def linked_at(path: Path, build: Build = RELEASE) -> None:
    """The release's links are there and point into it, with update-alternatives' record of them."""
    found = installed_links(path)
    assert found.get(LINK[build.id]) == PREFIX[build.id], found
    if build is RELEASE:
        assert found.get("rocm-lib") == f"{PREFIX[build.id]}/lib", found
        assert (path / "opt/rocm/lib").is_symlink() and (path / "opt/rocm/core").is_symlink()


def apt(root: Root, *args: str) -> None:
    done = root.run("apt-get", "-y", "-q", *args)
    assert done.returncode == 0, output(done)


def test_install_respin_patch_downgrade_and_uninstall_with_apt(fresh_root, repositories, server, shared_dir):
    url = server.mount("lifecycle", repositories(RELEASE))
    ran = therock(fresh_root, shared_dir, url, RELEASE, "install")
    assert "[PASS] INSTALLATION TEST PASSED" in ran.stdout
    linked(fresh_root)
    audit(fresh_root)
    first = rocm_versions(fresh_root)
    assert first and set(first.values()) == {"7.1.0-1"}, first

    with server.serving("lifecycle", repositories(RELEASE, RESPIN)):      # the host respin
        apt(fresh_root, "update")
        apt(fresh_root, "full-upgrade")
    assert set(rocm_versions(fresh_root).values()) == {"7.1.0-2"}
    linked(fresh_root)
    audit(fresh_root)

    with server.serving("lifecycle", repositories(RELEASE, RESPIN, PATCH)):  # the patch release
        apt(fresh_root, "update")
        apt(fresh_root, "full-upgrade")
        assert set(rocm_versions(fresh_root).values()) == {"7.1.1-1"}
        linked(fresh_root)
        assert "70101" in (fresh_root / "var/lib/dpkg/alternatives/core").read_text()
        audit(fresh_root)
        automatic = fresh_root.run("apt-mark", "showauto").stdout.split()
        apt(fresh_root, "install", "--allow-downgrades", *[f"{p}=7.1.0-2" for p in rocm_versions(fresh_root)])
        # naming every package marked them all installed by hand: give back apt's marks, so
        # that the uninstall test's `apt autoremove` of the metapackages takes the rest
        marked = fresh_root.run("apt-mark", "auto", *automatic)
        assert marked.returncode == 0, output(marked)
    assert set(rocm_versions(fresh_root).values()) == {"7.1.0-2"}
    linked(fresh_root)
    assert "70100" in (fresh_root / "var/lib/dpkg/alternatives/core").read_text()
    audit(fresh_root)

    with server.serving("lifecycle", repositories(RELEASE, RESPIN)):
        apt(fresh_root, "update")
        therock(fresh_root, shared_dir, url, RESPIN, "uninstall")
    assert not rocm_versions(fresh_root)
    assert "core" not in installed_links(fresh_root.path) and not (fresh_root / "opt/rocm").exists()
    audit(fresh_root)


def test_the_asan_release_installs_and_uninstalls_with_therocks_tests(fresh_root, repositories, server, shared_dir):
    url = server.mount("asan", repositories(ASAN))
    therock(fresh_root, shared_dir, url, ASAN, "install")
    linked(fresh_root, ASAN)
    assert "core" not in installed_links(fresh_root.path)          # the normal release's links are not its own
    audit(fresh_root)
    therock(fresh_root, shared_dir, url, ASAN, "uninstall")
    assert not rocm_versions(fresh_root) and installed_links(fresh_root.path).get("core-asan") is None
    audit(fresh_root)


def test_therocks_uninstall_test_passes_after_its_install_test_with_dnf(fresh_root, repositories, server,
                                                                        shared_dir, tmp_path):
    """TheRock's two tests as they call dnf themselves (profile almalinux9; Debian's dnf and
    rpm in the Debian root, the AlmaLinux 9 stand-ins as the OS repository)."""
    out = repositories(RELEASE)
    url = server.mount("dnf-therock", out)
    stand_in_os_repository(fresh_root, out, server, tmp_path)
    therock(fresh_root, shared_dir, url, RELEASE, "install", "almalinux9")
    assert installed_links(fresh_root.path).get("core") == PREFIX[RELEASE.id]
    therock(fresh_root, shared_dir, url, RELEASE, "uninstall", "almalinux9")
    assert not {n for n in fresh_root.rpm_installed() if "rocm" in n}
    unlinked(fresh_root.path, RELEASE)


def test_apt_installs_one_component_and_links_the_release(fresh_root, repositories, server, shared_dir):
    url = server.mount("component", repositories(RELEASE))
    key = fresh_root / "usr/share/keyrings/rocm.gpg"
    key.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(repositories(RELEASE) / "rocm.gpg", key)
    (fresh_root / "etc/apt/sources.list.d/rocm.list").write_text(
        f"deb [signed-by=/usr/share/keyrings/rocm.gpg] {url}/deb stable main\n")
    apt(fresh_root, "update")
    apt(fresh_root, "install", "amdrocm-fft7.1-gfx1100")
    installed = rocm_versions(fresh_root)
    assert "amdrocm-fft7.1-gfx1100" in installed and "amdrocm-core7.1-links" not in installed
    linked(fresh_root)
    audit(fresh_root)
    apt(fresh_root, "purge", "--autoremove", "amdrocm-fft7.1-gfx1100")
    assert not rocm_versions(fresh_root) and "core" not in installed_links(fresh_root.path)


# -- the same release with rpm: dnf (--installroot) and zypper (--root) ---------------------------

# What TheRock's install test installs and its uninstall test removes, per build (rpm names).
METAS = {RELEASE.id: ("amdrocm7.1-gfx1100", "amdrocm-core-sdk7.1-gfx1100"),
         ASAN.id: ("amdrocm-asan7.1-gfx1100", "amdrocm-core-sdk-asan7.1-gfx1100")}


class RpmRoot:
    """An installroot on this machine that a package manager installs the served release
    into: the base system of tests/test_rpm.py (dash, update-alternatives, ln, rm: what the
    scriptlets run, chrooted) installed with rpm first, the AlmaLinux 9 stand-ins of
    tests/test_fresh_root.py as the OS repository (file://), and the release's repository over
    HTTP with every signature checked (its key imported into the root's rpm database).
    `manager` runs dnf or zypper with the commands of its kind (COMMANDS)."""

    def __init__(self, tmp_path: Path, manager: str, url: str, key: Path):
        if shutil.which(manager) is None or shutil.which("rpm") is None:
            pytest.skip(f"{manager} and rpm are needed (scripts/install-system-tools installs them)")
        stand_in = stand_in_repository(tmp_path / "os", [(n, v, p) for n, (v, p) in ALMALINUX9_BASE.items()])
        release = tmp_path / "rocm.repo"
        release.write_text(repo_file_text("rocm", "rocm (served)", f"{url}/rpm", f"{url}/rocm.asc", zypper=True))
        if manager == "dnf":
            self.client = DnfClient(tmp_path / "dnf", stand_in, key)
            shutil.copy(release, self.client.reposdir / release.name)
        else:
            self.client = ZypperClient(tmp_path / "root", [stand_in, release], key)
        self.manager, self.path = manager, self.client.root
        empty_rpm_root(self.path)                        # its /dev/null; skips unless root
        self.rpm("-i", "--nodeps", str(base_system_rpm(tmp_path)))

    def rpm(self, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(["rpm", "--root", str(self.path), *args], capture_output=True, text=True)
        assert done.returncode == 0, output(done)
        return done

    def do(self, step: str, *names: str) -> None:
        *before, command = COMMANDS[self.manager][step]
        for args in (*before, (*command, *names)):
            done = self.client.run(*args)
            assert done.returncode == 0, output(done)

    def versions(self) -> dict[str, str]:
        query = self.rpm("-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n").stdout
        return {n: v for n, v in (line.split() for line in query.splitlines()) if "rocm" in n}

    def verify(self) -> None:
        """rpm -Va on the root finds nothing changed in any installed package."""
        checked = subprocess.run(["rpm", "--root", str(self.path), "-Va"], capture_output=True, text=True)
        assert checked.returncode == 0 and not checked.stdout.strip(), output(checked)


# Each step's commands (the last one gets the package names): the repository's metadata is
# read again first, as the same URL serves another release now.
COMMANDS = {
    "dnf": {"install": (("--refresh", "install"),), "upgrade": (("--refresh", "upgrade"),),
            "downgrade": (("--refresh", "downgrade"),),
            "remove": (("remove",),)},                                           # TheRock's: dnf remove -y
    "zypper": {"install": (("refresh",), ("install",)), "upgrade": (("refresh",), ("update",)),
               "downgrade": (("refresh",), ("install", "--oldpackage")),
               "remove": (("remove", "--clean-deps"),)},                         # TheRock's on SLES
}


def base_system_rpm(tmp_path: Path) -> Path:
    (tmp_path / "base").mkdir(exist_ok=True)
    return Path(write_rpm(base_system_spec(str(tmp_path / "base")), str(tmp_path / "base"),
                          BuildOptions(source_date_epoch=1700000000)).path)


def unlinked(path: Path, build: Build) -> None:
    """The release is gone: its prefix, /opt/rocm with it, and its links."""
    assert not (path / PREFIX[build.id].lstrip("/")).exists()
    assert LINK[build.id] not in installed_links(path) and not (path / "opt/rocm").exists()


@pytest.mark.parametrize("manager", ["dnf", "zypper"])
def test_install_respin_patch_downgrade_and_uninstall_with_rpm(manager, repositories, server, tmp_path):
    url = server.mount(manager, repositories(RELEASE))
    root = RpmRoot(tmp_path, manager, url, repositories(RELEASE) / "rocm.asc")
    root.do("install", *METAS[RELEASE.id])
    assert set(root.versions().values()) == {"7.1.0-1"}, root.versions()
    linked_at(root.path)
    root.verify()

    steps = [((RELEASE, RESPIN), "upgrade", "7.1.0-2", "70100"),              # the host respin
             ((RELEASE, RESPIN, PATCH), "upgrade", "7.1.1-1", "70101"),       # the patch release
             ((RELEASE, RESPIN, PATCH), "downgrade", "7.1.0-2", "70100")]     # and back
    for builds, step, version, priority in steps:
        with server.serving(manager, repositories(*builds)):
            installed = list(root.versions()) if step == "downgrade" else []
            names = [f"{n}-7.1.0-2" for n in installed] if manager == "zypper" else installed
            marks = root.path / "var/lib/zypp/AutoInstalled"
            automatic = marks.read_bytes() if manager == "zypper" else b""
            root.do(step, *names)
            if manager == "zypper" and step == "downgrade":
                # naming every package marked them all installed by hand (zypper has no
                # apt-mark): give back libzypp's marks, so that `remove --clean-deps` takes the rest
                marks.write_bytes(automatic)
        assert set(root.versions().values()) == {version}, (step, root.versions())
        linked_at(root.path)
        assert priority in (root.path / "var/lib/dpkg/alternatives/core").read_text()
        root.verify()

    with server.serving(manager, repositories(RELEASE, RESPIN)):
        root.do("remove", *METAS[RELEASE.id])
    assert not root.versions(), root.versions()
    unlinked(root.path, RELEASE)
    root.verify()

    with server.serving(manager, repositories(ASAN)):            # the ASAN release, in the same root
        root.do("install", *METAS[ASAN.id])
        linked_at(root.path, ASAN)
        assert "core" not in installed_links(root.path)
        root.verify()
        root.do("remove", *METAS[ASAN.id])
    assert not root.versions(), root.versions()
    unlinked(root.path, ASAN)
    root.verify()


def test_the_respin_changes_no_file_of_the_device_packages_only_their_version(tmp_path_factory, shared_dir):
    """What the respin above models: a host-only respin. Its device packages carry the same
    files under the prefix as the release's, byte for byte (their changelog names the new
    version); they are rebuilt at 7.1.0-2 only because a device
    package depends on its host package at exactly the same version (and meta-packages pin
    their members exactly), so device packages kept at 7.1.0-1 could not install beside the
    respun host packages."""
    pool = built_release(tmp_path_factory, shared_dir, RELEASE, RESPIN) / "deb/pool/main"

    def control(deb: Path, member: str) -> str:
        shown = subprocess.run(["dpkg-deb", "-I", str(deb), member], capture_output=True, text=True)
        return shown.stdout if shown.returncode == 0 else ""

    def depends(deb: Path) -> str:
        return subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True,
                              check=True).stdout

    device = [p for p in pool.glob("*_7.1.0-1_amd64.deb") if p.name.split("_")[0].endswith("-gfx1100")
              and control(p, "md5sums")]
    assert any(" opt/" in control(p, "md5sums") for p in device)
    for old in device:
        new = old.with_name(old.name.replace("_7.1.0-1_", "_7.1.0-2_"))
        released = [line for line in control(old, "md5sums").splitlines() if " opt/" in line]
        assert released == [line for line in control(new, "md5sums").splitlines() if " opt/" in line]
        assert "(= 7.1.0-1)" in depends(old), old.name
        assert depends(new) == depends(old).replace("(= 7.1.0-1)", "(= 7.1.0-2)"), new.name
