"""`rocpkg verify`: the checks no packager makes today (README: What build refuses, docs/repository.md: Integrity), over a plan before a
byte is written or over a built OUT tree read back from its package files.

The costly packaging bugs are silent: kernels missing for one target, a meta-package that
lost a dependency, a device package that ships nothing. Users meet them as
`hipErrorInvalidImage` on their GPU. Both entry points turn their input into the same
per-format view (package specs, the markers of host binaries, the TOCs of kpack archives)
and run the same checks on it:

kernels (per host binary with a `.rocm_kpack_ref` marker, per target its package is
planned for, per ISA a GPU of that target reports — each feature on and off — asking
kpack.loader what the runtime loads from an install of the closure; one line per problem,
naming the ISAs that meet it):
  archive-missing   no archive the marker's search paths name is shipped by the target's
                    device package or its dependency closure
  variant-missing   the release builds a feature variant (`gfx942:xnack+`) but the closure
                    ships no archive for it: the runtime would load another build
  archive-target    the archives found do not list the target in their gfx_arches
                    (the runtime's ARCH_NOT_FOUND)
  kernel-missing    no archive the runtime tries holds a `kernel_name#N` the binary needs
                    (with the fall-through every candidate, in order: an overlay may lack
                    what the bare archive holds; with kpack_lookup strict the first one).
                    The binary needs every N that any archive of the same prefix (any
                    target, any variant) holds for its kernel_name: a key present in the
                    gfx1100 archive and absent from the gfx942 one is missing for gfx942.
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
  duplicate-package (built tree) two package files of one name within one release
  release-conflict  (built tree of several releases) two releases ship one path under two
                    package names and no relation says one replaces the other
  relation          a relation resolves neither inside the repository nor to an external
                    package
  unreadable        a marker, archive or package that cannot be read
device code (plan):
  device-code-in-host  a host or plain package's ELF still carries device code (a non-empty
                    .hip_fatbin: the kpack split step did not run)
  misfiled-device-code a device package's file holds code for another target
  runpath           with settings.runpath_to_rpath on, an ELF would still be written with
                    DT_RUNPATH (TheRock's install test fails it: verify_no_runpath)
  missing-library   a host ELF needs a SONAME a package of the release ships, and none of
                    those packages is in its package's closure (rocpkg.verify.libraries; a
                    built tree's DT_NEEDED and SONAME are read back from each host ELF's
                    head and tail windows)
debug files (plan; rocpkg.plan.debug, each named with its check as build refuses it):
  debug-not-elf, debug-conflict, debug-orphan, debuglink-missing

The release's target IDs for a bare target are the target and every feature variant that
any archive shipped by a device package of that target lists: a release builds the same
target IDs for all its libraries, so one library lacking the `gfx942:xnack+` build is the
"xnack variant dropped" bug.

Layout: rocpkg.verify.view holds the per-format view and the report, rocpkg.verify.checks the
checks, rocpkg.verify.readback the reading of a built tree (streamed, never loading a package);
this module holds the two entry points.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable

from kpack import targets as kt
from kpack.loader import FALLTHROUGH
from rocpkg import model as m
from rocpkg.inputs.facts import FileFacts
from rocpkg.verify.checks import check_release
from rocpkg.inputs.config import common_namespace, external_rule, namespace
from rocpkg.errors import RocpkgInputError
from rocpkg.formats import registry
from rocpkg.verify.readback import package_files, read_tree_release
from rocpkg.verify.view import Problem, ReleaseView, VerifyReport, finish, payload

# -- a plan ---------------------------------------------------------------------------------

def verify_plan(plan, config=None) -> VerifyReport:
    """Check a plan before building: markers and archives are read from the artifacts the
    plan's files come from. `config` (rocpkg.inputs.config.Config) decides which names are
    external; without it, the plan's settings and definition names do."""
    if config is not None:
        external = external_rule(namespace(config), config.settings["external"])
    else:
        definitions = {s.definition for specs in plan.packages.values() for s in specs if s.definition}
        external = external_rule(common_namespace(definitions), plan.settings.get("external", []))
    families = {f: list(ts) for f, ts in (plan.settings.get("families") or kt.FAMILIES).items()}
    report = VerifyReport(source="plan", formats=sorted(plan.packages), warnings=list(plan.warnings))
    rewrite_runpath = plan.settings.get("runpath_to_rpath", False)
    for fmt in report.formats:
        release = ReleaseView(fmt, plan.by_name(fmt), external, families,
                              lookup=plan.settings.get("kpack_lookup", FALLTHROUGH))
        for spec in release.specs.values():
            for fe in payload(spec):
                if fe.type != m.FILE:
                    continue
                facts = plan.facts.get(fe.source) or FileFacts()  # the catalog read each file once
                if fe.path.endswith(".kpack"):
                    if facts.archive is None:
                        why = facts.archive_error or "not read by the catalog"
                        release.problem("unreadable", spec.name, fe.path, "", f"kpack archive {fe.source}: {why}")
                    else:
                        release.archives[(spec.name, fe.path)] = facts.archive
                elif spec.kind != m.KIND_DEVICE:
                    if facts.elf == "host":
                        release.linkage[(spec.name, fe.path)] = (facts.soname, tuple(facts.needed))
                    if facts.marker_error:
                        release.problem("unreadable", spec.name, fe.path, "",
                                        f"marker of {fe.source}: {facts.marker_error}")
                    elif facts.marker is not None:
                        release.markers[(spec.name, fe.path)] = facts.marker
                _check_placement(release, report, spec, fe, facts, families)
                if rewrite_runpath and facts.runpath_tags and not fe.patches:
                    release.problem("runpath", spec.name, fe.path, "", f"{fe.source} would keep DT_RUNPATH")
        check_release(release, report)
    report.problems += debug_problems(plan)
    finish(report)
    return report


def debug_problems(plan) -> list[Problem]:
    """The plan's debug findings (rocpkg.plan.debug), one problem each under the check
    `--allow` takes, named in its message as build's refusal names it: of the plan, no
    format (the debug packages of every format hold the same files)."""
    from rocpkg.plan.debug import DEBUGLINK_MISSING

    problems = []
    for finding in plan.debug_findings:
        package, path = "-", finding.where          # a debug file of the artifacts
        if finding.check == DEBUGLINK_MISSING:      # "package: installed path"
            package, _, path = finding.where.partition(": ")
        problems.append(Problem(finding.check, package, path, "-", f"{finding.what} [{finding.check}]"))
    return problems


def _check_placement(release: ReleaseView, report: VerifyReport, spec: m.PackageSpec, fe: m.FileEntry,
                     facts: FileFacts, families: dict[str, list[str]]) -> None:
    """Device code only where it belongs: none in a host or plain package (a fat binary
    there means the kpack split step did not run; a runtime's own embedded kernels, such
    as ROCr's trap handlers, are a warning), and in a device package only code for its
    target."""
    if spec.kind != m.KIND_DEVICE:
        if not facts.host_code:
            return
        from kpack.placement import EMBEDDED_CODE_OBJECT

        for kind, what in facts.host_code:
            if kind == EMBEDDED_CODE_OBJECT:
                report.warnings.append(f"{spec.name}: {fe.path}: {what} (kept: a runtime may carry its own kernels)")
            else:
                release.problem("device-code-in-host", spec.name, fe.path, "",
                                f"{fe.source} {what}; host packages carry no kernels")
        return
    if fe.path.endswith(".kpack") or not spec.target or not facts.targets:
        return  # archives: kpack.check compares every code object with the arch it is filed under
    from kpack.placement import code_fits

    foreign = [t for t in facts.targets if not code_fits(t, spec.target, families)]
    if foreign:
        release.problem("misfiled-device-code", spec.name, fe.path, spec.target,
                        f"{fe.source} holds device code for {', '.join(foreign)}, filed under {spec.target}")



# -- a built tree ---------------------------------------------------------------------------

def verify_tree(out_dir: str | os.PathLike, *, formats: Iterable[str] = registry.NAMES, jobs: int = 0,
                release: str | None = None, lookup: str | None = None) -> VerifyReport:
    """Check the packages of `formats` under OUT/<format>/ as built (each format's Reader
    finds and reads them, rocpkg.formats.plugin.Reader): names, relations and files from
    their metadata, markers and archives from their payloads.
    Which package is whose device package is read from the relations themselves: a device
    package is named for a target, pins a host package at its own version, and some
    meta-package pins both.

    An OUT holding several releases (manifest.json, rocpkg.store.releases) is checked release by
    release (or only `release`, `V-R`), then as a union: two releases must not ship one
    path under two package names unless their relations say one replaces the other.
    `jobs` processes read the packages (0: one per usable core); the report is the same
    for any number."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    formats = list(formats)
    found = package_files(out_dir)
    if not any(found[f] for f in formats):
        wanted = ", ".join(f"no {registry.get(f).suffix} under {f}/" for f in formats)
        raise RocpkgInputError((out_dir, f"{wanted}: nothing to verify"))
    report = VerifyReport(source=out_dir, formats=[f for f in registry.NAMES if found[f] and f in formats])
    from rocpkg.store.releases import manifest_releases, read_manifest

    doc = read_manifest(out_dir)
    groups = _release_groups(out_dir, doc, found, release)
    lookups = {} if lookup else _recorded_lookups(doc)
    recorded = manifest_releases(doc)
    only = [recorded[0].id] if len(recorded) == 1 else []   # the release of an OUT of one
    views: list[tuple[str, ReleaseView]] = []
    for label, files in groups:
        for fmt in report.formats:
            if not files.get(fmt):
                continue
            view = read_tree_release(fmt, files[fmt], jobs)
            view.lookup = lookup or lookups.get(label, lookups.get("", FALLTHROUGH))
            before, closures = len(report.problems), len(report.closures)
            check_release(view, report)
            if label and len(groups) > 1:  # say which release a problem is in
                report.problems[before:] = [dataclasses.replace(p, message=f"release {label}: {p.message}")
                                            for p in report.problems[before:]]
            for checked in [label] if label else only:   # which release the counts and closures cover
                report.releases.setdefault(fmt, []).append(checked)
                report.closures[closures:] = [dataclasses.replace(c, release=checked) for c in report.closures[closures:]]
            views.append((label, view))
    if len(groups) > 1:
        _check_union(views, report)
    finish(report)
    return report


def _recorded_lookups(doc: dict | None) -> dict[str, str]:
    """Release id -> the runtime lookup its record names ("" -> the one release's, when the
    manifest records exactly one)."""
    from rocpkg.store.releases import manifest_releases

    records = manifest_releases(doc)
    found = {r.id: r.kpack_lookup for r in records}
    if len(records) == 1:
        found[""] = records[0].kpack_lookup
    return found


def _release_groups(out_dir: str, doc: dict | None, found: dict[str, list[str]],
                    wanted: str | None) -> list[tuple[str, dict]]:
    """(release id, {format: package files}) per release recorded in the manifest `doc`;
    files no release records form a group of their own ("unrecorded"). One group for an OUT
    of one release (or with no manifest)."""
    from rocpkg.store.releases import find_release, manifest_releases

    records = manifest_releases(doc)
    if wanted is not None:
        if "-" not in wanted:  # a release number alone: the one recorded release with it
            matching = [r for r in records if r.release == wanted]
            wanted = matching[0].id if len(matching) == 1 else wanted
        records = [find_release(doc, wanted)]
    elif len(records) <= 1:
        return [("", found)]
    groups = []
    claimed: set[str] = set()
    for record in records:
        mine = {os.path.join(out_dir, f) for f in record.files}
        claimed |= mine
        groups.append((record.id, {fmt: [p for p in paths if p in mine] for fmt, paths in found.items()}))
    if wanted is None:
        rest = {fmt: [p for p in paths if p not in claimed] for fmt, paths in found.items()}
        if any(rest.values()):
            groups.append(("unrecorded", rest))
    return groups


def _check_union(views: list[tuple[str, ReleaseView]], report: VerifyReport) -> None:
    """Across releases: one path, one package name, unless a relation (Conflicts, Replaces,
    Breaks, Obsoletes) between the two names says one takes the path over."""
    from rocpkg.inputs.config import relation_names

    for fmt in report.formats:
        owners: dict[str, dict[str, str]] = {}
        related: dict[str, set[str]] = {}
        for label, view in views:
            if view.fmt != fmt:
                continue
            for name, spec in view.specs.items():
                related.setdefault(name, set()).update(
                    n for attr in ("conflicts", "replaces", "breaks", "obsoletes")
                    for rel in getattr(spec, attr) for n in relation_names(rel))
                for fe in payload(spec):
                    owners.setdefault(fe.path, {}).setdefault(name, label)
        for path, names in sorted(owners.items()):
            if len(names) < 2:
                continue
            first, *others = sorted(names)
            fighting = [o for o in others if o not in related.get(first, ()) and first not in related.get(o, ())]
            if fighting:
                report.problems.append(Problem(
                    "release-conflict", first, path, "-",
                    f"release {names[first]} ships this path in {first}, release "
                    f"{', '.join(names[o] for o in fighting)} in {', '.join(fighting)}, and no relation says "
                    f"one replaces the other: installing both fails", fmt))
