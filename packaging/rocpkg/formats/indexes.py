"""What a format's repository reports of its indexes, as plain data, and the rules every
format reads its indexes back by (rocpkg.formats.plugin.Repository).

Indexes are read back as hostile as any input: the caller hands each format an opener of
OUT's files (no symlink followed, a regular file, bounded), and what goes wrong reading one
(not UTF-8, not XML, a size that is not a number, a truncated stream) is bad input naming
the index (damaged_index), never a traceback."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import BinaryIO, Callable

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.streams import hash_file

# rel (a path relative to OUT, "/"-separated) -> the file opened for reading as OUT's own
Opener = Callable[[str], BinaryIO]


@dataclass(frozen=True)
class PackageRef:
    """One package by name-version-release-architecture, and its file."""

    format: str
    name: str
    version: str
    release: str
    arch: str
    file: str           # relative to OUT


@dataclass(frozen=True)
class IndexEntry(PackageRef):
    """One package as an index publishes it."""

    index: str = ""     # the index file, relative to OUT
    size: int = -1
    sha256: str = ""


@dataclass(frozen=True)
class IndexFile:
    """A file of a format's tree that its repository's indexes consist of. A root (Release,
    repomd.xml, a pacman database) has no owner; a file a root lists carries what the root
    says of it: its size and SHA-256 (open_sha256: of its gzip'd text)."""

    path: str           # relative to OUT
    owner: str = ""     # the root listing it, as messages name it ("Release")
    size: int = -1
    sha256: str = ""
    required: bool = True       # its absence is a problem (else the root lists it as optional)
    open_sha256: str = ""


@dataclass(frozen=True)
class Signature:
    """A signature file over an index file (paths relative to OUT); clearsigned: the
    signature file holds the signed text itself, which must be the signed file's."""

    signature: str
    signed: str
    clearsigned: bool = False


@contextlib.contextmanager
def damaged_index(path: str):
    """What goes wrong reading an index becomes bad input naming it."""
    import xml.etree.ElementTree as ET

    try:
        yield
    except FileNotFoundError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, EOFError, OSError, ET.ParseError) as exc:
        raise RocpkgInputError((path, f"damaged index ({type(exc).__name__}: {exc}): run `rocpkg repo` "
                                      f"to write it anew")) from None


class Rehash:
    """The digest source of an indexer given none: hashes every file."""

    def sha256(self, path: str, key: str) -> tuple[str, int]:
        digest = hash_file(path)
        return digest.hexdigest(), digest.count

    def save(self) -> None:
        """Nothing to keep."""
