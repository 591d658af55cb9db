"""Run the rocpkg command line as a user would: a child process of this interpreter."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROCPKG = [sys.executable, "-m", "rocpkg.cli"]


def rocpkg(*args, **kw) -> subprocess.CompletedProcess:
    """`rocpkg ARGS...` (any argument may be a Path), output captured as text."""
    return subprocess.run(ROCPKG + [str(a) for a in args], capture_output=True, text=True, **kw)


def snapshot(out: Path) -> dict[str, tuple] | None:
    """Every path under OUT with its type, mode and bytes or link target (None: no OUT),
    to show that a refused run left OUT as it was."""
    if not os.path.lexists(out):
        return None
    found = {}
    for dirpath, dirnames, filenames in os.walk(out):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, out)
            if stat.S_ISREG(st.st_mode):
                found[rel] = ("file", st.st_mode, Path(full).read_bytes())
            elif stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(full))
            else:
                found[rel] = ("dir", st.st_mode)
    return found


def refusal_lines(result: subprocess.CompletedProcess, needles=()) -> list[str]:
    """The `error:` lines of a run that must have been refused: exit 2, no traceback, each
    problem once, and every needle named by some error line."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors, output
    assert len(errors) == len(set(errors)), f"a problem reported twice:\n{output}"
    for needle in needles:
        assert any(needle in line for line in errors), f"no error line names {needle!r}:\n{output}"
    return errors
