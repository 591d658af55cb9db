"""What `rocpkg build` does before its first write, step by step, on one artifacts tree,
in the order the build does it: the imports, the worker processes (forked first: they
load the writers and search the host ELFs' data sections while the plan is made), the
config, the walk of the first target's dirs (and of the family dirs that route files to
it) and the device packages planned from them (rocpkg.plan.early_device_specs: the build
writes those while it makes the rest of the plan), and the look for their state (a
package without one is stale whatever its fingerprint: OUT of a new release has none).
Without such packages (or with one job) the first write waits for the whole plan. A
worker writes once its own imports are done (the writers, loaded after the fork, beside
the parent's walk) and a .deb's templates compiled: "a worker ready to write" is the first
of them, timed inside the workers, and the first write is the later of the two. What runs beside the
writes is timed after, apart: the walk of the other target and family dirs (their
packages join the ones written ahead), the rest of the plan (the generic dirs' walk,
which takes the device dirs as walked, and make_plan),
the checks a build must pass (rocpkg.gate: verify's plan checks, every packed kpack
archive; the host ELFs are searched by the writers that read them, as in a build) and the
fingerprints the workers record. Last, what a
worker imports after the fork (jinja2's share of it; python-debian's before the .deb writer
stopped importing it: on the 16-core machine these kept the first write 0.1-0.15 s after
the first package, jinja2 because that machine's copy had no bytecode and every worker
compiled it; now the first write comes 0.10 s in, as the floor's).
Run it in a fresh interpreter (imports are part of the figure):

    PYTHONPATH=packaging:. python3 benchmarks/bench_start.py ARTIFACTS [--config package.json] [-j N]

Target (issue 15): well under 0.2 s in all on TheRock's config.
"""
from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402


def _ready_to_write() -> float:
    """In a worker, queued at its fork: when it could start a .deb (the writers its
    initializer imports, the templates a .deb renders compiled). Same clock as the parent's."""
    from rocpkg import render

    env = render._environment()
    for name in render.WRITER_TEMPLATES["deb"]:
        env.get_template(name)
    return time.perf_counter()


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
    from rocpkg import host_code, plan  # noqa: F401 (as rocpkg.cli_build._cmd_build)
    from rocpkg import build, gate
    from rocpkg.cli_common import early_specs, load_config_of, load_plan
    from rocpkg.compression import usable_cores
    from rocpkg.fingerprint import code_fingerprint
    from rocpkg.model import BuildOptions
    from rocpkg.workers import Workers

    t = step("imports", t)
    options = argparse.Namespace(config=args.config, artifacts=args.artifacts, pkg_version=None, release=None,
                                 targets=None, formats="deb,rpm")
    with Workers(args.jobs or usable_cores(), hold=True) as workers:  # as `rocpkg build`
        t = step("fork the workers", t)
        pending = (workers.pool.starmap_async(_ready_to_write, [()] * workers.size, chunksize=1)
                   if workers.pool is not None else None)
        config = load_config_of(options)
        t = step("config", t)
        size = workers.size if workers.pool is not None else 1
        parts, walked = early_specs(options, config, enough=size)   # as `rocpkg build`
        first, later = [], []
        every_worker = None     # when the parts first held a package for each worker
        with tempfile.TemporaryDirectory() as out:   # a new release's OUT: no package has a state
            states = build._recorded_states(out, ("deb", "rpm"))
            for part in parts:     # as build_release: the first part's packages start at once
                stale_part = [spec for spec in part if build._up_to_date(spec, out, None, states) is None]
                if not first:
                    first = stale_part
                    t = step(f"first device dirs, {len(part)} packages", t)
                    first_write = time.perf_counter() - STARTED
                else:
                    seen = {(spec.format, spec.name) for spec in first + later}
                    later += [spec for spec in stale_part if (spec.format, spec.name) not in seen]
                if every_worker is None and len(first) + len(later) >= size:
                    every_worker = time.perf_counter() - STARTED
            walk = time.perf_counter() - t
            t = time.perf_counter()
            parts_done = t - STARTED
            plan = load_plan(options, config, embedded_objects=False, starmap_async=workers.starmap_async,
                             prior=walked(), writers=True)     # as `rocpkg build` scans
            rest = time.perf_counter() - t
            specs = [spec for found in plan.packages.values() for spec in found]
            t = time.perf_counter()
            stale = [spec for spec in specs if build._up_to_date(spec, out, None, states) is None]
            # the host ELFs of the packages written are searched by their writers (rocpkg.host_code)
            plan.host_search.hand_out({fe.source for spec in stale for fe in spec.files if fe.type == "file"})
            lookups = time.perf_counter() - t
        one_job = pending is None       # no workers: nothing is written ahead, the checks come first
        if one_job or not first:        # the first write waits for the whole plan
            marks.append(("device dirs (none written ahead)", walk))
            marks.append(("plan", rest))
            marks.append(("state lookups", lookups))
            first_write = parts_done + rest + lookups
        t = time.perf_counter()
        gate.refusals(plan, list(plan.packages), config=None, starmap_async=workers.starmap_async)
        checks = time.perf_counter() - t
        if one_job:                     # this process loads the writers itself, after the checks
            marks.append(("checks", checks))
            first_write += checks
            t = time.perf_counter()
            worker_ready = first_write + _ready_to_write() - t
        else:
            worker_ready = min(pending.get()) - STARTED
        t = time.perf_counter()
        code = code_fingerprint()
        options = BuildOptions(source_date_epoch=build.EPOCH_BASE)
        for spec in stale:
            build.package_fingerprint(spec, options, code)
        fingerprints = time.perf_counter() - t
    packages = sum(len(s) for s in plan.packages.values())
    for name, seconds in marks:
        print(f"{name:32}{seconds:8.3f} s")
    ahead = "none written ahead: one job" if one_job else f"{len(first)} + {len(later)} written ahead"
    print(f"{'packages handed out':32}{first_write:8.3f} s  ({packages} packages, {ahead})")
    if every_worker is not None and not one_job:
        print(f"{'one for every worker':32}{every_worker:8.3f} s  ({size} workers; the parts are walked one "
              "target at a time until then)")
    print(f"{'a worker ready to write':32}{worker_ready:8.3f} s  (its writers imported, a .deb's templates compiled)")
    print(f"{'before the first write':32}{max(first_write, worker_ready):8.3f} s")
    if first and not one_job:
        print(f"{'other device dirs, beside writes':32}{walk:8.3f} s  (their packages queued as the first run)")
        print(f"{'rest of the plan, beside writes':32}{rest + lookups:8.3f} s  (generic dirs, make_plan, state lookups)")
    if not one_job:
        print(f"{'checks, beside the writes':32}{checks:8.3f} s  (kpack archives, verify; the writers search host ELFs)")
    print(f"{'fingerprints, beside the writes':32}{fingerprints:8.3f} s  (taken by the workers, each after its package; summed here)")
    print(f"{'a worker imports':32}{_worker_imports()}")
    return 0


# what the writers pull in that costs (charset_normalizer: python-debian imports it whenever
# it is installed; on the 16-core machine 40 ms of a worker's 0.16-0.24 s)
LIBRARIES = ("jinja2", "debian.deb822", "charset_normalizer")


def _worker_imports() -> str:
    """What a worker imports after the fork, in all and the LIBRARIES' part of it, from a
    fresh interpreter's -X importtime (the parent's modules imported first, as at the fork):
    on 16 cores the workers' readiness, not the parent, decided the first write."""
    import subprocess

    parent = "import rocpkg.cli_build, rocpkg.plan, rocpkg.host_code, rocpkg.workers"
    worker = "from kpack import check, placement; from rocpkg import deb, host_code, releases, render, rpm"
    run = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          f"{parent}; import sys; sys.stderr.write('--\\n'); {worker}"],
                         capture_output=True, text=True, check=True)
    found, total = {}, 0.0
    for line in run.stderr.split("--\n", 1)[1].splitlines():
        _, cumulative, name = line.split("|")
        seconds = int(cumulative) / 1e6
        total += seconds if len(name) - len(name.lstrip()) == 1 else 0.0     # a top-level import
        if name.strip() in LIBRARIES:
            found[name.strip()] = seconds
    top = ", ".join(f"{name} {seconds:.3f}" for name, seconds in found.items())
    return f"{total:8.3f} s  (of which {top})"


if __name__ == "__main__":
    sys.exit(main())
