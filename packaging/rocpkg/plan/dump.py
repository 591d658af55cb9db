"""A plan in the forms `rocpkg plan` prints: the stable JSON (schema rocpkg-plan/1,
documented in the README) and Graphviz text of one format's relations."""
from __future__ import annotations

from rocpkg.formats.registry import file_name
from rocpkg import model as m
from rocpkg.inputs.config import relation_names


PLAN_SCHEMA = "rocpkg-plan/1"


def spec_to_dict(spec: m.PackageSpec, with_files: bool = True) -> dict:
    """The stable JSON form of one package (documented in README, `rocpkg plan --json`)."""
    out = {
        "format": spec.format, "name": spec.name, "kind": spec.kind, "definition": spec.definition,
        "target": spec.target, "family": spec.family, "version": spec.version, "release": spec.release,
        "epoch": spec.epoch, "arch": spec.arch, "filename": file_name(spec), "summary": spec.summary,
    }
    for attr in m.RELATION_FIELDS:
        out[attr] = list(getattr(spec, attr))
    out["scripts"] = dict(spec.scripts)
    out["files"] = sum(1 for f in spec.files if f.type != m.DIR)
    out["bytes"] = spec.payload_size
    if with_files:
        out["file_list"] = [
            {"path": f.path, "type": f.type, "mode": f.mode, "size": f.size, "source": f.source,
             "link_target": f.link_target, "patches": [[a, d.hex()] for a, d in f.patches]} for f in spec.files
        ]
    return out


def plan_to_dict(plan, with_files: bool = True) -> dict:
    return {
        "schema": PLAN_SCHEMA,
        "version": plan.settings["version"], "release": plan.settings["release"], "epoch": plan.settings["epoch"],
        "abi": plan.abi, "build_variant": plan.settings.get("build_variant", "release"),
        "targets": plan.targets, "families": plan.families, "top_metapackage": plan.top_metapackage,
        "info": plan.info, "warnings": plan.warnings,
        "packages": [spec_to_dict(p, with_files) for fmt in sorted(plan.packages) for p in plan.packages[fmt]],
    }


def plan_to_dot(plan, fmt: str) -> str:
    """Graphviz text of one format's relations; node shape says the kind."""
    shapes = {m.KIND_FILES: "box", m.KIND_HOST: "box", m.KIND_DEVICE: "component", m.KIND_META: "ellipse",
              m.KIND_ALIAS: "doubleoctagon"}
    specs = plan.by_name(fmt)
    lines = [f'digraph "rocpkg-{fmt}" {{', "  rankdir=LR;", "  node [fontsize=10];"]
    for name, spec in sorted(specs.items()):
        lines.append(f'  "{name}" [shape={shapes.get(spec.kind, "box")}];')
    for name, spec in sorted(specs.items()):
        for rel in spec.depends + spec.pre_depends:
            for dep in relation_names(rel):
                style = "" if dep in specs else ' [style=dashed]'
                lines.append(f'  "{name}" -> "{dep}"{style};')
                break
    lines.append("}")
    return "\n".join(lines) + "\n"
