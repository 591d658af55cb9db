"""The shared-library metadata downstream packaging tools read, from the catalog's ELF
facts (no artifact is reopened here): which host ELF files of a package count (its
shipped host ELFs whose names can stand in metadata), and the settings' exclude patterns;
each format turns them into its own metadata (Format.library_metadata: a .deb's shlibs
file, an .rpm's elfdeps Provides and Requires).
"""
from __future__ import annotations

import re

from rocpkg import model as m
from rocpkg.formats.preflight import LIBRARY_NAME
from rocpkg.formats.registry import get as get_format

EXCLUDE_SETTING = "rpm_requires_exclude"


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
    """Fill in each spec's shared-library metadata in its format (Format.library_metadata:
    a deb spec's `shlibs`, an rpm spec's ELF Provides and Requires), from the facts of the
    host ELF files it ships (facts_of: source path -> FileFacts).
    Returns (warnings, problems): a host ELF whose dynamic table or version sections
    could not be read, or whose SONAME no control file can hold, is a warning naming it
    (its package goes without that metadata); a bad exclude pattern is a problem."""
    excludes, problems = requires_excludes(settings)
    warnings: dict[str, str] = {}
    for fmt, specs in packages.items():
        fill = get_format(fmt).library_metadata
        for spec in specs if fill is not None else ():
            fill(spec, _elf_facts(spec, facts_of, warnings), excludes)
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
        odd = [name for name in (facts.soname, *facts.needed) if name and not LIBRARY_NAME.fullmatch(name)]
        if odd:
            warnings[entry.path] = (f"{entry.path} (in {spec.name}): library name {odd[0]!r} cannot stand in "
                                    "shlibs or an rpm dependency; its package gets no shared-library metadata from it")
            continue
        found.append(facts)
    return found
