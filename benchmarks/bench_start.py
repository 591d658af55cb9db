"""What `rocpkg build` does before its first write, step by step, on one artifacts tree,
in the order the build does it: the imports, the worker processes (forked first: they
load the writers and search the host ELFs' data sections while the plan is made), the
plan (config + catalog walk) and the look for each package's state (a package without one
is stale whatever its fingerprint: OUT of a new release has none). The checks a build
must pass (rocpkg.gate: verify's plan checks, every packed kpack archive, the host
search's results) and the fingerprints it records (each worker takes those of the
packages it writes) run while the packages are written; they are timed after, apart.
Run it in a fresh interpreter (imports are part of the figure):

    PYTHONPATH=packaging:. python3 benchmarks/bench_start.py ARTIFACTS [--config package.json] [-j N]

Target (issue 15): well under 0.2 s in all on TheRock's config.
"""
from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts")
    parser.add_argument("--config", default=None)
    parser.add_argument("-j", "--jobs", type=int, default=0, help="workers (default: every core)")
    args = parser.parse_args()
    marks = [("interpreter to main", time.perf_counter() - STARTED)]

    def step(name: str, since: float) -> float:
        now = time.perf_counter()
        marks.append((name, now - since))
        return now

    t = time.perf_counter()
    import tempfile

    import rocpkg.cli_build  # noqa: F401 (what `rocpkg build` imports before its workers fork)
    from rocpkg import build, gate
    from rocpkg.cli_common import load_plan
    from rocpkg.compression import usable_cores
    from rocpkg.model import BuildOptions
    from rocpkg.workers import Workers

    t = step("imports", t)
    with Workers(args.jobs or usable_cores(), hold=True) as workers:  # as `rocpkg build`
        t = step("fork the workers", t)
        plan = load_plan(argparse.Namespace(config=args.config, artifacts=args.artifacts, pkg_version=None,
                                            release=None, targets=None, formats="deb,rpm"),
                         embedded_objects=False, starmap_async=workers.starmap_async)  # as `rocpkg build` scans
        t = step("plan (config + catalog walk)", t)
        specs = [spec for found in plan.packages.values() for spec in found]
        with tempfile.TemporaryDirectory() as out:   # a new release's OUT: no package has a state
            t = time.perf_counter()
            states = build._recorded_states(out, plan.packages)
            stale = [spec for spec in specs if build._up_to_date(spec, out, None, states) is None]
            t = step("state lookups", t)
        first_write = time.perf_counter() - STARTED
        gate.refusals(plan, list(plan.packages), config=None, starmap_async=workers.starmap_async)
        checks = time.perf_counter() - t
        t = time.perf_counter()
        code = build._code_fingerprint()
        options = BuildOptions(source_date_epoch=build.EPOCH_BASE)
        for spec in stale:
            build.package_fingerprint(spec, options, code)
        fingerprints = time.perf_counter() - t
    packages = sum(len(s) for s in plan.packages.values())
    for name, seconds in marks:
        print(f"{name:32}{seconds:8.3f} s")
    print(f"{'before the first write':32}{first_write:8.3f} s  ({packages} packages)")
    print(f"{'checks, beside the writes':32}{checks:8.3f} s  (host search, kpack archives, verify)")
    print(f"{'fingerprints, beside the writes':32}{fingerprints:8.3f} s  (taken by the workers, each after its package; summed here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
