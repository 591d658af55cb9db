"""A user's machine, for the tests that install from a rocpkg repository the way users do
(tests/test_fresh_root.py): a throwaway Debian root made with mmdebstrap, commands run in it
through chroot, a repository served over HTTP on 127.0.0.1 only, and a release of TheRock's
package.json whose sample artifacts hold the files TheRock's own install test looks for.

Kept apart from the tests so that another build (a variant, other build options) is one more
`Case`, not another harness."""
from __future__ import annotations

import pytest
import http.server
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cli_run import rocpkg
from kpack.elf import build_host_elf

SUITE = "bookworm"
MIRROR = os.environ.get("ROCPKG_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What the root holds besides mmdebstrap's apt variant, and who needs it:
ROOT_PACKAGES = (
    # TheRock's install test: python3 with its modules, sudo (it calls it even as root),
    # wget + gpg (it fetches and dearmors the key), binutils (readelf, its RUNPATH check)
    "python3", "python3-requests", "python3-prettytable", "python3-yaml",
    "sudo", "wget", "gpg", "binutils", "ca-certificates",
    # what TheRock's -devel packages depend on from the OS (DEBDepends `libstdc++-12-dev | ...`):
    # the roots have no Debian source once made, so the OS part is installed up front
    "libstdc++-12-dev",
    # the rpm case (its almalinux9 profile): Debian's own dnf and rpm stand in for AlmaLinux's
    "dnf", "rpm",
)
ROOT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LC_ALL": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}

THEROCK_CONFIG = "fixtures/therock/package.json"          # under the shared directory
INSTALL_TEST = "reference/therock-install-test/native_linux_package_install_test.py"
VERSION = "7.1.0"                                         # what `rocpkg build` gives TheRock's list form
TARGETS = ("gfx942", "gfx1100")


# -- what a test can rely on --------------------------------------------------------------

def missing_for_roots(make: bool = True) -> str | None:
    """Why the roots cannot be made (make) or entered here (None: they can): not root,
    a tool missing, or the Debian mirror unreachable."""
    if os.geteuid() != 0:
        return "making and entering a Debian root needs root"
    for tool in ("mmdebstrap", "chroot", "unshare", "mount")[0 if make else 1:]:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-system-tools installs mmdebstrap)"
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return "cannot make a mount namespace (unshare -m)"
    return mirror_problem() if make else None


def mirror_problem() -> str | None:
    url = f"{MIRROR}/dists/{SUITE}/InRelease"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"the Debian mirror is not reachable ({url}: {exc})"


def make_root(path: Path) -> subprocess.CompletedProcess:
    """`mmdebstrap --variant=apt` of Debian bookworm with ROOT_PACKAGES into path/."""
    return subprocess.run(["mmdebstrap", "--variant=apt", "--quiet", f"--include={','.join(ROOT_PACKAGES)}",
                           SUITE, str(path), MIRROR], capture_output=True, text=True, timeout=1500)


# -- a root --------------------------------------------------------------------------------

class Root:
    """A fresh root: an overlay whose lower layer is the root mmdebstrap made (read only,
    shared by every test) and whose upper layer is this test's, mounted at path/merged until
    remove(); a copy of it where overlayfs cannot be mounted. Commands run in it through
    chroot, each in a mount namespace of its own with /proc and /dev mounted: those mounts
    end with the command, whatever happens to the test. The Debian source mmdebstrap
    configured is removed: what the root installs comes from what a test configures."""

    def __init__(self, base: Path, path: Path):
        self.path = path / "merged"
        self.layers = path
        for d in ("upper", "work", "merged"):
            (path / d).mkdir(parents=True)
        mounted = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                                  f"lowerdir={base},upperdir={path / 'upper'},workdir={path / 'work'}", str(self.path)],
                                 capture_output=True, text=True)
        self.mounted = mounted.returncode == 0
        if not self.mounted:
            subprocess.run(["cp", "-a", f"{base}/.", str(self.path)], check=True, capture_output=True)
        try:
            (self.path / "etc/apt/sources.list").unlink(missing_ok=True)
            for extra in (self.path / "etc/apt/sources.list.d").glob("*"):
                extra.unlink()
        except BaseException:
            self.remove()
            raise

    def __truediv__(self, relative: str) -> Path:
        return self.path / relative.lstrip("/")

    def run(self, *command: str, timeout: int = 600, input: str | None = None) -> subprocess.CompletedProcess:
        script = ('mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && '
                  'exec chroot "$0" "$@"')
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                               str(self.path), *command], capture_output=True, text=True, timeout=timeout,
                              input=input, env=ROOT_ENV)

    def dpkg_installed(self) -> set[str]:
        query = self.run("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\n")
        return {line.split()[1] for line in query.stdout.splitlines() if line.startswith("ii ")}

    def rpm_installed(self) -> set[str]:
        query = self.run("rpm", "-qa", "--qf", "%{NAME}\n")
        return set(query.stdout.split()) - {"gpg-pubkey"}

    def remove(self) -> None:
        if self.mounted:
            if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "--lazy", str(self.path)], capture_output=True)
            self.mounted = False
        shutil.rmtree(self.layers, ignore_errors=True)


# -- the repository server -------------------------------------------------------------------

class _Handler(http.server.SimpleHTTPRequestHandler):
    def translate_path(self, path: str) -> str:
        parts = urllib.parse.unquote(urllib.parse.urlsplit(path).path).lstrip("/").split("/", 1)
        directory = self.server.mounts.get(parts[0])
        if directory is None:
            return "/nonexistent/rocpkg-test"
        self.directory = str(directory)
        return super().translate_path("/" + (parts[1] if len(parts) > 1 else ""))

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class RepositoryServer:
    """HTTP on 127.0.0.1 only, on a port the kernel chose free; each directory mounted at a
    first path segment (`url(name)` serves `mounts[name]`)."""

    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.mounts = {}
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def mount(self, name: str, directory: Path) -> str:
        self.httpd.mounts[name] = directory
        return self.url(name)

    @contextmanager
    def serving(self, name: str, directory: Path):
        """Serve another directory at name's URL for a while (the same URL, other bytes)."""
        before = self.httpd.mounts.get(name)
        self.httpd.mounts[name] = directory
        try:
            yield
        finally:
            self.httpd.mounts[name] = before

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- the release -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One build of TheRock's package list and what TheRock's install test is told about it.
    A build variant is one more Case: its build options, the install test's options for it,
    the infix its package names carry and the prefix it installs to, e.g.
    Case("asan", ("--build-variant", "asan"), ("--build-variant", "asan"), "-asan", "/opt/rocm/core-asan-7.1")."""
    id: str
    build_args: tuple[str, ...] = ()
    install_test_args: tuple[str, ...] = ()
    name_infix: str = ""
    prefix: str = "/opt/rocm/core-7.1"

    def package(self, name: str, target: str = "") -> str:
        """TheRock's versioned name of definition `name` in this build: amdrocm{infix}7.1[-target]."""
        abi = ".".join(VERSION.split(".")[:2])
        return f"{name}{self.name_infix}{abi}" + (f"-{target}" if target else "")


# The files TheRock's install test counts (VERIFY_KEY_COMPONENTS, at least 2 of 5), placed where
# TheRock's artifacts hold them: artifact dir -> (path under its stage dir, kind). The sample
# generator writes per-subdir stand-ins (bin/<subdir>-info, lib/lib<subdir>.so.1); these add the
# real names.
KEY_FILES = {
    "core-runtime_run_generic/rocminfo/stage": [("bin/rocminfo", "script")],
    "amd-llvm_run_generic/hipcc/stage": [("bin/hipcc", "script")],
    "core-ocl_run_generic/ocl-clr/stage": [("bin/clinfo", "script")],
    "core-hip_lib_generic/clr/stage": [("lib/libamdhip64.so.7.1.0", "elf"),
                                       ("lib/libamdhip64.so.7", "link:libamdhip64.so.7.1.0")],
    "core-hip_dev_generic/clr/stage": [("lib/libamdhip64.so", "link:libamdhip64.so.7"),
                                       ("include/hip/hip_runtime.h", "header")],
}
KEY_PATHS = ("bin/rocminfo", "bin/hipcc", "bin/clinfo", "include/hip/hip_runtime.h", "lib/libamdhip64.so")


def add_key_files(artifacts: Path) -> None:
    for stage, files in KEY_FILES.items():
        for relative, kind in files:
            path = artifacts / stage / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind.startswith("link:"):
                os.symlink(kind[5:], path)
            elif kind == "elf":  # DT_RUNPATH as built: the release's runpath_to_rpath makes it DT_RPATH
                path.write_bytes(build_host_elf({".text": b"\xc3" * 64}, soname="libamdhip64.so.7", runpath="$ORIGIN"))
                path.chmod(0o755)
            elif kind == "header":
                path.write_text("#ifndef HIP_RUNTIME_H\n#define HIP_RUNTIME_H\nint hipGetDeviceCount(int *count);\n#endif\n")
            else:
                path.write_text(f"#!/bin/sh\necho '{path.name}: rocpkg sample stand-in, no GPU here'\n")
                path.chmod(0o755)


def build_release(shared_dir: Path, work: Path, case: Case, base_url: str, signer) -> Path:
    """Sample artifacts of TheRock's package.json (gfx942 and gfx1100, with the key files),
    built and indexed into work/out, signed, with setup packages pointing at base_url."""
    config = shared_dir / THEROCK_CONFIG
    artifacts, out = work / "artifacts", work / "out"
    made = rocpkg("sample-artifacts", artifacts, "-c", config, "--targets", ",".join(TARGETS), "--size-mb", "0.5")
    assert made.returncode == 0, made.stderr
    add_key_files(artifacts)
    built = rocpkg("build", "-c", config, "-a", artifacts, "-o", out, "-q", "-j", str(min(8, os.cpu_count() or 1)),
                   *case.build_args)
    assert built.returncode == 0, built.stdout + built.stderr
    indexed = rocpkg("repo", out, "--base-url", base_url, "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id)
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    return out


def fetch(url: str, path: Path) -> Path:
    """url's bytes into path, never through a proxy (the server is on 127.0.0.1)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as response:
        path.write_bytes(response.read())
    return path


# TheRock's install test imports `normalize_target_list` from its sibling packaging_utils.py,
# which imports the rest of TheRock's build tools; this stand-in does what the install test
# uses it for (split arch lists on commas, semicolons and spaces, drop :features, lower-case,
# dedupe), so that the install test itself runs unchanged.
PACKAGING_UTILS_STAND_IN = '''"""Stand-in for TheRock's build_tools/packaging/linux/packaging_utils.py (rocpkg tests)."""
import re


def normalize_target_list(value, *, lowercase=False, dedupe=False):
    if value is None:
        items = []
    elif isinstance(value, str):
        items = [value]
    else:
        items = [str(v) for v in value]
    tokens = [t.split(":", 1)[0] for item in items for t in re.split(r"[,;\\s]+", item) if t]
    if lowercase:
        tokens = [t.lower() for t in tokens]
    if dedupe:
        tokens = list(dict.fromkeys(tokens))
    return tokens
'''


def place_install_test(shared_dir: Path, root: Root, where: str = "/root/therock-install-test") -> str:
    """Copy TheRock's install test, unchanged, into the root with the packaging_utils stand-in
    beside it; returns the script's path inside the root."""
    target = root / where
    target.mkdir(parents=True)
    script = shared_dir / INSTALL_TEST
    shutil.copy(script, target / script.name)
    (target / "packaging_utils.py").write_text(PACKAGING_UTILS_STAND_IN)
    return f"{where}/{script.name}"


@pytest.fixture(scope="module")
def server():
    """A RepositoryServer on 127.0.0.1 for one test module (import it where it is used)."""
    served = RepositoryServer()
    yield served
    served.close()
