"""Debug packages: the detached debug files of the artifacts' `dbg` components, matched to
the ELF files the plan ships by their GNU build-id.

TheRock places each debug file at `<artifact>_dbg_<suffix>/<stage>/.build-id/NN/REST.debug`,
named by the build-id of the binary it belongs to (NN: its first byte in hex, REST: the
others). A package that ships ELF files with such an id gets one debug package holding their
debug files at `/usr/lib/debug/.build-id/NN/REST.debug`, where gdb, eu-unstrip and
debuginfod clients look with no configuration:

- deb `N-dbgsym`: Section debug, `Depends: N (= V-R)`, `Auto-Built-Package: debug-symbols`,
  `Build-Ids:` the ids it holds, N's architecture (what dh_strip makes);
- rpm `N-debuginfo`: `Provides: debuginfo(build-id) = ID` per id (what `dnf
  debuginfo-install` and gdb's hint look up) and `Requires: N = V-R`, exact like the deb:
  a debug file describes one build's bytes only, so no other release of N can use it
  (Fedora's generated debuginfo packages carry no Requires at all and rely on
  debuginfo-install picking the matching version; pinning says the same to a plain
  `dnf install N-debuginfo`).

Metas and aliases never pull a debug package; a dbgsym's doc dir is a link to its
package's, as dh_strip makes it (no copyright of its own: lintian's non-debug-file-in-debug-
package). Debug packages own no directory (dpkg and
rpm share /usr/lib/debug/.build-id/NN between packages as they do for Fedora's and
Debian's). The artifacts are never rewritten: a shipped binary keeps its bytes, kpack'd or
not. What is wrong is a DebugFinding under one of DEBUG_CHECKS (build refuses it unless
`--allow`ed) or, where no check could make it right, a problem (exit 2).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from rocpkg import model as m
from rocpkg.formats.preflight import printable
from rocpkg.formats.registry import get as get_format
from rocpkg.inputs.catalog import Catalog

DEBUG_COMPONENT = "dbg"
DEBUG_DIR = "/usr/lib/debug/.build-id"
DEBUG_ORPHAN = "debug-orphan"          # a debug file whose build-id no shipped binary has
DEBUG_NOT_ELF = "debug-not-elf"        # a .debug that is not an ELF with .debug_* sections
DEBUG_CONFLICT = "debug-conflict"      # two debug files for one id, different bytes
DEBUGLINK_MISSING = "debuglink-missing"  # a shipped binary's .gnu_debuglink has no debug file
DEBUG_CHECKS = (DEBUG_CONFLICT, DEBUG_NOT_ELF, DEBUG_ORPHAN, DEBUGLINK_MISSING)
_BUILD_ID_PATH = re.compile(r"(?:^|/)\.build-id/([0-9a-f]{2})/([0-9a-f]{2,126})\.debug\Z")
_DEBUG_KINDS = (m.KIND_FILES, m.KIND_HOST, m.KIND_DEVICE)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class DebugFinding:
    """One problem of the debug files: its check (the name `--allow` takes), where, what."""

    check: str
    where: str
    what: str


@dataclass(frozen=True)
class DebugFile:
    build_id: str
    source: str
    size: int
    identity: tuple[int, int]


@dataclass
class DebugIndex:
    """The usable debug files of the artifacts by build-id, and what is wrong with the rest."""

    files: dict[str, DebugFile]
    findings: list[DebugFinding]
    problems: list[tuple[str, str]]
    has_components: bool


def index_debug_files(catalog: Catalog) -> DebugIndex:
    """Every `.build-id/NN/REST.debug` of the `dbg` components: a regular file (a symlink
    is refused: a debug file is read through no link), an ELF with debug sections (else
    debug-not-elf) whose build-id is the one its path names (else a problem); two files for
    one id must hold the same bytes (else debug-conflict; the first in path order is kept)."""
    index = DebugIndex({}, [], [], False)
    for (_, component), dirs in sorted(catalog.dirs.items()):
        if component != DEBUG_COMPONENT:
            continue
        index.has_components = True
        for adir in dirs:
            for stage in adir.stages:
                for entry in stage.entries:
                    _index_entry(index, entry)
    return index


def _index_entry(index: DebugIndex, entry) -> None:
    found = _BUILD_ID_PATH.search(entry.rel)
    if found is None or entry.type == m.DIR:
        return
    where = printable(entry.source)
    if entry.type != m.FILE:
        index.problems.append((where, "a debug file must be a regular file, not a symlink"))
        return
    facts = entry.facts
    if facts is None or facts.elf != "host" or not facts.debug_sections:
        index.findings.append(DebugFinding(DEBUG_NOT_ELF, where, "not an ELF file with .debug_* sections"))
        return
    if facts.elf_end and entry.size > facts.elf_end:
        index.findings.append(DebugFinding(DEBUG_NOT_ELF, where, f"{entry.size - facts.elf_end} bytes past the end of "
                                                                 f"its ELF (which ends at byte {facts.elf_end}): "
                                                                 "no section holds them"))
        return
    named = found.group(1) + found.group(2)
    if facts.build_id != named:
        index.problems.append((where, f"its build-id is {facts.build_id or 'missing'}, not the {named} "
                                      "its .build-id path names"))
        return
    candidate = DebugFile(named, entry.source, entry.size, entry.identity)
    kept = index.files.setdefault(named, candidate)
    if kept is not candidate and not _same_bytes(kept, candidate):
        index.findings.append(DebugFinding(DEBUG_CONFLICT, where, f"build-id {named} also has the debug file "
                                                                  f"{printable(kept.source)}, with other bytes"))


def _same_bytes(first: DebugFile, second: DebugFile) -> bool:
    """Whether two debug files hold the same bytes (read through no symlink)."""
    if first.size != second.size:
        return False
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fds = [os.open(f.source, flags) for f in (first, second)]
    try:
        if not all(stat.S_ISREG(os.fstat(fd).st_mode) for fd in fds):
            return False
        while True:
            left, right = (os.read(fd, _CHUNK) for fd in fds)
            if left != right:
                return False
            if not left:
                return True
    finally:
        for fd in fds:
            os.close(fd)


def debug_packages(specs: list[m.PackageSpec], index: DebugIndex, facts_of, pin) -> list[m.PackageSpec]:
    """The debug package of each package of one format with files whose build-id has a
    debug file. pin(name): the exact-version relation on a package of that format."""
    out = []
    for spec in specs:
        if spec.kind not in _DEBUG_KINDS:
            continue
        ids = sorted({facts_of(fe.source).build_id for fe in spec.files if fe.type == m.FILE}
                     & index.files.keys())
        if ids:
            out.append(_debug_spec(spec, [index.files[i] for i in ids], pin))
    return out


def _debug_spec(spec: m.PackageSpec, files: list[DebugFile], pin) -> m.PackageSpec:
    """The debug package of spec: its name, version, architecture and people, none of its
    relations or scripts; the debug files under DEBUG_DIR."""
    form = get_format(spec.format)
    ids = [f.build_id for f in files]
    name = spec.name + form.debug_suffix
    debug = m.PackageSpec(
        format=spec.format, name=name, version=spec.version, release=spec.release, arch=spec.arch,
        kind=m.KIND_DEBUG, definition=spec.definition, epoch=spec.epoch,
        summary=form.debug_summary(spec.name),
        description=f"The detached debug information of the ELF files of {spec.name}, found by gdb and "
                    f"debuginfod clients under {DEBUG_DIR} by their build-id.",
        maintainer=spec.maintainer, vendor=spec.vendor, license=spec.license, homepage=spec.homepage,
        section="debug", priority="optional", group="Development/Debug" if spec.group else "",
        depends=[pin(spec.name)], provides=form.debug_provides(ids),
        files=[m.FileEntry(f"{DEBUG_DIR}/{f.build_id[:2]}/{f.build_id[2:]}.debug", m.FILE, 0o644, f.source, f.size,
                           identity=f.identity) for f in files],
        prefix=spec.prefix)
    if form.finish_debug is not None:
        form.finish_debug(debug, spec, ids)
    return debug


def shipped_findings(specs: list[m.PackageSpec], index: DebugIndex, facts_of) -> tuple[list[DebugFinding], list[str]]:
    """debug-orphan for each debug file no shipped binary of these packages has, and
    debuglink-missing for each shipped binary with a `.gnu_debuglink` and no debug file
    (a warning instead where the artifacts hold no dbg component at all)."""
    shipped: dict[str, str] = {}
    linked: dict[str, tuple[str, str]] = {}
    for spec in specs:
        for fe in spec.files:
            facts = facts_of(fe.source) if fe.type == m.FILE else None
            if facts is None or facts.elf != "host":
                continue
            if facts.build_id:
                shipped.setdefault(facts.build_id, fe.path)
            if facts.debuglink and facts.build_id not in index.files:
                linked.setdefault(fe.path, (spec.name, facts.debuglink))
    findings = [DebugFinding(DEBUG_ORPHAN, printable(f.source), f"build-id {i} is the id of no binary the release "
                                                                "ships")
                for i, f in sorted(index.files.items()) if i not in shipped]
    missing = [DebugFinding(DEBUGLINK_MISSING, f"{name}: {printable(path)}", f"its .gnu_debuglink names "
                            f"{printable(link)}, and no dbg component holds its debug file")
               for path, (name, link) in sorted(linked.items())]
    if index.has_components:
        return findings + missing, []
    return findings, [f"{f.where}: {f.what} [{f.check}]" for f in missing]
