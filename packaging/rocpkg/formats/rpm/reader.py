""".rpm read back for verify (rocpkg.formats.plugin.Reader): the header (name, version,
relations and the file list), and one streamed pass over the cpio payload, made only when
the visitor wants a file the header lists."""
from __future__ import annotations

import io
import re

from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.reading import files_below, unreadable
from rocpkg.formats.streams import CHUNK

_PIN = re.compile(r"(?P<name>[^\s(|]+)\s*=\s*(?P<evr>\S+)")
_RELATIONS = (("depends", "requires"), ("recommends", "recommends"), ("suggests", "suggests"),
              ("provides", "provides"), ("conflicts", "conflicts"), ("obsoletes", "obsoletes"))


class _Bounded(io.RawIOBase):
    """Exactly `size` bytes of a stream; what is not read is skipped by skip()."""

    def __init__(self, stream, size: int):
        self.stream = stream
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.left <= 0:
            return 0
        data = self.stream.read(min(len(buffer), self.left))
        if not data:
            raise EOFError(f"payload ended with {self.left} bytes of a member unread")
        buffer[: len(data)] = data
        self.left -= len(data)
        return len(data)

    def skip(self) -> None:
        while self.left > 0:
            self.read(min(CHUNK, self.left))


def _relations(record, kind: str) -> list[str]:
    """The record's relations of one kind as text, without rpmlib() features or repeats."""
    from rocpkg.formats.rpm.relations import format_relation, is_rpmlib

    out = []
    for name, flags, version in record.dependencies[kind]:
        text = format_relation(name, flags, version)
        if not is_rpmlib(name, flags) and text not in out:
            out.append(text)
    return out


class RpmReader:
    files_in_metadata = True

    def package_files(self, tree: str) -> list[str]:
        """Every .rpm directly in an architecture's directory rpm/<arch>/ (not repodata/)."""
        return files_below(tree, ".rpm", depth=1, skip=("repodata",))

    def read_meta(self, path: str) -> m.PackageSpec:
        from rocpkg.formats.rpm.read import read_rpm
        from rocpkg.formats.rpm.record import package_from_header

        try:
            record = package_from_header(read_rpm(path))
            spec = m.PackageSpec("rpm", record.name, record.version, record.release, record.arch, "",
                                 epoch=record.epoch)
            for attr, kind in _RELATIONS:
                setattr(spec, attr, _relations(record, kind))
            spec.files = record.file_entries()
            return spec
        except (RocpkgInputError, KeyError, ValueError, OSError, EOFError) as exc:
            raise unreadable(path, exc) from None

    def read_payload(self, path: str, spec: m.PackageSpec, visitor) -> None:
        """The cpio entries, each with the header's type, mode and link of its path."""
        from rocpkg.formats.rpm.cpio import iter_cpio, skip_cpio_pad
        from rocpkg.formats.rpm.read import open_payload_stream, read_rpm
        from rocpkg.formats.rpm.record import package_from_header

        by_index = dict(enumerate(spec.files))
        if not any(fe.type == m.FILE and visitor.wants(fe.path) for fe in spec.files):
            return
        try:
            record = package_from_header(read_rpm(path))
            with open(path, "rb") as fh:
                fh.seek(record.payload_offset)
                stream = io.BufferedReader(open_payload_stream(fh, record.payload_compressor), CHUNK)
                for index, member, size in iter_cpio(stream, by_index):
                    body = _Bounded(stream, size)
                    listed = by_index.get(index) if index is not None else None
                    if listed is None:
                        entry = m.FileEntry(member, "other", 0, "", size)
                    else:
                        entry = m.FileEntry(member, listed.type, listed.mode, "", size, listed.link_target)
                    wanted = listed is not None and listed.type == m.FILE and visitor.wants(member)
                    visitor.visit(entry, body if wanted else None)
                    body.skip()
                    skip_cpio_pad(stream, size)
        except Exception as exc:  # zstd / lzma errors of a corrupt payload too
            raise unreadable(path, exc, "payload") from None

    def pinned(self, relation: str) -> tuple[str, str] | None:
        """`name = evr`."""
        match = _PIN.fullmatch(relation.strip())
        return (match["name"], match["evr"]) if match else None


READER = RpmReader()
