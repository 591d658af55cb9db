"""Arch Linux packages: pacman's `.pkg.tar.zst`, read back, and its repository database.

  rules   names, pkgver/pkgrel/epoch, relations, architectures, file names, pool layout,
          pacman's version order (vercmp)
  write   write_pacman(): a PackageSpec -> a streamed .pkg.tar.zst as makepkg writes it
  read    read_pacman(): a package read back (bounded, streaming), .MTREE checked
  index   write_database(): <repo>.db / <repo>.files as repo-add writes them, signed
  mtree   the .MTREE text;  tar  the tar members written and read;  templates  rendering

This package re-exports what callers use."""
from rocpkg.formats.pacman.index import database_names, write_database
from rocpkg.formats.pacman.read import PacmanFile, PacmanPackage, read_pacman, read_pacman_info
from rocpkg.formats.pacman.rules import (ANY, FORMAT, architecture, full_version, name_problem, package_filename,
                                         package_name, pin, pkgrel, pkgver, pool_dir, relation, relations,
                                         split_full_version, vercmp)
from rocpkg.formats.pacman.write import PkgInfo, filename, write_pacman

__all__ = [
    "database_names", "write_database", "PacmanFile", "PacmanPackage", "read_pacman", "read_pacman_info",
    "ANY", "FORMAT", "architecture", "full_version", "name_problem", "package_filename", "package_name", "pin",
    "pkgrel", "pkgver", "pool_dir", "relation", "relations", "split_full_version", "vercmp", "PkgInfo",
    "filename", "write_pacman",
]
