"""What rpmbuild's elfdeps generates for host ELF files: `soname()(64bit)` and
`soname(VERSION)(64bit)` Provides for each shared library, and `needed()(64bit)` and
`needed(VERSION)(64bit)` Requires for each DT_NEEDED name and needed symbol version, less
those an exclude pattern matches (rpm's __requires_exclude). An in-release SONAME becomes a
Requires rpm resolves to the release's own package that provides it."""
from __future__ import annotations

import re

from rocpkg.formats.preflight import LIBRARY_NAME


def rpm_elf_relations(elf_facts: list, excludes: list[re.Pattern]) -> tuple[list[str], list[str]]:
    """(Provides, Requires) rpmbuild's elfdeps would generate for these host ELF files,
    sorted; Requires any exclude pattern matches (re.search, as rpm's) are left out."""
    provides, requires = set(), set()
    for facts in elf_facts:
        mark = "(64bit)" if facts.elf_bits == 64 else ""
        if facts.soname:
            provides.add(f"{facts.soname}(){mark}")
            provides.update(f"{facts.soname}({version}){mark}" for version in facts.version_defs
                            if LIBRARY_NAME.fullmatch(version))
        requires.update(f"{needed}(){mark}" for needed in facts.needed)
        requires.update(f"{library}({version}){mark}" for library, version in facts.version_needs
                        if LIBRARY_NAME.fullmatch(version))
    requires = {r for r in requires if not any(p.search(r) for p in excludes)}
    return sorted(provides), sorted(requires)
