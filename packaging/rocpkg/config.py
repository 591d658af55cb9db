"""Load and validate package.json in both shapes (TheRock's list, rocpkg's object).

Every problem is collected with the file, the JSON path and what is wrong, and raised
together, so that a maintainer fixes a config in one pass instead of one error per run.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources

from rocpkg.errors import RocpkgInputError

# Keys of a package definition and the type each must have. "bool" accepts TheRock's
# string booleans ("True"/"False") as well as real ones.
DEFINITION_KEYS: dict[str, str] = {
    "Package": "str",
    "Version": "str",
    "Release": "str",
    "Epoch": "int",
    "Architecture": "str",
    "BuildArch": "str",
    "Maintainer": "str",
    "Description_Short": "str",
    "Description_Long": "str",
    "Section": "str",
    "Priority": "str",
    "Group": "str",
    "License": "str",
    "Vendor": "str",
    "Homepage": "str",
    "Gfxarch": "bool",
    "Metapackage": "bool",
    "DisablePackaging": "bool",
    "Postinstall": "bool",
    "Disable_DWZ": "bool",
    "Disable_RPM_STRIP": "bool",
    "Disable_DEB_STRIP": "bool",
    "Comments": "str",
    "Artifactory": "list",
    # legacy single-artifact form seen in TheRock's disabled entries
    "Artifact": "str",
    "Components": "strlist",
}
# Relation keys per format: package.json key -> PackageSpec field
DEB_RELATION_KEYS = {
    "DEBDepends": "depends",
    "DEBPreDepends": "pre_depends",
    "DEBRecommends": "recommends",
    "DEBSuggests": "suggests",
    "DEBConflicts": "conflicts",
    "DEBBreaks": "breaks",
    "DEBReplaces": "replaces",
    "DEBProvides": "provides",
}
RPM_RELATION_KEYS = {
    "RPMRequires": "depends",
    "RPMRecommends": "recommends",
    "RPMSuggests": "suggests",
    "RPMConflicts": "conflicts",
    "RPMObsoletes": "obsoletes",
    "RPMProvides": "provides",
}
for _k in list(DEB_RELATION_KEYS) + list(RPM_RELATION_KEYS):
    DEFINITION_KEYS[_k] = "strlist"

SETTINGS_DEFAULTS: dict[str, object] = {
    "version": "7.1.0",
    "release": "1",
    "epoch": 0,
    "prefix": "/opt/rocm/core-{abi}",
    "naming": {
        "versioned": "{name}{abi}",
        "host": "{name}-host{abi}",
        "device": "{name}{abi}-{target}",
        "family": "{name}{abi}-{family}",
        "alias": "rocm-{family}",
    },
    "families": None,            # None: kpack.targets.FAMILIES
    "top_metapackage": None,     # None: the per-target meta-package no other one includes
    "aliases": True,
    "targets": None,             # None: every target found in the artifacts
    "compression": "zstd",
    "compression_level": 3,
    "suite": "stable",
    "maintainer": "rocpkg <rocpkg@localhost>",
    "vendor": "",
    "homepage": "",
    "license": "MIT",
    "deb_arch": "amd64",
    "rpm_arch": "x86_64",
    "external": [],              # names declared external (system packages)
    "allow_unsatisfied": False,  # unsatisfiable dependencies become warnings
}
SETTINGS_TYPES = {
    "version": str, "release": str, "epoch": int, "prefix": str, "naming": dict,
    "families": (dict, type(None)), "top_metapackage": (str, type(None)), "aliases": bool,
    "targets": (list, type(None)), "compression": str, "compression_level": int, "suite": str,
    "maintainer": str, "vendor": str, "homepage": str, "license": str, "deb_arch": str,
    "rpm_arch": str, "external": list, "allow_unsatisfied": bool,
}
COMPRESSIONS = ("zstd", "xz", "gzip")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION_RE = re.compile(r"^[0-9][A-Za-z0-9.+~]*$")


@dataclass(frozen=True)
class ArtifactRef:
    """One Artifact x Subdir x Component triple of a definition."""

    artifact: str
    subdir: str
    component: str
    where: str  # JSON path, for error messages
    gfxarch: bool = True  # Artifact_Gfxarch: False marks an artifact that is never split per target


@dataclass
class Definition:
    """One package.json entry, normalised: real booleans, lists, relation dicts."""

    name: str
    index: int
    fields: dict
    gfxarch: bool = False
    metapackage: bool = False
    disabled: bool = False
    postinstall: bool = False
    artifacts: list[ArtifactRef] = field(default_factory=list)
    deb_relations: dict[str, list[str]] = field(default_factory=dict)
    rpm_relations: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"[{self.index}]"


@dataclass
class Config:
    path: str
    settings: dict
    definitions: list[Definition]

    @property
    def enabled(self) -> list[Definition]:
        return [d for d in self.definitions if not d.disabled]

    def by_name(self) -> dict[str, Definition]:
        return {d.name: d for d in self.definitions}


def default_config_path() -> str:
    """The bundled package.json: installed as `rocpkg.defaults`, or the repository's own
    when rocpkg runs from a source checkout."""
    try:
        return str(resources.files("rocpkg.defaults").joinpath("package.json"))
    except ModuleNotFoundError:
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "package.json")


def _as_bool(value, where, problems) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0", ""):
        return value.strip().lower() in ("true", "yes", "1")
    problems.append((where, f"expected a boolean or \"True\"/\"False\", got {value!r}"))
    return False


def _check_type(value, kind: str, where: str, problems) -> bool:
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "list": isinstance(value, list),
        "strlist": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "bool": True,  # checked by _as_bool
    }[kind]
    if not ok:
        want = {"strlist": "a list of strings", "list": "a list", "str": "a string", "int": "an integer"}[kind]
        problems.append((where, f"expected {want}, got {type(value).__name__} {value!r:.60}"))
    return ok


def _parse_artifactory(value, where: str, problems) -> list[ArtifactRef]:
    refs: list[ArtifactRef] = []
    if not isinstance(value, list):
        return refs
    for ai, art in enumerate(value):
        aw = f"{where}.Artifactory[{ai}]"
        if not isinstance(art, dict):
            problems.append((aw, "expected an object with Artifact and Artifact_Subdir"))
            continue
        for key in art:
            if key not in ("Artifact", "Artifact_Subdir", "Artifact_Gfxarch"):
                problems.append((f"{aw}.{key}", "unknown key"))
        art_gfxarch = _as_bool(art.get("Artifact_Gfxarch", True), f"{aw}.Artifact_Gfxarch", problems)
        name = art.get("Artifact")
        if not isinstance(name, str) or not name:
            problems.append((f"{aw}.Artifact", "missing or not a non-empty string"))
            continue
        subdirs = art.get("Artifact_Subdir")
        if not isinstance(subdirs, list) or not subdirs:
            problems.append((f"{aw}.Artifact_Subdir", "missing or not a non-empty list"))
            continue
        for si, sub in enumerate(subdirs):
            sw = f"{aw}.Artifact_Subdir[{si}]"
            if not isinstance(sub, dict):
                problems.append((sw, "expected an object with Name and Components"))
                continue
            for key in sub:
                if key not in ("Name", "Components"):
                    problems.append((f"{sw}.{key}", "unknown key"))
            sname = sub.get("Name")
            comps = sub.get("Components")
            if not isinstance(sname, str) or not sname:
                problems.append((f"{sw}.Name", "missing or not a non-empty string"))
                continue
            if not isinstance(comps, list) or not comps or not all(isinstance(c, str) and c for c in comps):
                problems.append((f"{sw}.Components", "missing or not a non-empty list of strings"))
                continue
            for comp in comps:
                if "_" in comp:
                    problems.append((f"{sw}.Components", f"component {comp!r} must not contain '_'"))
                refs.append(ArtifactRef(name, sname, comp, sw, art_gfxarch))
    return refs


def _load_settings(raw, problems) -> dict:
    settings = json.loads(json.dumps(SETTINGS_DEFAULTS))
    if raw is None:
        return settings
    if not isinstance(raw, dict):
        problems.append(("settings", "expected an object"))
        return settings
    for key, value in raw.items():
        where = f"settings.{key}"
        if key not in SETTINGS_DEFAULTS:
            problems.append((where, "unknown key"))
            continue
        if not isinstance(value, SETTINGS_TYPES[key]) or (isinstance(value, bool) and SETTINGS_TYPES[key] is int):
            problems.append((where, f"wrong type {type(value).__name__}"))
            continue
        if key == "naming":
            for nk, nv in value.items():
                if nk not in SETTINGS_DEFAULTS["naming"]:
                    problems.append((f"{where}.{nk}", "unknown naming pattern"))
                elif not isinstance(nv, str):
                    problems.append((f"{where}.{nk}", "expected a string"))
                else:
                    settings["naming"][nk] = nv
            continue
        settings[key] = value
    return settings


def validate_settings(settings: dict, where_prefix: str = "settings") -> list[tuple[str, str]]:
    """Checks that also apply after command-line overrides (--version, --release)."""
    problems = []
    if not _VERSION_RE.match(str(settings["version"])) or str(settings["version"]).count(".") < 1:
        problems.append((f"{where_prefix}.version", f"{settings['version']!r} is not a MAJOR.MINOR[.PATCH] version"))
    if not re.match(r"^[A-Za-z0-9.+~]+$", str(settings["release"])):
        problems.append((f"{where_prefix}.release", f"{settings['release']!r} is not a valid release"))
    if settings["compression"] not in COMPRESSIONS:
        problems.append((f"{where_prefix}.compression", f"must be one of {', '.join(COMPRESSIONS)}"))
    if not str(settings["prefix"]).startswith("/"):
        problems.append((f"{where_prefix}.prefix", "must be an absolute path"))
    if settings["epoch"] < 0:
        problems.append((f"{where_prefix}.epoch", "must be >= 0"))
    return problems


def relation_names(relation: str) -> list[str]:
    """Package names in one DEB or RPM relation (`a (>= 1) | b`, `(a or b)`, `a >= 1`)."""
    text = relation.strip()
    if text.startswith("("):
        text = text.strip("()")
        parts = re.split(r"\s+(?:or|and|if|else|with|without|unless)\s+", text)
    else:
        parts = text.split("|")
    names = []
    for part in parts:
        part = part.strip().strip("()").strip()
        if not part:
            continue
        names.append(re.split(r"[\s(<>=]", part, maxsplit=1)[0])
    return names


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Read package.json (either shape) into a validated Config or raise RocpkgInputError."""
    path = os.fspath(path) if path is not None else default_config_path()
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise RocpkgInputError(path, "file not found") from None
    except json.JSONDecodeError as exc:
        raise RocpkgInputError(f"{path}:{exc.lineno}:{exc.colno}", f"invalid JSON: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RocpkgInputError(path, f"cannot read: {exc}") from None

    problems: list[tuple[str, str]] = []
    if isinstance(raw, list):
        settings = _load_settings(None, problems)
        entries, base = raw, ""
    elif isinstance(raw, dict):
        for key in raw:
            if key not in ("settings", "packages"):
                problems.append((key, "unknown top-level key (expected settings, packages)"))
        settings = _load_settings(raw.get("settings"), problems)
        entries, base = raw.get("packages"), "packages"
        if not isinstance(entries, list):
            problems.append(("packages", "missing or not a list"))
            entries = []
    else:
        raise RocpkgInputError(path, "expected a JSON list of package definitions or an object with settings and packages")
    problems += validate_settings(settings)

    definitions: list[Definition] = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(entries):
        where = f"{base}[{index}]"
        if not isinstance(entry, dict):
            problems.append((where, "expected an object"))
            continue
        name = entry.get("Package")
        if not isinstance(name, str) or not name:
            problems.append((f"{where}.Package", "missing or not a non-empty string"))
            continue
        where = f"{where}({name})"
        if not _NAME_RE.match(name):
            problems.append((f"{where}.Package", "not a valid package name (lower-case letters, digits, + - .)"))
        if name in seen:
            problems.append((f"{where}.Package", f"defined twice (first at {seen[name]})"))
        seen[name] = where
        for key, value in entry.items():
            if key not in DEFINITION_KEYS:
                problems.append((f"{where}.{key}", "unknown key"))
            else:
                _check_type(value, DEFINITION_KEYS[key], f"{where}.{key}", problems)
        d = Definition(name=name, index=index, fields=entry)
        d.gfxarch = _as_bool(entry.get("Gfxarch", False), f"{where}.Gfxarch", problems)
        d.metapackage = _as_bool(entry.get("Metapackage", False), f"{where}.Metapackage", problems)
        d.disabled = _as_bool(entry.get("DisablePackaging", False), f"{where}.DisablePackaging", problems)
        d.postinstall = _as_bool(entry.get("Postinstall", False), f"{where}.Postinstall", problems)
        for key in ("Disable_DWZ", "Disable_RPM_STRIP", "Disable_DEB_STRIP"):
            if key in entry:  # rocpkg never rewrites payload files: these hold by construction
                _as_bool(entry[key], f"{where}.{key}", problems)
        d.artifacts = _parse_artifactory(entry.get("Artifactory", []), where, problems)
        if d.metapackage and d.artifacts and not d.disabled:
            problems.append((f"{where}.Artifactory", "a meta-package ships no files"))
        for key, attr in DEB_RELATION_KEYS.items():
            if isinstance(entry.get(key), list):
                d.deb_relations[attr] = [r.strip() for r in entry[key] if r.strip()]
        for key, attr in RPM_RELATION_KEYS.items():
            if isinstance(entry.get(key), list):
                d.rpm_relations[attr] = [r.strip() for r in entry[key] if r.strip()]
        # TheRock leaves RPMRequires out where it matches DEBDepends minus system names
        definitions.append(d)

    config = Config(path=path, settings=settings, definitions=definitions)
    problems += _check_relations(config, base)
    if problems:
        raise RocpkgInputError([(f"{path}: {w}", m) for w, m in problems])
    return config


def common_namespace(names) -> str:
    """The most common first dash-separated word of package names (`amdrocm` for TheRock)."""
    counts: dict[str, int] = {}
    for name in names:
        head = name.split("-", 1)[0]
        counts[head] = counts.get(head, 0) + 1
    return max(sorted(counts), key=lambda k: counts[k]) if counts else ""


def namespace(config: Config) -> str:
    """The release's package namespace: a dependency inside it must be defined."""
    return common_namespace(d.name for d in config.definitions)


def external_rule(namespace_: str, declared=()):
    """name -> True when the name is external: declared so, or outside the namespace
    (libc6, python3, ...)."""
    declared = set(declared)
    return lambda name: name in declared or not (name == namespace_ or name.startswith(namespace_ + "-"))


def is_external(config: Config, name: str) -> bool:
    """Whether a name that is not defined is an external system package."""
    return external_rule(namespace(config), config.settings["external"])(name)


def _check_relations(config: Config, base: str) -> list[tuple[str, str]]:
    problems = []
    defined = {d.name: d for d in config.definitions}
    external = external_rule(namespace(config), config.settings["external"])
    for d in config.enabled:
        for fmt, relations, keys in (("deb", d.deb_relations, DEB_RELATION_KEYS), ("rpm", d.rpm_relations, RPM_RELATION_KEYS)):
            for key, attr in keys.items():
                for ri, relation in enumerate(relations.get(attr, [])):
                    for name in relation_names(relation):
                        target = defined.get(name)
                        where = f"{base}[{d.index}]({d.name}).{key}[{ri}]"
                        if target is None and not external(name):
                            problems.append((where, f"{name!r} is neither defined nor an external system package"))
                        elif target is not None and target.disabled and attr in ("depends", "pre_depends"):
                            problems.append((where, f"{name!r} has DisablePackaging set and is never built"))
    return problems
