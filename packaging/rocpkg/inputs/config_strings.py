"""The strings of package.json that land in metadata, scripts or paths: one-line control
fields, sections, priorities, architectures, versions, suites, naming patterns, families,
targets, the install prefix. Each check returns what is wrong ("" or a list of
(key, what)); rocpkg.inputs.config reports them with the file and the field."""
from __future__ import annotations

import posixpath
import re
import string

from rocpkg.formats import preflight as pf
from rocpkg.formats.filelist import SYSTEM_DIRS

# Top directories whose contents the kernel or the boot provides, or that are emptied at boot.
VOLATILE_ROOTS = {"proc": "the kernel's process file system", "sys": "the kernel's sysfs",
                  "dev": "device nodes", "run": "emptied at every boot", "tmp": "emptied at boot",
                  "boot": "the boot loader's"}
VERSION_RE = re.compile(r"^[0-9][A-Za-z0-9.+~]*\Z")
# Definition strings that land in one line of a control file or spec header.
ONE_LINE_KEYS = ("Version", "Release", "Architecture", "BuildArch", "Maintainer", "Description_Short", "Section",
                 "Priority", "Group", "License", "Vendor", "Homepage")
ONE_LINE_SETTINGS = ("maintainer", "vendor", "homepage", "license")
PRIORITIES = ("required", "important", "standard", "optional", "extra")
_SECTION_RE = re.compile(r"^[a-z0-9][a-z0-9+._-]*(?:/[a-z0-9][a-z0-9+._-]*)?\Z")
_SUITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_FAMILY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*\Z")
# An install prefix: plain path characters only (it lands in maintainer scripts, spec
# %files and ld.so.conf.d).
_PREFIX_RE = re.compile(r"^/[A-Za-z0-9._+~@/-]*\Z")
# The placeholders each naming pattern may use, and sample values to check what it makes.
NAMING_FIELDS = {"versioned": ("name", "abi"), "host": ("name", "abi"), "device": ("name", "abi", "target"),
                 "family": ("name", "abi", "family"), "alias": ("family", "abi")}
_SAMPLE = {"name": "lib", "abi": "7.1", "target": "gfx942", "family": "gfx110X", "version": "7.1.0"}


def placeholder_problem(pattern: str, allowed) -> str:
    """A str.format pattern may use only the named placeholders, bare (no attribute,
    index, conversion or format spec: `{name.__class__}` is not a package name)."""
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(pattern) if name is not None]
    except ValueError as exc:
        return f"{pattern!r} is not a valid pattern ({exc})"
    for name, spec, conv in fields:
        if name not in allowed or spec or conv:
            return f"placeholder {{{name}}} is not one of {', '.join('{' + a + '}' for a in allowed)}"
    return ""


def prefix_problem(pattern: str, version: str) -> str:
    """What is wrong with the install prefix ("" if nothing): absolute, normalised, no
    `..` or `//`, plain path characters, and not / itself."""
    problem = placeholder_problem(pattern, ("abi", "version")) or pf.control_problem(pattern)
    if problem:
        return problem
    prefix = pattern.format(abi=".".join(version.split(".")[:2]), version=version)
    if not prefix.startswith("/"):
        return f"{prefix!r} must be an absolute path"
    if ".." in prefix.split("/"):
        return f"{prefix!r} holds '..'"
    if "//" in prefix:
        return f"{prefix!r} holds '//'"
    if posixpath.normpath(prefix) != prefix:
        return f"{prefix!r} is not normalised (write {posixpath.normpath(prefix)!r})"
    top = prefix.split("/")[1]
    if top in VOLATILE_ROOTS:
        return f"{prefix} is under /{top}, {VOLATILE_ROOTS[top]}: a package cannot install there"
    if prefix in SYSTEM_DIRS:
        return f"{prefix} is a system directory, which no package may own: install under a directory of its own"
    if not _PREFIX_RE.match(prefix):
        return f"{prefix!r} holds characters other than letters, digits and . _ + ~ @ - /"
    return ""


def settings_string_problems(settings: dict) -> list[tuple[str, str]]:
    """Settings strings that land in metadata or on disk: one-line fields, the suite,
    architectures, naming patterns, families, targets and names."""
    from kpack.targets import parse_target

    out = []
    for key in ONE_LINE_SETTINGS:
        problem = pf.control_problem(settings[key])
        if problem:
            out.append((key, problem))
    if not settings["maintainer"].strip():
        out.append(("maintainer", "empty: every Debian package needs a Maintainer"))
    if not _SUITE_RE.match(settings["suite"]) or ".." in settings["suite"]:
        out.append(("suite", f"{settings['suite']!r} is not a suite name (letters, digits and . _ -; no '/')"))
    if not pf.DEB_ARCH.match(settings["deb_arch"]):
        out.append(("deb_arch", f"{settings['deb_arch']!r} is not a Debian architecture name"))
    if not pf.RPM_ARCH.match(settings["rpm_arch"]):
        out.append(("rpm_arch", f"{settings['rpm_arch']!r} is not an RPM architecture name"))
    for key, pattern in settings["naming"].items():
        allowed = NAMING_FIELDS[key]
        problem = placeholder_problem(pattern, allowed) or pf.control_problem(pattern)
        if not problem:
            made = pattern.format(**{k: _SAMPLE[k] for k in allowed}).lower()
            if not pf.DEB_NAME.match(made):
                problem = f"{pattern!r} makes {made!r}, not a valid package name"
        if problem:
            out.append((f"naming.{key}", problem))
    families = settings["families"] or {}
    for name, members in families.items():
        if not _FAMILY_RE.match(name):
            out.append((f"families.{name}", "not a family name (letters, digits and . + -)"))
        if not isinstance(members, list) or not all(isinstance(t, str) for t in members):
            out.append((f"families.{name}", "expected a list of target names"))
            continue
        out += [(f"families.{name}", f"{t!r} is not a target") for t in members if not _is_target(t, parse_target)]
    for index, target in enumerate(settings["targets"] or []):
        if not isinstance(target, str) or not _is_target(target, parse_target):
            out.append((f"targets[{index}]", f"{target!r} is not a target"))
    for index, name in enumerate(settings["external"]):
        if not isinstance(name, str) or not (pf.DEB_NAME.match(name) or pf.RPM_NAME.match(name)):
            out.append((f"external[{index}]", f"{name!r} is not a package name"))
    top = settings["top_metapackage"]
    if top is not None and not pf.DEB_NAME.match(top):
        out.append(("top_metapackage", f"{top!r} is not a package name"))
    return out


def _is_target(text: str, parse_target) -> bool:
    try:
        parse_target(text)
    except ValueError:
        return False
    return True


def definition_string_problems(entry: dict) -> list[tuple[str, str]]:
    """(key, what) for a definition's metadata strings."""
    out = []
    for key in ONE_LINE_KEYS:
        value = entry.get(key)
        if isinstance(value, str) and pf.control_problem(value):
            out.append((key, pf.control_problem(value)))
    if isinstance(entry.get("Maintainer"), str) and entry["Maintainer"] and not entry["Maintainer"].strip():
        out.append(("Maintainer", "blank: leave it out to use settings.maintainer"))
    if isinstance(entry.get("Description_Long"), str) and pf.control_problem(entry["Description_Long"], True):
        out.append(("Description_Long", pf.control_problem(entry["Description_Long"], True)))
    checks = (("Section", lambda v: _SECTION_RE.match(v), "not a Debian section (lower-case, e.g. libs, devel)"),
              ("Priority", lambda v: v in PRIORITIES, f"not one of {', '.join(PRIORITIES)}"),
              ("Architecture", lambda v: pf.DEB_ARCH.match(v), "not a Debian architecture name"),
              ("BuildArch", lambda v: pf.RPM_ARCH.match(v), "not an RPM architecture name"),
              ("Version", lambda v: VERSION_RE.match(v), "not a version valid for both DEB and RPM"),
              ("Release", lambda v: re.match(r"^[A-Za-z0-9.+~]+\Z", v), "not a release valid for both DEB and RPM"))
    done = {key for key, _ in out}
    for key, ok, what in checks:
        value = entry.get(key)
        if isinstance(value, str) and value and key not in done and not ok(value):
            out.append((key, f"{value!r} is {what}"))
    return out
