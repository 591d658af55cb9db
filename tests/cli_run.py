"""Run the rocpkg command line as a user would: a child process of this interpreter."""
from __future__ import annotations

import subprocess
import sys

ROCPKG = [sys.executable, "-m", "rocpkg.cli"]


def rocpkg(*args, **kw) -> subprocess.CompletedProcess:
    """`rocpkg ARGS...` (any argument may be a Path), output captured as text."""
    return subprocess.run(ROCPKG + [str(a) for a in args], capture_output=True, text=True, **kw)
