"""Faults while writing: a full disk or a file-size limit during build or repo ends in exit
2 with one line naming the path, leaves no temporary behind, and leaves what was published
before as it was."""
from __future__ import annotations

import hashlib
import resource
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

import cli_run

from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

def rocpkg(*args, file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit():  # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return cli_run.rocpkg(*args, preexec_fn=limit if file_size_limit is not None else None)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".rocpkg" not in p.parts}


def temporaries(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*.tmp-*")]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    make_sample_artifacts(root / "artifacts", load_config(None), targets=["gfx942"], size_mb=0.5)
    return root / "artifacts"


def one_error_line(done: subprocess.CompletedProcess, what: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and what in errors[0], done.stderr
    return errors[0]


def test_a_file_size_limit_during_build_is_one_line_naming_the_file_and_no_temporary(artifacts, tmp_path):
    out = tmp_path / "out"
    done = rocpkg("build", "-a", artifacts, "-o", out, "-j", "2", file_size_limit=64 << 10)
    line = one_error_line(done, "File too large")
    assert str(out) in line
    assert temporaries(out) == []


def test_a_failed_repo_leaves_the_published_indexes_as_they_were(artifacts, tmp_path):
    out = tmp_path / "out"
    assert rocpkg("build", "-a", artifacts, "-o", out, "--repo").returncode == 0
    published = snapshot(out)
    assert rocpkg("build", "-a", artifacts, "-o", out, "--release", "2").returncode == 0
    before = snapshot(out)

    done = rocpkg("repo", str(out), file_size_limit=1)

    one_error_line(done, "File too large")
    assert snapshot(out) == before
    indexes = {k: v for k, v in published.items() if k.startswith(("deb/dists/", "rpm/repodata/"))}
    assert indexes and {k: v for k, v in snapshot(out).items() if k in indexes} == indexes
    assert temporaries(out) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_full_disk_during_build_is_one_line_and_no_temporary(artifacts, small_disk):
    out = small_disk / "out"
    done = rocpkg("build", "-a", artifacts, "-o", out, "-j", "2")
    line = one_error_line(done, "No space left on device")
    assert str(out) in line
    assert temporaries(out) == []


def test_a_full_disk_during_repo_keeps_the_published_repository(artifacts, small_disk, tmp_path):
    staging = tmp_path / "out"
    assert rocpkg("build", "-a", artifacts, "-o", staging, "--formats", "deb", "--repo").returncode == 0
    out = small_disk / "out"
    shutil.copytree(staging, out)
    published = snapshot(out)
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as fh:  # leave the disk with nothing free
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass

    done = rocpkg("repo", str(out))

    filler.unlink()
    one_error_line(done, "No space left on device")
    assert snapshot(out) == published
    assert temporaries(out) == []
