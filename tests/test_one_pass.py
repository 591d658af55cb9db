"""Every byte read once and hashed once (issue 15): the writers take every digest their
format needs on the single read of each source and report the package's own sha256
without reopening it; zstd workers go where the work is; the sample generator makes the
payload it is asked for."""
from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from rocpkg.builder import run as build
from rocpkg.formats.deb import read_deb_control_file, write_deb
from rocpkg.formats.pacman import write_pacman
from rocpkg.model import DIR, FILE, BuildOptions, FileEntry, PackageSpec
from rocpkg.formats.rpm import write_rpm
from rocpkg.formats.streams import DigestThread

PREFIX = "/opt/rocm-7.1.0"
MIB = 1 << 20


def _spec(fmt: str, files: list[FileEntry]) -> PackageSpec:
    return PackageSpec(format=fmt, name="rocm-blas7.1-gfx942", version="7.1.0", release="1",
                       arch="amd64" if fmt == "deb" else "x86_64", kind="device", summary="BLAS kernels",
                       description="BLAS kernels for gfx942.", maintainer="ROCm <rocm@example.com>",
                       vendor="Example", license="MIT", homepage="https://example.com/rocm", files=files)


@pytest.fixture
def sources(tmp_path) -> dict[str, bytes]:
    """A large incompressible kernel file (several chunks), a small one and an empty one."""
    contents = {f"{PREFIX}/lib/rocblas/library/Kernels.co": os.urandom(5 * MIB + 123),
                f"{PREFIX}/lib/rocblas/library/TensileLibrary.dat": b"tensile" * 100,
                f"{PREFIX}/lib/rocblas/library/empty.dat": b""}
    for path, data in contents.items():
        (tmp_path / os.path.basename(path)).write_bytes(data)
    return contents


def _files(tmp_path, sources) -> list[FileEntry]:
    return [FileEntry(f"{PREFIX}/lib/rocblas/library", DIR, 0o755)] + [
        FileEntry(path, FILE, 0o644, str(tmp_path / os.path.basename(path)), len(data))
        for path, data in sources.items()]


def _options(**fields) -> BuildOptions:
    return BuildOptions(source_date_epoch=1_700_000_000, compression="zstd", compression_level=3, **fields)


def _rchar() -> int:
    """Bytes this process has read through read() so far (the kernel's own count)."""
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_each_writer_reports_the_sha256_and_size_of_the_file_it_wrote(fmt, tmp_path, sources):
    writer = write_deb if fmt == "deb" else write_rpm
    built = writer(_spec(fmt, _files(tmp_path, sources)), str(tmp_path / "out"), _options())
    data = open(built.path, "rb").read()
    assert (built.sha256, built.size) == (hashlib.sha256(data).hexdigest(), len(data))


def test_the_deb_md5sums_are_the_md5_of_each_source(tmp_path, sources):
    built = write_deb(_spec("deb", _files(tmp_path, sources)), str(tmp_path / "out"), _options())
    listed = dict(reversed(line.split("  ", 1)) for line in
                  read_deb_control_file(built.path, "md5sums").decode().splitlines())
    for path, data in sources.items():
        assert listed[path[1:]] == hashlib.md5(data).hexdigest()


def test_rpm_reports_the_sha256_of_each_source_and_rpm_checks_every_digest(tmp_path, sources):
    built = write_rpm(_spec("rpm", _files(tmp_path, sources)), str(tmp_path / "out"), _options())
    query = subprocess.run(["rpm", "-qp", "--qf", "[%{FILENAMES} %{FILEDIGESTS}\n]", built.path],
                           check=True, capture_output=True, text=True).stdout
    digests = dict(line.split(" ", 1) for line in query.splitlines())
    for path, data in sources.items():
        assert digests[path].strip() == hashlib.sha256(data).hexdigest()
    checked = subprocess.run(["rpm", "-Kv", "--nosignature", built.path], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for line in ("Header SHA256 digest: OK", "Header SHA1 digest: OK", "Payload SHA256 digest: OK"):
        assert line in checked.stdout
    assert "MD5" not in checked.stdout


@pytest.mark.parametrize("fmt, passes_over_the_package", [("deb", 1), ("rpm", 1), ("pacman", 1)])
def test_each_source_byte_is_read_once(fmt, passes_over_the_package, tmp_path, sources):
    """What the process reads: every source byte once, plus one pass over the compressed
    package (a .deb's and an .rpm's whole-file sha256; pacman's files, compressed aside
    and copied in after the .MTREE), and nothing else of any size."""
    writer = {"deb": write_deb, "rpm": write_rpm, "pacman": write_pacman}[fmt]
    spec = _spec(fmt, _files(tmp_path, sources))
    writer(spec, str(tmp_path / "warm"), _options())  # imports and templates loaded before counting
    before = _rchar()
    built = writer(spec, str(tmp_path / "out"), _options())
    read = _rchar() - before
    payload = sum(len(d) for d in sources.values())
    expected = payload + passes_over_the_package * built.size  # the headers before an rpm's payload are in hand
    assert abs(read - expected) < MIB // 2


def test_a_digest_thread_keeps_the_bytes_of_a_buffer_the_caller_reuses():
    digest = DigestThread("sha256", whole=True)
    buffer = bytearray(DigestThread.SMALL)
    expected = hashlib.sha256()
    for fill in range(4):
        buffer[:] = bytes([fill]) * len(buffer)
        digest.write(buffer)
        expected.update(buffer)
    assert digest.hexdigest() == expected.hexdigest()


def test_the_largest_package_gets_the_cores_the_others_leave():
    sizes = [900 * MIB] + [10 * MIB] * 40
    threads = build.zstd_threads(sizes, cores=16, jobs=16, cap=16)
    assert threads[0] == 11             # 900 of the 1300 MiB left: 11 of the 16 cores
    assert threads[1] == 1              # 16 small packages at once: one core each


def test_when_fewer_packages_than_jobs_are_left_they_share_all_the_cores():
    threads = build.zstd_threads([10 * MIB] * 20, cores=16, jobs=16, cap=16)
    assert threads[:4] == [1, 1, 1, 1]
    assert threads[-1] == 16 and threads[-2] == 8


def test_the_largest_start_first_then_the_small_ones_then_the_rest():
    from rocpkg.builder.schedule import PACKAGE_OVERHEAD, start_order

    sizes = [900 * MIB, 500 * MIB, 300 * MIB, 20 * MIB, 2 * MIB, PACKAGE_OVERHEAD, 4096, 0]
    # two workers: the two largest at once, then the three whose cost is their overhead
    assert start_order(sizes, 2) == [0, 1, 5, 6, 7, 2, 3, 4]
    assert start_order(sizes, 0) == [5, 6, 7, 0, 1, 2, 3, 4]
    assert start_order(sizes, 16) == list(range(8))
    assert start_order([], 4) == []


def test_no_package_gets_more_workers_than_the_writer_allows():
    assert max(build.zstd_threads([MIB << 10, MIB], cores=64, jobs=2, cap=16)) == 16


def test_sample_artifacts_make_the_payload_asked_for(tmp_path):
    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    summary = make_sample_artifacts(tmp_path / "artifacts", load_config(None), targets=["gfx942"], size_mb=96)
    assert 0.8 * 96 * MIB <= summary.bytes <= 1.3 * 96 * MIB
