"""The formats rocpkg writes, each registered here once: the one list of them.

`--formats` choices, manifest.json's schema, OUT's tree, the builder, verify and the
repository commands all take the formats from here (rocpkg.formats.plugin.Format says
what each provides)."""
from __future__ import annotations

from rocpkg.formats.deb.plugin import FORMAT as DEB
from rocpkg.formats.pacman.plugin import FORMAT as PACMAN
from rocpkg.formats.plugin import Format
from rocpkg.formats.rpm.plugin import FORMAT as RPM

REGISTERED: dict[str, Format] = {f.name: f for f in (DEB, RPM, PACMAN)}
NAMES: tuple[str, ...] = tuple(REGISTERED)
DEFAULT: tuple[str, ...] = tuple(n for n, f in REGISTERED.items() if f.default_build)   # --formats not given


def get(name: str) -> Format:
    """The registered format of this name (KeyError for another name)."""
    return REGISTERED[name]


def file_name(spec) -> str:
    """A package's file name in its format (an epoch never appears in it)."""
    return REGISTERED[spec.format].file_name(spec)
