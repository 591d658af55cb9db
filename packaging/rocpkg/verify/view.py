"""The per-format view of a release that verify's checks read (built from a plan or read back
from a built tree), and the report they fill."""
from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from typing import Callable

from kpack import targets as kt
from kpack.loader import FALLTHROUGH
from kpack.marker import Marker
from rocpkg import model as m
from rocpkg.inputs.facts import ArchiveToc

REPORT_SCHEMA = "rocpkg-verify/1"
# The checks verify makes of a plan (and so the ones build refuses on, rocpkg.builder.gate)
PLAN_CHECKS = ("archive-missing", "variant-missing", "archive-target", "kernel-missing", "generic-binary",
               "empty-device", "target-depends", "meta-kernels", "meta-foreign-target", "file-conflict",
               "relation", "unreadable", "device-code-in-host", "misfiled-device-code", "runpath",
               "missing-library")
# the relations that must be met: each names a package of the repository or an external one
REQUIRING_RELATIONS = ("depends", "pre_depends", "recommends", "suggests")
EM_AMDGPU = 224


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
    release: str = ""               # the release of OUT it was computed in ("" a plan's, or OUT's one)


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
    releases: dict[str, list[str]] = field(default_factory=dict)   # fmt -> the release ids of OUT checked

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def checks(self) -> set[str]:
        return {p.check for p in self.problems}

    def to_dict(self) -> dict:
        return {"schema": REPORT_SCHEMA, "source": self.source, "ok": self.ok, "formats": self.formats,
                "counts": self.counts, "targets": self.targets, "externals": self.externals,
                "warnings": self.warnings, "releases": self.releases, "problems": [asdict(p) for p in self.problems],
                "closures": [asdict(c) for c in self.closures]}

    def add_checked(self, fmt: str, counts: dict[str, int], targets: dict[str, list[str]],
                    externals: set[str]) -> None:
        """Fold what one release's checks of `fmt` covered into the report: counts add up,
        target IDs and external names are unions, so a report over several releases of one
        OUT counts every package and kernel it checked (a plan has one release per format)."""
        mine = self.counts.setdefault(fmt, {})
        for key, value in counts.items():
            mine[key] = mine.get(key, 0) + value
        ids = self.targets.setdefault(fmt, {})
        for target, found in targets.items():
            ids[target] = sorted(set(ids.get(target, ())) | set(found), key=lambda x: (x != target, x))
        self.targets[fmt] = dict(sorted(ids.items(), key=lambda item: target_order(item[0])))
        self.externals[fmt] = sorted(set(self.externals.get(fmt, ())) | externals)


# -- the per-format view both entry points build --------------------------------------------

@dataclass
class ReleaseView:
    fmt: str
    specs: dict[str, m.PackageSpec]
    is_external: Callable[[str], bool]
    families: dict[str, list[str]]
    markers: dict[tuple[str, str], Marker] = field(default_factory=dict)   # (package, path)
    archives: dict[tuple[str, str], ArchiveToc] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    lookup: str = FALLTHROUGH    # the release's runtime: kpack.loader.FALLTHROUGH or STRICT
    # (package, path) -> (SONAME, DT_NEEDED) of each host ELF shipped (a plan's; a tree read back has none)
    linkage: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def problem(self, check: str, package: str, path: str, target: str, message: str) -> None:
        self.problems.append(Problem(check, package, path or "-", target or "-", message, self.fmt))


def payload(spec: m.PackageSpec) -> list[m.FileEntry]:
    """Files and symlinks a package ships, leaving out the doc files a writer adds
    (/usr/share/doc/<name>/)."""
    doc = f"/usr/share/doc/{spec.name}/"
    return [f for f in spec.files if f.type != m.DIR and not f.path.startswith(doc)]


def looks_host_elf(head: bytes) -> bool:
    """A little-endian ELF that is not an AMDGPU code object (those carry no marker)."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return False
    return struct.unpack_from("<H", head, 18)[0] != EM_AMDGPU


def finish(report: VerifyReport) -> None:
    unique = sorted(set(report.problems), key=lambda p: (p.format, p.package, p.path, p.target, p.check, p.message))
    report.problems = unique


def target_order(target: str) -> tuple:
    order = kt.table_order()
    bare = target.split(":", 1)[0]
    return (order.get(bare, len(order)), target)


def key_order(key: str) -> tuple:
    name, _, number = key.rpartition("#")
    return (name, int(number) if number.isdigit() else -1, key)
