"""Where the end of a build goes: `rocpkg build` with each package's start and end in its
worker, the host search's verdict, the moves into OUT and the end of main, on one clock.
It printed the 16-core machine's story of issue 15: the 419 MiB host library started once
the plan was whole, 0.33 s in, and ended the build alone; written ahead, it starts at 0.12 s.

    PYTHONPATH=packaging:. python3 benchmarks/build_timeline.py build -a ARTIFACTS -o OUT -j 16 -q
"""
from __future__ import annotations

import json
import os
import sys
import time

T0 = time.time()

from rocpkg.builder import packing  # noqa: E402
from rocpkg.builder import run as build  # noqa: E402

LOG = f"/tmp/build-timeline-{os.getpid()}.jsonl"
EVENTS: list[tuple[str, float]] = []
MOVES: list[float] = []


_BUILD_ONE, _TAKE, _RECORD, _COLLECT = packing.build_one, build._HostVerdict.take, build._record, build._collect


def timed_build_one(task):
    """packing.build_one, its start and end logged (module level: the pool pickles it by name)."""
    started = time.time()
    try:
        return _BUILD_ONE(task)
    finally:
        with open(LOG, "a") as fh:
            fh.write(json.dumps({"name": task.spec.name, "mib": task.spec.payload_size >> 20,
                                 "threads": task.options.threads, "s": started - T0, "e": time.time() - T0}) + "\n")


def _took(self, answer):
    done = _TAKE(self, answer)
    if done:
        EVENTS.append(("verdict", time.time() - T0))
    return done


def _recorded(*args, **kwargs):
    done = _RECORD(*args, **kwargs)
    MOVES.append(time.time() - T0)
    return done


def _collected(*args, **kwargs):
    try:
        return _COLLECT(*args, **kwargs)
    finally:
        EVENTS.append(("collect end", time.time() - T0))


def _patch() -> None:
    """Log what the build does, around its own functions (the workers fork after this)."""
    packing.build_one, build._HostVerdict.take, build._record, build._collect = (
        timed_build_one, _took, _recorded, _collected)


def main() -> int:
    _patch()
    from rocpkg.cli.main import main as rocpkg

    status = rocpkg(sys.argv[1:])
    EVENTS.append(("main end", time.time() - T0))
    if not os.path.exists(LOG):
        return status
    with open(LOG) as fh:
        rows = [json.loads(line) for line in fh]
    os.unlink(LOG)
    print("events:", ", ".join(f"{name} {t:.3f} s" for name, t in EVENTS))
    if MOVES:
        print(f"moves into OUT: {len(MOVES)}, from {min(MOVES):.3f} to {max(MOVES):.3f} s")
    print("the biggest packages:")
    for r in sorted(rows, key=lambda r: -r["mib"])[:8]:
        print(f"  {r['name'][:40]:40} {r['mib']:6} MiB  {r['threads']} threads  {r['s']:.3f} -> {r['e']:.3f} s")
    print("the last to finish:")
    for r in sorted(rows, key=lambda r: -r["e"])[:5]:
        print(f"  {r['name'][:40]:40} {r['mib']:6} MiB  {r['threads']} threads  {r['s']:.3f} -> {r['e']:.3f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
