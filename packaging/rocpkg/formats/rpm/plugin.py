"""The RPM format as the rest of rocpkg sees it (rocpkg.formats.plugin.Format)."""
from __future__ import annotations

from rocpkg.formats import preflight, versions
from rocpkg.formats.plugin import Format

SNIPPET = "rocm.repo"           # the repo file for /etc/yum.repos.d and /etc/zypp/repos.d, at OUT's top


def _pin(name: str, evr: str) -> str:
    return f"{name} = {evr}"


def _external(relation: str) -> str:
    """A system relation kept verbatim; DEB-style alternatives become a rich `(a or b)`."""
    if "|" in relation:
        return "(" + " or ".join(p.strip() for p in relation.split("|")) + ")"
    return relation


def _arch(independent: bool, fields: dict, settings: dict) -> str:
    return "noarch" if independent else (fields.get("BuildArch") or settings["rpm_arch"])


def file_name(spec) -> str:
    return f"{spec.name}-{spec.version}-{spec.release}.{spec.arch}.rpm"


def _pool(spec) -> str:
    return spec.arch


def _library_metadata(spec, elf_facts: list, excludes) -> None:
    from rocpkg.formats.rpm.elfdeps import rpm_elf_relations

    provides, requires = rpm_elf_relations(elf_facts, excludes)
    spec.provides.extend(p for p in provides if p not in spec.provides)
    spec.depends.extend(r for r in requires if r not in spec.depends)


FORMAT = Format(
    name="rpm", title="RPM", suffix=".rpm", client="dnf", dialect="rpm", metadata_suffix="spec",
    pin=_pin, external=_external, arch=_arch, file_name=file_name, pool=_pool,
    writer="rocpkg.formats.rpm.write:write_rpm", reader="rocpkg.formats.rpm.reader:READER",
    index_dirs=("repodata",), sign_in_place="rocpkg.formats.sign:sign_rpm_header",
    name_rule=preflight.RPM_NAME, arch_rule=preflight.RPM_ARCH,
    version_problem=preflight.rpm_version_problem, relation_problem=preflight.rpm_relation_problem,
    case_provides=True, target_provides=lambda target: f"rocm-gfx({target})", debug_suffix="-debuginfo",
    debug_summary=lambda name: f"Debug information for package {name}",
    debug_provides=lambda ids: [f"debuginfo(build-id) = {i}" for i in ids],
    library_metadata=_library_metadata, templates=("rpm/spec.j2",),
    order_tool="rpm", compare=versions.rpm_compare, install_command="dnf install {}",
    repository="rocpkg.formats.rpm.repository:REPOSITORY", snippet=SNIPPET,
)
