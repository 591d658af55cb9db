"""Package names per format from the settings' naming patterns (README: What it does): the ABI a
version names, Debian's `-dev` spelling, lower-case names in both formats, and where a
build variant goes (TheRock's `--build-variant asan`): `-asan` before the ABI in every
versioned name (`amdrocm-core-asan7.1`, `amdrocm-fft-host-asan7.1`,
`amdrocm-fft-asan7.1-gfx942`), after the name in the non-versioned one (`amdrocm-fft-asan`),
after the alias's fixed part (`rocm-asan-gfx110x`), and before the version in the prefix
(`/opt/rocm/core-asan-7.1`), so that a variant release shares no name and no path with
the release it was built beside."""
from __future__ import annotations

import re

NORMAL_BUILD = "release"        # settings.build_variant of the normal build: no name changes
# the first {abi} or {version} of a prefix pattern, with the separator before it
_PREFIX_VERSION = re.compile(r"([-_]?)(\{(?:abi|version)\})")


def abi_of(version: str) -> str:
    return ".".join(version.split(".")[:2])


def lower_devel(name: str) -> str:
    """DEB spelling of a definition name: `-devel` becomes `-dev` (Debian convention)."""
    return re.sub(r"-devel(?=$|-)", "-dev", name)


def build_variant(settings: dict) -> str:
    """The variant a release's names carry: "" for the normal build, else its name ("asan")."""
    variant = settings.get("build_variant") or NORMAL_BUILD
    return "" if variant == NORMAL_BUILD else variant


def variant_prefix(pattern: str, variant: str) -> str:
    """The prefix pattern of a variant build: `-{variant}` before the pattern's first
    {abi} or {version} (`/opt/rocm/core-{abi}` -> `/opt/rocm/core-asan-{abi}`,
    `/opt/rocm/{abi}` -> `/opt/rocm/asan-{abi}`), else after the whole path
    (`/opt/rocm` -> `/opt/rocm-asan`). The pattern unchanged for the normal build."""
    if not variant:
        return pattern
    match = _PREFIX_VERSION.search(pattern)
    if match is None:
        return f"{pattern.rstrip('/')}-{variant}"
    separator = match.group(1) or "-"
    if match.start() > 0 and pattern[match.start() - 1] == "/" and not match.group(1):
        return f"{pattern[:match.start()]}{variant}{separator}{pattern[match.start():]}"
    return f"{pattern[:match.start()]}{separator}{variant}{match.group(0)}{pattern[match.end():]}"


class Namer:
    """Package names from the settings' patterns, in one format's spelling (lower_devel:
    Debian's `-dev` for a `-devel` definition)."""

    def __init__(self, settings: dict, abi: str, lower_devel: bool):
        self.naming = settings["naming"]
        self.abi = abi
        self.lower_devel = lower_devel
        self.variant = build_variant(settings)
        # what the patterns' {abi} stands for: the ABI, after the variant ("-asan7.1")
        self.name_abi = f"-{self.variant}{abi}" if self.variant else abi

    def _fix(self, name: str) -> str:
        # dpkg folds case and apt does not: DEB names are lower-case. RPM names are too,
        # so that one spelling works everywhere; mixed-case family names become Provides.
        return name.lower()

    def _base(self, definition: str) -> str:
        return lower_devel(definition) if self.lower_devel else definition

    def unversioned(self, d: str) -> str:
        return self._fix(self._base(d) + (f"-{self.variant}" if self.variant else ""))

    def versioned(self, d: str) -> str:
        return self._fix(self.naming["versioned"].format(name=self._base(d), abi=self.name_abi))

    def host(self, d: str) -> str:
        return self._fix(self.naming["host"].format(name=self._base(d), abi=self.name_abi))

    def device(self, d: str, target: str) -> str:
        return self._fix(self.naming["device"].format(name=self._base(d), abi=self.name_abi, target=target))

    def family(self, d: str, family: str) -> str:
        return self._fix(self.family_provides(d, family))

    def family_provides(self, d: str, family: str) -> str:
        """The family variant's name with the family's own spelling (an RPM Provides)."""
        return self.naming["family"].format(name=self._base(d), abi=self.name_abi, family=family)

    def alias(self, family: str) -> str:
        return self._fix(self.alias_provides(family))

    def alias_provides(self, family: str) -> str:
        return alias_name(self.naming["alias"], family, self.abi, self.variant)

    def with_target(self, base: str, target_or_family: str) -> str:
        """`{base}-{target}`, a non-versioned per-target name (settings.unversioned_targets)."""
        return self._fix(f"{base}-{target_or_family}")


def alias_name(pattern: str, family: str, abi: str, variant: str = "") -> str:
    """A family alias's name in the family's spelling: the pattern's {abi} takes the variant
    before the ABI; a pattern without {abi} takes it before the family (`rocm-asan-gfx110X`)."""
    if variant and "{abi}" not in pattern:
        return pattern.format(family=f"{variant}-{family}", abi=abi)
    return pattern.format(family=family, abi=f"-{variant}{abi}" if variant else abi)
