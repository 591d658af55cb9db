"""Fault points for the crash tests, with no hook in rocpkg: count the changes a process
makes to the file system (os.replace, rename, unlink, link, mkdir, rmdir: every step of
rocpkg's writers and of its rollback goes through them) and at the k-th one fail it with
an OSError (EIO, ENOSPC, EFBIG, EROFS: a disk going bad, full, a size limit, read-only),
or kill the process with SIGKILL there, as a crash would. Only the process that installs
them counts (a build's forked workers do not).

`python tests/faultpoint.py K MODE ROCPKG-ARGS...` (K a number or TEXT#N) runs the rocpkg command line with the
fault point installed; MODE is "kill" or an errno name."""
from __future__ import annotations

import errno
import os
import signal
import sys

CALLS = ("replace", "rename", "unlink", "link", "mkdir", "rmdir")


def install(at: int | str, mode: str = "kill") -> dict:
    """Fail (or kill at) the at-th change from now (1-based), or with at "TEXT#N" the N-th
    change of a path that contains TEXT (the path changed: a rename's target; never one of
rocpkg's journal). Returns the counter ({"n": changes so far}),
    which uninstall() takes."""
    text, _, nth = str(at).rpartition("#") if "#" in str(at) else ("", "", str(at))
    state = {"n": 0, "hits": 0, "pid": os.getpid(), "real": {}}
    for name in CALLS:
        real = state["real"][name] = getattr(os, name)

        def wrapped(*args, _real=real, _name=name, **kw):
            if os.getpid() == state["pid"]:
                state["n"] += 1
                target = str(args[1] if _name in ("replace", "rename", "link") else args[0])
                matched = not text or (text in target and "journal.d" not in target)
                state["hits"] += matched
                if matched and state["hits"] == int(nth):
                    if mode == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    code = getattr(errno, mode)
                    raise OSError(code, os.strerror(code), args[0] if args else None)
            return _real(*args, **kw)

        setattr(os, name, wrapped)
    return state


def uninstall(state: dict) -> None:
    for name, real in state["real"].items():
        setattr(os, name, real)


if __name__ == "__main__":
    counter = install(sys.argv[1], sys.argv[2])
    from rocpkg.cli.main import main

    status = main(sys.argv[3:])
    sys.stdout.flush()
    print(f"faultpoint: {counter['n']} changes", file=sys.stderr)
    os._exit(status)
