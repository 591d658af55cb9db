"""Where a build's CPU goes, package by package, against the floor's for the same package:
`rocpkg build` and bench_build.py's per-package floor (`floor deb-full`/`rpm-full`) run as
children, each package's CPU taken inside the process that writes it (process_time around
the writer), then compared by kind and size. It showed issue 15's 16-core story of stop 31:
the packages end together, and what a .deb build spends over the floor is spread (5% in the
packages, the workers' imports, a later start and a tail), while two threads for a host
library on busy cores cost 11-20% more CPU than one.

    PYTHONPATH=packaging:. python3 benchmarks/package_cpu.py --artifacts ARTIFACTS --jobs 16 --formats deb
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _log_row(log: str, row: dict) -> None:
    with open(log, "a") as fh:
        fh.write(json.dumps(row) + "\n")


_CHILD: dict = {}   # in a child: the log, its start, the writer the timed one wraps


def timed_build_one(task):
    """packing.build_one, its CPU logged (module level: the pool pickles it by name)."""
    begun, cpu = time.time(), time.process_time()
    try:
        return _CHILD["write"](task)
    finally:
        _log_row(_CHILD["log"], {"name": task.spec.name, "format": task.spec.format, "kind": task.spec.kind,
                                 "bytes": task.spec.payload_size, "threads": task.options.threads,
                                 "cpu": time.process_time() - cpu, "start": begun - _CHILD["started"],
                                 "end": time.time() - _CHILD["started"]})


def timed_floor(job):
    """bench_build.floor_package, its CPU logged."""
    pkg = job[0]
    begun, cpu = time.time(), time.process_time()
    try:
        return _CHILD["write"](job)
    finally:
        _log_row(_CHILD["log"], {"name": pkg["name"], "format": pkg["format"], "kind": pkg["kind"],
                                 "bytes": pkg["bytes"], "threads": 1, "cpu": time.process_time() - cpu,
                                 "start": begun - _CHILD["started"], "end": time.time() - _CHILD["started"]})


def _child_rocpkg(argv: list[str]) -> None:
    """`rocpkg build ARGV`, each package's CPU taken in its worker (the workers fork after
    packing.build_one is wrapped)."""
    from rocpkg.builder import packing
    from rocpkg.cli.main import main

    _CHILD["write"], packing.build_one = packing.build_one, timed_build_one
    main(argv)


def _child_floor(fmt: str, jobs: int, plan_json: str, out: str) -> None:
    """bench_build.py's full floor, each package's CPU taken in the process that writes it."""
    sys.path.insert(0, HERE)
    import bench_build

    _CHILD["write"], bench_build.floor_package = bench_build.floor_package, timed_floor
    bench_build.floor_child(fmt, f"{fmt}-full", jobs, plan_json, out)


def _run(argv: list[str], log: str) -> dict:
    """One child: wall from before its start, its own and its workers' CPU, its packages."""
    started = time.time()
    done = subprocess.run([sys.executable, __file__, "--child", log, repr(started), *argv],
                          capture_output=True, text=True)
    wall = time.time() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(argv[:4])} failed:\n{done.stderr[-3000:]}")
    cpu = json.loads(done.stdout.strip().splitlines()[-1])
    with open(log) as fh:
        rows = [json.loads(line) for line in fh]
    os.unlink(log)
    return {"wall": wall, **cpu, "rows": rows}


def _category(row: dict) -> str:
    mib = row["bytes"] >> 20
    size = "< 1 MiB" if mib < 1 else "1-63 MiB" if mib < 64 else "64-255 MiB" if mib < 256 else ">= 256 MiB"
    return f"{row['kind']:8} {size:>10}"


def report(fmt: str, rocpkg: dict, floor: dict) -> list[str]:
    lines = []
    for label, run in (("rocpkg", rocpkg), ("floor", floor)):
        rows = run["rows"]
        biggest = max(rows, key=lambda r: r["bytes"])
        lines.append(f"{fmt} {label:6} wall {run['wall']:6.3f} s  parent cpu {run['parent']:5.2f} s  workers {run['workers']:6.2f} s "
                     f"(packages {sum(r['cpu'] for r in rows):6.2f})  first start {min(r['start'] for r in rows):.3f}  "
                     f"last end {max(r['end'] for r in rows):.3f}  biggest {biggest['bytes'] >> 20} MiB "
                     f"t{biggest['threads']} {biggest['start']:.3f}->{biggest['end']:.3f} ({biggest['cpu']:.2f} s cpu)")
    floor_cpu = {r["name"]: r["cpu"] for r in floor["rows"]}
    by_category: dict[str, list[float]] = {}
    for row in rocpkg["rows"]:
        if row["name"] in floor_cpu:
            pair = by_category.setdefault(_category(row), [0, 0.0, 0.0])
            pair[0] += 1
            pair[1] += row["cpu"]
            pair[2] += floor_cpu[row["name"]]
    lines.append(f"{'':4}{'kind, payload':20} {'packages':>8} {'rocpkg cpu s':>13} {'floor cpu s':>12} {'ratio':>6}")
    for category in sorted(by_category):
        count, mine, theirs = by_category[category]
        lines.append(f"{'':4}{category:20} {count:8} {mine:13.2f} {theirs:12.2f} {mine / theirs if theirs else 0:6.2f}")
    return lines


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _CHILD["log"], _CHILD["started"] = sys.argv[2], float(sys.argv[3])
        kind, *rest = sys.argv[4:]
        if kind == "rocpkg":
            _child_rocpkg(rest)
        else:
            _child_floor(rest[0], int(rest[1]), rest[2], rest[3])
        own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        sys.stdout.flush()
        print(json.dumps({"parent": own.ru_utime + own.ru_stime, "workers": workers.ru_utime + workers.ru_stime}))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--formats", default="deb,rpm")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("SOURCE_DATE_EPOCH", "1700000000")
    with tempfile.TemporaryDirectory(prefix="package-cpu-") as scratch:
        plan_json = os.path.join(scratch, "plan.json")
        with open(plan_json, "w") as fh:
            subprocess.run([sys.executable, "-m", "rocpkg.cli", "plan", "-a", args.artifacts, "--json"], stdout=fh,
                           check=True)
        for round_ in range(args.rounds):
            for fmt in args.formats.split(","):
                out = os.path.join(scratch, "out")
                rocpkg = _run(["rocpkg", "build", "-a", args.artifacts, "-o", out, "--formats", fmt, "-j",
                               str(args.jobs), "-q"], os.path.join(scratch, "log"))
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                floor = _run(["floor", fmt, str(args.jobs), plan_json, out], os.path.join(scratch, "log"))
                shutil.rmtree(out, ignore_errors=True)
                print(f"round {round_ + 1}: rocpkg / floor {fmt}-full = {rocpkg['wall'] / floor['wall']:.2f}x")
                print("\n".join(report(fmt, rocpkg, floor)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
