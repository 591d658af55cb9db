"""Arch Linux packages: pacman's `.pkg.tar.zst`, read back, and its repository database.

  rules   names, pkgver/pkgrel/epoch, relations, architectures, file names, pool layout,
          pacman's version order (vercmp)
  write   write_pacman(): a PackageSpec -> a streamed .pkg.tar.zst as makepkg writes it
  read    read_pacman(): a package read back (bounded, streaming), .MTREE checked
  index   write_database(): <repo>.db / <repo>.files as repo-add writes them, signed;
          read_database(): one read back
  repository  REPOSITORY: the format's Repository (rocpkg.formats.plugin): OUT/pacman/<arch>/
          indexed as <suite>.db, the pacman.conf section
  mtree   the .MTREE text;  tar  the tar members written and read;  templates  rendering

  plugin  FORMAT: what the rest of rocpkg asks of the format (rocpkg.formats.registry)

This package re-exports what callers use, lazily: registering the format loads only its
light description, not the writer."""
from __future__ import annotations

import importlib

_EXPORTS = {"database_names": "index", "write_database": "index", "PacmanFile": "read", "PacmanPackage": "read",
            "read_pacman": "read", "read_pacman_info": "read", "PkgInfo": "write", "filename": "write",
            "write_pacman": "write",
            **{name: "rules" for name in ("ANY", "FORMAT", "architecture", "full_version", "name_problem",
                                          "package_filename", "package_name", "pin", "pkgrel", "pkgver", "pool_dir",
                                          "relation", "relations", "split_full_version", "vercmp")}}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
