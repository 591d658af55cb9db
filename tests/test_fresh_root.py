"""Install in one step, anywhere (issue 37), shown on a machine nobody prepared: a Debian
bookworm root fresh from mmdebstrap, real apt and dpkg (and Debian's dnf and rpm for the rpm
side) run in it through chroot, a release of TheRock's package.json served over HTTP on
127.0.0.1, signed.

- The setup package alone is enough: `dpkg -i amdrocm-repo.deb`, `apt-get update`,
  `apt-get install rocm-gfx110x` installs the gfx1100 kernels and nothing of gfx942, with
  apt's signature checks as they come (no trusted=yes, no allow-unauthenticated); the same
  root refuses the repository signed by another key, or once the keyring is gone. The rpm
  side, `dnf install URL/amdrocm-repo.rpm` then `dnf install rocm-gfx110X`, likewise.
- TheRock's own install test (../shared/reference/therock-install-test, run unchanged, sanity
  mode) passes against the served repository for deb (--os-profile debian12) and rpm
  (--os-profile almalinux9).

The root is made once per session; each test gets a fresh one, an overlay on it.
The release is built once per module per `Case` (CASES below): a build variant is one
more Case there, and the install-test tests run for it too. Skips without root, mmdebstrap or
the Debian mirror (ROCPKG_TEST_DEBIAN_MIRROR overrides it), or without ../shared."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cli_run import rocpkg
from fresh_roots import (KEY_PATHS, SUITE, VERSION, Case, RepositoryServer, server, Root, build_release, fetch,
                         make_root, mirror_problem, missing_for_roots, place_install_test)
from repo_helpers import kill_gpg_agent, make_signer, stand_in_repository
from rocpkg.repo.setup import top_metapackage

RELEASE = Case("release")
# TheRock's ASAN build (`--build-variant asan` for rocpkg build and for TheRock's install test):
# amdrocm-asan7.1-gfx1100 and amdrocm-core-sdk-asan7.1-gfx1100 under /opt/rocm/core-asan-7.1
ASAN = Case("asan", ("--build-variant", "asan"), ("--build-variant", "asan"), "-asan", "/opt/rocm/core-asan-7.1")
# The builds TheRock's install test runs against.
CASES = [RELEASE, ASAN]
FAMILY_PACKAGE = {"deb": "rocm-gfx110x", "rpm": "rocm-gfx110X"}

# What the release's RPMs need of the OS: rpm's database in the Debian root is empty, and
# AlmaLinux's own repositories are not reachable from here, so empty stand-ins for the
# AlmaLinux 9 packages that provide them are served from a repository of their own (unsigned,
# gpgcheck=0, as the OS's base repository is trusted by the OS itself; rocpkg's repository
# keeps gpgcheck=1). Name -> (AlmaLinux 9 version, what it provides besides its name).
ALMALINUX9_BASE = {"glibc": ("2.34", ["libc.so.6()(64bit)", "libm.so.6()(64bit)", "libdl.so.2()(64bit)",
                                      "libpthread.so.0()(64bit)", "librt.so.1()(64bit)"]),
                   "bash": ("5.1.8", ["/bin/sh", "/bin/bash"]),
                   "python3": ("3.9.18", ["/usr/bin/python3"]),
                   "libstdc++": ("11.4.1", ["libstdc++.so.6()(64bit)"]),
                   "libgcc": ("11.4.1", ["libgcc_s.so.1()(64bit)"])}


@pytest.fixture(scope="session")
def debian_root(tmp_path_factory):
    """A Debian bookworm root (mmdebstrap --variant=apt, fresh_roots.ROOT_PACKAGES), made
    once per session and only ever read: each test's root is an overlay on it. Removed at
    the end of the session."""
    kept = os.environ.get("ROCPKG_TEST_DEBIAN_ROOT")   # one made before (same ROOT_PACKAGES), used as is
    problem = missing_for_roots(make=not (kept and os.path.isdir(kept)))
    if problem:
        pytest.skip(problem)
    if kept and os.path.isdir(kept):
        yield Path(kept)
        return
    base = tmp_path_factory.mktemp("debian-root") / SUITE
    started = time.perf_counter()
    made = make_root(base)
    if made.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        problem = mirror_problem()
        if problem:
            pytest.skip(problem)
        pytest.fail(f"mmdebstrap failed:\n{made.stdout[-4000:]}{made.stderr[-4000:]}")
    print(f"\nmmdebstrap {SUITE}: {time.perf_counter() - started:.0f} s")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def releases(debian_root, shared_dir, tmp_path_factory, server, signer):
    """case -> OUT of that build, built on first use, signed, served at server.url(case.id)."""
    built: dict[str, Path] = {}

    def release(case: Case) -> Path:
        if case.id not in built:
            out = build_release(shared_dir, tmp_path_factory.mktemp(case.id), case, server.url(case.id), signer)
            server.mount(case.id, out)
            built[case.id] = out
        return built[case.id]
    return release


@pytest.fixture
def fresh_root(debian_root, tmp_path):
    root = Root(debian_root, tmp_path / "root")
    yield root
    root.remove()


def output(result: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(map(str, result.args))}\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"


def assert_gfx1100_only(installed: set[str], root: Root, prefix: str) -> None:
    """The gfx1100 kernels are there and nothing of gfx942 (its packages or its archives)."""
    assert not sorted(n for n in installed if "gfx942" in n.lower() or "gfx94x" in n.lower())
    archives = sorted(p.name for p in (root / prefix).rglob("*.kpack") if p.is_file())
    assert archives and all("gfx1100" in name for name in archives), archives


def setup_deb(root: Root, out: Path, url: str) -> str:
    """Download OUT/<top>-repo.deb from its stable URL and install it with dpkg; returns <top>."""
    top = top_metapackage(str(out))
    fetch(f"{url}/{top}-repo.deb", root / f"tmp/{top}-repo.deb")
    installed = root.run("dpkg", "-i", f"/tmp/{top}-repo.deb")
    assert installed.returncode == 0, output(installed)
    return top


def apt_trusts_nothing_else(root: Root, top: str) -> None:
    """No source but the setup package's, and nothing that turns apt's checks off."""
    assert sorted(p.name for p in (root / "etc/apt/sources.list.d").iterdir()) == [f"{top}.sources"]
    assert not (root / "etc/apt/sources.list").exists()
    config = root.run("apt-config", "dump").stdout
    for loosened in ("AllowUnauthenticated", "AllowInsecureRepositories", "AllowDowngradeToInsecureRepositories"):
        assert f'{loosened} "true"' not in config and f'{loosened} "1"' not in config
    sources = (root / f"etc/apt/sources.list.d/{top}.sources").read_text()
    assert f"Signed-By: /usr/share/keyrings/{top}-archive-keyring.gpg" in sources
    assert "trusted" not in sources.lower()


# -- the setup packages in a fresh root ---------------------------------------------------------

def test_apt_installs_the_family_package_with_what_the_setup_deb_configured(releases, server, fresh_root):
    out = releases(RELEASE)
    top = setup_deb(fresh_root, out, server.url(RELEASE.id))
    apt_trusts_nothing_else(fresh_root, top)
    update = fresh_root.run("apt-get", "update")
    assert update.returncode == 0, output(update)
    assert "W:" not in update.stdout + update.stderr and "NO_PUBKEY" not in update.stdout + update.stderr, output(update)
    assert list((fresh_root / "var/lib/apt/lists").glob("*_InRelease")), "apt read no signed InRelease"
    install = fresh_root.run("apt-get", "install", "-y", FAMILY_PACKAGE["deb"])
    assert install.returncode == 0, output(install)
    installed = fresh_root.dpkg_installed()
    assert {FAMILY_PACKAGE["deb"], RELEASE.package("amdrocm", "gfx110x"), RELEASE.package("amdrocm-blas", "gfx1100"),
            "amdrocm-blas-host7.1"} <= installed
    assert_gfx1100_only(installed, fresh_root, RELEASE.prefix)
    verified = fresh_root.run("dpkg", "--verify")
    assert verified.returncode == 0 and not verified.stdout, output(verified)


@pytest.fixture(scope="module")
def resigned(releases, server, tmp_path_factory) -> Path:
    """The release's repository as it would be at the same URL signed by a key its setup
    packages do not hold (indexes, signatures and RPM headers re-signed)."""
    other = tmp_path_factory.mktemp("resigned") / "out"
    shutil.copytree(releases(RELEASE), other, symlinks=True)
    other_signer, home = make_signer()
    try:
        resigned = rocpkg("repo", other, "--base-url", server.url(RELEASE.id), "--gpg-home", home,
                          "--sign-key", other_signer.key_id)
        assert resigned.returncode == 0, output(resigned)
    finally:
        kill_gpg_agent(home)
    return other


def test_apt_in_that_root_refuses_another_key_and_a_missing_keyring(releases, server, resigned, fresh_root):
    out = releases(RELEASE)
    top = setup_deb(fresh_root, out, server.url(RELEASE.id))
    with server.serving(RELEASE.id, resigned):
        update = fresh_root.run("apt-get", "update")
        assert update.returncode != 0 and "NO_PUBKEY" in update.stdout + update.stderr, output(update)
        install = fresh_root.run("apt-get", "install", "-y", FAMILY_PACKAGE["deb"])
        assert install.returncode != 0, output(install)
    keyring = fresh_root / f"usr/share/keyrings/{top}-archive-keyring.gpg"
    kept = keyring.read_bytes()
    keyring.unlink()
    update = fresh_root.run("apt-get", "update")
    assert update.returncode != 0, output(update)
    assert not fresh_root.dpkg_installed() & {FAMILY_PACKAGE["deb"], RELEASE.package("amdrocm", "gfx110x")}
    keyring.write_bytes(kept)            # and with it back, the same root takes the same repository
    update = fresh_root.run("apt-get", "update")
    assert update.returncode == 0, output(update)


def stand_in_os_repository(root: Root, out: Path, server: RepositoryServer, tmp_path: Path) -> None:
    """Serve the AlmaLinux 9 stand-ins for what the release's RPMs need of the OS and configure
    them in root's /etc/yum.repos.d (the only other repository there)."""
    if shutil.which("rpm") is None:
        pytest.skip("rpm is not installed here (it reads what the release's RPMs require)")
    rpms = sorted(str(p) for p in (out / "rpm").glob("*/*.rpm"))

    def query(tag: str) -> set[str]:
        return set(subprocess.run(["rpm", "-qp", "--qf", f"[%{{{tag}}}\\n]", *rpms], check=True,
                                  capture_output=True, text=True).stdout.split())
    needed = {n for n in query("REQUIRENAME") - query("PROVIDENAME") if not n.startswith("rpmlib(")}
    provided = {name for name in ALMALINUX9_BASE} | {p for _, ps in ALMALINUX9_BASE.values() for p in ps}
    assert needed <= provided, f"add AlmaLinux 9 stand-ins for {sorted(needed - provided)}"
    repo = tmp_path / "almalinux9-stand-in"
    stand_in_repository(repo, [(name, version, provides) for name, (version, provides) in ALMALINUX9_BASE.items()])
    url = server.mount(f"stand-in-{tmp_path.name}", repo)
    (root / "etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/yum.repos.d/almalinux9-stand-in.repo").write_text(
        f"[almalinux9-stand-in]\nname=AlmaLinux 9 stand-ins (rocpkg tests)\nbaseurl={url}/rpm\n"
        "enabled=1\ngpgcheck=0\nrepo_gpgcheck=0\n")
    # what AlmaLinux's almalinux-release sets and a Debian root lacks: the release dnf substitutes
    (root / "etc/dnf/vars").mkdir(parents=True, exist_ok=True)
    (root / "etc/dnf/vars/releasever").write_text("9\n")


def test_dnf_installs_the_family_package_with_what_the_setup_rpm_configured(releases, server, fresh_root, tmp_path):
    out = releases(RELEASE)
    url = server.url(RELEASE.id)
    stand_in_os_repository(fresh_root, out, server, tmp_path)
    top = top_metapackage(str(out))
    setup = fresh_root.run("dnf", "install", "-y", f"{url}/{top}-repo.rpm")
    assert setup.returncode == 0, output(setup)
    repo_file = (fresh_root / f"etc/yum.repos.d/{top}.repo").read_text()
    assert "gpgcheck=1" in repo_file and "repo_gpgcheck=1" in repo_file
    install = fresh_root.run("dnf", "install", "-y", FAMILY_PACKAGE["rpm"])
    assert install.returncode == 0, output(install)
    installed = fresh_root.rpm_installed()
    # rpm names are lower-case too; rocm-gfx110x provides rocm-gfx110X
    assert {"rocm-gfx110x", RELEASE.package("amdrocm", "gfx110x"), RELEASE.package("amdrocm-blas", "gfx1100"),
            f"{top}-repo"} <= installed
    assert_gfx1100_only(installed, fresh_root, RELEASE.prefix)
    verified = fresh_root.run("rpm", "-Va", "--nodeps", "--nomtime")
    assert not [line for line in verified.stdout.splitlines() if "/opt/rocm" in line], output(verified)


def test_dnf_in_that_root_refuses_the_repository_signed_by_another_key(releases, server, resigned, fresh_root,
                                                                      tmp_path):
    out = releases(RELEASE)
    stand_in_os_repository(fresh_root, out, server, tmp_path)
    top = top_metapackage(str(out))
    setup = fresh_root.run("dnf", "install", "-y", f"{server.url(RELEASE.id)}/{top}-repo.rpm")
    assert setup.returncode == 0, output(setup)
    with server.serving(RELEASE.id, resigned):
        install = fresh_root.run("dnf", "install", "-y", FAMILY_PACKAGE["rpm"])
    assert install.returncode != 0, output(install)
    assert "repomd.xml GPG signature verification error" in install.stdout + install.stderr, output(install)
    assert fresh_root.rpm_installed() == {f"{top}-repo"}


# -- TheRock's install test -----------------------------------------------------------------------

def run_install_test(root: Root, shared_dir: Path, case: Case, url: str, os_profile: str,
                     repository: str) -> subprocess.CompletedProcess:
    script = place_install_test(shared_dir, root)
    started = time.perf_counter()
    ran = root.run("python3", script, "--test-type", "sanity", "--os-profile", os_profile,
                   "--repo-url", f"{url}/{repository}", "--gpg-key-url", f"{url}/rocm.asc",
                   "--release-type", "release", "--rocm-version", VERSION, "--gfx-arch", "gfx1100",
                   "--install-prefix", case.prefix, *case.install_test_args, timeout=1800)
    print(f"\nTheRock install test, {os_profile}, {case.id}: {time.perf_counter() - started:.0f} s\n{ran.stdout}")
    return ran


def assert_install_test_passed(ran: subprocess.CompletedProcess, installed: set[str], root: Root, case: Case) -> None:
    assert ran.returncode == 0, output(ran)
    assert "[PASS] INSTALLATION TEST PASSED" in ran.stdout
    assert f"Components found: {len(KEY_PATHS)}/{len(KEY_PATHS)}" in ran.stdout, output(ran)
    assert "[PASS] All installed files owned by root with safe permissions" in ran.stdout
    assert "[PASS] No installed ELF files use DT_RUNPATH" in ran.stdout
    named = {case.package("amdrocm", "gfx1100"), case.package("amdrocm-core-sdk", "gfx1100")}
    assert named <= installed, sorted(named - installed)
    for relative in KEY_PATHS:
        assert (root / case.prefix / relative).exists(), relative
    assert_gfx1100_only(installed, root, case.prefix)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_therocks_install_test_passes_for_deb_on_debian12(case, releases, server, fresh_root, shared_dir):
    releases(case)
    ran = run_install_test(fresh_root, shared_dir, case, server.url(case.id), "debian12", "deb")
    assert_install_test_passed(ran, fresh_root.dpkg_installed(), fresh_root, case)
    # it configured the repository with the key it fetched, signature checks on
    assert "signed-by=" in (fresh_root / "etc/apt/sources.list.d/rocm-test.list").read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_therocks_install_test_passes_for_rpm_on_its_almalinux9_profile(case, releases, server, fresh_root,
                                                                         shared_dir, tmp_path):
    out = releases(case)
    stand_in_os_repository(fresh_root, out, server, tmp_path)
    ran = run_install_test(fresh_root, shared_dir, case, server.url(case.id), "almalinux9", "rpm")
    assert_install_test_passed(ran, fresh_root.rpm_installed(), fresh_root, case)
    assert "gpgcheck=1" in (fresh_root / "etc/yum.repos.d/rocm-test.repo").read_text()
    assert "Key imported successfully" in ran.stdout      # dnf checked the packages' signatures
