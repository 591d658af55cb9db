"""Work spread over the cores: one function over many items on forked worker processes
(verify's read-back and hashing, the RPM header signing of `repo`), each item's answer
in the items' order, so that the result is the same list as the serial loop's, whatever
the number of processes.

The function and its items travel to the workers by pickling (module-level functions,
plain data); the workers are forked, so they start with what this process imported.
Each worker holds one item at a time: memory grows with the number of processes, never
with the items' sizes. With one job (or one item) the loop runs here, in this process.
A worker that ends while it holds an item (a signal, the out-of-memory killer, a crash)
fails the call with RocpkgWorkerLost (worker_lost), never a wait for its answer."""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterable, Iterator, TypeVar

from rocpkg.errors import RocpkgWorkerLost
from rocpkg.formats.compression import usable_cores

T = TypeVar("T")
R = TypeVar("R")


def jobs_for(jobs: int | None) -> int:
    """The processes a command runs on: `jobs` (-j) when given, else the usable cores."""
    return max(1, jobs or usable_cores())


def spread(function: Callable[..., R], items: Iterable[tuple], jobs: int | None,
           size: Callable[[tuple], int] | None = None, ordered: bool = True) -> Iterator[R]:
    """function(*item) for each item, on up to `jobs` forked processes (jobs_for); an
    item's exception is raised where its answer would be. The items are all handed out at
    once, the largest by `size` first (the last to start should be small: a large one would
    end alone); the answers are yielded in the items' order, or with ordered false as they
    come (whoever acts on each answer at once holds none waiting)."""
    items = list(items)
    workers = min(jobs_for(jobs), len(items))
    if workers <= 1:
        for item in items:
            yield function(*item)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    with ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=_quiet) as pool:
        order = sorted(range(len(items)), key=lambda i: -size(items[i])) if size else range(len(items))
        futures: list = [None] * len(items)
        for i in order:
            futures[i] = pool.submit(function, *items[i])
        try:
            for future in (futures if ordered else as_completed(futures)):
                with worker_lost("run the command again"):
                    answer = future.result()
                yield answer
        finally:
            for future in futures:
                future.cancel()


@contextlib.contextmanager
def worker_lost(then: str):
    """A ProcessPoolExecutor's worker that ended while work was pending (BrokenProcessPool),
    raised as RocpkgWorkerLost, its message ending with `then` (what the user does next)."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except BrokenProcessPool:
        raise RocpkgWorkerLost("a worker process ended while it held work (killed by a signal or the "
                               f"out-of-memory killer, or crashed); {then}") from None


def file_size(path: str) -> int:
    """A file's size for spread's order (0 when it cannot be stat'ed: the work reports it)."""
    try:
        return os.stat(path, follow_symlinks=False).st_size
    except OSError:
        return 0


def _quiet() -> None:
    """A worker leaves Ctrl-C to its parent (which stops the pool)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
