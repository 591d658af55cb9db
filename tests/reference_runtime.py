"""rocm-kpack's reference C++ runtime as a test oracle: build it once (cached by a hash of
its sources and of tests/kpack_oracle.cpp) and ask it which code object a GPU would load.

    oracle = build_reference_loader(shared_dir)
    oracle.lookup([(binary, isa, co_index), ...]) -> [OracleResult, ...]
    compare_with_loader(oracle, binaries, isas) -> (lookups, disagreement lines)

The build lives in ~/.cache/rocpkg-tests/rocm-kpack-<hash> (or $ROCPKG_TEST_CACHE), so
repeated test runs, and the lead's runs over installed releases, reuse it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ORACLE_SOURCE = Path(__file__).resolve().parent / "kpack_oracle.cpp"
TOOLS = ("cmake", "g++")
HEADERS = ("/usr/include/zstd.h", "/usr/include/msgpack.hpp")
# kpack_error_t names, for messages
CODES = {-1: "NO_MARKER", 0: "SUCCESS", 2: "FILE_NOT_FOUND", 3: "INVALID_FORMAT", 5: "KERNEL_NOT_FOUND",
         6: "DECOMPRESSION_FAILED", 9: "IO_ERROR", 12: "INVALID_METADATA", 13: "ARCHIVE_NOT_FOUND",
         14: "ARCH_NOT_FOUND"}


@dataclass(frozen=True)
class OracleResult:
    code: int              # kpack_error_t; 0 = loaded
    size: int
    sha256: str | None     # of the code object, when loaded
    archive: str | None    # canonical path of the archive it loaded from (or first asked)
    target: str | None     # the architecture it matched that archive for
    tried: tuple[str, ...] = ()   # every candidate asked, in order: "ARCHIVE@TARGET"

    @property
    def name(self) -> str:
        return CODES.get(self.code, str(self.code))


def missing_tools() -> list[str]:
    """What the build needs and this machine lacks (scripts/install-system-tools installs it)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None] + \
        [header for header in HEADERS if not os.path.exists(header)]


def _source_hash(source_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in source_dir.rglob("*") if p.is_file()) + [ORACLE_SOURCE]:
        digest.update(str(path.relative_to(path.parent.parent if path == ORACLE_SOURCE else source_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("ROCPKG_TEST_CACHE") or Path.home() / ".cache" / "rocpkg-tests")


def build_reference_loader(shared_dir: Path) -> "ReferenceLoader":
    """Build (or reuse) the runtime library and the oracle driver; raises RuntimeError with
    the build log's tail when the build fails."""
    source = Path(shared_dir) / "reference" / "rocm-kpack"
    final = cache_root() / f"rocm-kpack-{_source_hash(source)}"
    driver = final / "kpack_oracle"
    if driver.exists():
        return ReferenceLoader(driver)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{final.name}.tmp-", dir=final.parent))
    try:
        shims = source / "cmake-debian12"
        _run(["cmake", "-S", str(source), "-B", str(work / "build"), "-DCMAKE_BUILD_TYPE=Release",
              "-DBUILD_TESTING=OFF", f"-Dmsgpack-cxx_DIR={shims}", f"-Dzstd_DIR={shims}"])
        _run(["cmake", "--build", str(work / "build"), "-j", "2"])
        _run(["g++", "-std=c++17", "-O1", "-o", str(work / "kpack_oracle"), str(ORACLE_SOURCE),
              f"-I{source / 'runtime' / 'include'}", "-DROCM_KPACK_STATIC",
              str(work / "build" / "runtime" / "librocm_kpack.a"), "-lzstd"])
        try:
            work.rename(final)
        except OSError:  # another run finished first: use its build
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return ReferenceLoader(driver)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[:3])} failed:\n{(done.stdout + done.stderr)[-3000:]}")


class ReferenceLoader:
    """The built oracle driver: one process per batch of lookups."""

    def __init__(self, driver: Path):
        self.driver = Path(driver)

    def lookup(self, requests: list[tuple[str, str, int]]) -> list[OracleResult]:
        text = "".join(f"{binary}\t{isa}\t{index}\n" for binary, isa, index in requests)
        done = subprocess.run([str(self.driver)], input=text, capture_output=True, text=True, check=True)
        lines = done.stdout.splitlines()
        assert len(lines) == len(requests), done.stdout + done.stderr
        results = []
        for line in lines:
            code, size, digest, archive, target, tried = line.split("\t")
            results.append(OracleResult(int(code), int(size), None if digest == "-" else digest,
                                        None if archive == "-" else archive, None if target == "-" else target,
                                        () if tried == "-" else tuple(tried.split("|"))))
        return results

    def __call__(self, binary: str, isa: str, co_index: int) -> OracleResult:
        return self.lookup([(binary, isa, co_index)])[0]


def compare_with_loader(oracle: ReferenceLoader, binaries: list[tuple[str, object]],
                        isas: list[str], co_indexes: tuple[int, ...] = (0, 1)) -> tuple[int, list[str]]:
    """Ask kpack.loader (filesystem opener) and the runtime the same lookups: every
    (binary path, marker) × ISA × co_index. Returns (lookups compared, one line per lookup
    where they differ in status, archive, target or code-object bytes). Usable on any
    installed tree, e.g. a release installed with dpkg into a throwaway root. The candidates
    asked are compared in order, each archive once (the runtime lists an archive reached by
    two paths twice; asking it twice changes nothing)."""
    from kpack.loader import filesystem_opener, find_kernel, load_kernel

    opener = filesystem_opener()
    requests = [(path, isa, index) for path, _ in binaries for isa in isas for index in co_indexes]
    markers = dict(binaries)
    differ = []
    for (path, isa, index), theirs in zip(requests, oracle.lookup(requests)):
        ours = find_kernel(markers[path], path, isa, index, opener)
        tried = tuple(dict.fromkeys(f"{os.path.realpath(a)}@{t}" for a, t in ours.tried))
        mine = (ours.runtime_code, os.path.realpath(ours.archive) if ours.archive else None, ours.target,
                hashlib.sha256(load_kernel(ours)).hexdigest() if ours.found else None, tried)
        runtime = (theirs.code, theirs.archive, theirs.target, theirs.sha256, tuple(dict.fromkeys(theirs.tried)))
        if mine != runtime:
            differ.append(f"{path} on {isa} #{index}: kpack.loader {mine} ({ours.explain()}), runtime {runtime}")
    return len(requests), differ
