"""Package names per format from the settings' naming patterns (DESIGN §3): the ABI a
version names, Debian's `-dev` spelling, lower-case names in both formats."""
from __future__ import annotations

import re


def abi_of(version: str) -> str:
    return ".".join(version.split(".")[:2])


def lower_devel(name: str) -> str:
    """DEB spelling of a definition name: `-devel` becomes `-dev` (Debian convention)."""
    return re.sub(r"-devel(?=$|-)", "-dev", name)


class Namer:
    """Package names per format from the settings' patterns."""

    def __init__(self, settings: dict, abi: str, fmt: str):
        self.naming = settings["naming"]
        self.abi = abi
        self.fmt = fmt

    def _fix(self, name: str) -> str:
        # dpkg folds case and apt does not: DEB names are lower-case. RPM names are too,
        # so that one spelling works everywhere; mixed-case family names become Provides.
        return name.lower()

    def _base(self, definition: str) -> str:
        return lower_devel(definition) if self.fmt == "deb" else definition

    def unversioned(self, d: str) -> str:
        return self._fix(self._base(d))

    def versioned(self, d: str) -> str:
        return self._fix(self.naming["versioned"].format(name=self._base(d), abi=self.abi))

    def host(self, d: str) -> str:
        return self._fix(self.naming["host"].format(name=self._base(d), abi=self.abi))

    def device(self, d: str, target: str) -> str:
        return self._fix(self.naming["device"].format(name=self._base(d), abi=self.abi, target=target))

    def family(self, d: str, family: str) -> str:
        return self._fix(self.naming["family"].format(name=self._base(d), abi=self.abi, family=family))

    def alias(self, family: str) -> str:
        return self._fix(self.naming["alias"].format(family=family, abi=self.abi))

    def alias_provides(self, family: str) -> str:
        return self.naming["alias"].format(family=family, abi=self.abi)
