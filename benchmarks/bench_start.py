"""What `rocpkg build` does before its first write, step by step, on one artifacts tree:
the imports the build needs, the plan (config + catalog scan), the build gate (verify's
plan checks and every packed kpack archive's structure) and the fingerprints that decide
what is stale. Run it in a fresh interpreter (imports are part of the figure):

    PYTHONPATH=packaging:. python3 benchmarks/bench_start.py ARTIFACTS [--config package.json]

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
    args = parser.parse_args()
    marks = [("interpreter to main", time.perf_counter() - STARTED)]

    def step(name: str, since: float) -> float:
        now = time.perf_counter()
        marks.append((name, now - since))
        return now

    t = time.perf_counter()
    from rocpkg import build, cli_build, deb, gate, rpm  # noqa: F401  (what a build imports)
    from rocpkg.cli_common import load_plan
    from rocpkg.model import BuildOptions

    t = step("imports", t)
    plan = load_plan(argparse.Namespace(config=args.config, artifacts=args.artifacts, pkg_version=None,
                                        release=None, targets=None, formats="deb,rpm"),
                     embedded_objects=False)  # as `rocpkg build` scans
    t = step("plan (config + catalog)", t)
    gate.refusals(plan, list(plan.packages), config=None)
    t = step("gate (verify + kpack archives)", t)
    code = build._code_fingerprint()
    options = BuildOptions(source_date_epoch=build.EPOCH_BASE)
    for specs in plan.packages.values():
        for spec in specs:
            build.package_fingerprint(spec, options, code)
    step("fingerprints", t)
    packages = sum(len(s) for s in plan.packages.values())
    for name, seconds in marks:
        print(f"{name:32}{seconds:8.3f} s")
    print(f"{'before the first write':32}{time.perf_counter() - STARTED:8.3f} s  ({packages} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
