"""How a GPU finds its kernels: rocm-kpack's runtime loader (`kpack_load_code_object`,
runtime/src/loader.cpp), restated. This module holds that algorithm and nothing else;
every rocpkg check that asks "which archive would this GPU load?" asks it here.

Given a host binary's marker (`kernel_name`, `kpack_search_paths`), the binary's path,
the device's ISA name and a code-object index N:

1. Compatible targets (isa_target_match.h): strip `amdgcn-amd-amdhsa--`, split the rest
   at `:` into the processor and its features *in the order written*, and list the power
   set of the features by a bit mask counting down from "all" (bit n-1-i = feature i):
   `gfx942:sramecc+:xnack-`, `gfx942:sramecc+`, `gfx942:xnack-`, `gfx942`. The device's
   spelling is kept: `gfx942:xnack-:sramecc+` yields `gfx942:xnack-:sramecc+` first.
2. Search paths, in marker order: a relative path is joined to the binary's directory and
   normalised (std::filesystem::weakly_canonical: symlinks of the existing part resolved,
   `.`/`..` folded), an absolute one is used as written; then the first `@GFXARCH@` is
   replaced by each compatible target in turn (path-major order); a path without it is
   used once.
3. Open every path that is an existing regular file, in that order; an archive that does
   not open (corrupt, unreadable) is skipped silently; two paths naming one file (same
   canonical path) are one archive. None open: ARCHIVE_NOT_FOUND.
4. Target-first: for each compatible target in order, the first opened archive whose
   `gfx_arches` lists exactly that string is chosen. None for any target: ARCH_NOT_FOUND.
5. `kernel_name#N` is fetched from the chosen archive for the chosen target; if the TOC
   has no such entry the load fails with KERNEL_NOT_FOUND. No other archive or target is
   tried.

Not modelled: the ROCM_KPACK_PATH / ROCM_KPACK_PATH_PREFIX / ROCM_KPACK_DISABLE
environment overrides (they replace the marker's paths; packaging never sets them) and
the process-wide archive cache (it changes nothing for archives that do not change).
"""
from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from kpack.errors import KpackFormatError
from kpack.marker import GFXARCH, Marker
from kpack.targets import feature_subsets, parse_target, split_target, strip_isa_prefix

FOUND = "found"
NO_ARCHIVE = "no-archive"              # KPACK_ERROR_ARCHIVE_NOT_FOUND
NO_TARGET = "no-target"                # KPACK_ERROR_ARCH_NOT_FOUND
KERNEL_NOT_FOUND = "kernel-not-found"  # KPACK_ERROR_KERNEL_NOT_FOUND
# The runtime's error code for each status (kpack_types.h), for comparing with it.
RUNTIME_CODES = {FOUND: 0, KERNEL_NOT_FOUND: 5, NO_ARCHIVE: 13, NO_TARGET: 14}


@dataclass(frozen=True)
class ArchiveIndex:
    """What the runtime consults of one opened archive: its `gfx_arches` and whether its
    TOC holds a key for an arch. `identity` names the file for de-duplication (the
    runtime's canonical path); None means the path itself."""

    gfx_arches: tuple[str, ...]
    has_kernel: Callable[[str, str], bool]
    identity: str | None = None

    @classmethod
    def from_kernels(cls, gfx_arches: Iterable[str], kernels: Mapping[str, Iterable[str]],
                     identity: str | None = None) -> "ArchiveIndex":
        """An index from plain data: `kernels` maps each key to the arches it is stored for
        (what a package set or a catalog knows without the file)."""
        table = {key: frozenset(arches) for key, arches in kernels.items()}
        return cls(tuple(gfx_arches), lambda key, arch: arch in table.get(key, ()), identity)


Opener = Callable[[str], "ArchiveIndex | None"]


@dataclass
class LoaderResult:
    """The runtime's answer for one (binary, ISA, co_index) lookup."""

    status: str
    isa: str
    key: str
    archive: str | None = None        # the archive chosen (FOUND or KERNEL_NOT_FOUND)
    target: str | None = None         # the compatible target it was chosen for
    searched: list[str] = field(default_factory=list)   # every expanded path, in order
    opened: list[str] = field(default_factory=list)     # the archives that opened
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why it did not open)

    @property
    def found(self) -> bool:
        return self.status == FOUND

    @property
    def runtime_code(self) -> int:
        return RUNTIME_CODES[self.status]

    def explain(self) -> str:
        """One line: what the runtime does on this GPU."""
        device = strip_isa_prefix(self.isa)
        if self.status == FOUND:
            return (f"on {device} the runtime opens {self.archive} and loads {self.key} "
                    f"for {self.target}")
        if self.status == KERNEL_NOT_FOUND:
            return (f"on {device} the runtime opens {self.archive} and finds no kernel {self.key} "
                    f"for {self.target}")
        skipped = "".join(f"; {path} does not open ({why})" for path, why in self.skipped)
        if self.status == NO_TARGET:
            return (f"on {device} the runtime opens {', '.join(self.opened)} but none lists "
                    f"{' or '.join(compatible_targets(self.isa))}, so {self.key} does not load{skipped}")
        return (f"on {device} the runtime finds no kpack archive for {self.key} "
                f"(looked for {', '.join(self.searched) or 'nothing'}){skipped}")


def compatible_targets(isa: str) -> list[str]:
    """The targets whose code runs on a device reporting `isa`, most specific first, in
    the runtime's order and spelling (see the module docstring, step 1). Raises
    InvalidTargetError when `isa` is not a target ID."""
    return list(_compatible_targets(isa))


@functools.lru_cache(maxsize=1024)
def _compatible_targets(isa: str) -> tuple[str, ...]:
    """compatible_targets, once per ISA: a release's checks ask it about 6,000 times for a
    few dozen ISAs (an exception, a non-target, is not cached: it is raised each time)."""
    parse_target(isa)  # validate: the runtime would expand any text, we refuse non-targets
    processor, features = split_target(isa)
    return tuple(feature_subsets(processor, features))


def lexical_resolve(path: str) -> str:
    """The runtime's normalisation of a joined relative path, without a filesystem."""
    return posixpath.normpath(path)


def weakly_canonical(path: str) -> str:
    """std::filesystem::weakly_canonical: the longest existing prefix made canonical
    (symlinks resolved, absolute), the rest appended, then `.` and `..` folded."""
    head, tail = path, []
    while head and not os.path.exists(head):
        head, name = os.path.split(head)
        if not name:
            break
        tail.append(name)
    if head and os.path.exists(head):
        return os.path.normpath(os.path.join(os.path.realpath(head), *reversed(tail)))
    return os.path.normpath(path)


def search_order(marker: Marker, binary_path: str, isa: str,
                 resolve: Callable[[str], str] = lexical_resolve) -> list[str]:
    """The archive paths the runtime expands for `binary_path` on `isa`, in its order
    (module docstring, step 2); repeats dropped (they cannot change the outcome).
    `resolve` normalises a joined relative path: lexical for a package set, the
    filesystem's weakly_canonical for an installed tree."""
    targets = compatible_targets(isa)
    base = posixpath.dirname(binary_path)
    paths: list[str] = []
    for search_path in marker.kpack_search_paths:
        resolved = search_path if posixpath.isabs(search_path) else resolve(posixpath.join(base, search_path))
        expanded = [resolved.replace(GFXARCH, target, 1) for target in targets] \
            if GFXARCH in resolved else [resolved]
        paths.extend(p for p in expanded if p not in paths)
    return paths


def find_kernel(marker: Marker, binary_path: str, isa: str, co_index: int,
                open_archive: Opener, *, resolve: Callable[[str], str] | None = None) -> LoaderResult:
    """Which archive and target the runtime loads `kernel_name#co_index` from (module
    docstring, steps 3-5). `open_archive(path)` answers for one path: an ArchiveIndex, None
    when no regular file is there, or raises KpackFormatError/OSError when it does not open
    (the runtime skips such an archive). `resolve` defaults to the opener's own `resolve`
    attribute, else lexical."""
    resolve = resolve or getattr(open_archive, "resolve", lexical_resolve)
    key = f"{marker.kernel_name}#{co_index}"
    result = LoaderResult(NO_ARCHIVE, isa, key, searched=search_order(marker, binary_path, isa, resolve))
    archives: list[tuple[str, ArchiveIndex]] = []
    identities: set[str] = set()
    for path in result.searched:
        try:
            index = open_archive(path)
        except (KpackFormatError, OSError) as exc:
            result.skipped.append((path, " ".join(str(exc).split())))
            continue
        if index is None or (index.identity or path) in identities:
            continue
        identities.add(index.identity or path)
        archives.append((path, index))
        result.opened.append(path)
    if not archives:
        return result
    result.status = NO_TARGET
    for target in compatible_targets(isa):
        chosen = next((path for path, index in archives if target in index.gfx_arches), None)
        if chosen is None:
            continue
        index = dict(archives)[chosen]
        result.archive, result.target = chosen, target
        result.status = FOUND if index.has_kernel(key, target) else KERNEL_NOT_FOUND
        return result
    return result


class FilesystemOpener:
    """open_archive for real files: KpackReader's header and TOC (the file is closed again;
    lookups reopen it). Paths resolve the way the runtime's do (weakly_canonical)."""

    resolve = staticmethod(weakly_canonical)

    def __call__(self, path: str) -> ArchiveIndex | None:
        from kpack.archive import KpackReader

        if not os.path.isfile(path):
            return None
        with KpackReader(path) as reader:
            arches = tuple(reader.gfx_arches)
            kernels: dict[str, set[str]] = {}
            for entry in reader.entries():
                kernels.setdefault(entry.key, set()).add(entry.arch)
        return ArchiveIndex.from_kernels(arches, kernels, identity=os.path.realpath(path))


def filesystem_opener() -> FilesystemOpener:
    """The opener for an installed tree (or any directory of real files)."""
    return FilesystemOpener()


def load_kernel(result: LoaderResult) -> bytes:
    """The code object a FOUND result names, read from the filesystem."""
    from kpack.archive import KpackReader

    if not result.found:
        raise KeyError(result.explain())
    with KpackReader(result.archive) as reader:
        return reader.get(result.key, result.target)


__all__ = ["ArchiveIndex", "LoaderResult", "compatible_targets", "search_order", "find_kernel",
           "filesystem_opener", "load_kernel", "FOUND", "NO_ARCHIVE", "NO_TARGET", "KERNEL_NOT_FOUND"]
