"""The build's worker processes: forked once, with the writers and their templates
loaded, they search the host ELFs while the plan is made, run the archive checks, then
write the packages."""
from __future__ import annotations

import importlib
import queue
import signal
import sys
from multiprocessing import get_context
from multiprocessing.pool import Pool

from rocpkg import model as m
from rocpkg.formats.registry import DEFAULT as DEFAULT_FORMATS, get as get_format



class Workers:
    """The build's worker processes (none for one job): the catalog's search of host data
    sections, the archive checks and then the packages run on them, each started when
    asked for. `rocpkg build` forks them first thing, so that they load the writers while
    it makes the plan; given the specs, the writers and their templates are loaded before
    the fork (no worker loads them again). They ignore Ctrl-C: the parent stops them (what
    they finished is kept by its state file, the rest is redone)."""

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
            self.pool = _Pool(self.size, initializer=_start_worker, initargs=(self.specs is not None, self.formats),
                              context=get_context("fork"))
            # set after the fork: the workers keep the default
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch_interval, self.SWITCH_INTERVAL))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self.stop()
            elif self.pool is not None:
                self.pool.close()
                self.pool.join()
        finally:
            if self._switch_interval is not None:
                sys.setswitchinterval(self._switch_interval)
                self._switch_interval = None

    def stop(self) -> None:
        """End the workers now, whatever they are writing (no temporary appears after)."""
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def starmap_async(self, function, arguments: list[tuple]):
        """Start function(*args) for each args on the workers; returns the call that
        waits for the results (in order). Without workers the work is done here, now."""
        if self.pool is None or len(arguments) < 2:
            return starmap_here(function, arguments)
        return self.pool.starmap_async(function, arguments).get

    def unordered(self, function, tasks: list):
        """function(task) for each task on the workers, results as they finish (as
        Pool.imap_unordered), all queued now, in order. A task's exception is raised where
        its result would be."""
        finished: queue.SimpleQueue = queue.SimpleQueue()

        def submit(task) -> None:
            self.pool.apply_async(function, (task,), callback=lambda answer: finished.put((True, answer)),
                                  error_callback=lambda exc: finished.put((False, exc)))

        def answers():
            for _ in tasks:
                ok, answer = finished.get()
                if not ok:
                    raise answer
                yield answer

        for task in tasks:
            submit(task)
        return answers()


class _Pool(Pool):
    """multiprocessing's Pool, but its worker-handler thread is not woken by every answer.
    Pool waits on the answers' pipe too (Pool._get_sentinels): an answer makes the pipe
    readable until the result-handler thread has read it, and the worker handler spins
    through its loop (a waitpid for each worker) meanwhile. This one wakes when a worker
    exits (the workers' sentinels) and when the pool's state or its last task changes (the
    change notifier), all it acts on: what multiprocessing's own ThreadPool waits on."""

    def _get_sentinels(self):
        return [self._change_notifier._reader]


def starmap_here(function, arguments: list[tuple]):
    """Workers.starmap_async's contract, done in this process, now."""
    results = [function(*args) for args in arguments]
    return lambda: results


def _start_worker(writers_loaded: bool, formats=DEFAULT_FORMATS) -> None:
    """Ignore Ctrl-C (the parent stops the workers); keep zstd's frame buffers
    (rocpkg.formats.compression); load what the tasks run, unless the parent did before forking:
    the writers of `formats` only. An .rpm build's workers do not import the .deb writer,
    python-debian and charset_normalizer before their first write; a format's writer is
    still imported when a task needs it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
