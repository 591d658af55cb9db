"""How long the plan of TheRock's 81-entry package.json takes for 3 targets (target < 2 s).

Prints the time of each stage (config, catalog, plan) and the total, plus the same
artifacts scanned with a bare os.walk as the reference floor for the catalog.

    python benchmarks/bench_plan.py [--config PATH] [--targets gfx942,gfx1100,gfx1101] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "packaging"), str(ROOT)]

from rocpkg.inputs.catalog import scan  # noqa: E402
from rocpkg.inputs.config import load_config  # noqa: E402
from rocpkg.plan.make import make_plan  # noqa: E402
from rocpkg.inputs.sample import make_sample_artifacts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT.parent / "shared" / "fixtures" / "therock" / "package.json"))
    parser.add_argument("--targets", default="gfx942,gfx1100,gfx1101")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = load_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = os.path.join(tmp, "artifacts")
        make_sample_artifacts(artifacts, config, targets=args.targets.split(","))
        best = {"config": 1e9, "catalog": 1e9, "plan": 1e9, "total": 1e9, "os.walk": 1e9}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            cfg = load_config(args.config)
            t1 = time.perf_counter()
            catalog = scan(artifacts)
            t2 = time.perf_counter()
            plan = make_plan(cfg, catalog)
            t3 = time.perf_counter()
            for _root, _dirs, files in os.walk(artifacts):
                for f in files:
                    os.lstat(os.path.join(_root, f))
            t4 = time.perf_counter()
            for key, value in (("config", t1 - t0), ("catalog", t2 - t1), ("plan", t3 - t2), ("total", t3 - t0),
                               ("os.walk", t4 - t3)):
                best[key] = min(best[key], value)
        packages = sum(len(v) for v in plan.packages.values())
        print(f"{len(cfg.definitions)} definitions, {len(plan.targets)} targets -> {packages} packages (both formats)")
        for key, value in best.items():
            print(f"  {key:8s} {value * 1000:8.1f} ms")
        print(f"  plan total vs target 2 s: {best['total'] / 2:.3f}x; catalog vs bare os.walk+lstat: "
              f"{best['catalog'] / max(best['os.walk'], 1e-9):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
