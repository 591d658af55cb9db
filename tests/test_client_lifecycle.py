"""A release's life on a user's machine, with the real package managers in a fresh Debian
bookworm root (mmdebstrap, as tests/test_fresh_root.py): TheRock's own install test, then a
host respin (7.1.0-2), a patch release (7.1.1-1) and a downgrade back (apt-get
--allow-downgrades) with the links and `dpkg --audit` checked after each step, then TheRock's
own uninstall test (apt autoremove: nothing named rocm left, the prefix gone) and the links
gone with the release; the same install and uninstall tests for the ASAN release.

The release is the small one of tests/links_release.py, signed and served over HTTP on
127.0.0.1; each step serves the repository that step needs at the same URL."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fresh_roots import RepositoryServer, Root, place_install_test
from links_release import ASAN, PATCH, RELEASE, RESPIN, Build, built_release, installed_links, rocpkg
from test_fresh_root import debian_root  # noqa: F401 - the session's Debian root, a fixture

UNINSTALL_TEST = "reference/therock-install-test/native_linux_package_uninstall_test.py"
COMMON = "reference/therock-install-test/native_linux_package_test_common.py"
PREFIX = {RELEASE.id: "/opt/rocm/core-7.1", ASAN.id: "/opt/rocm/core-asan-7.1"}
LINK = {RELEASE.id: "core", ASAN.id: "core-asan"}


@pytest.fixture(scope="module")
def server():
    served = RepositoryServer()
    yield served
    served.close()


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


def therock(root: Root, shared_dir: Path, url: str, build: Build, test: str) -> subprocess.CompletedProcess:
    """TheRock's install test (sanity) or uninstall test, unchanged, in root, for gfx1100."""
    placed = "/root/therock-install-test/native_linux_package_install_test.py"
    script = placed if (root / placed).exists() else place_install_test(shared_dir, root)
    for extra in (UNINSTALL_TEST, COMMON):
        shutil.copy(shared_dir / extra, root / str(Path(script).parent) / Path(extra).name)
    variant = ("--build-variant", "asan") if build is ASAN else ()
    common = ("--os-profile", "debian12", "--gfx-arch", "gfx1100", "--install-prefix", PREFIX[build.id], *variant)
    if test == "install":
        args = (script, "--test-type", "sanity", "--repo-url", f"{url}/deb", "--gpg-key-url", f"{url}/rocm.asc",
                "--release-type", "release", "--rocm-version", "7.1.0", *common)
    else:
        args = (str(Path(script).parent / Path(UNINSTALL_TEST).name), "--rocm-version", "7.1", *common)
    started = time.perf_counter()
    ran = root.run("python3", *args, timeout=1800)
    print(f"\nTheRock {test} test, {build.id}: {time.perf_counter() - started:.0f} s")
    assert ran.returncode == 0, output(ran)
    return ran


def audit(root: Root) -> None:
    checked = root.run("dpkg", "--audit")
    assert checked.returncode == 0 and not checked.stdout.strip(), output(checked)


def rocm_versions(root: Root) -> dict[str, str]:
    query = root.run("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n")
    return {p: v for s, p, v in (line.split() for line in query.stdout.splitlines()) if s == "ii" and "rocm" in p}


def linked(root: Root, build: Build = RELEASE) -> None:
    """The release's links are there and point into it, with dpkg's record of them."""
    found = installed_links(root.path)
    assert found.get(LINK[build.id]) == PREFIX[build.id], found
    if build is RELEASE:
        assert found.get("rocm-lib") == f"{PREFIX[build.id]}/lib", found
        assert (root / "opt/rocm/lib").is_symlink() and (root / "opt/rocm/core").is_symlink()


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
        apt(fresh_root, "install", "--allow-downgrades", *[f"{p}=7.1.0-2" for p in rocm_versions(fresh_root)])
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
