"""Helpers for the tests on real compilers and binaries: comgr through ctypes (the ROCm
library that names a code object's ISA for the runtime), clang-15, and Debian's own ROCm
packages downloaded once into a cache (~/.cache/rocpkg-tests, or $ROCPKG_TEST_CACHE).
Everything skips cleanly when the tool, the library or the network is absent."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

AMD_COMGR_DATA_KIND_EXECUTABLE = 8
CACHE = Path(os.environ.get("ROCPKG_TEST_CACHE") or Path.home() / ".cache" / "rocpkg-tests")


class _Data(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64)]


class Comgr:
    """`amd_comgr_get_data_isa_name` over code-object bytes."""

    def __init__(self, library: ctypes.CDLL):
        self.lib = library

    def isa_name(self, code_object: bytes) -> str | None:
        """`amdgcn-amd-amdhsa--gfx906:sramecc-:xnack+`, or None when comgr refuses the object."""
        data = _Data()
        assert self.lib.amd_comgr_create_data(AMD_COMGR_DATA_KIND_EXECUTABLE, ctypes.byref(data)) == 0
        try:
            assert self.lib.amd_comgr_set_data(data, ctypes.c_size_t(len(code_object)), code_object) == 0
            size = ctypes.c_size_t(0)
            if self.lib.amd_comgr_get_data_isa_name(data, ctypes.byref(size), None) != 0:
                return None
            name = ctypes.create_string_buffer(size.value)
            assert self.lib.amd_comgr_get_data_isa_name(data, ctypes.byref(size), name) == 0
            return name.value.decode()
        finally:
            self.lib.amd_comgr_release_data(data)

    def target(self, code_object: bytes) -> str | None:
        """The target ID part of the ISA name: `gfx906:sramecc-:xnack+`."""
        name = self.isa_name(code_object)
        return name.split("--", 1)[1] if name else None


def load_comgr() -> Comgr:
    for candidate in ("libamd_comgr.so.2", ctypes.util.find_library("amd_comgr")):
        if candidate:
            try:
                return Comgr(ctypes.CDLL(candidate))
            except OSError:
                continue
    pytest.skip("comgr (libamd-comgr2) is not installed")


def require_clang() -> str:
    clang = shutil.which("clang-15")
    if not clang or not shutil.which("ld.lld-15") and not shutil.which("ld.lld"):
        pytest.skip("clang-15 and lld-15 are not installed")
    return clang


def debian_package_root(*packages: str) -> Path:
    """A directory holding the extracted files of Debian packages, downloaded with
    `apt-get download` into the cache the first time; skips when they cannot be had."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        pytest.skip("apt-get / dpkg-deb are not available")
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    root = CACHE / ("root-" + "-".join(sorted(packages)))
    if (root / ".complete").exists():
        return root
    files = []
    for package in packages:
        found = sorted(debs.glob(f"{package}_*.deb"))
        if not found:
            done = subprocess.run(["apt-get", "download", "-q", package], cwd=debs, capture_output=True, text=True)
            found = sorted(debs.glob(f"{package}_*.deb"))
            if done.returncode or not found:
                pytest.skip(f"cannot download {package} (offline, or not in the configured archive): "
                            f"{done.stderr.strip()[-200:]}")
        files.append(found[-1])
    shutil.rmtree(root, ignore_errors=True)
    for deb in files:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (root / ".complete").touch()
    return root


def library(root: Path, prefix: str) -> Path:
    """The one shared library under root/usr/lib whose name starts with prefix (no symlinks)."""
    found = [path for path in (root / "usr" / "lib").rglob(prefix + "*") if path.is_file() and not path.is_symlink()]
    assert len(found) == 1, found
    return found[0]


def read_range(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(size)
