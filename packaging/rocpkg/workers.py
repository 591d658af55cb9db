"""The build's worker processes: forked once, with the writers and their templates
loaded, they check the archives and then write the packages."""
from __future__ import annotations

import signal
from multiprocessing import get_context

from rocpkg import model as m


class Workers:
    """The build's worker processes (none for one job): the catalog's search of host data
    sections, the archive checks and then the packages run on them. `rocpkg build` forks
    them first thing, so that they load the writers while it makes the plan; given the
    specs, the writers and their templates are loaded before the fork (no worker loads
    them again). They ignore Ctrl-C: the parent stops them (what they finished is kept
    by its state file, the rest is redone)."""

    def __init__(self, size: int, specs: list[m.PackageSpec] | None = None):
        self.size, self.specs, self.pool = size, specs, None

    def __enter__(self) -> "Workers":
        if self.size > 1:
            if self.specs is not None:
                _load_writers(self.specs)
            self.pool = get_context("fork").Pool(self.size, initializer=_start_worker,
                                                 initargs=(self.specs is not None,))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.stop()
        elif self.pool is not None:
            self.pool.close()
            self.pool.join()

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


def starmap_here(function, arguments: list[tuple]):
    """Workers.starmap_async's contract, done in this process, now."""
    results = [function(*args) for args in arguments]
    return lambda: results


def _start_worker(writers_loaded: bool) -> None:
    """Ignore Ctrl-C (the parent stops the workers); keep zstd's frame buffers
    (rocpkg.compression); load what the tasks run, unless the parent did before forking."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from rocpkg import compression

    compression.keep_frame_buffers()
    if not writers_loaded:
        from kpack import check, placement  # noqa: F401
        from rocpkg import deb, host_code, releases, rpm  # noqa: F401  (rocpkg.build: the first task)


def _load_writers(specs: list[m.PackageSpec]) -> None:
    """Import the writers and compile the templates the specs use (rocpkg.render)."""
    from rocpkg import deb, render, rpm  # noqa: F401

    render.compile_templates(specs)
