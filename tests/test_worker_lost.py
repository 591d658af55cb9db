"""A build worker that ends while the build still needs it (the out-of-memory killer, a
signal, a crash) ends the build with one error line and exit status 1, never a wait for an
answer that cannot come; nothing half-written is left, and the next build finishes the
release. Each run is a child process with a time limit: a wait forever fails the test."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_run import ROCPKG, rocpkg

LIMIT = 120  # seconds: far more than any of these runs takes

# Workers(2), or verify's and repo's spread() on 2 processes, running tasks of which one
# kills its own worker; prints what was raised.
IN_PROCESS = """
import os, signal, sys
from rocpkg.builder.workers import Workers
from rocpkg.formats.parallel import spread

def task(n):
    if n == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return n

with Workers(2) as workers:
    try:
        if sys.argv[1] == "unordered":
            print(sorted(workers.unordered(task, list(range(8)))))
        elif sys.argv[1] == "spread":
            print(list(spread(task, [(n,) for n in range(8)], 2)))
        else:
            print(workers.starmap_async(task, [(n,) for n in range(8)])())
    except Exception as exc:
        print(type(exc).__name__, exc)
"""

# `rocpkg build` whose workers each kill themselves at the start of their third package:
# rocpkg.builder.packing.build_one (what the workers run, looked up by name) is wrapped
# before the workers are forked.
KILLING_BUILD = """
import os, signal, sys
from rocpkg.builder import packing
from rocpkg.cli.main import main

parent, real, started = os.getpid(), packing.build_one, []

def build_one(task):
    started.append(task)
    if os.getpid() != parent and len(started) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(task)

build_one.__module__, build_one.__qualname__ = real.__module__, real.__qualname__
packing.build_one = build_one
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("call", ["unordered", "starmap_async", "spread"])
def test_a_worker_killed_during_a_task_is_said_not_waited_for(call):
    done = subprocess.run([sys.executable, "-c", IN_PROCESS, call], capture_output=True, text=True, timeout=LIMIT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("RocpkgWorkerLost a worker process ended while it held work"), done.stdout


def test_a_build_whose_worker_is_killed_ends_with_one_error_and_the_next_build_finishes(small_release, tmp_path):
    out = tmp_path / "out"
    killed = subprocess.run([sys.executable, "-c", KILLING_BUILD, "build", "-a", str(small_release), "-o", str(out),
                             "--formats", "deb,rpm", "-j", "2"], capture_output=True, text=True, timeout=LIMIT)

    assert killed.returncode == 1, killed.stdout + killed.stderr
    assert "Traceback" not in killed.stderr
    errors = [line for line in killed.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: a worker process ended while it held work (killed by a signal or the out-of-memory "
                      "killer, or crashed); nothing it was writing was published: run the build again"], killed.stderr
    assert not (out / ".rocpkg" / "staging").exists()
    leftovers = [name for _, _, files in os.walk(out) for name in files if ".tmp" in name or name.startswith(".")]
    assert leftovers == []

    again = rocpkg("build", "-a", small_release, "-o", out, "--formats", "deb,rpm", "-j", "2", timeout=LIMIT)
    assert again.returncode == 0, again.stderr
    verified = rocpkg("verify", out, timeout=LIMIT)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("when", ["forked", "writing"])
def test_a_build_interrupted_with_ctrl_c_stops_its_workers(tmp_path, when):
    """SIGINT reaches the parent alone (the workers ignore it), as soon as its workers are
    forked or once the first package is written: it stops the workers and exits 130,
    leaving no worker behind (one landing while the workers are forked is not lost)."""
    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    artifacts, out = tmp_path / "artifacts", tmp_path / "out"
    make_sample_artifacts(artifacts, load_config(None), targets=["gfx942", "gfx1100"], size_mb=128)
    build = subprocess.Popen(ROCPKG + ["build", "-a", str(artifacts), "-o", str(out), "--formats", "deb,rpm",
                                       "-j", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children = f"/proc/{build.pid}/task/{build.pid}/children"
    lines = []
    if when == "forked":
        while build.poll() is None and len(_listed(children)) < 2:
            pass
    else:
        for line in build.stderr:       # the progress lines: the first says a package is written
            lines.append(line)
            if line.startswith("[1/"):
                break
    workers = _listed(children)
    build.send_signal(signal.SIGINT)
    _, rest = build.communicate(timeout=LIMIT)
    stderr = "".join(lines) + rest

    assert len(workers) == 2, stderr
    assert build.returncode == 130, stderr
    assert "error: interrupted" in stderr and "Traceback" not in stderr and "Exception ignored" not in stderr
    assert _ended(workers)


def test_a_build_killed_outright_leaves_no_worker_behind(small_release, tmp_path):
    """SIGKILL of the build's process (the out-of-memory killer's way) ends its workers too:
    none is left waiting for a task forever, holding the caller's output pipes open."""
    build = subprocess.Popen(ROCPKG + ["build", "-a", str(small_release), "-o", str(tmp_path / "out"), "-j", "2"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = f"/proc/{build.pid}/task/{build.pid}/children"
    while build.poll() is None and len(_listed(children)) < 2:
        pass
    workers = _listed(children)
    build.kill()
    build.wait(timeout=LIMIT)
    ended = _ended(workers)
    for pid in [] if ended else workers:     # not left behind by a failing run either
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)

    assert len(workers) == 2
    assert ended


def _ended(pids: list[str], within: float = 10.0) -> bool:
    """Whether every process of `pids` has ended (gone, or a zombie), waiting up to `within`
    seconds: one whose descriptors are closed may still be on its way out."""
    deadline = time.monotonic() + within
    while True:
        alive = [pid for pid in pids if _state(pid) not in ("", "Z")]
        if not alive or time.monotonic() > deadline:
            return not alive
        time.sleep(0.05)


def _state(pid: str) -> str:
    """A process's state letter from /proc ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""


def _listed(children: str) -> list[str]:
    """The child processes /proc lists for a process (none once it has ended)."""
    try:
        with open(children) as listed:
            return listed.read().split()
    except FileNotFoundError:
        return []
