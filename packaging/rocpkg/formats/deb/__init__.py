"""The Debian format: .deb packages (package.py: the writer and reader), the APT archive
(archive.py: dists/<suite>/ indexes; repository.py: REPOSITORY, the format's Repository) and
what the rest of rocpkg asks of the format (plugin.py: FORMAT, registered in
rocpkg.formats.registry).

The names callers use are re-exported lazily, so that registering the format loads only
its light description, not the writer."""
from __future__ import annotations

import importlib

_EXPORTS = {"write_deb": "package", "iter_deb_members": "package", "list_deb_files": "package",
            "open_deb_tar": "package", "parse_relations": "package", "read_deb_control": "package",
            "read_deb_control_file": "package", "ArMember": "package"}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
