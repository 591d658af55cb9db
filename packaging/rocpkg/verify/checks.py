"""The checks of `rocpkg verify` (module rocpkg.verify.run lists them) over one format's view of
a release: kernels as the runtime finds them (kpack.loader), empty device packages, target
closures, file conflicts and relations."""
from __future__ import annotations

import posixpath

from kpack import targets as kt
from kpack.errors import KpackFormatError
from kpack.loader import STRICT, ArchiveIndex, compatible_targets, describe_candidates, find_candidates, search_order
from kpack.marker import GFXARCH, Marker
from rocpkg import model as m
from rocpkg.inputs.facts import ArchiveToc
from rocpkg.inputs.config import relation_names
from rocpkg.plan.graphs import closures, dependency_edges, provided_names
from kpack.targets import device_isas
from rocpkg.verify.libraries import check_libraries
from rocpkg.verify.view import REQUIRING_RELATIONS, Closure, ReleaseView, VerifyReport, key_order, payload, target_order


class Checker:
    def __init__(self, release: ReleaseView, report: VerifyReport):
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
        self.targets = sorted({t for per in self.devices.values() for t in per}, key=target_order)
        self.archive_owner: dict[str, tuple[str, ArchiveToc]] = {}
        for (package, path), info in sorted(release.archives.items()):
            self.archive_owner.setdefault(path, (package, info))
        self.variants = self._release_variants()
        self.counts = {"packages": len(self.specs), "host_binaries": 0, "archives": len(release.archives),
                       "lookups": 0, "kernels_checked": 0, "closures": 0}
        self.empty: set[str] = set()
        self.externals: set[str] = set()      # names relations reach outside the repository
        self._reach: dict | None = None   # graphs.closures of the package set, once
        self._payload_paths: dict[str, list[str]] = {}   # package -> the paths it ships

    # helpers
    def closure(self, root: str) -> tuple[list[str], list[str]]:
        """graphs.closure of root, from every package's closure taken at once."""
        if root not in self._closures:
            if self._reach is None:
                self._reach = closures(dependency_edges(self.specs, provided_names(self.specs)))
            names, unresolved = self._reach[root]
            self._closures[root] = sorted(names), sorted(unresolved)
        return self._closures[root]

    def shipped(self, root: str) -> dict[str, str]:
        """Install path -> package, over the closure of root."""
        if root not in self._shipped:
            paths: dict[str, str] = {}
            for name in self.closure(root)[0]:
                if name not in self._payload_paths:
                    self._payload_paths[name] = [fe.path for fe in payload(self.specs[name])]
                for path in self._payload_paths[name]:
                    paths.setdefault(path, name)
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
        check_libraries(self.r, self.closure)
        self.report.add_checked(self.fmt, self.counts, self.variants, self.externals)
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

    def _index(self, path: str, info: ArchiveToc) -> ArchiveIndex:
        if path not in self._indexes:
            self._indexes[path] = ArchiveIndex.from_kernels(info.arches, info.kernels)
        return self._indexes[path]

    def check_empty_devices(self) -> None:
        for host, per_target in sorted(self.devices.items()):
            markers = self._host_markers(host)
            for target, device in per_target.items():
                if payload(self.specs[device]):
                    continue
                shipped = self.shipped(device)
                opener = self.opener(device)
                providers = set()
                for path, mk in markers:
                    for isa in device_isas(target):
                        for archive, _ in find_candidates(mk, path, isa, opener).ordered:
                            if shipped.get(archive, device) != device:
                                providers.add(shipped[archive])
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
            required = sorted(self._required_keys(marker, path), key=key_order) or [f"{marker.kernel_name}#0"]
            if spec.kind == m.KIND_HOST:
                plans = [(t, d) for t, d in sorted(self.devices.get(package, {}).items(), key=lambda x: target_order(x[0]))]
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
        candidates = find_candidates(marker, path, isa, self.opener(root))
        wanted = self._release_variant(isa, target)
        needed_by = f"needed by {path} (in {spec.name})"
        on = self._on_isas
        ordered = candidates.ordered[:1] if self.r.lookup == STRICT else candidates.ordered
        if not ordered:
            self._no_candidate(spec, path, marker, candidates, wanted, root, needed_by)
            return
        first_archive, first_target = ordered[0]
        if wanted not in {t for _, t in ordered}:
            on(isa, "variant-missing", root, self._exact_paths(marker, path, wanted)[0], wanted,
               f"the release builds {wanted} but {root} and its dependencies ship no archive for it: on {{isas}} "
               f"the runtime loads {posixpath.basename(first_archive)} (built for {first_target}) instead; "
               f"{needed_by}")
        self.counts["kernels_checked"] += len(required)
        missing = [k for k in required if not candidates.find(k, self.r.lookup).found]
        if not missing:
            return
        owner = self.archive_owner[first_archive][0]
        tried = describe_candidates((posixpath.basename(a), t) for a, t in ordered)
        what = (f"holds no {marker.kernel_name}#N kernel" if len(missing) == len(required) else
                f"lacks {', '.join(missing[:5])}" + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
        if len(ordered) == 1:
            how = "on {isas} the runtime opens this archive and fails with KERNEL_NOT_FOUND"
        else:
            how = (f"on {{isas}} the runtime tries {tried} and none holds "
                   f"{'them' if len(missing) > 1 else 'it'}: KERNEL_NOT_FOUND")
        others = "" if len(missing) == len(required) else " (other archives of the prefix hold them)"
        on(isa, "kernel-missing", owner, first_archive, first_target,
           f"{what} for {first_target}{others}: {how}; {needed_by}")

    def _no_candidate(self, spec, path, marker, candidates, wanted, root, needed_by) -> None:
        """No archive the runtime opens lists a target of the GPU: which mistake it is."""
        on = self._on_isas
        isa = candidates.isas[0]
        shipped = self.shipped(root)
        exact = self._exact_paths(marker, path, wanted)
        opened = [p for p, _ in candidates.opened]
        if spec.kind != m.KIND_HOST:
            on(isa, "generic-binary", spec.name, path, wanted,
               f"needs per-target kernels ({exact[0]}) but {spec.name} has no device packages and its closure "
               f"ships no archive for {wanted}: on {{isas}} the runtime finds none")
        elif opened:
            listed = sorted({a for p in opened for a in self.archive_owner[p][1].arches})
            on(isa, "archive-target", shipped.get(opened[0], root), opened[0], wanted,
               f"on {{isas}} the runtime opens {', '.join(posixpath.basename(p) for p in opened)} but "
               f"its gfx_arches list {', '.join(listed) or '(none)'}, not {wanted}: ARCH_NOT_FOUND; {needed_by}")
        else:
            on(isa, "archive-missing", root, exact[0], wanted,
               f"{path} (in {spec.name}) finds no kpack archive on {{isas}}: neither {root} nor its "
               f"dependencies ship {', '.join(exact)}")

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
                for t in sorted(allowed & set(self.targets), key=target_order):
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
                                            {t: devices[t] for t in sorted(devices, key=target_order)}, unresolved))
        self.counts["closures"] += 1

    def check_file_conflicts(self) -> None:
        owners: dict[str, list[tuple[str, str]]] = {}
        shared: set[str] = set()    # the paths of more than one package: only those are sorted
        for name, spec in self.specs.items():
            for fe in spec.files:
                who = owners.get(fe.path)
                if who is None:
                    owners[fe.path] = [(name, fe.type)]
                else:
                    who.append((name, fe.type))
                    shared.add(fe.path)
        for path in sorted(shared):
            who = owners[path]
            if all(kind == m.DIR for _, kind in who):
                continue
            names = sorted(n for n, _ in who)
            self.problem("file-conflict", names[0], path, "", f"also shipped by {', '.join(names[1:])}")

    def check_relations(self) -> None:
        provided = {relation_names(p)[0] for s in self.specs.values() for p in s.provides} | set(self.specs)
        externals = self.externals
        for name, spec in sorted(self.specs.items()):
            for attr in REQUIRING_RELATIONS:
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


def check_release(release: ReleaseView, report: VerifyReport) -> None:
    Checker(release, report).run()
