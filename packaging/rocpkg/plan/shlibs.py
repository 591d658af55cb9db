"""The shared-library metadata downstream packaging tools read, from the catalog's ELF
facts (no artifact is reopened here):

- deb: a package shipping a shared library with a versioned SONAME gets one `shlibs`
  line per library, `libfoo 1 <package> (>= <version>)`, which dpkg-shlibdeps turns into
  a dependency of a program linked against it. The package name carries the release's
  ABI and install prefix; `>=` the upstream version built lets every later build of the
  same ABI (same prefix, same SONAME) satisfy it.
- rpm: what rpmbuild's elfdeps generates for the same files: `soname()(64bit)` and
  `soname(VERSION)(64bit)` Provides for each shared library, and `needed()(64bit)` and
  `needed(VERSION)(64bit)` Requires for each DT_NEEDED name and needed symbol version of
  every host ELF, less those settings.rpm_requires_exclude matches (rpm's
  __requires_exclude). An in-release SONAME becomes a Requires rpm resolves to the
  release's own package that provides it.
"""
from __future__ import annotations

import re

from rocpkg import model as m

EXCLUDE_SETTING = "rpm_requires_exclude"
# What dpkg-shlibdeps splits into (name, version): `libfoo.so.1` and `libfoo-1.2.so`.
_SONAME_FORMS = (re.compile(r"^(.+)\.so\.([^/]+)\Z"), re.compile(r"^(.+)-([0-9][^/]*)\.so\Z"))
# A name that can stand in a control file line and an rpm dependency without quoting.
_PLAIN = re.compile(r"^[A-Za-z0-9_.+@-]+\Z")


def requires_excludes(settings: dict) -> tuple[list[re.Pattern], list[tuple[str, str]]]:
    """(compiled patterns of settings.rpm_requires_exclude, problems naming a bad one)."""
    patterns, problems = [], []
    for index, text in enumerate(settings.get(EXCLUDE_SETTING) or []):
        where = f"settings.{EXCLUDE_SETTING}[{index}]"
        if not isinstance(text, str):
            problems.append((where, f"expected a regular expression string, not {type(text).__name__}"))
            continue
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            problems.append((where, f"{text!r} is not a regular expression: {exc}"))
    return patterns, problems


def add_library_metadata(packages: dict[str, list[m.PackageSpec]], facts_of, settings: dict
                         ) -> tuple[list[str], list[tuple[str, str]]]:
    """Fill each deb spec's `shlibs` and add each rpm spec's ELF Provides and Requires, from
    the facts of the host ELF files it ships (facts_of: source path -> FileFacts).
    Returns (warnings, problems): a host ELF whose dynamic table or version sections
    could not be read, or whose SONAME no control file can hold, is a warning naming it
    (its package goes without that metadata); a bad exclude pattern is a problem."""
    excludes, problems = requires_excludes(settings)
    warnings: dict[str, str] = {}
    for spec in packages.get("deb", []):
        spec.shlibs = deb_shlibs(spec, _elf_facts(spec, facts_of, warnings))
    for spec in packages.get("rpm", []):
        provides, requires = rpm_elf_relations(_elf_facts(spec, facts_of, warnings), excludes)
        spec.provides.extend(p for p in provides if p not in spec.provides)
        spec.depends.extend(r for r in requires if r not in spec.depends)
    return [warnings[path] for path in sorted(warnings)], problems


def _elf_facts(spec: m.PackageSpec, facts_of, warnings: dict[str, str]) -> list:
    """The facts of the host ELF files a spec ships, in file order; unreadable linkage
    and unusable names are noted in warnings (by install path)."""
    found: list = []
    if spec.kind not in (m.KIND_FILES, m.KIND_HOST):
        return found    # device code, metas and debug files: no library a program links
    for entry in spec.files:
        if entry.type != m.FILE:
            continue
        facts = facts_of(entry.source)
        if facts.elf != "host":
            continue
        if facts.linkage_error:
            warnings[entry.path] = (f"{entry.path} (in {spec.name}): its dynamic section cannot be read "
                                    f"({facts.linkage_error}); its package gets no shared-library metadata from it")
            continue
        odd = [name for name in (facts.soname, *facts.needed) if name and not _PLAIN.match(name)]
        if odd:
            warnings[entry.path] = (f"{entry.path} (in {spec.name}): library name {odd[0]!r} cannot stand in "
                                    "shlibs or an rpm dependency; its package gets no shared-library metadata from it")
            continue
        found.append(facts)
    return found


def split_soname(soname: str) -> tuple[str, str] | None:
    """(library name, SONAME version) as dpkg-shlibdeps splits a SONAME, None for one
    without a version (`libfoo.so`), which a shlibs file cannot name."""
    for form in _SONAME_FORMS:
        matched = form.match(soname)
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


def rpm_elf_relations(elf_facts: list, excludes: list[re.Pattern]) -> tuple[list[str], list[str]]:
    """(Provides, Requires) rpmbuild's elfdeps would generate for these host ELF files,
    sorted; Requires any exclude pattern matches (re.search, as rpm's) are left out."""
    provides, requires = set(), set()
    for facts in elf_facts:
        mark = "(64bit)" if facts.elf_bits == 64 else ""
        if facts.soname:
            provides.add(f"{facts.soname}(){mark}")
            provides.update(f"{facts.soname}({version}){mark}" for version in facts.version_defs
                            if _PLAIN.match(version))
        requires.update(f"{needed}(){mark}" for needed in facts.needed)
        requires.update(f"{library}({version}){mark}" for library, version in facts.version_needs
                        if _PLAIN.match(version))
    requires = {r for r in requires if not any(p.search(r) for p in excludes)}
    return sorted(provides), sorted(requires)
