"""The `kpack` command with hostile files and directories: a FIFO or a device named as an
archive never blocks a reader; `extract` never writes through a symlink below its output
directory and creates nothing but directories and regular files. Every refusal is exit
2 with one `error:` line naming the path, no traceback, within a timeout, and the work
directory as it was."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import refusal_lines, snapshot
from test_kpack_cli import code_object_tree

from kpack.archive import KpackWriter
from kpack.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60


def kpack(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "packaging"), str(REPO_ROOT)]))
    return subprocess.run([sys.executable, "-m", "kpack.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT)


@pytest.fixture
def work(tmp_path) -> Path:
    """tmp_path with a.kpack (four kernels under lib/ and share/), out/ and elsewhere/."""
    code_object_tree(tmp_path / "tree")
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "a.kpack"), "--family", "gfx94X"]) == 0
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


def refused(root: Path, *args, needles=()) -> list[str]:
    before = snapshot(root)
    errors = refusal_lines(kpack(*args), [str(n) for n in needles])
    assert len(errors) == 1, errors
    assert snapshot(root) == before, "the work dir changed"
    return errors


@pytest.mark.parametrize("command", ["info", "verify", "ls", "extract"])
@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_an_archive_that_is_no_regular_file_is_refused_without_blocking(work, command, kind):
    path = {"fifo": work / "fifo.kpack", "device": Path("/dev/zero"), "directory": work / "tree"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    args = [command, path] + (["-o", work / "out"] if command == "extract" else [])
    refused(work, *args, needles=[path, {"fifo": "is a FIFO", "device": "is a character device",
                                         "directory": "is a directory"}[kind]])


@pytest.mark.parametrize("planted", ["symlink", "symlink-deep", "file", "fifo"])
def test_extract_refuses_what_is_no_directory_where_a_kernels_directory_belongs(work, planted):
    where = work / "out" / ("lib/libfoo.so#0" if planted == "symlink-deep" else "lib")
    where.parent.mkdir(parents=True, exist_ok=True)
    if planted.startswith("symlink"):
        os.symlink(work / "elsewhere", where)
    elif planted == "file":
        where.write_bytes(b"a file\n")
    else:
        os.mkfifo(where)
    kind = {"symlink": "a symlink", "symlink-deep": "a symlink", "file": "a regular file", "fifo": "a FIFO"}[planted]
    refused(work, "extract", work / "a.kpack", "-o", work / "out", needles=[where, f"is {kind} where a directory"])
    assert list((work / "elsewhere").iterdir()) == []


def test_extract_refuses_a_directory_where_a_kernel_belongs(work):
    target = work / "out/lib/libfoo.so#0/gfx90a.hsaco"
    target.mkdir(parents=True)
    refused(work, "extract", work / "a.kpack", "-o", work / "out", needles=[target, "is a directory where a kernel"])


def test_extract_refuses_a_kernel_that_is_another_kernels_directory(work):
    archive = work / "clash.kpack"
    with KpackWriter(archive, "g", "gfx94X") as writer:
        writer.add("a#0", "gfx942", b"x")
        writer.add("a#0/gfx942.hsaco", "gfx90a", b"y")
    refused(work, "extract", archive, "-o", work / "out",
            needles=["a#0/gfx942.hsaco", "is both a kernel and a directory"])


def test_extract_replaces_a_symlink_where_a_kernel_belongs_never_writing_through_it(work):
    target = work / "out/lib/libfoo.so#0/gfx90a.hsaco"
    target.parent.mkdir(parents=True)
    victim = work / "elsewhere/victim"
    victim.write_bytes(b"not kpack's\n")
    os.symlink(victim, target)
    done = kpack("extract", work / "a.kpack", "-o", work / "out")
    assert done.returncode == 0, done.stderr
    assert not target.is_symlink() and target.read_bytes() == (work / "tree/lib/libfoo.so#0/gfx90a.hsaco").read_bytes()
    assert victim.read_bytes() == b"not kpack's\n"


def test_extract_into_a_directory_the_user_names_through_a_symlink(work):
    """DIR itself is the user's to name: a symlink to a directory is followed there only."""
    os.symlink(work / "elsewhere", work / "alias")
    done = kpack("extract", work / "a.kpack", "-o", work / "alias")
    assert done.returncode == 0, done.stderr
    found = sorted(p.relative_to(work / "elsewhere").as_posix() for p in (work / "elsewhere").rglob("*") if p.is_file())
    assert found == ["lib/libfoo.so#0/gfx90a.hsaco", "lib/libfoo.so#0/gfx942:sramecc+:xnack-.hsaco",
                     "lib/libfoo.so#1/gfx942.hsaco", "share/kernels/blit.co#0/gfx942.hsaco"]
    assert not [p for p in (work / "elsewhere").iterdir() if p.name.startswith(".kpack-extract-")]


def test_the_writer_never_opens_its_temporary_file_through_a_symlink(work):
    victim = work / "elsewhere/victim"
    victim.write_bytes(b"not kpack's\n")
    output = work / "b.kpack"
    os.symlink(victim, f"{output}.tmp-{os.getpid()}")
    with pytest.raises(OSError):
        KpackWriter(output, "g", "gfx94X")
    assert victim.read_bytes() == b"not kpack's\n" and not output.exists()
