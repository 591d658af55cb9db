"""Which GPU targets this machine has, from the amdgpu driver's KFD topology in sysfs, and
which family package serves each (so an end user knows which package to install).

KFD lists one node per CPU socket and per GPU under
`<sysfs>/class/kfd/kfd/topology/nodes/<N>/properties`, `key value` lines. A GPU node's
`gfx_target_version` is decimal major*10000 + minor*100 + stepping (110000 = gfx1100,
90402 = gfx942, 90010 = gfx90a: minor and stepping are printed in hex); a CPU node has 0.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from kpack import targets as kt
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import printable
from rocpkg.store.files import read_json
from rocpkg.store.manifest_schema import check_manifest

TOPOLOGY = os.path.join("class", "kfd", "kfd", "topology", "nodes")


@dataclass(frozen=True)
class GpuNode:
    node: int
    target: str                 # "gfx1100"
    family: str | None          # "gfx110X", None when no family has the target
    name: str = ""              # the node's `name` file, when present
    device_id: int = 0


def target_from_version(value: int) -> str:
    """gfx_target_version (decimal) -> target name: 90402 -> gfx942, 90010 -> gfx90a.
    ValueError for a number no GPU reports (negative, or a minor or stepping past one hex
    digit: the name would be ambiguous)."""
    major, minor, stepping = value // 10000, (value // 100) % 100, value % 100
    if value <= 0 or minor > 15 or stepping > 15 or major > 99:
        raise ValueError(f"gfx_target_version {value} is not major*10000 + minor*100 + stepping with a minor "
                         f"and stepping of one hex digit each")
    return f"gfx{major}{minor:x}{stepping:x}"


def read_properties(path: str) -> dict[str, int]:
    """A KFD `properties` file as {key: int}; lines that are not `key integer` are skipped."""
    props: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:     # sysfs text is not ours to trust
        for line in fh:
            parts = line.split()
            if len(parts) == 2:
                try:
                    props[parts[0]] = int(parts[1])
                except ValueError:
                    continue
    return props


def detect_gpus(sysfs_root: str = "/sys", families: dict[str, list[str]] | None = None) -> list[GpuNode]:
    """The GPU nodes of the KFD topology under sysfs_root, by node number; [] when there is
    no topology (no amdgpu driver, or not Linux)."""
    nodes_dir = os.path.join(sysfs_root, TOPOLOGY)
    try:
        entries = [e for e in os.listdir(nodes_dir) if e.isdigit()]
    except OSError:
        return []
    gpus = []
    for entry in sorted(entries, key=int):
        node_dir = os.path.join(nodes_dir, entry)
        try:
            props = read_properties(os.path.join(node_dir, "properties"))
        except OSError:
            continue
        version = props.get("gfx_target_version", 0)
        if not version:
            continue  # a CPU node
        try:
            target = target_from_version(version)
        except ValueError as exc:
            raise RocpkgInputError((os.path.join(node_dir, "properties"), str(exc))) from None
        try:
            with open(os.path.join(node_dir, "name"), encoding="utf-8", errors="replace") as fh:
                name = printable(fh.read(256).strip())
        except OSError:
            name = ""
        gpus.append(GpuNode(int(entry), target, kt.family_of(target, families), name, props.get("device_id", 0)))
    return gpus


def packages_in_tree(out_dir: str) -> tuple[dict[str, set[str]], str]:
    """({format: lower-case package names}, release version) of a tree `rocpkg build` wrote,
    from its manifest.json: what a repository published from it can install (a format that
    also provides a family's own spelling, Format.case_provides, still names the package in
    lower case)."""
    doc = _manifest(out_dir)
    names: dict[str, set[str]] = {}
    for entry in doc["packages"]:
        names.setdefault(entry["format"], set()).add(entry["name"].lower())
    return names, str(doc["version"])


def built_for_in_tree(out_dir: str) -> dict[str, dict[str, tuple[str, tuple[str, ...]]]]:
    """{format: {lower-case name: (kind, GPU targets)}} of the packages of a built tree
    that are built for GPU targets (PackageSpec.built_for, as its manifest.json records it)."""
    out: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
    for entry in _manifest(out_dir)["packages"]:
        if entry.get("built_for"):
            out.setdefault(entry["format"], {})[entry["name"].lower()] = (entry.get("kind") or "",
                                                                           tuple(entry["built_for"]))
    return out


def built_for_in_plan(plan) -> dict[str, dict[str, tuple[str, tuple[str, ...]]]]:
    """{format: {lower-case name: (kind, GPU targets)}} of a plan, as built_for_in_tree."""
    return {fmt: {s.name.lower(): (s.kind, s.built_for) for s in specs if s.built_for}
            for fmt, specs in plan.packages.items()}


def installable_for(target: str, built_for: dict[str, tuple[str, tuple[str, ...]]]) -> str:
    """The package that installs everything for one target, by the packages' GPU targets:
    of the meta-packages built for that target alone, the one with the shortest name (the
    top meta-package's: amdrocm7.1-gfx1100); "" when none is."""
    metas = [name for name, (kind, targets) in built_for.items() if kind == "meta" and targets == (target,)]
    return min(metas, key=lambda n: (len(n), n)) if metas else ""


def _manifest(out_dir: str) -> dict:
    """A built tree's manifest.json, checked (bad input names it)."""
    path = os.path.join(out_dir, "manifest.json")
    try:
        doc = read_json(out_dir, "manifest.json", "manifest")
        if doc is None:
            raise FileNotFoundError(path)
        check_manifest(doc, path)
        return doc
    except FileNotFoundError:
        raise RocpkgInputError((path, "not found (--repo names a tree written by `rocpkg build`)")) from None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise RocpkgInputError((path, f"not a rocpkg manifest: {exc}")) from None


def packages_in_plan(plan) -> dict[str, set[str]]:
    """{format: lower-case package names} of a plan, as packages_in_tree."""
    return {fmt: {s.name.lower() for s in specs} for fmt, specs in plan.packages.items()}
