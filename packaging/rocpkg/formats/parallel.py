"""Work spread over the cores: one function over many items on forked worker processes
(verify's read-back and hashing, the RPM header signing of `repo`), each item's answer
in the items' order, so that the result is the same list as the serial loop's, whatever
the number of processes.

The function and its items travel to the workers by pickling (module-level functions,
plain data); the workers are forked, so they start with what this process imported.
Each worker holds one item at a time: memory grows with the number of processes, never
with the items' sizes. With one job (or one item) the loop runs here, in this process.
The workers are a forked_pool (the build's workers are one too): they leave Ctrl-C to this
process and end with it. A worker that ends while it holds an item (a signal, the
out-of-memory killer, a crash) fails the call with RocpkgWorkerLost (worker_lost), never a
wait for its answer."""
from __future__ import annotations

import contextlib
import os
import signal
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
    from concurrent.futures import as_completed

    with forked_pool(workers) as pool:
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


def forked_pool(workers: int, initializer: Callable | None = None, initargs: tuple = ()):
    """A ProcessPoolExecutor of `workers` forked processes, forked now (a pool of forked
    workers forks them all at its first call, before its own threads start). Each worker
    ignores Ctrl-C (the parent stops the pool), ends with this process (_end_with), then
    runs initializer(*initargs). A Ctrl-C while they are forked is held back until the
    forks are done (one landing in the interpreter's after-fork hooks is printed as ignored
    and lost), then stops them."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        try:
            pool.submit(int)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    except BaseException:
        stop_pool(pool)
        raise
    return pool


def stop_pool(pool) -> None:
    """End a forked_pool's workers now, whatever they are doing, and wait until they have.
    The executor's own table of its processes is read before any shutdown (which drops
    it): there is no public way to end running workers before Python 3.14
    (ProcessPoolExecutor.terminate_workers). They ignore only SIGINT; the executor's manager
    thread sees them end, fails what was pending and is joined here."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):
            process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


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


def _start_worker(parent: int, initializer: Callable | None, initargs: tuple) -> None:
    """A forked_pool worker's start: end with the parent, leave Ctrl-C to it (the mask
    the fork inherited unblocked), then the caller's initializer."""
    _end_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if initializer is not None:
        initializer(*initargs)


def _end_with(parent: int) -> None:
    """Have the kernel kill this worker when `parent` (the process that forked it) ends, on
    Linux (PR_SET_PDEATHSIG): a command killed outright (SIGKILL, the out-of-memory killer)
    leaves no worker behind waiting for work forever, holding its caller's output pipes
    open. What a build's worker was writing stays in OUT's staging area, which the next
    command that changes OUT sweeps."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:     # the parent ended before the request was made
        os._exit(1)
