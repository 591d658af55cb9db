"""Load and validate package.json in both shapes (TheRock's list, rocpkg's object).

Every problem is collected with the file, the JSON path and what is wrong, and raised
together, so that a maintainer fixes a config in one pass instead of one error per run.

package.json is untrusted: every string that lands in a control file, spec header,
changelog, Release file or repo config is checked here (no newline or control character
in a one-line field, names, versions and relations in each format's syntax, an install
prefix that is absolute and normalised), with the syntax rules of rocpkg.formats.preflight.
"""
from __future__ import annotations

import difflib
import functools
import json
import os
import re
import stat
from dataclasses import dataclass, field

from kpack.loader import LOOKUP_MODES
from rocpkg.formats import preflight as pf
from rocpkg.inputs.config_strings import VERSION_RE, definition_string_problems, prefix_problem, settings_string_problems
from rocpkg.formats.compression import KINDS as COMPRESSIONS, level_problem
from rocpkg import strict_json
from rocpkg.errors import RocpkgInputError
from rocpkg.store.files import kind_of

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
# package.json's two relation dialects, each format's packages taking one (Format.dialect):
# Debian's syntax (DEBDepends and kin) and rpm's (RPMRequires and kin). Per dialect:
# package.json key -> PackageSpec field
DEB_DIALECT, RPM_DIALECT = "deb", "rpm"
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
    "unknown_keys": "error",     # "warn": unknown package.json keys are ignored with a warning
    # DT_RUNPATH -> DT_RPATH in every host ELF packed (rocpkg.inputs.rpath); TheRock's list form
    # turns it on, as TheRock's packaging does
    "runpath_to_rpath": False,
    # the runtime the release ships: "fallthrough" (rocm-kpack since August 2026: every
    # archive matching the GPU, in order) or "strict" (before it: the most specific one only)
    "kpack_lookup": "fallthrough",
    # the release channel the version was derived for (rocpkg.inputs.channels), recorded in manifest.json
    "channel": "",
    # non-versioned per-target and per-family names of the top meta-package ({top}-{target})
    "unversioned_targets": False,
    # a -dbgsym / -debuginfo package per package whose ELF files have debug files in the
    # artifacts' dbg components (rocpkg.plan.debug)
    "debug_packages": True,
    # regular expressions: an rpm Requires generated from an ELF file's DT_NEEDED or needed
    # symbol version that one matches is left out (rpm's __requires_exclude; rocpkg.plan.shlibs)
    "rpm_requires_exclude": [],
    # which build of the stack the artifacts are (TheRock's --build-variant): "release", or
    # "asan", whose packages and prefix carry -asan (rocpkg.plan.naming) beside the release's
    "build_variant": "release",
}
# "release" is the normal build and changes no name; the others name their packages
BUILD_VARIANTS = ("release", "asan")


SETTINGS_TYPES = {
    "version": str, "release": str, "epoch": int, "prefix": str, "naming": dict,
    "families": (dict, type(None)), "top_metapackage": (str, type(None)), "aliases": bool,
    "targets": (list, type(None)), "compression": str, "compression_level": int, "suite": str,
    "maintainer": str, "vendor": str, "homepage": str, "license": str, "deb_arch": str,
    "rpm_arch": str, "external": list, "allow_unsatisfied": bool,
    "unknown_keys": str, "runpath_to_rpath": bool, "kpack_lookup": str, "channel": str,
    "unversioned_targets": bool, "debug_packages": bool, "rpm_requires_exclude": list,
    "build_variant": str,
}
UNKNOWN_KEY_MODES = ("error", "warn")
ARTIFACT_KEYS = ("Artifact", "Artifact_Subdir", "Artifact_Gfxarch")
SUBDIR_KEYS = ("Name", "Components")
EPOCH_MAX = 2**31 - 1
CONFIG_LIMIT = 256 << 20       # bytes of package.json read (TheRock's is under 1 MiB)
_NAME_RE = pf.DEB_NAME


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

    def relations(self, dialect: str) -> dict[str, list[str]]:
        """The relations package.json gives in one dialect: DEB_DIALECT (DEBDepends and
        kin) or RPM_DIALECT (RPMRequires and kin); a format takes the dialect its syntax
        reads (Format.dialect)."""
        return self.deb_relations if dialect == DEB_DIALECT else self.rpm_relations


@dataclass
class Config:
    path: str
    settings: dict
    definitions: list[Definition]
    warnings: list[str] = field(default_factory=list)   # unknown keys, in warn mode

    @property
    def enabled(self) -> list[Definition]:
        return [d for d in self.definitions if not d.disabled]

    def by_name(self) -> dict[str, Definition]:
        return {d.name: d for d in self.definitions}


def default_config_path() -> str:
    """The bundled package.json: installed as `rocpkg.defaults`, or the repository's own
    when rocpkg runs from a source checkout."""
    from rocpkg import bundled_dir

    return os.path.join(bundled_dir("rocpkg.defaults"), "package.json")


class UnknownKey(tuple):
    """A (where, what) problem about a key rocpkg does not know: an error, or in the
    opt-in warn mode (settings.unknown_keys, --unknown-keys) a warning."""

    def __new__(cls, where: str, key: str, known, what: str = "unknown key"):
        return super().__new__(cls, (where, what + did_you_mean(key, known)))


def did_you_mean(word: str, known) -> str:
    """ " (did you mean 'DEBDepends'?)" for the known word closest to word, or ""."""
    known = list(known)
    folded = {k.lower(): k for k in known}
    match = folded.get(word.lower()) or next(iter(difflib.get_close_matches(word, known, n=1, cutoff=0.6)), None)
    return f" (did you mean {match!r}?)" if match else ""


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
            if key not in ARTIFACT_KEYS:
                problems.append(UnknownKey(f"{aw}.{key}", key, ARTIFACT_KEYS))
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
                if key not in SUBDIR_KEYS:
                    problems.append(UnknownKey(f"{sw}.{key}", key, SUBDIR_KEYS))
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
            problems.append(UnknownKey(where, key, SETTINGS_DEFAULTS))
            continue
        if not isinstance(value, SETTINGS_TYPES[key]) or (isinstance(value, bool) and SETTINGS_TYPES[key] is int):
            problems.append((where, f"wrong type {type(value).__name__}"))
            continue
        if key == "naming":
            for nk, nv in value.items():
                if nk not in SETTINGS_DEFAULTS["naming"]:
                    problems.append(UnknownKey(f"{where}.{nk}", nk, SETTINGS_DEFAULTS["naming"],
                                               "unknown naming pattern"))
                elif not isinstance(nv, str):
                    problems.append((f"{where}.{nk}", "expected a string"))
                else:
                    settings["naming"][nk] = nv
            continue
        settings[key] = value
    return settings


def build_variant_problem(variant) -> str:
    """What is wrong with a build variant ("" if it is a known one)."""
    if variant in BUILD_VARIANTS:
        return ""
    return f"unknown build variant {variant!r}: must be one of {', '.join(BUILD_VARIANTS)}"


def validate_settings(settings: dict, where_prefix: str = "settings") -> list[tuple[str, str]]:
    """Checks that also apply after command-line overrides (--version, --release)."""
    problems = []
    version_ok = VERSION_RE.match(str(settings["version"])) and str(settings["version"]).count(".") >= 1
    if not version_ok:
        problems.append((f"{where_prefix}.version", f"{settings['version']!r} is not a MAJOR.MINOR[.PATCH] version"))
    if not re.match(r"^[A-Za-z0-9.+~]+\Z", str(settings["release"])):
        problems.append((f"{where_prefix}.release", f"{settings['release']!r} is not a valid release"))
    if settings["unknown_keys"] not in UNKNOWN_KEY_MODES:
        problems.append((f"{where_prefix}.unknown_keys", f"must be one of {', '.join(UNKNOWN_KEY_MODES)}"))
    if settings["kpack_lookup"] not in LOOKUP_MODES:
        problems.append((f"{where_prefix}.kpack_lookup", f"must be one of {', '.join(LOOKUP_MODES)}"))
    if settings.get("channel"):
        from rocpkg.inputs.channels import CHANNELS

        if settings["channel"] not in CHANNELS:
            problems.append((f"{where_prefix}.channel", f"must be one of {', '.join(CHANNELS)}"))
    if build_variant_problem(settings.get("build_variant", "release")):
        problems.append((f"{where_prefix}.build_variant", build_variant_problem(settings["build_variant"])))
    if settings["compression"] not in COMPRESSIONS:
        problems.append((f"{where_prefix}.compression", f"must be one of {', '.join(COMPRESSIONS)}"))
    elif level_problem(settings["compression"], settings["compression_level"]):
        problems.append((f"{where_prefix}.compression_level",
                         level_problem(settings["compression"], settings["compression_level"])))
    problem = prefix_problem(str(settings["prefix"]), str(settings["version"])) if version_ok else ""
    if problem:
        problems.append((f"{where_prefix}.prefix", problem))
    if not 0 <= settings["epoch"] <= EPOCH_MAX:
        problems.append((f"{where_prefix}.epoch", f"must be between 0 and {EPOCH_MAX} (dpkg and rpm keep a 32-bit int)"))
    problems += [(f"{where_prefix}.{w}", what) for w, what in settings_string_problems(settings)]
    return problems


def relation_problem(dialect: str, relation: str) -> str:
    """A package.json relation in one dialect's syntax ("" if valid). RPMRequires and kin
    may use Debian's `a | b` alternatives: the plan writes them as `(a or b)`."""
    if dialect == DEB_DIALECT:
        return pf.deb_relation_problem(relation)
    if not relation.strip().startswith("(") and "|" in relation:
        return next((p for p in map(pf.rpm_relation_problem, relation.split("|")) if p), "")
    return pf.rpm_relation_problem(relation)


def relation_names(relation: str) -> list[str]:
    """Package names in one relation of either dialect or a format's syntax (`a (>= 1) | b`,
    `(a or b)`, `a >= 1`, `a>=1`)."""
    return list(_relation_names(relation))


@functools.lru_cache(maxsize=65536)
def _relation_names(relation: str) -> tuple[str, ...]:
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
    return tuple(names)


def _load_definition(entry, index: int, base: str, seen: dict[str, str], problems: list) -> Definition | None:
    """One package.json entry as a Definition (None when it has no usable name); its
    problems are added to `problems`, `seen` maps each name to where it was first defined."""
    where = f"{base}[{index}]"
    if not isinstance(entry, dict):
        problems.append((where, "expected an object"))
        return None
    name = entry.get("Package")
    if not isinstance(name, str) or not name:
        problems.append((f"{where}.Package", "missing or not a non-empty string"))
        return None
    where = f"{where}({name})"
    if not _NAME_RE.match(name):
        problems.append((f"{where}.Package", "not a valid package name (lower-case letters, digits, + - .)"))
    if name in seen:
        problems.append((f"{where}.Package", f"defined twice (first at {seen[name]})"))
    seen[name] = where
    for key, value in entry.items():
        if key not in DEFINITION_KEYS:
            problems.append(UnknownKey(f"{where}.{key}", key, DEFINITION_KEYS))
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
    problems += [(f"{where}.{key}", what) for key, what in definition_string_problems(entry)]
    for dialect, keys, relations in ((DEB_DIALECT, DEB_RELATION_KEYS, d.deb_relations),
                                     (RPM_DIALECT, RPM_RELATION_KEYS, d.rpm_relations)):
        for key, attr in keys.items():
            if not isinstance(entry.get(key), list) or not all(isinstance(r, str) for r in entry[key]):
                continue
            relations[attr] = [r.strip() for r in entry[key] if r.strip()]
            problems += [(f"{where}.{key}[{ri}]", relation_problem(dialect, r)) for ri, r in enumerate(entry[key])
                         if r.strip() and relation_problem(dialect, r)]
    # TheRock leaves RPMRequires out where it matches DEBDepends minus system names
    return d


def _config_bytes(path: str) -> bytes:
    """The bytes of package.json: opened without blocking (a FIFO never hangs the read), a
    regular file of at most CONFIG_LIMIT bytes; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(f"it is {kind_of(mode)}, not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(CONFIG_LIMIT + 1)
    if len(data) > CONFIG_LIMIT:
        raise OSError(f"more than the {CONFIG_LIMIT} bytes rocpkg reads of a package list")
    return data


def load_config(path: str | os.PathLike | None = None, unknown_keys: str | None = None) -> Config:
    """Read package.json (either shape) into a validated Config or raise RocpkgInputError.

    unknown_keys: "error" or "warn" (default: settings.unknown_keys, else "error"): in warn
    mode a key rocpkg does not know is ignored and listed in Config.warnings (a newer
    TheRock file may carry keys this rocpkg does not read yet)."""
    path = os.fspath(path) if path is not None else default_config_path()
    try:
        raw = strict_json.loads(_config_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        raise RocpkgInputError((path, "file not found")) from None
    except json.JSONDecodeError as exc:
        raise RocpkgInputError((f"{path}:{exc.lineno}:{exc.colno}", f"invalid JSON: {exc.msg}")) from None
    except ValueError as exc:           # strict_json's refusals: the JSON path, then what
        raise RocpkgInputError((path, pf.printable(str(exc)))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RocpkgInputError((path, f"cannot read: {exc}")) from None

    problems: list[tuple[str, str]] = []
    if isinstance(raw, list):
        settings = _load_settings(None, problems)
        settings["runpath_to_rpath"] = True  # TheRock's packaging rewrites RUNPATH by default
        entries, base = raw, ""
    elif isinstance(raw, dict):
        for key in raw:
            if key not in ("settings", "packages"):
                problems.append(UnknownKey(key, key, ("settings", "packages"),
                                           "unknown top-level key (expected settings, packages)"))
        settings = _load_settings(raw.get("settings"), problems)
        entries, base = raw.get("packages"), "packages"
        if not isinstance(entries, list):
            problems.append(("packages", "missing or not a list"))
            entries = []
    else:
        raise RocpkgInputError((path, "expected a JSON list of package definitions or an object with settings and packages"))
    problems += validate_settings(settings)

    definitions: list[Definition] = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(entries):
        d = _load_definition(entry, index, base, seen, problems)
        if d is not None:
            definitions.append(d)

    if len(definitions) == len(entries) and not any(not d.disabled for d in definitions):
        problems.append((base or "package list", "no package to build: the list is empty or every definition "
                                                 "has DisablePackaging"))
    config = Config(path=path, settings=settings, definitions=definitions)
    problems += _check_relations(config, base)
    mode = unknown_keys or settings["unknown_keys"]
    if mode == "warn":
        config.warnings = [pf.printable(f"{path}: {p[0]}: {p[1]}; ignored") for p in problems
                           if isinstance(p, UnknownKey)]
        problems = [p for p in problems if not isinstance(p, UnknownKey)]
    if problems:
        raise RocpkgInputError(*[(pf.printable(f"{path}: {w}"), pf.printable(m)) for w, m in problems])
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
        for relations, keys in ((d.deb_relations, DEB_RELATION_KEYS), (d.rpm_relations, RPM_RELATION_KEYS)):
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
