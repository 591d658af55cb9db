"""The Debian format as the rest of rocpkg sees it (rocpkg.formats.plugin.Format)."""
from __future__ import annotations

import os

from rocpkg.formats import preflight, versions
from rocpkg.formats.plugin import Format
from rocpkg.model import SYMLINK, FileEntry


POOL_ROOT = "pool"
SNIPPET = "rocm.list"           # apt's one-line source, at OUT's top


def _pin(name: str, evr: str) -> str:
    return f"{name} (= {evr})"


def _external(relation: str) -> str:
    """A system relation kept verbatim, only spaced as Debian writes alternatives."""
    return " | ".join(p.strip() for p in relation.split("|"))


def _arch(independent: bool, fields: dict, settings: dict) -> str:
    return "all" if independent else (fields.get("Architecture") or settings["deb_arch"])


def file_name(spec) -> str:
    return f"{spec.name}_{spec.version}-{spec.release}_{spec.arch}.deb"


def _pool(spec) -> str:
    return os.path.join(POOL_ROOT, "main")


def _library_metadata(spec, elf_facts: list, excludes) -> None:
    from rocpkg.formats.deb.shlibs import deb_shlibs

    spec.shlibs = deb_shlibs(spec, elf_facts)


def _finish_debug(debug, spec, ids: list[str]) -> None:
    """A dbgsym as dh_strip makes it: its fields, and its doc dir a link to its package's."""
    debug.deb_fields = [("Auto-Built-Package", "debug-symbols"), ("Build-Ids", " ".join(ids))]
    debug.files.insert(0, FileEntry(f"/usr/share/doc/{debug.name}", SYMLINK, 0o777, link_target=spec.name))
    debug.prefix = ""


FORMAT = Format(
    name="deb", title="Debian", suffix=".deb", client="apt", dialect="deb", metadata_suffix="control",
    pin=_pin, external=_external, arch=_arch, file_name=file_name, pool=_pool,
    writer="rocpkg.formats.deb.package:write_deb", reader="rocpkg.formats.deb.reader:READER",
    package_root=POOL_ROOT, index_dirs=("dists",),
    name_rule=preflight.DEB_NAME, arch_rule=preflight.DEB_ARCH,
    version_problem=preflight.deb_version_problem, relation_problem=preflight.deb_relation_problem,
    lower_devel=True, meta_section="metapackages", plain_shared_objects=True, needs_maintainer=True,
    libc="libc6", debug_suffix="-dbgsym", debug_summary=lambda name: f"debug symbols for {name}",
    library_metadata=_library_metadata, finish_debug=_finish_debug,
    templates=("deb/changelog.j2", "deb/copyright.j2", "deb/control.j2", "deb/maintscript.j2"),
    order_tool="dpkg", compare=versions.dpkg_compare, install_command="apt install {}",
    repository="rocpkg.formats.deb.repository:REPOSITORY", snippet=SNIPPET,
)
