"""The build's worker processes: forked once, with the writers and their templates
loaded, they search the host ELFs while the plan is made, run the archive checks, then
write the packages. A worker that ends while it holds work (killed by a signal or the
out-of-memory killer, crashed) ends the build with RocpkgWorkerLost
(formats.parallel.worker_lost), never a wait for an answer that cannot come."""
from __future__ import annotations

import importlib
import sys

from rocpkg import model as m
from rocpkg.formats.parallel import forked_pool, stop_pool, worker_lost
from rocpkg.formats.registry import DEFAULT as DEFAULT_FORMATS, get as get_format


class Workers:
    """The build's worker processes (none for one job): the catalog's search of host data
    sections, the archive checks and then the packages run on them, each started when
    asked for. `rocpkg build` forks them first thing, so that they load the writers while
    it makes the plan; given the specs, the writers and their templates are loaded before
    the fork (no worker loads them again). They ignore Ctrl-C: the parent stops them (what
    they finished is kept by its state file, the rest is redone).

    They are a forked_pool (rocpkg.formats.parallel: a ProcessPoolExecutor), whose manager
    thread watches each worker's exit: a worker gone while work is pending fails every
    pending call at once (raised here as RocpkgWorkerLost), where multiprocessing's Pool
    would start a new worker and leave the lost task's answer waited for forever."""

    # The pool's threads in this process hand each task to a worker and take each answer
    # back, and each needs the GIL for it; a thread waiting for the GIL while the main
    # thread plans or records gets it only after the switch interval (5 ms by default), so
    # the build runs with a shorter one.
    SWITCH_INTERVAL = 0.0005

    def __init__(self, size: int, specs: list[m.PackageSpec] | None = None, formats=DEFAULT_FORMATS):
        self.size, self.specs, self.pool = size, specs, None
        self.formats = tuple(formats)   # the writers each worker loads (when specs are not given)
        self._switch_interval: float | None = None

    def __enter__(self) -> "Workers":
        if self.size > 1:
            if self.specs is not None:
                _load_writers(self.specs)
            # forked now, so that they load the writers while the plan is made
            self.pool = forked_pool(self.size, _start_worker, (self.specs is not None, self.formats))
            # set after the fork: the workers keep the default
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch_interval, self.SWITCH_INTERVAL))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self.stop()
            elif self.pool is not None:
                self.pool.shutdown(wait=True)
                self.pool = None
        finally:
            if self._switch_interval is not None:
                sys.setswitchinterval(self._switch_interval)
                self._switch_interval = None

    def stop(self) -> None:
        """End the workers now, whatever they are writing (no temporary appears after)."""
        if self.pool is None:
            return
        pool, self.pool = self.pool, None
        stop_pool(pool)

    def starmap_async(self, function, arguments: list[tuple]):
        """Start function(*args) for each args on the workers; returns the call that
        waits for the results (in order). Without workers the work is done here, now."""
        if self.pool is None or len(arguments) < 2:
            return starmap_here(function, arguments)
        with _lost():
            futures = [self.pool.submit(function, *args) for args in arguments]

        def results() -> list:
            with _lost():
                return [future.result() for future in futures]
        return results

    def unordered(self, function, tasks: list):
        """function(task) for each task on the workers, results as they finish (as
        Pool.imap_unordered), all queued now, in order. A task's exception is raised where
        its result would be."""
        from concurrent.futures import as_completed

        with _lost():
            futures = [self.pool.submit(function, task) for task in tasks]

        def answers():
            for future in as_completed(futures):
                with _lost():
                    answer = future.result()
                yield answer
        return answers()


def _lost():
    """A worker that ended while work was pending, said as RocpkgWorkerLost."""
    return worker_lost("nothing it was writing was published: run the build again")


def starmap_here(function, arguments: list[tuple]):
    """Workers.starmap_async's contract, done in this process, now."""
    results = [function(*args) for args in arguments]
    return lambda: results


def _start_worker(writers_loaded: bool, formats=DEFAULT_FORMATS) -> None:
    """After forked_pool's own start (Ctrl-C left to the parent, the worker ending with
    it): keep zstd's frame buffers (rocpkg.formats.compression); load what the tasks run,
    unless the parent did before forking: the writers of `formats` only. An .rpm build's
    workers do not import the .deb writer, python-debian and charset_normalizer before
    their first write; a format's writer is still imported when a task needs it."""
    from rocpkg.formats import compression

    compression.keep_frame_buffers()
    if not writers_loaded:
        from kpack import check, placement  # noqa: F401
        from rocpkg.inputs import host_code  # noqa: F401  (the host search)
        from rocpkg.builder import packing

        for fmt in formats:
            importlib.import_module(get_format(fmt).writer_module)


def _load_writers(specs: list[m.PackageSpec]) -> None:
    """Import the writers and compile the templates the specs use (rocpkg.formats.render)."""
    from rocpkg.formats import render

    used = sorted({spec.format for spec in specs})
    for fmt in used:
        importlib.import_module(get_format(fmt).writer_module)
    render.compile_templates(specs, [t for fmt in used for t in get_format(fmt).templates])
