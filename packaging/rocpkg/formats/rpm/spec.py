"""The rendered spec (templates/rpm/spec.j2) read back into what the header needs:
preamble, relations, description, scriptlets and changelog. Templates are the single
source of metadata text; this parses only the subset of spec syntax they render."""
from __future__ import annotations

import calendar
import time
from dataclasses import dataclass

from rocpkg.formats.rpm.relations import (RPMSENSE_SCRIPT_POST, RPMSENSE_SCRIPT_POSTUN, RPMSENSE_SCRIPT_PRE,
                                  RPMSENSE_SCRIPT_PREUN, parse_relation, split_relations)


@dataclass
class ParsedSpec:
    """What the writer takes from the rendered spec (templates/rpm/spec.j2)."""

    preamble: dict[str, str]
    relations: dict[str, list[tuple[str, int, str]]]    # Requires/... -> (name, flags, version)
    description: str
    scripts: dict[str, tuple[str, str]]                 # "post" -> (program, body)
    changelog: list[tuple[int, str, str]]               # (time, name line, text)


SCRIPT_SECTIONS = ("pre", "post", "preun", "postun")
_SECTIONS = ("description", "files", "changelog") + SCRIPT_SECTIONS
RELATION_KEYS = ("requires", "recommends", "suggests", "provides", "conflicts", "obsoletes")
SCRIPT_SENSE = {"pre": RPMSENSE_SCRIPT_PRE, "post": RPMSENSE_SCRIPT_POST,
                "preun": RPMSENSE_SCRIPT_PREUN, "postun": RPMSENSE_SCRIPT_POSTUN}


def _changelog_time(header_line: str) -> int:
    """`* Thu Jan 01 1970 ...` -> noon UTC of that day (rpm keeps day resolution)."""
    fields = header_line.lstrip("*").split()
    stamp = time.strptime(" ".join(fields[:4]), "%a %b %d %Y")
    return calendar.timegm(stamp) + 12 * 3600


def _literal(text: str) -> str:
    """What rpmbuild makes of spec text without macros: `%%` is a literal `%` (render.py
    writes every `%` of package.json text that way, so no string becomes a macro)."""
    return text.replace("%%", "%")


def parse_spec(text: str) -> ParsedSpec:
    """Parse the subset of spec syntax that spec.j2 renders: `Key: value` preamble,
    %description, %pre/%post/%preun/%postun (optionally `-p <prog>`), %files (ignored:
    the file list comes from the plan) and %changelog."""
    preamble: dict[str, str] = {}
    relations: dict[str, list] = {k: [] for k in RELATION_KEYS}
    sections: dict[str, list[str]] = {}
    programs: dict[str, str] = {}
    current = None
    for lineno, line in enumerate(text.splitlines(), 1):
        word = line.split()[0] if line.split() else ""
        if word.startswith("%") and word[1:] in _SECTIONS:
            current = word[1:]
            if current in sections:
                raise ValueError(f"spec line {lineno}: section %{current} repeated")
            sections[current] = []
            args = line.split()[1:]
            programs[current] = args[1] if args[:1] == ["-p"] and len(args) > 1 else "/bin/sh"
            continue
        if current is not None:
            sections[current].append(line)
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"spec line {lineno}: expected `Key: value`: {line!r}")
        key, value = key.strip(), value.strip()
        base, _, qualifier = key.partition("(")
        if base.lower() in RELATION_KEYS:
            sense = SCRIPT_SENSE.get(qualifier.rstrip(")").strip(), 0) if qualifier else 0
            for item in split_relations(value):
                name, flags, version = parse_relation(item)
                relations[base.lower()].append((name, flags | sense, version))
        else:
            preamble[key.lower()] = _literal(value)
    scripts = {}
    for name in SCRIPT_SECTIONS:
        if name in sections:
            body = "\n".join(sections[name]).strip("\n")
            if body.strip() or programs[name] != "/bin/sh":
                scripts[name] = (programs[name], body + "\n" if body else "")
    changelog = []
    entry = None
    for line in sections.get("changelog", []):
        if line.startswith("*"):
            entry = [_changelog_time(line), " ".join(line.lstrip("*").split()[4:]), []]
            changelog.append(entry)
        elif entry is not None and line.strip():
            entry[2].append(_literal(line))
    description = _literal("\n".join(sections.get("description", [])).strip("\n"))
    return ParsedSpec(preamble, relations, description, scripts,
                      [(t, n, "\n".join(body)) for t, n, body in changelog])


