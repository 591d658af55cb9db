"""The lines of a .deb's `shlibs` control file, which dpkg-shlibdeps turns into a dependency
of a program linked against a library the package ships: `libfoo 1 <package> (>= <version>)`
for each versioned SONAME. The package name carries the release's ABI and install prefix;
`>=` the upstream version built lets every later build of the same ABI satisfy it."""
from __future__ import annotations

import re

from rocpkg import model as m

# What dpkg-shlibdeps splits into (name, version): `libfoo.so.1` and `libfoo-1.2.so`.
_SONAME_FORMS = (re.compile(r"(.+)\.so\.([^/]+)"), re.compile(r"(.+)-([0-9][^/]*)\.so"))


def split_soname(soname: str) -> tuple[str, str] | None:
    """(library name, SONAME version) as dpkg-shlibdeps splits a SONAME, None for one
    without a version (`libfoo.so`), which a shlibs file cannot name."""
    for form in _SONAME_FORMS:
        matched = form.fullmatch(soname)
        if matched:
            return matched.group(1), matched.group(2)
    return None


def deb_shlibs(spec: m.PackageSpec, elf_facts: list) -> list[str]:
    """The shlibs lines of a deb spec: one per distinct versioned SONAME it ships, sorted."""
    minimum = f"{spec.epoch}:{spec.version}" if spec.epoch else spec.version
    lines = set()
    for facts in elf_facts:
        split = split_soname(facts.soname) if facts.soname else None
        if split is not None:
            lines.add(f"{split[0]} {split[1]} {spec.name} (>= {minimum})")
    return sorted(lines)
