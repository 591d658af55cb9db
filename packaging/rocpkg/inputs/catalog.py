"""Index an artifacts directory: artifacts, manifests, stage trees, and the target of every
device file.

Both of TheRock's layouts are understood: split per target (`fft_lib_gfx942`,
`blas_lib_gfx90a:xnack+`) and recombined per family (`fft_lib_gfx110X`), where each file is
routed to one target by its kpack TOC, its code-object header or its name. The catalog only
reads; it never copies a byte of the artifacts.

The artifacts are untrusted. The tree is walked through directory descriptors, every
component opened with O_NOFOLLOW, so that no stage dir and no file is reached through a
symlink (a manifest line `rocFFT/evil/secret` with `rocFFT/evil -> /etc` is refused, not
followed); only regular files, directories and symlinks are accepted, and every regular
file is opened, which is the only readability test that holds for root too. While a file
is open, every fact a later stage needs is read from it, once (rocpkg.inputs.facts: ELF class,
DT_NEEDED, the `.rocm_kpack_ref` marker, a kpack archive's TOC summary, the targets of
device code); a malformed marker or archive becomes a recorded error of that file, so
plan, build and verify never reopen an artifact to learn something about it.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from kpack import targets as kt
from kpack.detect import EMBEDDING_SUFFIXES
from rocpkg.errors import RocpkgInputError
from rocpkg.inputs.facts import HEAD_SIZE, FileFacts, plain_facts, read_facts
from rocpkg.inputs.host_code import FILE_FLAGS as _FILE_FLAGS
from rocpkg.inputs.host_code import HostSearch
from rocpkg.formats.preflight import printable

MANIFEST = "artifact_manifest.txt"
GENERIC = "generic"
# A processor name inside a file name or path component: gfx942, gfx1100, gfx90a:xnack+ ...
_TARGET_IN_NAME = re.compile(r"(?<![0-9a-z])(gfx[0-9]{1,2}[0-9a-f]{1,2}(?:-generic)?(?::(?:xnack|sramecc)[+-])*)(?![0-9a-z])")
# Opening a directory of the tree: never through a symlink, never a non-directory.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class StageEntry(NamedTuple):
    """One path of a stage tree, with the target it belongs to ("" = host/generic).
    Immutable plain data, a tuple (the catalog makes one per artifact file, tens of
    thousands in a large release: a tuple is made in a third of a frozen dataclass's time)."""

    rel: str            # posix path relative to the stage root ("lib/librocfft.so.0")
    type: str           # "file" | "dir" | "symlink"
    mode: int           # permission bits
    size: int
    source: str         # absolute path in the artifacts dir
    link_target: str = ""
    target: str = ""    # bare lower-case target ("gfx942") for device files
    variant: str = ""   # full target ID it was built for ("gfx90a:xnack+")
    facts: FileFacts | None = None  # regular files only
    identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the file the catalog read (regular files)


@dataclass
class Stage:
    line: str                       # the manifest line ("math-libs/rocFFT/stage")
    root: str                       # absolute stage dir, normalised (below an artifact dir: never "/")
    entries: list[StageEntry] = field(default_factory=list)

    def matches(self, subdir: str) -> bool:
        """TheRock's rule: the manifest line contains `<Subdir Name>/`, taken here as
        whole path components so that `hipBLAS` never matches `hipBLASLt`."""
        return f"/{subdir}/" in f"/{self.line.strip('/')}/"


@dataclass
class ArtifactDir:
    dirname: str
    artifact: str
    component: str
    suffix: str
    kind: str                       # "generic" | "target" | "family"
    path: str
    stages: list[Stage] = field(default_factory=list)

    @functools.cached_property
    def bare_target(self) -> str:
        """Read for every stage lookup of the plan (20,000 times for TheRock's config)."""
        return kt.bare_processor(self.suffix) if self.kind == "target" else ""


@dataclass
class Catalog:
    root: str
    families: dict[str, list[str]]
    dirs: dict[tuple[str, str], list[ArtifactDir]] = field(default_factory=dict)
    facts: dict[str, FileFacts] = field(default_factory=dict)   # source path -> its facts
    pending: object = None      # the host ELFs' device code still being searched (settle)

    def settle(self) -> None:
        """Wait for the search of the host ELFs' data sections (rocpkg.inputs.host_code) and add
        what it found to their facts; its problems raise RocpkgInputError. make_plan calls
        it before it returns: a plan's facts are complete."""
        pending, self.pending = self.pending, None
        problems = pending() if pending is not None else []
        if problems:
            raise RocpkgInputError(*problems)

    @contextlib.contextmanager
    def settled(self):
        """settle() after the block; a block that fails waits for the search all the same
        (its own error is the one raised): no search is left running on the workers when
        they are stopped, and what is reported is the block's error, not a stopped
        search's."""
        try:
            yield self
        except Exception:
            with contextlib.suppress(Exception):
                self.settle()
            raise
        self.settle()

    def facts_of(self, source: str) -> FileFacts:
        """The facts of one artifact file (empty facts for a path the catalog never saw)."""
        return self.facts.get(source) or FileFacts()

    @property
    def targets(self) -> list[str]:
        """Bare targets that any artifact carries device code for, in table order."""
        found = set()
        for dirs in self.dirs.values():
            for d in dirs:
                if d.kind == "target":
                    found.add(d.bare_target)
                elif d.kind == "family":
                    found.update(e.target for s in d.stages for e in s.entries if e.target)
        return sort_targets(found)

    def artifact_dirs(self, artifact: str, component: str) -> list[ArtifactDir]:
        return self.dirs.get((artifact, component), [])

    def has_device_dirs(self, artifact: str, component: str) -> bool:
        return any(d.kind != "generic" for d in self.artifact_dirs(artifact, component))

    def device_targets(self, artifact: str, component: str) -> set[str]:
        found = set()
        for d in self.artifact_dirs(artifact, component):
            if d.kind == "target":
                found.add(d.bare_target)
            elif d.kind == "family":
                found.update(e.target for s in d.stages for e in s.entries if e.target)
        return found

    def stages(self, artifact: str, component: str, subdir: str, target: str | None) -> list[tuple[ArtifactDir, Stage, list[StageEntry]]]:
        """Stage trees of one Artifact x Subdir x Component: the generic ones when target is
        None, otherwise the entries for that bare target (its split dirs, their feature
        variants, and the files of family dirs routed to it)."""
        result = []
        for d in self.artifact_dirs(artifact, component):
            if target is None:
                if d.kind != "generic":
                    continue
            elif d.kind == "generic" or (d.kind == "target" and d.bare_target != target):
                continue
            for s in d.stages:
                if not s.matches(subdir):
                    continue
                entries = s.entries
                if target is not None and d.kind == "family":
                    entries = [e for e in entries if e.target == target]
                result.append((d, s, entries))
        return result


_DROPPED_BITS = ((stat.S_ISUID, "setuid"), (stat.S_ISGID, "setgid"), (stat.S_ISVTX, "sticky"),
                 (stat.S_IWOTH, "world-writable"))
_ANY_DROPPED = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWOTH


def dropped_mode_bits(mode: int, entry_type: str) -> str:
    """The risky permission bits of an artifact file or dir that a package never carries
    (setuid, setgid, sticky, world-writable), named for a warning; "" when there are none."""
    if not mode & _ANY_DROPPED or entry_type == "symlink":
        return ""
    names = [name for bit, name in _DROPPED_BITS if mode & bit]
    return f"{'/'.join(names)} bit{'s' if len(names) > 1 else ''}" if names else ""


def sort_targets(names) -> list[str]:
    order = kt.table_order()
    return sorted(set(names), key=lambda t: (order.get(t, len(order)), t))


def parse_dirname(dirname: str) -> tuple[str, str, str] | None:
    """`<name>_<component>_<suffix>` -> (name, component, suffix); suffix may hold colons."""
    parts = dirname.rsplit("_", 2)
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


def classify_suffix(suffix: str, families: dict[str, list[str]]) -> str | None:
    if suffix == GENERIC:
        return "generic"
    try:
        target = kt.parse_target(suffix)
    except ValueError:
        target = None
    if target is not None and any(target.processor.lower() in members for members in families.values()):
        return "target"
    if suffix in families:
        return "family"
    return None


def scan(root: str | os.PathLike, families: dict[str, list[str]] | None = None, *,
         embedded_objects: bool = True, starmap_async=None) -> Catalog:
    """Index every artifact dir under root; all problems are reported together. With
    embedded_objects=False host data sections are searched for offload bundles only.
    starmap_async: worker processes that search the host ELFs' data sections while the
    walk goes on and the caller plans (catalog.settle() waits for them;
    rocpkg.inputs.host_code); without them the search is done before this returns."""
    search = HostSearch(embedded_objects, starmap_async)
    catalog, problems = _index(root, families or kt.FAMILIES, search.add)
    if problems:
        search.abandon()    # what the walk started is waited for (Catalog.settled), nothing more
        raise RocpkgInputError(*problems)
    catalog.pending = search.finish(catalog.facts)
    if starmap_async is None:
        catalog.settle()
    return catalog


def _index(root, families: dict[str, list[str]], host_elfs_found):
    """The catalog of root's artifact dirs and the problems; host_elfs_found([(path,
    identity)]) is told of each artifact dir's host ELFs once the dir is read."""
    root = os.path.abspath(os.fspath(root))
    try:  # the root the user named may itself be a symlink; nothing below it is followed
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise RocpkgInputError((root, "artifacts directory not found")) from None
    except OSError as exc:
        raise RocpkgInputError((root, f"cannot open: {exc.strerror}")) from None
    catalog = Catalog(root=root, families=families)
    problems: list[tuple[str, str]] = []

    def take(adir: ArtifactDir, dir_facts: dict[str, FileFacts], dir_elfs: list[tuple[str, tuple[int, int]]]) -> None:
        catalog.facts.update(dir_facts)
        if dir_elfs:
            host_elfs_found(dir_elfs)
        catalog.dirs.setdefault((adir.artifact, adir.component), []).append(adir)

    try:
        for dirname in sorted(os.listdir(root_fd)):
            path = os.path.join(root, dirname)
            if dirname.startswith("."):
                continue
            try:
                st = os.stat(dirname, dir_fd=root_fd, follow_symlinks=False)
            except OSError as exc:
                problems.append((printable(path), f"cannot stat: {exc.strerror}"))
                continue
            if stat.S_ISLNK(st.st_mode):
                problems.append((printable(path), "artifact dir is a symlink (artifacts are read through real "
                                                  "directories only)"))
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            parsed = parse_dirname(dirname)
            if parsed is None:
                problems.append((printable(path), "directory name is not <name>_<component>_<suffix>"))
                continue
            artifact, component, suffix = parsed
            kind = classify_suffix(suffix, families)
            if kind is None:
                problems.append((printable(path), f"suffix {printable(suffix)!r} is neither 'generic', a known "
                                                  "target nor a family"))
                continue
            adir = ArtifactDir(dirname, artifact, component, suffix, kind, path)
            try:
                dir_fd = os.open(dirname, _DIR_FLAGS, dir_fd=root_fd)
            except OSError as exc:
                problems.append((printable(path), f"cannot open: {exc.strerror}"))
                continue
            dir_facts: dict[str, FileFacts] = {}
            dir_elfs: list[tuple[str, tuple[int, int]]] = []
            try:
                _Walker(families, adir, problems, dir_facts, dir_elfs).read_stages(dir_fd)
            finally:
                os.close(dir_fd)
            take(adir, dir_facts, dir_elfs)
    finally:
        os.close(root_fd)
    return catalog, problems


_TYPE_NAMES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"))
MAX_DEPTH = 128   # directory levels below a stage root; deeper trees cannot be installed anyway


class _Walker:
    """Reads one artifact dir: its manifest, its stage trees and the facts of their files,
    through directory descriptors, never through a symlink."""

    def __init__(self, families: dict[str, list[str]], adir: ArtifactDir, problems: list[tuple[str, str]],
                 facts: dict[str, FileFacts], host_elfs: list[tuple[str, tuple[int, int]]]):
        self.families = families
        self.facts = facts           # this dir's files' facts, kept apart (scan_device_dirs)
        self.host_elfs = host_elfs   # (path, identity): whose device code scan() reads afterwards
        self.adir = adir
        self.problems = problems
        self.default_target = adir.bare_target if adir.kind == "target" else ""
        self.variant = adir.suffix if adir.kind == "target" else ""

    def problem(self, path: str, what: str) -> None:
        self.problems.append((printable(path), what))

    def read_stages(self, dir_fd: int) -> None:
        adir = self.adir
        manifest = os.path.join(adir.path, MANIFEST)
        try:
            fd = os.open(MANIFEST, _FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            self.problem(manifest, "missing manifest")
            return
        except OSError as exc:
            self.problem(manifest, _open_error(exc, dir_fd, MANIFEST))
            return
        try:
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    self.problem(manifest, "not a regular file")
                    return
                text = fh.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.problem(manifest, f"cannot read: {exc}")
            return
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if not lines:
            self.problem(manifest, "empty manifest: lists no stage dir")
            return
        for lineno, line in enumerate(lines, 1):
            where = f"{manifest}:{lineno}"
            norm = posixpath.normpath(line)
            if line.startswith("/") or norm == ".." or norm.startswith("../"):
                self.problem(where, f"stage dir {printable(line)!r} escapes the artifact dir")
                continue
            stage_fd = self._open_stage(dir_fd, norm, line, where)
            if stage_fd is None:
                continue
            try:
                stage = Stage(norm, os.path.normpath(os.path.join(adir.path, norm)))
                self._walk(stage, stage_fd)
            finally:
                os.close(stage_fd)
            adir.stages.append(stage)

    def _open_stage(self, dir_fd: int, norm: str, line: str, where: str) -> int | None:
        """The stage dir opened one component at a time, none of them a symlink."""
        fd = os.dup(dir_fd)
        parts = [] if norm == "." else norm.split("/")
        for index, part in enumerate(parts):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                sub = "/".join(parts[:index + 1])
                if exc.errno == errno.ENOENT:
                    self.problem(where, f"stage dir {printable(line)!r} does not exist")
                elif _is_symlink(dir_fd, sub):
                    self.problem(where, f"stage dir {printable(line)!r} runs through the symlink "
                                        f"{printable(sub)} (artifacts are read through real directories only)")
                elif exc.errno == errno.ENOTDIR:
                    self.problem(where, f"stage dir {printable(line)!r}: {printable(sub)} is not a directory")
                else:
                    self.problem(where, f"stage dir {printable(line)!r}: cannot open {printable(sub)}: "
                                        f"{exc.strerror}")
                return None
            os.close(fd)
            fd = nxt
        return fd

    def _walk(self, stage: Stage, stage_fd: int) -> None:
        """Depth first, each directory's entries in name order; one descriptor per level."""
        pending = [(os.dup(stage_fd), "", iter(self._read_dir(stage, stage_fd, "")))]
        try:
            while pending:
                fd, rel_dir, subdirs = pending[-1]
                name = next(subdirs, None)
                if name is None:
                    os.close(fd)
                    pending.pop()
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                full = os.path.join(stage.root, rel)
                if len(pending) >= MAX_DEPTH:
                    self.problem(full, f"directories nested deeper than {MAX_DEPTH} levels")
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    self.problem(full, _open_error(exc, fd, name))
                    continue
                try:
                    names = self._read_dir(stage, sub, rel)
                except BaseException:
                    os.close(sub)
                    raise
                pending.append((sub, rel, iter(names)))
        finally:
            for fd, _, _ in pending:
                os.close(fd)

    def _read_dir(self, stage: Stage, fd: int, rel_dir: str) -> list[str]:
        """Add the entries of one directory; return the names of its subdirectories."""
        subdirs = []
        try:
            with os.scandir(fd) as listing:
                found = sorted((item.name, item) for item in listing)
        except OSError as exc:
            self.problem(os.path.join(stage.root, rel_dir), f"cannot list: {exc.strerror}")
            return subdirs
        for name, item in found:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = f"{stage.root}/{rel}"     # os.path.join's result: the root is normalised, never "/"
            try:
                # the directory's own word for a regular file is enough: _file opens it
                # (never through a symlink) and takes its mode and size from the open file
                if item.is_file(follow_symlinks=False):
                    entry = self._file(fd, name, rel, full)
                    if entry is not None:
                        self._add(stage, entry)
                    continue
                st = item.stat(follow_symlinks=False)
            except OSError as exc:
                self.problem(full, f"cannot stat: {exc.strerror}")
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                link = os.readlink(name, dir_fd=fd)
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
                if link.startswith("/") or resolved == ".." or resolved.startswith("../"):
                    self.problem(full, f"symlink to {printable(link)!r} escapes its stage dir")
                    continue
                entry = StageEntry(rel, "symlink", 0o777, 0, full, link, self.default_target, self.variant)
            elif stat.S_ISDIR(st.st_mode):
                subdirs.append(name)
                entry = StageEntry(rel, "dir", mode, 0, full, "", self.default_target, self.variant)
            elif stat.S_ISREG(st.st_mode):
                entry = self._file(fd, name, rel, full)
                if entry is None:
                    continue
            else:
                kind = next((what for test, what in _TYPE_NAMES if test(st.st_mode)), "an unknown file type")
                self.problem(full, f"is {kind}: only regular files, directories and symlinks can be packaged")
                continue
            self._add(stage, entry)
        return subdirs

    def _add(self, stage: Stage, entry: StageEntry) -> None:
        """An entry of the stage (in a family dir, once routed to its target)."""
        if self.adir.kind == "family":
            entry = self._route(entry)
            if entry is None:
                return
        stage.entries.append(entry)

    def _file(self, dir_fd: int, name: str, rel: str, full: str) -> StageEntry | None:
        """Open a regular file (the readability test that also holds for root), read its
        facts, and make its entry from what the open file says (fstat: its type, mode,
        size and identity), not from the directory listing."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            self.problem(full, _open_error(exc, dir_fd, name))
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.problem(full, "changed type while being read (now not a regular file)")
                return None
            embedded = (self.adir.kind == "family" and not _TARGET_IN_NAME.search(rel)
                        and rel.lower().endswith(EMBEDDING_SUFFIXES))
            identity = (st.st_dev, st.st_ino)
            # most files are told by their first bytes, read on the descriptor; the rest
            # are read further through a file object
            head = os.pread(fd, HEAD_SIZE, 0)
            facts = plain_facts(head, name, embedded)
            if facts is None:
                with os.fdopen(os.dup(fd), "rb") as fh:
                    facts = read_facts(fh, name, embedded, host_code=False, head=head)
        except OSError as exc:
            self.problem(full, f"cannot be read: {exc.strerror or exc}")
            return None
        finally:
            os.close(fd)
        self.facts[full] = facts
        if facts.elf == "host":
            self.host_elfs.append((full, identity))
        return StageEntry(rel, "file", stat.S_IMODE(st.st_mode), st.st_size, full, "", self.default_target,
                          self.variant, facts, identity)

    def _route(self, entry: StageEntry) -> StageEntry | None:
        """Find the one target of an entry in a family dir, or report it. A per-arch dir
        (library/gfx942/) belongs to its target; other dirs are owned through the files
        routed into them (None, silently)."""
        adir = self.adir
        if entry.type == "dir":
            named = {kt.bare_processor(n) for n in _TARGET_IN_NAME.findall(entry.rel)}
            if len(named) != 1:
                return None
            return StageEntry(entry.rel, "dir", entry.mode, 0, entry.source, "", named.pop(), "")
        facts = entry.facts or FileFacts()
        reason, variants = "", []
        if facts.archive is not None:
            variants, reason = list(facts.archive.arches), "its kpack TOC lists "
        elif facts.archive_error:
            self.problem(entry.source, f"cannot be routed to a target: {facts.archive_error}")
            return None
        if not variants:
            named = _TARGET_IN_NAME.findall(entry.rel if entry.type != "symlink" else entry.rel + "/" + entry.link_target)
            variants, reason = named, "its name names "
        if not variants and facts.device_error:
            self.problem(entry.source, f"cannot be routed to a target: {facts.device_error}")
            return None
        if not variants and facts.targets:
            variants, reason = list(facts.targets), "its code objects are for "
        candidates = {kt.bare_processor(v) for v in variants}
        if len(candidates) != 1:
            what = reason + ", ".join(sorted(set(variants))) if candidates else "no target found in its name or content"
            self.problem(entry.source, f"cannot be routed to one target of {adir.suffix}: {what}")
            return None
        (target,) = candidates
        if target not in self.families[adir.suffix]:
            self.problem(entry.source, f"routed to {target}, which is not in family {adir.suffix}")
            return None
        variant = variants[0] if len(set(variants)) == 1 else target
        return entry._replace(target=target, variant=variant)


def _is_symlink(dir_fd: int, rel: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(rel, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_error(exc: OSError, dir_fd: int, name: str) -> str:
    """What to say when opening an entry failed: a symlink swapped in, or unreadable."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(dir_fd, name):
        return "is a symlink where a real file or directory was expected (never followed)"
    if exc.errno == errno.EACCES:
        return "cannot be read: permission denied (rocpkg must read every file it packs)"
    return f"cannot be read: {exc.strerror}"
