""".pkg.tar.zst read back for verify (rocpkg.formats.plugin.Reader): the .PKGINFO, and
one streamed pass over the package whose members are its listing, checked against its
.MTREE (rocpkg.formats.pacman.read)."""
from __future__ import annotations

import re

from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.pacman import rules
from rocpkg.formats.pacman.plugin import SUFFIX
from rocpkg.formats.reading import files_below, unreadable

_PIN = re.compile(r"(?P<name>[^<>=\s]+)=(?P<evr>[^<>=\s]+)")
# .PKGINFO key -> the PackageSpec's relations (optdepend's `: reason` left out)
_RELATIONS = (("depend", "depends"), ("optdepend", "recommends"), ("provides", "provides"),
              ("conflict", "conflicts"), ("replaces", "obsoletes"))


def _entry(found) -> m.FileEntry:
    size = found.size if found.type == m.FILE else 0
    return m.FileEntry(found.path, found.type, found.mode, "", size, found.link)


def _said(path: str, exc: RocpkgInputError) -> RocpkgInputError:
    """read_pacman's problems as one package's: `member: what` where a member is named."""
    whats = [what if where == path else f"{where.removeprefix(path + ': ')}: {what}" for where, what in exc.problems]
    return RocpkgInputError((path, "; ".join(whats)))


class PacmanReader:
    files_in_metadata = False

    def package_files(self, tree: str) -> list[str]:
        """Every package directly in an architecture's directory pacman/<arch>/."""
        return files_below(tree, SUFFIX, depth=1)

    def read_meta(self, path: str) -> m.PackageSpec:
        from rocpkg.formats.pacman.read import read_pacman_info

        try:
            package = read_pacman_info(path)
            epoch, version, release = rules.split_full_version(package.first("pkgver"))
            spec = m.PackageSpec("pacman", package.first("pkgname"), version, release, package.first("arch"), "",
                                 epoch=epoch)
            for key, attr in _RELATIONS:
                getattr(spec, attr).extend(value.split(": ", 1)[0].strip() for value in package.info.get(key, ()))
            return spec
        except RocpkgInputError as exc:
            raise _said(path, exc) from None

    def read_payload(self, path: str, spec: m.PackageSpec, visitor) -> None:
        from rocpkg.formats.pacman.read import read_pacman

        def listed(found) -> None:
            if found.type != m.FILE:
                visitor.visit(_entry(found), None)

        def visit(found, stream) -> None:
            visitor.visit(_entry(found), stream if visitor.wants(found.path) else None)

        try:
            read_pacman(path, visit, listed)
        except RocpkgInputError as exc:
            raise unreadable(path, _said(path, exc), "payload") from None
        except Exception as exc:  # what the visitor raised: too many entries, too long
            raise unreadable(path, exc, "payload") from None

    def pinned(self, relation: str) -> tuple[str, str] | None:
        """`name=[epoch:]pkgver-pkgrel`."""
        match = _PIN.fullmatch(relation.strip())
        return (match["name"], match["evr"]) if match else None


READER = PacmanReader()
