"""The device code a host ELF still carries (a fat binary the kpack split left, bundles in
its data sections), searched beside the catalog's walk.

Why apart from the walk: a release's host data sections are GiBs, and searching the
largest alone takes longer than the rest of the catalog. So the catalog hands the host
ELFs to the search as its walk lists them, to the build's worker processes when there are
some (they search while the walk and the planner go on); the plan is returned once the
search is in (rocpkg.plan.make), so the build's checks see every finding before a package
is written.
Without workers it runs on threads (kpack.memsearch lets them run) before the catalog is
returned.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os

from kpack.errors import KpackFormatError

# an artifact file is opened read-only, never through a symlink, never blocking on a FIFO
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


class HostSearch:
    """The search of the host ELFs' data sections, fed by the catalog's walk (add) as it
    finds them. With worker processes (starmap_async) a batch starts as soon as it has
    BATCH files, so the workers search while the walk goes on; without them every file is
    searched on threads once the walk is over (finish). finish() returns the call that
    waits for the search, adds what it found to the facts and returns the problems (a file
    replaced or unreadable since the walk). Each file is opened again, no symlink
    followed, and must be the one the walk read (its identity)."""

    BATCH = 2   # one file would be searched here, not on the workers (Workers.starmap_async)

    def __init__(self, embedded_objects: bool, starmap_async=None):
        self.embedded_objects, self.starmap_async = embedded_objects, starmap_async
        self.queued: list[tuple[str, tuple[int, int]]] = []    # (path, identity) not started yet
        self.started: list[tuple[list[str], object]] = []     # (paths, the call that waits for them)

    def add(self, found: list[tuple[str, tuple[int, int]]]) -> None:
        """More host ELFs the walk read: (path, identity)."""
        self.queued.extend(found)
        if self.starmap_async is not None and len(self.queued) >= self.BATCH:
            self._start()

    def _start(self) -> None:
        batch, self.queued = self.queued, []
        arguments = [(source, identity, self.embedded_objects) for source, identity in batch]
        if self.starmap_async is not None:
            waiter = self.starmap_async(found_in, arguments)
        else:
            read = _on_threads(arguments)
            waiter = lambda: read  # noqa: E731
        self.started.append(([source for source, _ in batch], waiter))

    def abandon(self) -> None:
        """Wait for the batches started, their answers (and a failure of theirs) unused:
        the caller reports its own error; start no more."""
        started, self.started, self.queued = self.started, [], []
        for _sources, waiter in started:
            with contextlib.suppress(Exception):
                waiter()

    def finish(self, facts: dict):
        """Start what is left; the call that waits for every file (see the class)."""
        if self.queued:
            self._start()
        started, self.started = self.started, []

        def settle() -> list[tuple[str, str]]:
            problems = []
            for sources, waiter in started:
                for source, (changes, problem) in zip(sources, waiter()):
                    if problem is not None:
                        problems.append(problem)
                    else:
                        facts[source] = dataclasses.replace(facts[source], **changes)
            return problems

        return settle


def found_in(source: str, identity: tuple[int, int], embedded_objects: bool):
    """(the facts' new fields, None) or (None, the problem) for one host ELF."""
    from rocpkg.formats.preflight import printable

    try:
        fd = os.open(source, FILE_FLAGS)
    except OSError as exc:
        return None, (printable(source), f"cannot be read: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != identity:
            return None, (printable(source), "was replaced while being read (not the file the walk read)")
        try:
            return device_code(fh, embedded_objects), None
        except OSError as exc:
            return None, (printable(source), f"cannot be read: {exc.strerror or exc}")


def device_code(fh, embedded_objects: bool = True) -> dict:
    """The FileFacts fields of the device code a host ELF still carries (read through
    this open file): host_code, or device_error for a malformed fat binary."""
    from kpack.placement import host_device_code

    try:
        found = host_device_code(f"/proc/self/fd/{fh.fileno()}", embedded_objects=embedded_objects)
    except KpackFormatError as exc:
        return _fields(error=why(exc))
    return _fields(found)


def _fields(found=(), error: str = "") -> dict:
    """The FileFacts fields of what a host ELF's search found (kpack.placement.Finding)."""
    return {"host_code": tuple((f.kind, f.describe()) for f in found), "device_error": error}


def why(exc: KpackFormatError) -> str:
    """The error without its file name: the problem's `where` names the artifact file."""
    return ": ".join(part for part in (exc.location, exc.what) if part)


def _on_threads(arguments: list[tuple]) -> list:
    from concurrent.futures import ThreadPoolExecutor

    from rocpkg.formats.compression import usable_cores

    if len(arguments) < 2:
        return [found_in(*args) for args in arguments]
    with ThreadPoolExecutor(min(usable_cores(), len(arguments), 16)) as pool:
        return list(pool.map(lambda args: found_in(*args), arguments))
