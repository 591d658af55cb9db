"""The package set and its relations (README: What it does), per format, before a byte is written.

Input: a validated Config and a Catalog. Output: a Plan holding, per format, every
PackageSpec with its names, pins, relations in that format's syntax and its sorted file
list. Writers pack what the plan says and nothing else. The Plan is plain data, complete
before the first write: make_plan returns once the catalog's search of the host ELFs is
in its facts.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from dataclasses import dataclass, field

from kpack import targets as kt
from rocpkg import model as m
from rocpkg.inputs.catalog import Catalog, StageEntry, dropped_mode_bits, sort_targets
from rocpkg.inputs.config import Config, Definition, relation_names, validate_settings
from rocpkg.errors import RocpkgInputError
from rocpkg.plan.debug import DEBUG_COMPONENT, debug_packages, index_debug_files, shipped_findings
from rocpkg.plan.graphs import strongly_connected
from rocpkg.plan.layout import alternatives, owned_ancestors, priority
from rocpkg.plan.naming import Namer, abi_of, build_variant, variant_prefix
from rocpkg.formats.preflight import check_plan, printable
from rocpkg.formats.registry import DEFAULT as DEFAULT_FORMATS, get as get_format
from rocpkg.plan.providers import link_archive_providers
from rocpkg.plan.shlibs import add_library_metadata
from rocpkg.inputs.rpath import planned_patches

_SHARED_LIB = re.compile(r"/lib[^/]*\.so(\.[0-9]+)*\Z")
# The packages that manage the release's links (the release's links package, and every
# package with files of a release that has one) run postinst/postrm; without links, the
# packages of definitions with `Postinstall` refresh the linker cache only.
SCRIPT_TEMPLATES = {"postinst": "postinst.j2", "postrm": "postrm.j2"}
LDCONFIG_SCRIPTS = {"postinst": "ldconfig.j2", "postrm": "ldconfig.j2"}

# Definition classes
LIBRARY = "library"            # files, not per target -> N{abi}, N
PER_TARGET = "per-target"      # host + device per target -> N-host{abi}, N{abi}-{t}, N{abi}, N
META = "meta"                  # meta, not per target -> N{abi}, N
PER_TARGET_META = "per-target-meta"  # N{abi}-{t}, N{abi}-{family}, N{abi}, N


@dataclass
class Plan:
    settings: dict
    abi: str
    targets: list[str]                       # bare targets of the release
    families: dict[str, list[str]]           # family -> its targets in this release
    top_metapackage: str
    classes: dict[str, str]                  # definition -> class
    packages: dict[str, list[m.PackageSpec]] = field(default_factory=dict)
    info: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)  # artifact source path -> facts.FileFacts, read once
    debug_findings: list = field(default_factory=list)  # rocpkg.plan.debug.DebugFinding: build refuses them

    def by_name(self, fmt: str) -> dict[str, m.PackageSpec]:
        return {p.name: p for p in self.packages.get(fmt, [])}


def make_plan(config: Config, catalog: Catalog, *, version: str | None = None, release: str | None = None,
              targets: list[str] | None = None, formats=DEFAULT_FORMATS) -> Plan:
    """Compute the whole package set or raise RocpkgInputError with every problem. The
    plan is plain data, complete when returned: the catalog's search of the host ELFs
    (rocpkg.inputs.host_code), which ran while the package set was made, is in its facts."""
    settings = release_settings(config, version, release)
    builder = _PlanBuilder(config, catalog, settings, targets or settings.get("targets"))
    with catalog.settled():     # the search waited for, even when the plan fails
        plan = builder.build(formats)
    return plan


def release_settings(config: Config, version: str | None = None, release: str | None = None) -> dict:
    """The config's settings with --pkg-version and --release over them (a plan's settings)."""
    settings = dict(config.settings)
    if version is not None:
        settings["version"] = version
    if release is not None:
        settings["release"] = release
    problems = [(f"--{w.split('.')[-1]}", msg) for w, msg in validate_settings(settings)]
    if problems:
        raise RocpkgInputError(*problems)
    return settings


def _provide_targets(fmt: str, specs: list[m.PackageSpec]) -> None:
    """What a package built for GPU targets provides for each, in a format that says it so
    (Format.target_provides: rpm's `rocm-gfx(gfx1100)`)."""
    target_provides = get_format(fmt).target_provides
    if target_provides is not None:
        for spec in specs:
            spec.provides.extend(target_provides(t) for t in spec.built_for)


class _PlanBuilder:
    def __init__(self, config: Config, catalog: Catalog, settings: dict, targets: list[str] | None):
        self.config = config
        self.catalog = catalog
        self.settings = settings
        self.version = settings["version"]
        self.release = settings["release"]
        self.epoch = settings["epoch"]
        self.abi = abi_of(self.version)
        self.variant = build_variant(settings)
        self.prefix = variant_prefix(settings["prefix"], self.variant).format(abi=self.abi, version=self.version).rstrip("/")
        self.families_table = settings["families"] or kt.FAMILIES
        self.defs = {d.name: d for d in config.enabled}
        self.problems: list[tuple[str, str]] = []
        self.warnings: list[str] = []
        found = catalog.targets
        # feature builds asked for by name (`--targets gfx90a:xnack+`): bare target -> IDs;
        # a target asked for bare, or not at all, keeps every build the artifacts hold
        self.builds: dict[str, set[str]] = {}
        if targets:
            self.targets = self._wanted_targets(targets, found)
        else:
            self.targets = found
        self.families = {}
        for fam, members in self.families_table.items():
            present = [t for t in members if t in self.targets]
            if present:
                self.families[fam] = present
        self.classes = {name: self._classify(d) for name, d in self.defs.items()}

    def _wanted_targets(self, names: list[str], found: list[str]) -> list[str]:
        """`--targets`: bare targets, feature builds, ROCr ISA names, families (their members
        the artifacts hold). A name with features selects the builds a GPU of that name can
        run (`gfx942:xnack+`: the xnack+ and the bare build, not the xnack- one)."""
        from kpack.loader import compatible_targets

        bare: list[str] = []
        named_bare: set[str] = set()
        for name in (n for text in names for n in re.split(r"[,;\s]+", text) if n):
            family = next((f for f in self.families_table if f.lower() == name.lower()), None)
            try:
                wanted = kt.parse_target_list(name, self.families_table)
            except kt.InvalidTargetError as exc:
                self.problems.append(("--targets", str(exc)))
                continue
            if family is not None:
                wanted = [t for t in wanted if t in found]
                if not wanted:
                    self.problems.append(("--targets", f"family {family}: no artifact carries device code for "
                                                       f"any of {', '.join(self.families_table[family])}"))
            for tid in map(kt.parse_target, wanted):
                if tid.processor not in found:
                    self.problems.append(("--targets", f"no artifact carries device code for {tid.processor} "
                                                       f"(the artifacts have {', '.join(found) or 'none'})"))
                    continue
                if tid.processor not in bare:
                    bare.append(tid.processor)
                if tid.features:
                    self.builds.setdefault(tid.processor, set()).update(compatible_targets(str(tid)))
                else:
                    named_bare.add(tid.processor)
        self.builds = {t: ids for t, ids in self.builds.items() if t not in named_bare}  # bare: every build
        return sort_targets(bare)

    # ---- classification and files -------------------------------------------------
    def _device_refs(self, d: Definition):
        return [r for r in d.artifacts if r.gfxarch and self.catalog.has_device_dirs(r.artifact, r.component)]

    def _classify(self, d: Definition) -> str:
        if d.metapackage:
            return PER_TARGET_META if d.gfxarch else META
        if d.gfxarch and self._device_refs(d) and self.targets:
            return PER_TARGET
        return LIBRARY

    def _where(self, d: Definition) -> str:
        return f"{self.config.path}: [{d.index}]({d.name})"

    def _entries_to_files(self, pkg_label: str, chosen: list[tuple[str, StageEntry]]) -> list[m.FileEntry]:
        by_path: dict[str, m.FileEntry] = {}
        origin: dict[str, str] = {}
        for label, e in chosen:
            path = f"{self.prefix}/{e.rel}"
            dropped = dropped_mode_bits(e.mode, e.type)
            if dropped:  # never shipped; said, not silently
                self.warnings.append(f"{printable(e.source)}: {dropped} dropped from the package")
            if e.type == "file":
                patches, why = planned_patches(e.facts, self.settings.get("runpath_to_rpath", False))
                self.problems += [(printable(e.source), why)] if why else []
                fe = m.FileEntry(path, m.FILE, e.mode & 0o755, e.source, e.size, patches=patches,
                                 identity=e.identity)
            elif e.type == "symlink":
                fe = m.FileEntry(path, m.SYMLINK, 0o777, "", 0, e.link_target)
            else:
                fe = m.FileEntry(path, m.DIR, 0o755)
            old = by_path.get(path)
            if old is not None:
                if old.type == m.DIR and fe.type == m.DIR:
                    continue
                self.warnings.append(f"{pkg_label}: {path} comes from both {origin[path]} and {label}; keeping the first")
                continue
            by_path[path] = fe
            origin[path] = label
        # every directory from the prefix down to each path is owned by the package, and
        # those above the prefix that no base system has (/opt/rocm: removed with the last release)
        for path in owned_ancestors(self.prefix) if by_path else ():
            by_path.setdefault(path, m.FileEntry(path, m.DIR, 0o755))
        for path in list(by_path):
            parent = path[:path.rfind("/")]   # normalised, absolute, below a prefix that is not /
            while len(parent) >= len(self.prefix) and parent.startswith(self.prefix):
                found = by_path.get(parent)
                if found is not None:   # a listed directory adds its own parents (one added here: this walk)
                    if found.type != m.DIR:
                        self.problems.append((pkg_label, f"{parent} is both a directory and a {found.type}"))
                    break
                by_path[parent] = m.FileEntry(parent, m.DIR, 0o755)
                parent = parent[:parent.rfind("/")]
        return [by_path[p] for p in sorted(by_path)]

    def _collect(self, d: Definition, target: str | None, pkg_label: str) -> list[m.FileEntry]:
        chosen: list[tuple[str, StageEntry]] = []
        for ref in d.artifacts:
            if ref.component == DEBUG_COMPONENT:
                continue  # debug files go to the debug packages (rocpkg.plan.debug) only
            if target is not None and not (ref.gfxarch and self.catalog.has_device_dirs(ref.artifact, ref.component)):
                continue
            for adir, stage, entries in self.catalog.stages(ref.artifact, ref.component, ref.subdir, target):
                label = f"{adir.dirname}/{stage.line}"
                named = self.builds.get(target or "")
                chosen.extend((label, e) for e in entries if not named or not e.variant or e.variant in named)
        return self._entries_to_files(pkg_label, chosen)

    def _check_artifacts(self, d: Definition, namer: Namer) -> None:
        cls = self.classes[d.name]
        for ref in d.artifacts:
            dirs = self.catalog.artifact_dirs(ref.artifact, ref.component)
            pattern = f"{ref.artifact}_{ref.component}_*"
            if not dirs:
                self.problems.append((f"{self._where(d)}{ref.where[ref.where.index('.Artifactory'):]}",
                                      f"no artifact matches {pattern} (needed by package {namer.versioned(d.name)})"))
                continue
            if not any(s.matches(ref.subdir) for a in dirs for s in a.stages):
                self.problems.append((f"{self._where(d)}{ref.where[ref.where.index('.Artifactory'):]}",
                                      f"no stage dir of {pattern} has {ref.subdir}/ in its manifest"))
            if cls == PER_TARGET and ref.gfxarch and self.catalog.has_device_dirs(ref.artifact, ref.component):
                have = self.catalog.device_targets(ref.artifact, ref.component)
                for t in self.targets:
                    if t not in have:
                        fam = kt.family_of(t, self.families_table) or t
                        self.problems.append((f"{self.catalog.root}/{ref.artifact}_{ref.component}_{t}",
                                              f"artifact missing (nor in {ref.artifact}_{ref.component}_{fam}): "
                                              f"needed by package {namer.device(d.name, t)}"))

    # ---- relations ---------------------------------------------------------------
    def _evr(self) -> str:
        base = f"{self.version}-{self.release}"
        return f"{self.epoch}:{base}" if self.epoch else base

    def _pin(self, fmt: str, name: str) -> str:
        return get_format(fmt).pin(name, self._evr())

    def _map_relation(self, fmt: str, relation: str, namer: Namer, context: str, target: str = "") -> list[str]:
        """Rewrite one DEBDepends/RPMRequires entry for a package of the given context:
        in-release names become the right versioned/host/device names, system names stay."""
        names = relation_names(relation)
        internal = [n for n in names if n in self.defs]
        if not internal:  # system packages: the host side depends on them, device code does not
            written = get_format(fmt).external(relation)    # "": the format names no system package
            return [written] if written and context != "device" else []
        # alternatives naming in-release packages resolve to the first of them
        dep = self.defs[internal[0]]
        cls = self.classes[dep.name]
        if context == "device":
            return [self._pin(fmt, namer.device(dep.name, target))] if cls == PER_TARGET else []
        if context in ("host", "files"):  # pinned: 7.1.0 and 7.1.1 of one release must not mix
            if cls == PER_TARGET:
                return [self._pin(fmt, namer.host(dep.name))]
            return [self._pin(fmt, namer.versioned(dep.name))]
        if context == "meta-target":
            if cls in (PER_TARGET, PER_TARGET_META):  # both are named N{abi}-{t} for a target
                return [self._pin(fmt, namer.device(dep.name, target))]
            return [self._pin(fmt, namer.versioned(dep.name))]
        # plain meta: members at their all-target versioned names
        return [self._pin(fmt, namer.versioned(dep.name))]

    def _relations(self, fmt: str, d: Definition, namer: Namer, context: str, target: str = "") -> dict[str, list[str]]:
        source = d.relations(get_format(fmt).dialect)
        out: dict[str, list[str]] = {}
        for attr, relations in source.items():
            mapped: list[str] = []
            for rel in relations:
                if attr != "depends" and context == "device":
                    continue
                for r in self._map_relation(fmt, rel, namer, context, target):
                    if r not in mapped:
                        mapped.append(r)
            if mapped:
                out[attr] = mapped
        return out

    # ---- package set -------------------------------------------------------------
    def _spec(self, fmt: str, d: Definition, name: str, kind: str, *, files=(), target="", family="",
              summary_note="", long_note="", arch_independent=False) -> m.PackageSpec:
        f = d.fields
        s = self.settings
        summary = f.get("Description_Short") or d.name
        if summary_note:
            summary = f"{summary} ({summary_note})"
        long = f.get("Description_Long") or summary
        if long_note:
            long = f"{long}\n\n{long_note}"
        if self.variant:
            long = f"{long}\n\nThe {self.variant} build of the release, installed under {self.prefix} beside the normal build."
        form = get_format(fmt)
        arch = form.arch(arch_independent, f, s)
        section = f.get("Section") or "devel"
        if form.meta_section and kind in (m.KIND_META, m.KIND_ALIAS):
            section = form.meta_section  # the format's section for packages that only pull in others
        if form.plain_shared_objects:
            files = [dataclasses.replace(fe, mode=fe.mode & ~0o111) if fe.type == m.FILE and _SHARED_LIB.search(fe.path)
                     else fe for fe in files]
        version, release = form.version(self.version, self.release)
        return m.PackageSpec(
            format=fmt, name=name, version=version, release=release, arch=arch, kind=kind,
            definition=d.name, target=target, family=family, epoch=self.epoch,
            summary=summary, description=long,
            maintainer=f.get("Maintainer") or s["maintainer"], vendor=f.get("Vendor") or s["vendor"],
            license=f.get("License") or s["license"], homepage=f.get("Homepage") or s["homepage"],
            section=section, priority=f.get("Priority") or "optional",
            group=f.get("Group") or "", files=list(files), prefix=self.prefix, variant=self.variant,
        )

    def _apply(self, spec: m.PackageSpec, relations: dict[str, list[str]]) -> m.PackageSpec:
        for attr, values in relations.items():
            getattr(spec, attr).extend(v for v in values if v not in getattr(spec, attr))
        return spec

    def build(self, formats) -> Plan:
        # artifact problems first: they do not depend on the format
        message_namer = Namer(self.settings, self.abi, lower_devel=True)   # names in artifact problems
        for d in self.defs.values():
            self._check_artifacts(d, message_namer)
        if not self.targets and any(c == PER_TARGET_META for c in self.classes.values()):
            self.warnings.append("no target found in the artifacts: per-target meta-packages have no variants")
        top = self._top_metapackage()
        plan = Plan(self.settings, self.abi, self.targets, self.families, top, self.classes,
                    facts=self.catalog.facts)
        if self.problems:
            raise RocpkgInputError(*self.problems)
        # files are shared by both formats: collect once
        files: dict[tuple[str, str], list[m.FileEntry]] = {}
        for d in self.defs.values():
            cls = self.classes[d.name]
            if cls == LIBRARY:
                files[(d.name, "")] = self._collect(d, None, d.name)
            elif cls == PER_TARGET:
                files[(d.name, "")] = self._collect(d, None, d.name)
                for t in self.targets:
                    files[(d.name, t)] = self._collect(d, t, f"{d.name}[{t}]")
        for fmt in formats:
            plan.packages[fmt] = self._format_packages(fmt, files, top)
        warnings, problems = link_archive_providers(plan, self.catalog.facts_of, self._pin, self.settings)
        self.warnings += warnings
        self.problems += problems
        warnings, problems = add_library_metadata(plan.packages, self.catalog.facts_of, self.settings)
        self.warnings += warnings
        self.problems += problems
        for fmt, specs in plan.packages.items():
            if get_format(fmt).libc:
                self._add_libc_dependency(specs, get_format(fmt).libc)
        if formats and self.settings.get("debug_packages", True):
            self._add_debug_packages(plan, formats)
        for fmt in formats:
            plan.packages[fmt].sort(key=lambda p: p.name)
            names = collections.Counter(p.name for p in plan.packages[fmt])
            for dup in sorted(n for n, count in names.items() if count > 1):
                self.problems.append((f"{fmt} package {dup}", "two packages of the plan have this name; "
                                      "change settings.naming"))
        plan.info.extend(self._cycles())
        plan.warnings.extend(self.warnings)
        self.problems.extend(check_plan(plan.packages, {fmt: get_format(fmt) for fmt in plan.packages}))
        if self.problems:
            raise RocpkgInputError(*self.problems)
        return plan

    def _add_debug_packages(self, plan: Plan, formats) -> None:
        """The debug package of each package whose ELF files have debug files in the
        artifacts' dbg components (rocpkg.plan.debug), and what is wrong with those files."""
        index = index_debug_files(self.catalog)
        self.problems += index.problems
        findings, warnings = shipped_findings(plan.packages[formats[0]], index, self.catalog.facts_of)
        plan.debug_findings = index.findings + findings
        self.warnings += warnings
        for fmt in formats:
            plan.packages[fmt] += debug_packages(plan.packages[fmt], index, self.catalog.facts_of,
                                                 lambda name, fmt=fmt: self._pin(fmt, name))

    def _top_metapackage(self) -> str:
        configured = self.settings.get("top_metapackage")
        if configured:
            if self.classes.get(configured) != PER_TARGET_META:
                self.problems.append(("settings.top_metapackage", f"{configured!r} is not a per-target meta-package"))
            return configured
        metas = [n for n, c in self.classes.items() if c == PER_TARGET_META]
        included = {name for n in metas for r in self.defs[n].deb_relations.get("depends", []) for name in relation_names(r)}
        roots = [n for n in metas if n not in included] or metas
        return min(roots, key=lambda n: (len(n), n)) if roots else ""

    def _format_packages(self, fmt: str, files, top: str) -> list[m.PackageSpec]:
        namer = Namer(self.settings, self.abi, get_format(fmt).lower_devel)
        out: list[m.PackageSpec] = []
        pin = lambda name: self._pin(fmt, name)  # noqa: E731
        links = self._links_package(fmt, namer, files)
        if links is not None:
            out.append(links)
        for d in self.defs.values():
            cls = self.classes[d.name]
            scripts = dict(LDCONFIG_SCRIPTS) if d.postinstall else {}
            if links is not None and d.postinstall and cls == PER_TARGET_META:
                scripts = {}  # every variant pins the release's one links package instead
            versioned = namer.versioned(d.name)
            if cls == LIBRARY:
                spec = self._spec(fmt, d, versioned, m.KIND_FILES, files=files[(d.name, "")])
                out.append(self._apply(spec, self._relations(fmt, d, namer, "files")))
                spec.scripts = scripts
            elif cls == PER_TARGET:
                host = self._host_spec(fmt, d, namer, files[(d.name, "")])
                out.append(host)
                out.extend(self._device_spec(fmt, d, namer, t, files[(d.name, t)]) for t in self.targets)
                meta = self._spec(fmt, d, versioned, m.KIND_META, summary_note="all targets", arch_independent=True,
                                  long_note="Installs the host code and the kernels for every target of the release.")
                meta.depends.extend([pin(host.name)] + [pin(namer.device(d.name, t)) for t in self.targets])
                meta.scripts = scripts
                out.append(meta)
            elif cls == META:
                meta = self._spec(fmt, d, versioned, m.KIND_META, arch_independent=True)
                out.append(self._apply(meta, self._relations(fmt, d, namer, "meta")))
                meta.scripts = scripts
            else:  # PER_TARGET_META
                for t in self.targets:
                    tm = self._spec(fmt, d, namer.device(d.name, t), m.KIND_META, target=t, arch_independent=True,
                                    summary_note=f"for {t}", long_note=f"Installs this set with the kernels for {t} only.")
                    tm.scripts = scripts
                    tm.built_for = (t,)
                    if links is not None and d.postinstall:
                        tm.depends.append(pin(links.name))
                    out.append(self._apply(tm, self._relations(fmt, d, namer, "meta-target", t)))
                for fam, members in self.families.items():
                    if namer.family(d.name, fam) == namer.device(d.name, members[0]):
                        continue  # a one-target family named like its target (gfx90a): N{abi}-{t} serves it
                    fm = self._spec(fmt, d, namer.family(d.name, fam), m.KIND_META, family=fam, arch_independent=True,
                                    summary_note=f"for {fam}",
                                    long_note=f"Installs this set with the kernels for the {fam} family: {', '.join(members)}.")
                    fm.depends.extend(pin(namer.device(d.name, t)) for t in members)
                    fm.scripts = scripts
                    fm.built_for = tuple(members)
                    if get_format(fmt).case_provides and fam != fam.lower():  # `dnf install ...-gfx110X` works too
                        fm.provides.append(f"{namer.family_provides(d.name, fam)} = {self._evr()}")
                    out.append(fm)
                meta = self._spec(fmt, d, versioned, m.KIND_META, summary_note="all targets", arch_independent=True,
                                  long_note="Installs this set with the kernels for every target of the release.")
                meta.depends.extend(pin(namer.device(d.name, t)) for t in self.targets)
                meta.scripts = scripts
                out.append(meta)
            unv = self._spec(fmt, d, namer.unversioned(d.name), m.KIND_META, arch_independent=True,
                             summary_note="latest release",
                             long_note=f"Depends on {versioned}, the release this name currently points to.")
            unv.depends.append(pin(versioned))
            out.append(unv)
        if top and self.settings.get("aliases", True):
            td = self.defs[top]
            for fam, members in self.families.items():
                alias = self._spec(fmt, td, namer.alias(fam), m.KIND_ALIAS, family=fam, arch_independent=True,
                                   summary_note=f"{fam} GPUs",
                                   long_note=f"Installs {namer.family(top, fam)}: everything for GPUs of the {fam} family "
                                             f"({', '.join(members)}) and no other target's kernels.")
                alias.summary = f"ROCm for {fam} GPUs ({', '.join(members)})"
                alias.depends.append(pin(namer.family(top, fam)))
                alias.built_for = tuple(members)
                if get_format(fmt).case_provides and namer.alias_provides(fam) != alias.name:
                    alias.provides.append(f"{namer.alias_provides(fam)} = {self._evr()}")
                out.append(alias)
        if top and self.settings.get("unversioned_targets"):
            out += self._unversioned_target_metas(fmt, namer, top, {spec.name for spec in out})
        if links is not None:
            self._register_links(out, links)
        _provide_targets(fmt, out)
        return out

    @staticmethod
    def _register_links(specs: list[m.PackageSpec], links: m.PackageSpec) -> None:
        """Every package that ships files under the release's prefix registers the release's
        links as its links package does (same alternatives, same priority), so that
        installing one component (`apt install amdrocm-fft7.1-gfx1100`) links /opt/rocm/core
        and its slaves to the release: each package's postinst runs after its own files are
        in place and adds the slaves that now exist; its postrm keeps the links while the
        prefix is there and removes them with the release's last package."""
        for spec in specs:
            if spec is not links and any(fe.type != m.DIR for fe in spec.files):
                spec.links, spec.link_priority = links.links, links.link_priority
                spec.scripts = dict(SCRIPT_TEMPLATES)

    def _unversioned_target_metas(self, fmt: str, namer: Namer, top: str, taken: set[str]) -> list[m.PackageSpec]:
        """settings.unversioned_targets: the names users are told to type (TheRock's
        `apt install amdrocm-gfx942`), `{top}-{t}` per target and `{top}-{family}` per
        family, each pinning the top meta-package's variant of this release, so that the
        newest release built wins as it does for the unversioned top name. A name the
        release already has (a family alias `rocm-{family}` when the top is `rocm`) is
        not made twice."""
        td, base = self.defs[top], namer.unversioned(top)
        out = []
        variants = [(t, "", namer.device(top, t)) for t in self.targets]
        variants += [("", fam, namer.family(top, fam)) for fam, members in self.families.items()
                     if namer.family(top, fam) != namer.device(top, members[0])]
        for target, family, variant in variants:
            name = namer.with_target(base, target or family)
            if name in taken:
                continue
            meta = self._spec(fmt, td, name, m.KIND_META, target=target, family=family, arch_independent=True,
                              summary_note=f"{target or family}, latest release",
                              long_note=f"Depends on {variant}, the release this name currently points to.")
            meta.depends.append(self._pin(fmt, variant))
            meta.built_for = (target,) if target else tuple(self.families[family])
            out.append(meta)
        return out

    def _host_spec(self, fmt: str, d: Definition, namer: Namer, files) -> m.PackageSpec:
        """The host package of a per-target definition."""
        host = self._spec(fmt, d, namer.host(d.name), m.KIND_HOST, files=files, summary_note="host code",
                          long_note="This package holds the host code; the GPU kernels are in one package per target.")
        return self._apply(host, self._relations(fmt, d, namer, "host"))

    def _device_spec(self, fmt: str, d: Definition, namer: Namer, target: str, files) -> m.PackageSpec:
        """The device package of a per-target definition for one target."""
        dev = self._spec(fmt, d, namer.device(d.name, target), m.KIND_DEVICE, files=files, target=target,
                         summary_note=f"{target} kernels",
                         long_note=f"GPU kernels and tuning databases of {d.name} for {target}.")
        dev.depends.append(self._pin(fmt, namer.host(d.name)))
        dev.built_for = (target,)
        return self._apply(dev, self._relations(fmt, d, namer, "device", target))

    def _links_package(self, fmt: str, namer: Namer, files) -> m.PackageSpec | None:
        """The one package per release whose scripts manage the release's links
        (/opt/rocm/core, /opt/rocm/bin, /usr/bin/hipcc... with update-alternatives), so that
        removing one variant of a release while another stays keeps them: `N{abi}-links` of
        the per-target meta-package with `Postinstall` that includes no other one. It pins
        the packages with files of that definition's closure (dpkg and rpm then set the
        links up after the files they point at are in place) and owns the directories
        above the prefix (the links live there)."""
        owners = [d for d in self.defs.values() if d.postinstall and self.classes[d.name] == PER_TARGET_META]
        if not owners:
            return None
        closures = {d.name: self._members(d.name) for d in owners}
        owner = min(owners, key=lambda d: (len(closures[d.name]), d.index))
        spec = self._spec(fmt, owner, f"{namer.versioned(owner.name)}-links", m.KIND_META, arch_independent=True,
                          files=[m.FileEntry(p, m.DIR, 0o755) for p in owned_ancestors(self.prefix)],
                          summary_note="links", long_note=f"Points {', '.join(a.link for a in self._alternatives())} "
                                                          f"at the newest release installed (update-alternatives).")
        spec.scripts = dict(SCRIPT_TEMPLATES)
        spec.links, spec.link_priority = self._alternatives(), priority(self.version)
        for name in sorted(closures[owner.name]):
            cls = self.classes[name]
            if cls in (LIBRARY, PER_TARGET) and any(fe.type != m.DIR for fe in files[(name, "")]):
                spec.depends.append(self._pin(fmt, namer.host(name) if cls == PER_TARGET else namer.versioned(name)))
        return spec

    def _alternatives(self):
        """The links the release's links package manages: a variant build (ASAN) manages
        only its own (/opt/rocm/core-asan), never the ones the normal release shares."""
        return alternatives(self.prefix, shared=not self.variant)

    def _members(self, name: str) -> set[str]:
        """The in-release definitions a definition includes, itself among them."""
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            todo.extend(n for r in self.defs[current].deb_relations.get("depends", [])
                        for n in relation_names(r)[:1] if n in self.defs)
        return seen

    def _add_libc_dependency(self, specs: list[m.PackageSpec], libc: str) -> None:
        """What dpkg-shlibdeps would add and package.json lists often forget: a package
        whose ELF files need libc.so.6 depends on the format's C library package (libc)."""
        needs: dict[str, bool] = {}
        for spec in specs:
            if any(n == libc for rel in spec.depends for n in relation_names(rel)):
                continue
            for fe in spec.files:
                if fe.type == m.FILE and fe.source not in needs:
                    needs[fe.source] = "libc.so.6" in self.catalog.facts_of(fe.source).needed
                if fe.type == m.FILE and needs[fe.source]:
                    spec.depends.insert(0, libc)
                    break

    def _cycles(self) -> list[str]:
        graph = {n: [x for r in d.deb_relations.get("depends", []) for x in relation_names(r) if x in self.defs]
                 for n, d in self.defs.items()}
        return [f"dependency cycle (legal in DEB/RPM): {' -> '.join(c + [c[0]])}" for c in strongly_connected(graph)
                if len(c) > 1]

