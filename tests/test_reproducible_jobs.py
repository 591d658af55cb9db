"""Output is a function of the inputs and SOURCE_DATE_EPOCH alone: the number of jobs (and so
of compressor threads per package) never changes a byte of any package, index or record,
in any registered format."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from cli_run import rocpkg

from rocpkg.formats.registry import NAMES

FORMATS = ",".join(NAMES)
ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}


def _digests(out: Path) -> dict[str, str]:
    """sha256 of every regular file under OUT except rocpkg's own working records
    (.rocpkg/: state journals hold inode numbers and mtimes of this tree)."""
    found = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if path.is_file() and not path.is_symlink() and not rel.startswith(".rocpkg/"):
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_one_job_and_sixteen_jobs_write_the_same_bytes(small_release, tmp_path):
    outs = {}
    out = tmp_path / "out"      # one path: the client snippets name it
    for jobs in (1, 16):
        done = rocpkg("build", "-a", small_release, "-o", out, "--formats", FORMATS, "-j", jobs, "--repo",
                      env=ENV)
        assert done.returncode == 0, done.stderr
        outs[jobs] = _digests(out)
        shutil.rmtree(out)
    assert len(outs[1]) > 20 and any(rel.startswith(f"{fmt}/") for rel in outs[1] for fmt in NAMES)
    assert outs[1] == outs[16]
