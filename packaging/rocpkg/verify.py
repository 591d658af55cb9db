"""`rocpkg verify`: the checks no packager makes today (DESIGN §7), over a plan before a
byte is written or over a built OUT tree read back from its .deb and .rpm files.

The costly packaging bugs are silent: kernels missing for one target, a meta-package that
lost a dependency, a device package that ships nothing. Users meet them as
`hipErrorInvalidImage` on their GPU. Both entry points turn their input into the same
per-format view (package specs, the markers of host binaries, the TOCs of kpack archives)
and run the same checks on it:

kernels (per host binary with a `.rocm_kpack_ref` marker, per target its package is
planned for, per target ID the release builds for that target):
  archive-missing   no archive the marker's search path names is shipped by the target's
                    device package or its dependency closure
  variant-missing   the release builds a feature variant (`gfx942:xnack+`) but the closure
                    ships no archive for it: the runtime would fall back to another build
  archive-target    the archive found does not list that target ID in its gfx_arches
  kernel-missing    the archive lacks a `kernel_name#N` the binary needs. The binary needs
                    every N that any archive of the same prefix (any target, any variant)
                    holds for its kernel_name: a key present in the gfx1100 archive and
                    absent from the gfx942 one is a kernel missing for gfx942.
  generic-binary    a binary needing per-target kernels sits in a package that has no
                    device packages, and its closure ships no archive for a target
packages and relations:
  empty-device      a device package ships no file and no dependency ships the archives
                    its host binaries' markers name (its binaries' kernel checks for that
                    target are not repeated: one cause, one line)
  device-host       (built tree) a package named for a target ships files but is no host
                    package's device package (it does not pin a host package)
  target-depends    a device package's closure lacks the same-target device package of a
                    host package its host package pulls in
  meta-kernels      a per-target or family meta-package's closure holds a host package but
                    not that host's device package for one of its targets
  meta-foreign-target  a target, family or alias package's closure holds another target's
                    device package
  file-conflict     two packages of one format ship the same path (directories excepted)
  duplicate-package (built tree) two package files of one name: verify checks one release
  relation          a relation resolves neither inside the repository nor to an external
                    package
  unreadable        a marker, archive or package that cannot be read

The release's target IDs for a bare target are the target and every feature variant that
any archive shipped by a device package of that target lists: a release builds the same
target IDs for all its libraries, so one library lacking the `gfx942:xnack+` build is the
"xnack variant dropped" bug.

Reading a built tree never loads a package: each .deb's data.tar and each .rpm's cpio
payload is streamed once; a host ELF is spilled to a temporary file just long enough to
read its marker section; of a kpack archive only its header and TOC are kept.
"""
from __future__ import annotations

import io
import os
import posixpath
import re
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from kpack import targets as kt
from kpack.archive import KpackReader
from kpack.errors import KpackFormatError
from kpack.loader import ArchiveIndex, compatible_targets, find_kernel, search_order
from kpack.marker import GFXARCH, Marker, read_marker
from rocpkg import model as m
from rocpkg.catalog import FileFacts
from rocpkg.config import common_namespace, external_rule, namespace, relation_names
from rocpkg.errors import RocpkgInputError
from rocpkg.plan import closure, device_isas
from rocpkg.streams import CHUNK, copy_stream, read_exact, read_upto, skip_exact

REPORT_SCHEMA = "rocpkg-verify/1"
# The checks verify makes of a plan (and so the ones build refuses on, rocpkg.gate)
PLAN_CHECKS = ("archive-missing", "variant-missing", "archive-target", "kernel-missing", "generic-binary",
               "empty-device", "target-depends", "meta-kernels", "meta-foreign-target", "file-conflict",
               "relation", "unreadable", "device-code-in-host", "misfiled-device-code")
RELATION_FIELDS = ("depends", "pre_depends", "recommends", "suggests")
EM_AMDGPU = 224
KPACK_HEAD = 68                 # header, zeros to 64, and the zstd frame count at 64
MAX_TOC = 256 << 20             # a TOC larger than this is refused, not read into memory
_PIN = re.compile(r"^(?P<name>[^\s(|]+)\s*(?:\(\s*=\s*(?P<deb>[^\s)]+)\s*\)|=\s*(?P<rpm>\S+))$")


# -- the report ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """One failed check: which package, which path (or "-"), which target ID (or "-")."""

    check: str
    package: str
    path: str
    target: str
    message: str
    format: str = ""

    def line(self) -> str:
        package = f"{self.package} ({self.format})" if self.format else self.package
        return f"error: {package}: {self.path or '-'}: {self.target or '-'}: {self.message}"


@dataclass
class Closure:
    """The offline install closure of one meta-package, family meta or alias."""

    format: str
    root: str
    kind: str                       # "alias" | "family" | "target" | "meta"
    family: str = ""
    target: str = ""
    packages: list[str] = field(default_factory=list)
    devices: dict[str, list[str]] = field(default_factory=dict)   # target -> device packages
    unresolved: list[str] = field(default_factory=list)


@dataclass
class VerifyReport:
    source: str                     # "plan" or the OUT directory
    formats: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    closures: list[Closure] = field(default_factory=list)
    externals: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    targets: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # fmt -> target -> IDs
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def checks(self) -> set[str]:
        return {p.check for p in self.problems}

    def to_dict(self) -> dict:
        return {"schema": REPORT_SCHEMA, "source": self.source, "ok": self.ok, "formats": self.formats,
                "counts": self.counts, "targets": self.targets, "externals": self.externals,
                "warnings": self.warnings, "problems": [asdict(p) for p in self.problems],
                "closures": [asdict(c) for c in self.closures]}


# -- the per-format view both entry points build --------------------------------------------

@dataclass
class _Archive:
    """What verify needs of a kpack archive: its target IDs and key -> target IDs."""

    arches: tuple[str, ...]
    kernels: dict[str, frozenset[str]]


@dataclass
class _Release:
    fmt: str
    specs: dict[str, m.PackageSpec]
    is_external: Callable[[str], bool]
    families: dict[str, list[str]]
    markers: dict[tuple[str, str], Marker] = field(default_factory=dict)   # (package, path)
    archives: dict[tuple[str, str], _Archive] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def problem(self, check: str, package: str, path: str, target: str, message: str) -> None:
        self.problems.append(Problem(check, package, path or "-", target or "-", message, self.fmt))


def _payload(spec: m.PackageSpec) -> list[m.FileEntry]:
    """Files and symlinks a package ships, leaving out the doc files a .deb writer adds."""
    doc = f"/usr/share/doc/{spec.name}/"
    return [f for f in spec.files if f.type != m.DIR and not f.path.startswith(doc)]


def _archive_of(reader: KpackReader) -> _Archive:
    kernels: dict[str, set[str]] = {}
    for entry in reader.entries():
        kernels.setdefault(entry.key, set()).add(entry.arch)
    return _Archive(tuple(reader.gfx_arches), {k: frozenset(v) for k, v in kernels.items()})


def _looks_host_elf(head: bytes) -> bool:
    """A little-endian ELF that is not an AMDGPU code object (those carry no marker)."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return False
    return struct.unpack_from("<H", head, 18)[0] != EM_AMDGPU


# -- a plan ---------------------------------------------------------------------------------

def verify_plan(plan, config=None) -> VerifyReport:
    """Check a plan before building: markers and archives are read from the artifacts the
    plan's files come from. `config` (rocpkg.config.Config) decides which names are
    external; without it, the plan's settings and definition names do."""
    if config is not None:
        external = external_rule(namespace(config), config.settings["external"])
    else:
        definitions = {s.definition for specs in plan.packages.values() for s in specs if s.definition}
        external = external_rule(common_namespace(definitions), plan.settings.get("external", []))
    families = {f: list(ts) for f, ts in (plan.settings.get("families") or kt.FAMILIES).items()}
    report = VerifyReport(source="plan", formats=sorted(plan.packages), warnings=list(plan.warnings))
    for fmt in report.formats:
        release = _Release(fmt, plan.by_name(fmt), external, families)
        for spec in release.specs.values():
            for fe in _payload(spec):
                if fe.type != m.FILE:
                    continue
                facts = plan.facts.get(fe.source) or FileFacts()  # the catalog read each file once
                if fe.path.endswith(".kpack"):
                    if facts.archive is None:
                        why = facts.archive_error or "not read by the catalog"
                        release.problem("unreadable", spec.name, fe.path, "", f"kpack archive {fe.source}: {why}")
                    else:
                        release.archives[(spec.name, fe.path)] = _Archive(facts.archive.arches, facts.archive.kernels)
                elif spec.kind != m.KIND_DEVICE:
                    if facts.marker_error:
                        release.problem("unreadable", spec.name, fe.path, "",
                                        f"marker of {fe.source}: {facts.marker_error}")
                    elif facts.marker is not None:
                        release.markers[(spec.name, fe.path)] = facts.marker
                _check_placement(release, report, spec, fe, facts, families)
        _check_release(release, report)
    _finish(report)
    return report


def _check_placement(release: _Release, report: VerifyReport, spec: m.PackageSpec, fe: m.FileEntry,
                     facts: FileFacts, families: dict[str, list[str]]) -> None:
    """Device code only where it belongs: none in a host or plain package (a fat binary
    there means the kpack split step did not run; a runtime's own embedded kernels, such
    as ROCr's trap handlers, are a warning), and in a device package only code for its
    target."""
    from kpack.placement import EMBEDDED_CODE_OBJECT, code_fits

    if spec.kind != m.KIND_DEVICE:
        for kind, what in facts.host_code:
            if kind == EMBEDDED_CODE_OBJECT:
                report.warnings.append(f"{spec.name}: {fe.path}: {what} (kept: a runtime may carry its own kernels)")
            else:
                release.problem("device-code-in-host", spec.name, fe.path, "",
                                f"{fe.source} {what}; host packages carry no kernels")
        return
    if fe.path.endswith(".kpack") or not spec.target:
        return  # archives: kpack.check compares every code object with the arch it is filed under
    foreign = [t for t in facts.targets if not code_fits(t, spec.target, families)]
    if foreign:
        release.problem("misfiled-device-code", spec.name, fe.path, spec.target,
                        f"{fe.source} holds device code for {', '.join(foreign)}, filed under {spec.target}")


# -- a built tree ---------------------------------------------------------------------------

def verify_tree(out_dir: str | os.PathLike, *, formats: Iterable[str] = ("deb", "rpm"), jobs: int = 0) -> VerifyReport:
    """Check the packages under OUT/deb/pool/main and OUT/rpm/<arch>/ as built: names,
    relations and files from their metadata, markers and archives from their payloads.
    Which package is whose device package is read from the relations themselves: a device
    package is named for a target, pins a host package at its own version, and some
    meta-package pins both."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    found = _package_files(out_dir)
    if not any(found[f] for f in formats):
        raise RocpkgInputError(out_dir, "no .deb under deb/pool/main and no .rpm under rpm/<arch>/: nothing to verify")
    report = VerifyReport(source=out_dir, formats=[f for f in ("deb", "rpm") if found[f] and f in formats])
    workers = jobs or min(8, os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="rocpkg-verify-") as spill, ThreadPoolExecutor(workers) as pool:
        for fmt in report.formats:
            _check_release(_read_tree_release(fmt, found[fmt], pool, spill), report)
    _finish(report)
    return report


def _read_tree_release(fmt: str, package_files: list[str], pool: ThreadPoolExecutor, spill: str) -> _Release:
    """One format's packages: metadata first (cheap, decides host and device packages),
    then one streamed pass over each payload."""
    read_meta = _read_deb_meta if fmt == "deb" else _read_rpm_meta
    specs: dict[str, m.PackageSpec] = {}
    files_of: dict[str, str] = {}
    release = _Release(fmt, specs, lambda name: False, {f: list(t) for f, t in kt.FAMILIES.items()})
    for path, spec, error in pool.map(read_meta, package_files):
        if error is not None:
            release.problem("unreadable", os.path.basename(path), path, "", error)
        elif spec.name in specs:
            release.problem("duplicate-package", spec.name, path, "",
                            f"a second package of this name (besides {os.path.basename(files_of[spec.name])}): "
                            f"verify checks one release")
        else:
            specs[spec.name] = spec
            files_of[spec.name] = path
    release.is_external = external_rule(common_namespace(specs))
    _classify_tree(release)
    read_payload = _read_deb_payload if fmt == "deb" else _read_rpm_payload
    names = list(specs)
    results = pool.map(read_payload, [specs[n] for n in names], [files_of[n] for n in names], [spill] * len(names))
    for name, (files, markers, archives, problems) in zip(names, results):
        if files is not None:
            specs[name].files = files
        release.markers.update(markers)
        release.archives.update(archives)
        release.problems.extend(problems)
    _kinds_after_payload(release)
    return release


def _package_files(out_dir: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"deb": [], "rpm": []}
    pool = os.path.join(out_dir, "deb", "pool", "main")
    if os.path.isdir(pool):
        for root, dirs, files in os.walk(pool):
            dirs.sort()
            found["deb"] += [os.path.join(root, f) for f in sorted(files) if f.endswith(".deb")]
    rpm_root = os.path.join(out_dir, "rpm")
    if os.path.isdir(rpm_root):
        for arch in sorted(os.listdir(rpm_root)):
            arch_dir = os.path.join(rpm_root, arch)
            if arch != "repodata" and os.path.isdir(arch_dir):
                found["rpm"] += [os.path.join(arch_dir, f) for f in sorted(os.listdir(arch_dir)) if f.endswith(".rpm")]
    return found


def _read_deb_meta(path: str):
    from debian.debian_support import Version

    from rocpkg.deb import parse_relations, read_deb_control

    try:
        control = read_deb_control(path)
        version = Version(control["Version"])
        spec = m.PackageSpec("deb", control["Package"], version.upstream_version, version.debian_revision or "",
                             control.get("Architecture", ""), "", epoch=int(version.epoch or 0))
        for attr, key in (("depends", "Depends"), ("pre_depends", "Pre-Depends"), ("recommends", "Recommends"),
                          ("suggests", "Suggests"), ("provides", "Provides")):
            getattr(spec, attr).extend(parse_relations(control.get(key, "")))
        return path, spec, None
    except (RocpkgInputError, KeyError, ValueError, OSError, EOFError) as exc:
        return path, None, _why(exc)


def _why(exc: Exception) -> str:
    if isinstance(exc, RocpkgInputError):
        return "; ".join(what for _, what in exc.problems)
    return str(exc) or type(exc).__name__


def _rpm_relations(record, kind: str) -> list[str]:
    """The record's relations of one kind as text, without rpmlib() features or repeats."""
    from rocpkg.rpm.relations import format_relation, is_rpmlib

    out = []
    for name, flags, version in record.dependencies[kind]:
        text = format_relation(name, flags, version)
        if not is_rpmlib(name, flags) and text not in out:
            out.append(text)
    return out


def _read_rpm_meta(path: str):
    from rocpkg.rpm import package_from_header, read_rpm

    try:
        record = package_from_header(read_rpm(path))
        spec = m.PackageSpec("rpm", record.name, record.version, record.release, record.arch, "",
                             epoch=record.epoch)
        spec.depends = _rpm_relations(record, "requires")
        spec.recommends = _rpm_relations(record, "recommends")
        spec.suggests = _rpm_relations(record, "suggests")
        spec.provides = _rpm_relations(record, "provides")
        spec.files = record.file_entries()
        return path, spec, None
    except (RocpkgInputError, KeyError, ValueError, OSError, EOFError) as exc:
        return path, None, _why(exc)


def _target_suffix(name: str) -> str:
    """The bare target a package name ends with (`rocm-blas7.1-gfx942` -> gfx942), or ""."""
    tail = name.rsplit("-", 1)[-1]
    try:
        tid = kt.parse_target(tail)
    except kt.InvalidTargetError:
        return ""
    return tid.processor if tid.processor in kt.MACH_BY_PROCESSOR and not tid.features else ""


def _family_suffix(name: str, families: dict[str, list[str]]) -> str:
    tail = name.rsplit("-", 1)[-1].lower()
    return next((f for f in families if f.lower() == tail and not _target_suffix(name)), "")


def _pins(spec: m.PackageSpec) -> set[str]:
    """Packages this one depends on at exactly its own version."""
    pinned = set()
    for rel in spec.depends + spec.pre_depends:
        match = _PIN.match(rel.strip())
        if match and (match.group("deb") or match.group("rpm")) == spec.evr:
            pinned.add(match.group("name"))
    return pinned


def _classify_tree(release: _Release) -> None:
    """Host and device packages from the relations alone (see verify_tree)."""
    specs = release.specs
    pins = {name: _pins(spec) for name, spec in specs.items()}
    pinned_by: dict[str, set[str]] = {}
    for name, pinned in pins.items():
        for dep in pinned:
            pinned_by.setdefault(dep, set()).add(name)
    for name, spec in specs.items():
        target = _target_suffix(name)
        if not target:
            continue
        for host in sorted(pins[name]):
            if host not in specs or _target_suffix(host):
                continue
            if any(name in pins[meta] for meta in pinned_by.get(host, ()) if meta != name):
                spec.kind, spec.target, spec.definition = m.KIND_DEVICE, target, host
                specs[host].kind, specs[host].definition = m.KIND_HOST, host
                break


def _kinds_after_payload(release: _Release) -> None:
    """Files, meta, family and alias packages once the payload listing is known; a package
    named for a target that ships files but belongs to no host is reported."""
    for name, spec in release.specs.items():
        if spec.kind in (m.KIND_HOST, m.KIND_DEVICE):
            continue
        has_files = bool(_payload(spec))
        spec.kind = m.KIND_FILES if has_files else m.KIND_META
        spec.target = _target_suffix(name)
        spec.family = "" if spec.target else _family_suffix(name, release.families)
        if has_files and spec.target:
            release.problem("device-host", name, "", spec.target,
                            "ships files for a target but pins no host package at its own version "
                            "(is it a device package that lost its host dependency?)")
    for spec in release.specs.values():
        # an alias pins the family meta of its family (rocm-gfx110x -> rocm7.1-gfx110x)
        if spec.kind == m.KIND_META and spec.family and any(
                release.specs[dep].family == spec.family for dep in _pins(spec) if dep in release.specs):
            spec.kind = m.KIND_ALIAS


class _Bounded(io.RawIOBase):
    """Exactly `size` bytes of a stream; what is not read is skipped by skip()."""

    def __init__(self, stream, size: int):
        self.stream = stream
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.left <= 0:
            return 0
        data = self.stream.read(min(len(buffer), self.left))
        if not data:
            raise EOFError(f"payload ended with {self.left} bytes of a member unread")
        buffer[: len(data)] = data
        self.left -= len(data)
        return len(data)

    def skip(self) -> None:
        while self.left > 0:
            self.read(min(CHUNK, self.left))


class _SparseImage(io.RawIOBase):
    """A kpack archive's header and TOC at their offsets, zeros elsewhere: all that
    KpackReader reads to list target IDs and kernel keys."""

    def __init__(self, name: str, size: int, pieces: list[tuple[int, bytes]]):
        self.name = name
        self.size = size
        self.pieces = pieces
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.size, self.pos + n)
        out = bytearray(max(0, end - self.pos))
        for start, data in self.pieces:
            lo, hi = max(start, self.pos), min(start + len(data), end)
            if lo < hi:
                out[lo - self.pos: hi - self.pos] = data[lo - start: hi - start]
        self.pos = end
        return bytes(out)


class _Inspector:
    """Looks at each payload member once, as it streams by: kpack archives keep their
    header and TOC, host ELF files are spilled to read their marker."""

    def __init__(self, spec: m.PackageSpec, spill_dir: str):
        self.spec = spec
        self.spill_dir = spill_dir
        self.markers: dict[tuple[str, str], Marker] = {}
        self.archives: dict[tuple[str, str], _Archive] = {}
        self.problems: list[Problem] = []

    def wants(self, path: str) -> bool:
        return path.endswith(".kpack") or (self.spec.kind != m.KIND_DEVICE
                                           and not path.startswith(f"/usr/share/doc/{self.spec.name}/"))

    def member(self, path: str, size: int, stream) -> None:
        try:
            if path.endswith(".kpack"):
                self.archives[(self.spec.name, path)] = self._archive(path, size, stream)
            elif self.spec.kind != m.KIND_DEVICE:
                marker = self._marker(size, stream)
                if marker is not None:
                    self.markers[(self.spec.name, path)] = marker
        except KpackFormatError as exc:
            self.problems.append(Problem("unreadable", self.spec.name, path, "-", str(exc), self.spec.format))

    def _archive(self, path: str, size: int, stream) -> _Archive:
        head = read_upto(stream, min(size, KPACK_HEAD))
        pieces = [(0, head)]
        if len(head) >= 16 and head[:4] == b"KPAK":
            (toc_offset,) = struct.unpack_from("<Q", head, 8)
            if len(head) <= toc_offset < size:
                if size - toc_offset > MAX_TOC:
                    raise KpackFormatError(f"TOC of {size - toc_offset} bytes is larger than verify reads")
                skip_exact(stream, toc_offset - len(head))
                pieces.append((toc_offset, read_exact(stream, size - toc_offset)))
        with KpackReader(_SparseImage(path, size, pieces)) as reader:
            return _archive_of(reader)

    def _marker(self, size: int, stream) -> Marker | None:
        head = read_upto(stream, min(size, 64))
        if not _looks_host_elf(head):
            return None
        fd, spilled = tempfile.mkstemp(dir=self.spill_dir, suffix=".elf")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(head)
                copy_stream(stream, out, size - len(head))
            return read_marker(spilled)
        finally:
            os.unlink(spilled)


def _read_deb_payload(spec: m.PackageSpec, package_file: str, spill_dir: str):
    """One pass over data.tar: the file listing, and the inspector's look at each member."""
    from rocpkg.deb import open_deb_tar

    inspector = _Inspector(spec, spill_dir)
    files: list[m.FileEntry] = []
    try:
        with open_deb_tar(package_file, "data.tar") as tar:
            for info in tar:
                path = "/" + info.name.removeprefix(".").strip("/")
                if path == "/":
                    continue
                if info.isreg():
                    files.append(m.FileEntry(path, m.FILE, info.mode & 0o7777, "", info.size))
                    if inspector.wants(path):
                        inspector.member(path, info.size, tar.extractfile(info))
                elif info.isdir():
                    files.append(m.FileEntry(path, m.DIR, info.mode & 0o7777))
                elif info.issym():
                    files.append(m.FileEntry(path, m.SYMLINK, 0o777, "", 0, info.linkname))
                else:
                    files.append(m.FileEntry(path, "other", info.mode & 0o7777))
    except (RocpkgInputError, OSError, EOFError, ValueError) as exc:
        inspector.problems.append(Problem("unreadable", spec.name, package_file, "-", f"data.tar: {_why(exc)}", "deb"))
    except Exception as exc:  # tarfile / zstd / lzma errors of a corrupt member
        inspector.problems.append(Problem("unreadable", spec.name, package_file, "-", f"data.tar: {exc}", "deb"))
    return files, inspector.markers, inspector.archives, inspector.problems


def _read_rpm_payload(spec: m.PackageSpec, package_file: str, spill_dir: str):
    """One pass over the cpio payload, only when the header lists something to inspect."""
    from rocpkg.rpm import iter_cpio, open_payload_stream, package_from_header, read_rpm, skip_cpio_pad

    inspector = _Inspector(spec, spill_dir)
    by_index = {i: fe for i, fe in enumerate(spec.files)}
    if not any(fe.type == m.FILE and inspector.wants(fe.path) for fe in spec.files):
        return None, {}, {}, []
    try:
        record = package_from_header(read_rpm(package_file))
        with open(package_file, "rb") as fh:
            fh.seek(record.payload_offset)
            stream = io.BufferedReader(open_payload_stream(fh, record.payload_compressor), CHUNK)
            for index, path, size in iter_cpio(stream, by_index):
                body = _Bounded(stream, size)
                fe = by_index.get(index) if index is not None else None
                if fe is not None and fe.type == m.FILE and inspector.wants(path):
                    inspector.member(path, size, body)
                body.skip()
                skip_cpio_pad(stream, size)
    except (RocpkgInputError, OSError, EOFError, ValueError) as exc:
        inspector.problems.append(Problem("unreadable", spec.name, package_file, "-", f"payload: {_why(exc)}", "rpm"))
    except Exception as exc:  # zstd / lzma errors of a corrupt payload
        inspector.problems.append(Problem("unreadable", spec.name, package_file, "-", f"payload: {exc}", "rpm"))
    return None, inspector.markers, inspector.archives, inspector.problems


# -- the checks -----------------------------------------------------------------------------

def _finish(report: VerifyReport) -> None:
    unique = sorted(set(report.problems), key=lambda p: (p.format, p.package, p.path, p.target, p.check, p.message))
    report.problems = unique


class _Checker:
    def __init__(self, release: _Release, report: VerifyReport):
        self.r = release
        self.report = report
        self.specs = release.specs
        self.fmt = release.fmt
        self._closures: dict[str, tuple[list[str], list[str]]] = {}
        self._indexes: dict[str, ArchiveIndex] = {}
        self._by_isa: dict[tuple, list[str]] = {}
        self._shipped: dict[str, dict[str, str]] = {}
        self.devices: dict[str, dict[str, str]] = {}     # host -> target -> device package
        hosts = {s.definition: s.name for s in self.specs.values() if s.kind == m.KIND_HOST}
        for spec in self.specs.values():
            if spec.kind == m.KIND_DEVICE and spec.definition in hosts:
                self.devices.setdefault(hosts[spec.definition], {})[spec.target] = spec.name
        self.device_target = {d: t for per in self.devices.values() for t, d in per.items()}
        self.targets = sorted({t for per in self.devices.values() for t in per}, key=_target_order)
        self.archive_owner: dict[str, tuple[str, _Archive]] = {}
        for (package, path), info in sorted(release.archives.items()):
            self.archive_owner.setdefault(path, (package, info))
        self.variants = self._release_variants()
        self.counts = {"packages": len(self.specs), "host_binaries": 0, "archives": len(release.archives),
                       "lookups": 0, "kernels_checked": 0, "closures": 0}
        self.empty: set[str] = set()

    # helpers
    def closure(self, root: str) -> tuple[list[str], list[str]]:
        if root not in self._closures:
            self._closures[root] = closure(self.specs, root)
        return self._closures[root]

    def shipped(self, root: str) -> dict[str, str]:
        """Install path -> package, over the closure of root."""
        if root not in self._shipped:
            paths: dict[str, str] = {}
            for name in self.closure(root)[0]:
                for fe in _payload(self.specs[name]):
                    paths.setdefault(fe.path, name)
            self._shipped[root] = paths
        return self._shipped[root]

    def _release_variants(self) -> dict[str, list[str]]:
        found: dict[str, set[str]] = {t: {t} for t in self.targets}
        for path, (package, info) in self.archive_owner.items():
            target = self.device_target.get(package)
            if not target:
                continue
            for arch in info.arches:
                try:
                    tid = kt.parse_target(arch)
                except kt.InvalidTargetError:
                    continue
                if tid.processor == target and not tid.strict:
                    found[target].add(str(tid))
        return {t: sorted(v, key=lambda x: (x != t, x)) for t, v in found.items()}

    def problem(self, *args) -> None:
        self.r.problem(*args)

    # checks
    def run(self) -> None:
        self.check_empty_devices()
        self.check_markers()
        self.check_target_closures()
        self.check_file_conflicts()
        self.check_relations()
        self.report.counts[self.fmt] = self.counts
        self.report.targets[self.fmt] = self.variants
        self.report.problems.extend(self.r.problems)

    def _exact_paths(self, marker: Marker, path: str, target_id: str) -> list[str]:
        """Per search path, the archive the marker names for exactly `target_id`."""
        return [search_order(Marker([sp], marker.kernel_name), path, target_id)[0]
                for sp in marker.kpack_search_paths]

    def _host_markers(self, host: str) -> list[tuple[str, Marker]]:
        return [(path, mk) for (pkg, path), mk in sorted(self.r.markers.items()) if pkg == host]

    def opener(self, root: str):
        """The runtime's view of an install of `root`'s closure: an archive exists where a
        package of the closure ships it (loader.find_kernel's open_archive)."""
        shipped = self.shipped(root)

        def open_archive(path: str) -> ArchiveIndex | None:
            if path not in shipped:
                return None
            owned = self.archive_owner.get(path)
            if owned is None:  # shipped but unreadable: reported as such; the runtime skips it
                raise KpackFormatError("unreadable archive", path=path)
            return self._index(path, owned[1])
        return open_archive

    def _index(self, path: str, info: _Archive) -> ArchiveIndex:
        if path not in self._indexes:
            self._indexes[path] = ArchiveIndex.from_kernels(info.arches, info.kernels)
        return self._indexes[path]

    def check_empty_devices(self) -> None:
        for host, per_target in sorted(self.devices.items()):
            markers = self._host_markers(host)
            for target, device in per_target.items():
                if _payload(self.specs[device]):
                    continue
                shipped = self.shipped(device)
                opener = self.opener(device)
                providers = set()
                for path, mk in markers:
                    for isa in device_isas(target):
                        found = find_kernel(mk, path, isa, 0, opener)
                        if found.archive and shipped.get(found.archive, device) != device:
                            providers.add(shipped[found.archive])
                if not providers:
                    self.empty.add(device)
                    why = (f"and none of its dependencies ships the kpack archives the markers of {host}'s "
                           f"{len(markers)} binaries name") if markers else f"and {host} has no binary needing kernels"
                    self.problem("empty-device", device, "", target, f"device package ships no file, {why}")

    def _required_keys(self, marker: Marker, path: str) -> set[str]:
        """Every kernel_name#N any archive of the marker's prefixes holds, for any target ID."""
        keys: set[str] = set()
        for sp in marker.kpack_search_paths:
            if GFXARCH not in sp:
                continue
            template = sp if posixpath.isabs(sp) else posixpath.normpath(posixpath.join(posixpath.dirname(path), sp))
            head, tail = template.split(GFXARCH, 1)
            for archive_path, (_, info) in self.archive_owner.items():
                if archive_path.startswith(head) and archive_path.endswith(tail) and \
                        kt.is_target(archive_path[len(head): len(archive_path) - len(tail)]):
                    keys.update(k for k in info.kernels if marker.owns(k))
        return keys

    def check_markers(self) -> None:
        """For every host binary, every target its package is for, and every ISA a GPU of
        that target reports (each feature on and off): what the runtime loads, per kernel."""
        for (package, path), marker in sorted(self.r.markers.items()):
            self.counts["host_binaries"] += 1
            spec = self.specs[package]
            required = sorted(self._required_keys(marker, path), key=_key_order) or [f"{marker.kernel_name}#0"]
            if spec.kind == m.KIND_HOST:
                plans = [(t, d) for t, d in sorted(self.devices.get(package, {}).items(), key=lambda x: _target_order(x[0]))]
            else:
                plans = [(t, package) for t in self.targets]
            for target, root in plans:
                if root in self.empty:
                    continue
                for isa in device_isas(target):
                    self._check_one(spec, path, marker, isa, target, root, required)
        self._flush_isa_problems()

    def _release_variant(self, isa: str, target: str) -> str:
        """The most specific build of the release a GPU reporting `isa` can run."""
        built = self.variants.get(target, [target])
        return next((t for t in compatible_targets(isa) if t in built), target)

    def _check_one(self, spec, path, marker, isa, target, root, required) -> None:
        self.counts["lookups"] += 1
        shipped = self.shipped(root)
        result = find_kernel(marker, path, isa, int(required[0].rpartition("#")[2]), self.opener(root))
        wanted = self._release_variant(isa, target)
        needed_by = f"needed by {path} (in {spec.name})"
        on = self._on_isas
        if result.archive is None:
            exact = self._exact_paths(marker, path, wanted)
            if spec.kind != m.KIND_HOST:
                on(isa, "generic-binary", spec.name, path, wanted,
                   f"needs per-target kernels ({exact[0]}) but {spec.name} has no device packages and its closure "
                   f"ships no archive for {wanted}: on {{isas}} the runtime finds none")
            elif result.opened:
                listed = sorted({a for p in result.opened for a in self.archive_owner[p][1].arches})
                on(isa, "archive-target", shipped.get(result.opened[0], root), result.opened[0], wanted,
                   f"on {{isas}} the runtime opens {', '.join(posixpath.basename(p) for p in result.opened)} but "
                   f"its gfx_arches list {', '.join(listed) or '(none)'}, not {wanted}: ARCH_NOT_FOUND; {needed_by}")
            else:
                on(isa, "archive-missing", root, exact[0], wanted,
                   f"{path} (in {spec.name}) finds no kpack archive on {{isas}}: neither {root} nor its "
                   f"dependencies ship {', '.join(exact)}")
            return
        owner, info = self.archive_owner[result.archive]
        if result.target != wanted:
            on(isa, "variant-missing", root, self._exact_paths(marker, path, wanted)[0], wanted,
               f"the release builds {wanted} but {root} and its dependencies ship no archive for it: on {{isas}} "
               f"the runtime loads {posixpath.basename(result.archive)} (built for {result.target}) instead; "
               f"{needed_by}")
        index = self._index(result.archive, info)
        self.counts["kernels_checked"] += len(required)
        missing = [k for k in required if not index.has_kernel(k, result.target)]
        if len(missing) == len(required):
            on(isa, "kernel-missing", owner, result.archive, result.target,
               f"holds no {marker.kernel_name}#N kernel for {result.target}: on {{isas}} the runtime opens this "
               f"archive and fails with KERNEL_NOT_FOUND; {needed_by}")
        elif missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            on(isa, "kernel-missing", owner, result.archive, result.target,
               f"lacks {shown} for {result.target} (other archives of the prefix hold them): on {{isas}} the "
               f"runtime opens this archive and fails with KERNEL_NOT_FOUND; {needed_by}")

    def _on_isas(self, isa: str, check: str, package: str, path: str, target: str, template: str) -> None:
        """One problem, one line: the GPUs (ISAs) that meet the same problem are listed in it."""
        self._by_isa.setdefault((check, package, path, target, template), []).append(isa)

    def _flush_isa_problems(self) -> None:
        for (check, package, path, target, template), isas in self._by_isa.items():
            self.problem(check, package, path, target, template.replace("{isas}", ", ".join(isas)))
        self._by_isa.clear()

    def _allowed(self, spec: m.PackageSpec) -> set[str] | None:
        if spec.target:
            return {spec.target}
        if spec.family:
            key = next((f for f in self.r.families if f.lower() == spec.family.lower()), None)
            return set(self.r.families.get(key, []))
        return None

    def check_target_closures(self) -> None:
        """Device, per-target, family and alias packages: their closure holds the kernels
        for their targets of every host package it holds, and no other target's."""
        for name, spec in sorted(self.specs.items()):
            allowed = self._allowed(spec)
            if spec.kind in (m.KIND_META, m.KIND_ALIAS):
                self._record_closure(spec)
            if allowed is None or spec.kind == m.KIND_FILES:
                continue
            members = set(self.closure(name)[0])
            for other in sorted(members):
                t = self.device_target.get(other)
                if t and t not in allowed:
                    self.problem("meta-foreign-target", name, "", t,
                                 f"closure holds {other}, kernels for {t}, which is outside "
                                 f"{spec.family or spec.target}")
            check = "target-depends" if spec.kind == m.KIND_DEVICE else "meta-kernels"
            for host in sorted(h for h in members if h in self.devices):
                for t in sorted(allowed & set(self.targets), key=_target_order):
                    device = self.devices[host].get(t)
                    if device is None:
                        self.problem(check, name, "", t, f"closure holds {host}, which has no device package for {t}")
                    elif device not in members:
                        via = "" if spec.kind != m.KIND_DEVICE else f" (a dependency of {self.specs[name].definition})"
                        self.problem(check, name, "", t,
                                     f"closure holds {host}{via} but not its {t} kernels {device}")

    def _record_closure(self, spec: m.PackageSpec) -> None:
        names, unresolved = self.closure(spec.name)
        devices: dict[str, list[str]] = {}
        for n in names:
            if n in self.device_target:
                devices.setdefault(self.device_target[n], []).append(n)
        kind = "alias" if spec.kind == m.KIND_ALIAS else "family" if spec.family else "target" if spec.target else "meta"
        self.report.closures.append(Closure(self.fmt, spec.name, kind, spec.family, spec.target, names,
                                            {t: devices[t] for t in sorted(devices, key=_target_order)}, unresolved))
        self.counts["closures"] += 1

    def check_file_conflicts(self) -> None:
        owners: dict[str, list[tuple[str, str]]] = {}
        for name, spec in self.specs.items():
            for fe in spec.files:
                owners.setdefault(fe.path, []).append((name, fe.type))
        for path, who in sorted(owners.items()):
            if len(who) < 2 or all(kind == m.DIR for _, kind in who):
                continue
            names = sorted(n for n, _ in who)
            self.problem("file-conflict", names[0], path, "", f"also shipped by {', '.join(names[1:])}")

    def check_relations(self) -> None:
        provided = {relation_names(p)[0] for s in self.specs.values() for p in s.provides} | set(self.specs)
        externals: set[str] = set()
        for name, spec in sorted(self.specs.items()):
            for attr in RELATION_FIELDS:
                for rel in getattr(spec, attr):
                    names = relation_names(rel)
                    if any(n in provided for n in names):
                        continue
                    outside = [n for n in names if self.r.is_external(n)]
                    if outside:
                        externals.update(outside)
                        continue
                    self.problem("relation", name, "", "",
                                 f"{attr.replace('_', '-')} {rel!r}: no package of the repository is or provides "
                                 f"{' or '.join(names)}, and it is not an external package")
        self.report.externals[self.fmt] = sorted(externals)


def _check_release(release: _Release, report: VerifyReport) -> None:
    _Checker(release, report).run()


def _target_order(target: str) -> tuple:
    order = {t: i for i, t in enumerate(t for ts in kt.FAMILIES.values() for t in ts)}
    bare = target.split(":", 1)[0]
    return (order.get(bare, len(order)), target)


def _key_order(key: str) -> tuple:
    name, _, number = key.rpartition("#")
    return (name, int(number) if number.isdigit() else -1, key)
