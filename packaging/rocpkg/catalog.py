"""Index an artifacts directory: artifacts, manifests, stage trees, and the target of every
device file.

Both of TheRock's layouts are understood: split per target (`fft_lib_gfx942`,
`blas_lib_gfx90a:xnack+`) and recombined per family (`fft_lib_gfx110X`), where each file is
routed to one target by its kpack TOC, its code-object header or its name. The catalog only
reads; it never copies a byte of the artifacts.
"""
from __future__ import annotations

import os
import posixpath
import re
import stat
from dataclasses import dataclass, field

from kpack import targets as kt
from rocpkg.errors import RocpkgInputError

MANIFEST = "artifact_manifest.txt"
GENERIC = "generic"
# A processor name inside a file name or path component: gfx942, gfx1100, gfx90a:xnack+ ...
_TARGET_IN_NAME = re.compile(r"(?<![0-9a-z])(gfx[0-9]{1,2}[0-9a-f]{1,2}(?:-generic)?(?::(?:xnack|sramecc)[+-])*)(?![0-9a-z])")


@dataclass(frozen=True)
class StageEntry:
    """One path of a stage tree, with the target it belongs to ("" = host/generic)."""

    rel: str            # posix path relative to the stage root ("lib/librocfft.so.0")
    type: str           # "file" | "dir" | "symlink"
    mode: int           # permission bits
    size: int
    source: str         # absolute path in the artifacts dir
    link_target: str = ""
    target: str = ""    # bare lower-case target ("gfx942") for device files
    variant: str = ""   # full target ID it was built for ("gfx90a:xnack+")


@dataclass
class Stage:
    line: str                       # the manifest line ("math-libs/rocFFT/stage")
    root: str                       # absolute stage dir
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

    @property
    def bare_target(self) -> str:
        return kt.parse_target(self.suffix).processor.lower() if self.kind == "target" else ""


@dataclass
class Catalog:
    root: str
    families: dict[str, list[str]]
    dirs: dict[tuple[str, str], list[ArtifactDir]] = field(default_factory=dict)

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


def sort_targets(names) -> list[str]:
    order = {t: i for i, t in enumerate(t for ts in kt.FAMILIES.values() for t in ts)}
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
    if target is not None and target.processor.lower() in {t for ts in families.values() for t in ts}:
        return "target"
    if suffix in families:
        return "family"
    return None


def scan(root: str | os.PathLike, families: dict[str, list[str]] | None = None) -> Catalog:
    """Index every artifact dir under root; all problems are reported together."""
    root = os.path.abspath(os.fspath(root))
    families = families or kt.FAMILIES
    if not os.path.isdir(root):
        raise RocpkgInputError(root, "artifacts directory not found")
    catalog = Catalog(root=root, families=families)
    problems: list[tuple[str, str]] = []
    for dirname in sorted(os.listdir(root)):
        path = os.path.join(root, dirname)
        if dirname.startswith(".") or not os.path.isdir(path):
            continue
        parsed = parse_dirname(dirname)
        if parsed is None:
            problems.append((path, "directory name is not <name>_<component>_<suffix>"))
            continue
        artifact, component, suffix = parsed
        kind = classify_suffix(suffix, families)
        if kind is None:
            problems.append((path, f"suffix {suffix!r} is neither 'generic', a known target nor a family"))
            continue
        adir = ArtifactDir(dirname, artifact, component, suffix, kind, path)
        _read_stages(adir, families, problems)
        catalog.dirs.setdefault((artifact, component), []).append(adir)
    if problems:
        raise RocpkgInputError(problems)
    return catalog


def _read_stages(adir: ArtifactDir, families, problems) -> None:
    manifest = os.path.join(adir.path, MANIFEST)
    try:
        with open(manifest, encoding="utf-8") as fh:
            lines = [ln.strip() for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    except FileNotFoundError:
        problems.append((manifest, "missing manifest"))
        return
    except (OSError, UnicodeDecodeError) as exc:
        problems.append((manifest, f"cannot read: {exc}"))
        return
    if not lines:
        problems.append((manifest, "empty manifest: lists no stage dir"))
        return
    for lineno, line in enumerate(lines, 1):
        where = f"{manifest}:{lineno}"
        norm = posixpath.normpath(line)
        if line.startswith("/") or norm == ".." or norm.startswith("../"):
            problems.append((where, f"stage dir {line!r} escapes the artifact dir"))
            continue
        stage_root = os.path.join(adir.path, norm)
        if not os.path.isdir(stage_root) or os.path.islink(stage_root):
            problems.append((where, f"stage dir {line!r} does not exist"))
            continue
        stage = Stage(norm, stage_root)
        _walk_stage(adir, stage, families, problems)
        adir.stages.append(stage)


def _walk_stage(adir: ArtifactDir, stage: Stage, families, problems) -> None:
    default_target = adir.bare_target if adir.kind == "target" else ""
    variant = adir.suffix if adir.kind == "target" else ""
    for dirpath, dirnames, filenames in os.walk(stage.root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, stage.root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = os.lstat(full)
            except OSError as exc:
                problems.append((full, f"cannot stat: {exc.strerror}"))
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                link = os.readlink(full)
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
                if link.startswith("/") or resolved == ".." or resolved.startswith("../"):
                    problems.append((full, f"symlink to {link!r} escapes its stage dir"))
                    continue
                entry = StageEntry(rel, "symlink", 0o777, 0, full, link, default_target, variant)
                if name in dirnames:
                    dirnames.remove(name)  # never follow
            elif stat.S_ISDIR(st.st_mode):
                entry = StageEntry(rel, "dir", mode, 0, full, "", default_target, variant)
            elif stat.S_ISREG(st.st_mode):
                entry = StageEntry(rel, "file", mode, st.st_size, full, "", default_target, variant)
            else:
                problems.append((full, "not a regular file, directory or symlink"))
                continue
            if adir.kind == "family":
                if entry.type == "dir":
                    # a per-arch dir (library/gfx942/) belongs to its target; other dirs are
                    # owned through the files routed into them
                    named = {kt.parse_target(n).processor.lower() for n in _TARGET_IN_NAME.findall(rel)}
                    if len(named) != 1:
                        continue
                    entry = StageEntry(rel, "dir", mode, 0, full, "", named.pop(), "")
                else:
                    entry = _route(adir, entry, families, problems)
                    if entry is None:
                        continue
            stage.entries.append(entry)


def _route(adir: ArtifactDir, entry: StageEntry, families, problems) -> StageEntry | None:
    """Find the one target of a file in a family dir, or report it."""
    members = set(families[adir.suffix])
    candidates: set[str] = set()
    variants: set[str] = set()
    reason = ""
    try:
        if entry.type == "file" and entry.rel.endswith(".kpack"):
            from kpack.archive import read_toc_arches

            arches = read_toc_arches(entry.source)
            variants = set(arches)
            candidates = {kt.parse_target(a).processor.lower() for a in arches}
            reason = "its kpack TOC lists " + ", ".join(sorted(arches))
        if not candidates:
            named = _TARGET_IN_NAME.findall(entry.rel if entry.type != "symlink" else entry.rel + "/" + entry.link_target)
            if named:
                variants = set(named)
                candidates = {kt.parse_target(n).processor.lower() for n in named}
                reason = "its name names " + ", ".join(sorted(named))
        if not candidates and entry.type == "file":
            from kpack.detect import detect_targets

            detected = detect_targets(entry.source)
            variants = set(detected)
            candidates = {kt.parse_target(t).processor.lower() for t in detected}
            reason = "its code objects are for " + ", ".join(sorted(detected))
    except Exception as exc:  # KpackFormatError, OSError: a file we cannot read is unroutable
        problems.append((entry.source, f"cannot be routed to a target: {exc}"))
        return None
    if len(candidates) != 1:
        what = reason if candidates else "no target found in its name or content"
        problems.append((entry.source, f"cannot be routed to one target of {adir.suffix}: {what}"))
        return None
    (target,) = candidates
    if target not in members:
        problems.append((entry.source, f"routed to {target}, which is not in family {adir.suffix}"))
        return None
    variant = sorted(variants)[0] if len(variants) == 1 else target
    return StageEntry(entry.rel, entry.type, entry.mode, entry.size, entry.source, entry.link_target, target, variant)
