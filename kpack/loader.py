"""How a GPU finds its kernels: rocm-kpack's runtime loader (`kpack_load_code_object`,
rocm-systems shared/kpack/runtime/src/loader.cpp), restated. This module holds that
algorithm and nothing else; every rocpkg check that asks "where would this GPU load this
kernel from?" asks it here.

Given a host binary's marker (`kernel_name`, `kpack_search_paths`), the binary's path,
the device's arch list and a code-object index N:

1. Compatible targets (isa_target_match.h): strip `amdgcn-amd-amdhsa--`, split the rest
   at `:` into the processor and its features *in the order written*, and list the power
   set of the features by a bit mask counting down from "all" (bit n-1-i = feature i):
   `gfx942:sramecc+:xnack-`, `gfx942:sramecc+`, `gfx942:xnack-`, `gfx942`. The device's
   spelling is kept: `gfx942:xnack-:sramecc+` yields `gfx942:xnack-:sramecc+` first.
2. Search paths, in marker order: a relative path is joined to the binary's directory and
   normalised (std::filesystem::weakly_canonical: symlinks of the existing part resolved,
   `.`/`..` folded), an absolute one is used as written; then the first `@GFXARCH@` is
   replaced by each compatible target of each arch-list entry in turn (path-major order);
   a path without it is used once.
3. Open every path that is an existing regular file, in that order; an archive that does
   not open (corrupt, unreadable) is skipped silently; two paths naming one file (same
   canonical path) are one archive. None open: ARCHIVE_NOT_FOUND.
4. Candidates, per arch-list entry: for each compatible target of that entry, most
   specific first, every opened archive whose `gfx_arches` lists exactly that string, in
   search-path order. An xnack-variant archive can so be a small overlay over the bare
   target's archive: both are candidates, the overlay first.
5. Fall-through: `kernel_name#N` comes from the first candidate whose TOC holds it (for
   the target it matched). When no candidate of an entry holds it, the next arch-list
   entry is tried. Result: the kernel; else KERNEL_NOT_FOUND when some candidate matched
   and none held it; else ARCH_NOT_FOUND.

The arch list: HIP's runtime (CLR) passes the agent's ISA name as ROCr reports it
(`amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`), one entry per call on every current GPU;
the loop over further entries is modelled all the same.

STRICT mode is the runtime before the fall-through (rocm-kpack before August 2026): the
first candidate is the only one; a kernel it lacks is KERNEL_NOT_FOUND, whatever a less
specific archive holds. A release whose own runtime predates the fall-through is checked
in this mode (the `kpack_lookup: strict` setting).

Not modelled: the ROCM_KPACK_PATH / ROCM_KPACK_PATH_PREFIX / ROCM_KPACK_DISABLE
environment overrides (they replace the marker's paths; packaging never sets them) and
the process-wide archive cache (it changes nothing for archives that do not change).
"""
from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from kpack.errors import KpackFormatError
from kpack.marker import GFXARCH, Marker
from kpack.targets import feature_subsets, parse_target, split_target, strip_isa_prefix

FOUND = "found"
NO_ARCHIVE = "no-archive"              # KPACK_ERROR_ARCHIVE_NOT_FOUND
NO_TARGET = "no-target"                # KPACK_ERROR_ARCH_NOT_FOUND
KERNEL_NOT_FOUND = "kernel-not-found"  # KPACK_ERROR_KERNEL_NOT_FOUND
# The runtime's error code for each status (kpack_types.h), for comparing with it.
RUNTIME_CODES = {FOUND: 0, KERNEL_NOT_FOUND: 5, NO_ARCHIVE: 13, NO_TARGET: 14}

FALLTHROUGH = "fallthrough"   # the runtime ROCm ships: every candidate, in order
STRICT = "strict"             # the runtime before the fall-through: the first candidate only
LOOKUP_MODES = (FALLTHROUGH, STRICT)


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


def _arch_list(isa: str | Sequence[str]) -> tuple[str, ...]:
    return (isa,) if isinstance(isa, str) else tuple(isa)


def _device(isas: Sequence[str]) -> str:
    return " / ".join(strip_isa_prefix(i) for i in isas)


@dataclass
class LoaderResult:
    """The runtime's answer for one (binary, arch list, co_index) lookup. `archive` and
    `target` name where the kernel loads from (FOUND) or the most specific candidate
    (KERNEL_NOT_FOUND); `tried` lists the candidates asked for the kernel, in order."""

    status: str
    isa: str
    key: str
    archive: str | None = None
    target: str | None = None
    searched: list[str] = field(default_factory=list)   # every expanded path, in order
    opened: list[str] = field(default_factory=list)     # the archives that opened
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why it did not open)
    tried: list[tuple[str, str]] = field(default_factory=list)    # (archive, target) asked, in order

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
            passed = self.tried[:-1]
            if not passed:
                return (f"on {device} the runtime opens {self.archive} and loads {self.key} "
                        f"for {self.target}")
            return (f"on {device} the runtime finds no {self.key} in {describe_candidates(passed)}, "
                    f"then loads it from {self.archive} for {self.target}")
        if self.status == KERNEL_NOT_FOUND:
            if len(self.tried) == 1:
                return (f"on {device} the runtime opens {self.archive} and finds no kernel {self.key} "
                        f"for {self.target}")
            return (f"on {device} the runtime tries {describe_candidates(self.tried)} and none holds "
                    f"{self.key}: KERNEL_NOT_FOUND")
        skipped = "".join(f"; {path} does not open ({why})" for path, why in self.skipped)
        if self.status == NO_TARGET:
            return (f"on {device} the runtime opens {', '.join(self.opened)} but none lists "
                    f"{' or '.join(compatible_targets(self.isa))}, so {self.key} does not load{skipped}")
        return (f"on {device} the runtime finds no kpack archive for {self.key} "
                f"(looked for {', '.join(self.searched) or 'nothing'}){skipped}")


def describe_candidates(candidates: Iterable[tuple[str, str]]) -> str:
    """`a.kpack (for gfx90a:xnack-), then b.kpack (for gfx90a)`: candidates in order."""
    return ", then ".join(f"{path} (for {target})" for path, target in candidates)


def compatible_targets(isa: str) -> list[str]:
    """The targets whose code runs on a device reporting `isa`, most specific first, in
    the runtime's order and spelling (see the module docstring, step 1). Raises
    InvalidTargetError when `isa` is not a target ID."""
    return list(_compatible_targets(isa))


@functools.lru_cache(maxsize=1024)
def _compatible_targets(isa: str) -> tuple[str, ...]:
    """compatible_targets, once per ISA (an exception, a non-target, is raised each time)."""
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


def search_order(marker: Marker, binary_path: str, isa: str | Sequence[str],
                 resolve: Callable[[str], str] = lexical_resolve) -> list[str]:
    """The archive paths the runtime expands for `binary_path` on an arch list (or one
    ISA), in its order (module docstring, step 2); repeats dropped (they cannot change
    the outcome). `resolve` normalises a joined relative path: lexical for a package set,
    the filesystem's weakly_canonical for an installed tree."""
    targets = [t for entry in _arch_list(isa) for t in compatible_targets(entry)]
    base = posixpath.dirname(binary_path)
    paths: list[str] = []
    for search_path in marker.kpack_search_paths:
        resolved = search_path if posixpath.isabs(search_path) else resolve(posixpath.join(base, search_path))
        expanded = [resolved.replace(GFXARCH, target, 1) for target in targets] \
            if GFXARCH in resolved else [resolved]
        paths.extend(p for p in expanded if p not in paths)
    return paths


@dataclass
class Candidates:
    """What the runtime has in hand for one binary on one device before it asks for a
    kernel (module docstring, steps 2-4): the paths it expanded, the archives that
    opened, and the candidates per arch-list entry. Every co_index of the binary is
    looked up against the same candidates: `find(key)`."""

    isas: tuple[str, ...]
    searched: list[str]
    opened: list[tuple[str, ArchiveIndex]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    per_entry: list[list[tuple[str, str, ArchiveIndex]]] = field(default_factory=list)

    @property
    def ordered(self) -> list[tuple[str, str]]:
        """Every (archive, target) candidate, in the order the runtime asks them."""
        return [(path, target) for entry in self.per_entry for path, target, _ in entry]

    def find(self, key: str, mode: str = FALLTHROUGH) -> LoaderResult:
        """Where `key` loads from (step 5); in STRICT mode the first candidate only."""
        result = LoaderResult(NO_ARCHIVE, self.isas[0], key, searched=list(self.searched),
                              opened=[path for path, _ in self.opened], skipped=list(self.skipped))
        if not self.opened:
            return result
        result.status = NO_TARGET
        for entry in self.per_entry:
            for path, target, index in (entry[:1] if mode == STRICT else entry):
                if result.archive is None:
                    result.archive, result.target = path, target
                result.tried.append((path, target))
                if index.has_kernel(key, target):
                    result.status, result.archive, result.target = FOUND, path, target
                    return result
                result.status = KERNEL_NOT_FOUND
            if mode == STRICT and entry:
                return result
        return result


def find_candidates(marker: Marker, binary_path: str, isa: str | Sequence[str], open_archive: Opener,
                    *, resolve: Callable[[str], str] | None = None) -> Candidates:
    """The runtime's candidates for `binary_path` on a device whose arch list is `isa` (one
    ISA name or several). `open_archive(path)` answers for one path: an ArchiveIndex, None
    when no regular file is there, or raises KpackFormatError/OSError when it does not open
    (the runtime skips such an archive). `resolve` defaults to the opener's own `resolve`
    attribute, else lexical."""
    resolve = resolve or getattr(open_archive, "resolve", lexical_resolve)
    isas = _arch_list(isa)
    found = Candidates(isas, search_order(marker, binary_path, isas, resolve))
    identities: set[str] = set()
    for path in found.searched:
        try:
            index = open_archive(path)
        except (KpackFormatError, OSError) as exc:
            found.skipped.append((path, " ".join(str(exc).split())))
            continue
        if index is None or (index.identity or path) in identities:
            continue
        identities.add(index.identity or path)
        found.opened.append((path, index))
    for entry in isas:
        found.per_entry.append([(path, target, index) for target in compatible_targets(entry)
                                for path, index in found.opened if target in index.gfx_arches])
    return found


def find_kernel(marker: Marker, binary_path: str, isa: str | Sequence[str], co_index: int,
                open_archive: Opener, *, resolve: Callable[[str], str] | None = None,
                mode: str = FALLTHROUGH) -> LoaderResult:
    """Which archive and target the runtime loads `kernel_name#co_index` from on a device
    whose arch list is `isa` (module docstring, steps 2-5); `mode` FALLTHROUGH (today's
    runtime) or STRICT (before the fall-through)."""
    found = find_candidates(marker, binary_path, isa, open_archive, resolve=resolve)
    return found.find(f"{marker.kernel_name}#{co_index}", mode)


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


__all__ = ["ArchiveIndex", "Candidates", "LoaderResult", "compatible_targets", "search_order", "find_candidates",
           "find_kernel", "describe_candidates", "filesystem_opener", "load_kernel", "FOUND", "NO_ARCHIVE",
           "NO_TARGET", "KERNEL_NOT_FOUND", "FALLTHROUGH", "STRICT", "LOOKUP_MODES"]
