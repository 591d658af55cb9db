"""The device code a host ELF still carries (a fat binary the kpack split left, bundles in
its data sections), searched after the catalog's walk.

Why apart from the walk: a release's host data sections are GiBs, and searching the
largest alone takes longer than the rest of the catalog. A build's writers read each
host ELF they
pack anyway, so the search rides on that read (HostScan: kpack.placement.StreamedSearch
over the chunks as they pass), and only the host ELFs no writer of the build reads (its
packages up to date, another shard's) are read for it, on the build's worker processes.
Without workers it runs on threads (kpack.memsearch lets them run) before the catalog is
returned.
"""
from __future__ import annotations

import dataclasses
import os

from kpack.errors import KpackFormatError

# an artifact file is opened read-only, never through a symlink, never blocking on a FIFO
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def search(facts: dict, sources: list[str], embedded_objects: bool, starmap_async=None, *,
           writers: bool = False) -> "HostSearch":
    """The search of each host ELF in `sources`, started now (writers=False) or once the
    build says which of them its writers read (HostSearch.hand_out). Calling the returned
    HostSearch waits for it, adds what it found to `facts` and returns the problems (a
    file replaced or unreadable since the walk). Each file is opened again, no symlink
    followed, and must be the one the walk read (its identity in facts)."""
    found = HostSearch(facts, sources, embedded_objects, starmap_async)
    if not writers:
        found.hand_out(())
    return found


class HostSearch:
    """The host ELFs' search: the part the build's writers take (hand_out) and the rest,
    read for it here. Until the writers report (record), the files they take count as
    clean: the build checks again once they have (rocpkg.build.run)."""

    def __init__(self, facts: dict, sources: list[str], embedded_objects: bool, starmap_async=None):
        self.facts, self.sources, self.embedded_objects = facts, list(sources), embedded_objects
        self.starmap_async = starmap_async
        self._read = None       # the waiter of the files searched by reading them

    def hand_out(self, written) -> frozenset[str]:
        """The sources among `written` (files the build's writers read) that their writers
        search; the others are searched now (on the workers when there are some). Once
        the search has started, none: every file is searched by reading it."""
        if self._read is not None:
            return frozenset()
        streamed = frozenset(self.sources).intersection(written)
        rest = [s for s in self.sources if s not in streamed]
        arguments = [(source, self.facts[source].identity, self.embedded_objects) for source in rest]
        if self.starmap_async is not None:
            waiter = self.starmap_async(found_in, arguments)
        else:
            read = _on_threads(arguments)
            waiter = lambda: read  # noqa: E731
        self._read = rest, waiter
        return streamed

    def __call__(self) -> list[tuple[str, str]]:
        if self._read is None:
            self.hand_out(())
        rest, waiter = self._read
        problems = []
        for source, (changes, problem) in zip(rest, waiter()):
            if problem is not None:
                problems.append(problem)
            else:
                self.facts[source] = dataclasses.replace(self.facts[source], **changes)
        return problems

    def record(self, found) -> bool:
        """Add what the writers found ((source, facts fields) pairs) to the facts; True
        when any of those files carries device code (the build's checks must run again)."""
        carries = False
        for source, changes in found:
            self.facts[source] = dataclasses.replace(self.facts[source], **changes)
            carries = carries or bool(changes["host_code"] or changes["device_error"])
        return carries


@dataclasses.dataclass(frozen=True)
class HostScan:
    """The host ELFs one package's writer searches as it reads them (HostSearch.hand_out):
    the writer's `observe` hook (rocpkg.formats.streams.Observe). Called with a source path, it
    gives the observer that searches that file's bytes for device code, or None."""

    sources: frozenset
    embedded_objects: bool = False

    def __call__(self, source: str) -> "_SearchObserver | None":
        if source not in self.sources:
            return None
        from kpack.placement import StreamedSearch

        return _SearchObserver(StreamedSearch(self.embedded_objects))


class _SearchObserver:
    """A rocpkg.formats.streams.StreamObserver over kpack.placement.StreamedSearch: its result is
    the FileFacts fields of the device code the file still carries (streamed_facts)."""

    def __init__(self, search):
        self.search = search

    def start(self, handle) -> None:
        self.search.start(handle)

    def watch(self, chunks):
        return self.search.watch(chunks)

    def result(self, handle, where: str) -> dict:
        return streamed_facts(self.search, handle, where)


def streamed_facts(search, fh, where: str) -> dict:
    """The FileFacts fields of a host ELF whose bytes went past `search` (device_code's),
    from the file still open as fh; where: the package and path, for an error."""
    if not search.whole:
        return _fields()
    try:
        return device_code(fh, search.embedded_objects)
    except OSError as exc:
        from rocpkg.errors import RocpkgInputError

        raise RocpkgInputError((where, f"cannot be read again for its device code: {exc.strerror or exc}")) from None


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
