""".deb read back for verify (rocpkg.formats.plugin.Reader): the control stanza, and one
streamed pass over data.tar whose members are the package's listing."""
from __future__ import annotations

import os
import re
import tarfile

from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.deb.plugin import POOL_ROOT
from rocpkg.formats.reading import files_below, unreadable

_PIN = re.compile(r"(?P<name>[^\s(|]+)\s*\(\s*=\s*(?P<evr>[^\s)]+)\s*\)")
_RELATIONS = (("depends", "Depends"), ("pre_depends", "Pre-Depends"), ("recommends", "Recommends"),
              ("suggests", "Suggests"), ("provides", "Provides"), ("conflicts", "Conflicts"),
              ("breaks", "Breaks"), ("replaces", "Replaces"))


class DebReader:
    files_in_metadata = False

    def package_files(self, tree: str) -> list[str]:
        """Every .deb under deb/pool/main/, at any depth."""
        return files_below(os.path.join(tree, POOL_ROOT, "main"), ".deb")

    def read_meta(self, path: str) -> m.PackageSpec:
        from debian.debian_support import Version

        from rocpkg.formats.deb.package import parse_relations, read_deb_control

        try:
            control = read_deb_control(path)
            version = Version(control["Version"])
            spec = m.PackageSpec("deb", control["Package"], version.upstream_version, version.debian_revision or "",
                                 control.get("Architecture", ""), "", epoch=int(version.epoch or 0))
            for attr, key in _RELATIONS:
                getattr(spec, attr).extend(parse_relations(control.get(key, "")))
            return spec
        except (RocpkgInputError, KeyError, ValueError, OSError, EOFError, tarfile.TarError) as exc:
            raise unreadable(path, exc) from None

    def read_payload(self, path: str, spec: m.PackageSpec, visitor) -> None:
        from rocpkg.formats.deb.package import open_deb_tar

        try:
            with open_deb_tar(path, "data.tar") as tar:
                for info in tar:
                    member = "/" + info.name.removeprefix(".").strip("/")
                    if member == "/":
                        continue
                    if info.isreg():
                        entry = m.FileEntry(member, m.FILE, info.mode & 0o7777, "", info.size)
                        visitor.visit(entry, tar.extractfile(info) if visitor.wants(member) else None)
                    elif info.isdir():
                        visitor.visit(m.FileEntry(member, m.DIR, info.mode & 0o7777), None)
                    elif info.issym():
                        visitor.visit(m.FileEntry(member, m.SYMLINK, 0o777, "", 0, info.linkname), None)
                    else:
                        visitor.visit(m.FileEntry(member, "other", info.mode & 0o7777), None)
        except Exception as exc:  # tarfile / zstd / lzma errors of a corrupt member too
            raise unreadable(path, exc, "data.tar") from None

    def pinned(self, relation: str) -> tuple[str, str] | None:
        """`name (= evr)`."""
        match = _PIN.fullmatch(relation.strip())
        return (match["name"], match["evr"]) if match else None


READER = DebReader()
