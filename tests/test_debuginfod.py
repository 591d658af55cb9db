"""A release's debug packages serve debuggers through debuginfod, the way distributions
publish theirs: elfutils' debuginfod scanning the .deb pool (`-U`, the -dbgsym packages) or the
rpm tree (`-R`, the -debuginfo packages) of one OUT, asked on 127.0.0.1 by
`debuginfod-find debuginfo BUILD-ID` for a library's build-id, answers with that library's
debug file, byte for byte, and answers nothing for a build-id the release does not hold.

The release is tests/test_debug_packages.py's: a gcc-built library split with objcopy, its
debug file in TheRock's dbg artifact layout, built once for the module. Each server gets a
free port, its own database, and is stopped in a finally."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from cli_run import rocpkg
from test_debug_packages import lay_out, split_library

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("gcc", "objcopy", "debuginfod", "debuginfod-find", "bsdtar")),
    reason="needs gcc, objcopy, debuginfod, debuginfod-find and bsdtar (scripts/install-system-tools)")

# The pool of each format and the option that makes debuginfod scan its packages.
POOLS = {"deb": ("-U", "deb", ".deb"), "rpm": ("-R", "rpm", ".rpm")}
UNKNOWN_BUILD_ID = "00" * 20


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> tuple[Path, Path, str]:
    """(OUT, the library's debug file as split, its build-id)."""
    root = tmp_path_factory.mktemp("debuginfod")
    library, debug, build_id = split_library(root / "gcc")
    artifacts = lay_out(root, library, debug, build_id)
    done = rocpkg("build", "-c", root / "package.json", "-a", artifacts, "-o", root / "out", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "out", debug, build_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port: int) -> dict[str, float]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return {k: float(v) for k, _, v in (line.rpartition(" ") for line in lines if line and not line.startswith("#"))}


def serve_and_find(pool: Path, option: str, suffix: str, tmp_path: Path, build_id: str) -> subprocess.CompletedProcess:
    """Start debuginfod over pool, wait until it has scanned every package there, then ask it
    for build_id's debuginfo; the server is killed whatever happens."""
    port, count = free_port(), sum(1 for _ in pool.rglob(f"*{suffix}"))
    log_path = tmp_path / "debuginfod.log"
    log = log_path.open("w")
    server = subprocess.Popen(["debuginfod", option, "-d", str(tmp_path / "index.sqlite"), "-p", str(port),
                               "-t", "0", "-g", "0", str(pool)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, scanned = time.monotonic() + 60, -1.0
        while scanned < count:
            assert server.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, f"scanned {scanned} of {count}\n{log_path.read_text()}"
            time.sleep(0.2)
            try:
                scanned = metrics(port).get(f'scanned_files_total{{source="{suffix} archive"}}', -1.0)
            except OSError:
                continue
        env = {**os.environ, "DEBUGINFOD_URLS": f"http://127.0.0.1:{port}", "DEBUGINFOD_TIMEOUT": "30",
               "DEBUGINFOD_CACHE_PATH": str(tmp_path / "client-cache"), "NO_PROXY": "127.0.0.1"}
        found = subprocess.run(["debuginfod-find", "debuginfo", build_id], capture_output=True, text=True,
                               env=env, timeout=60)
        missing = subprocess.run(["debuginfod-find", "debuginfo", UNKNOWN_BUILD_ID], capture_output=True,
                                 text=True, env=env, timeout=60)
        assert missing.returncode != 0 and not missing.stdout.strip(), missing.stdout + missing.stderr
        return found
    finally:
        server.kill()
        server.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("fmt", sorted(POOLS))
def test_debuginfod_over_the_pool_serves_the_librarys_debug_file_by_its_build_id(release, fmt, tmp_path):
    out, debug, build_id = release
    option, pool, suffix = POOLS[fmt]
    packaged = [p.name for p in (out / pool).rglob(f"*{suffix}")]
    assert any("dbgsym" in n or "debuginfo" in n for n in packaged), packaged
    found = serve_and_find(out / pool, option, suffix, tmp_path, build_id)
    assert found.returncode == 0, found.stdout + found.stderr
    assert Path(found.stdout.strip()).read_bytes() == debug.read_bytes()
