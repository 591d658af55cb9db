"""The bytes rocpkg wrote, as its records say, for the indexers of `rocpkg repo`: each
package file's size and SHA-256 from manifest.json (and the shard parts of a merged
tree), and its size, mtime and inode when rocpkg wrote it (the state lines,
rocpkg.store.state.recorded_stamps).

A file still as stamped is taken at its record without a byte of it read. Any other is
read once, as OUT's own (never through a symlink, a regular file): the bytes recorded
(a tree merged by copying has other inodes) are taken at their record; other bytes are
taken only where they legitimately changed — the caller wrote them and says what it
wrote (rewritten: OUT-relative path -> (size, sha256), e.g. RPMs header-signed in place),
the change in progress replaced the file itself (rocpkg.store.journal.Change.rewritten),
or no record lists the file yet (a setup package written by this change). Anything else
is bad input naming the file, never indexed with a new hash.
"""
from __future__ import annotations

import os

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.registry import NAMES
from rocpkg.formats.streams import HashingWriter, copy_stream
from rocpkg.store.files import open_file
from rocpkg.store.manifest_schema import read_parts
from rocpkg.store.releases import read_manifest
from rocpkg.store.state import recorded_stamps


class Recorded:
    """What OUT's records say of its package files (module doc). The indexers' digest
    source: sha256(path, key) -> (hex, size); save() keeps nothing (the records are
    written by the build and by sync_manifest)."""

    def __init__(self, out_dir: str, rewritten: dict[str, tuple[int, str]] | None = None, change=None):
        self.out_dir = os.path.abspath(out_dir)
        doc = read_manifest(self.out_dir)
        entries = list(doc["packages"]) if doc else []
        entries += [e for _name, part in read_parts(self.out_dir) for e in part["packages"]]
        self.entries = {e["file"]: (e["size"], e["sha256"]) for e in entries}
        # file -> (format, name, its state line): how rocpkg wrote it
        self.stamps = {rel: (fmt, name, state) for fmt in NAMES
                       for rel, (name, state) in recorded_stamps(self.out_dir, fmt).items()}
        self.rewritten = dict(rewritten or {})
        self.change = change
        self.known: dict[str, tuple[int, str]] = {}     # decided this run: (size, sha256)
        self.read: list[str] = []                       # the files read to decide

    def note(self, rel: str, size: int, sha256: str) -> None:
        """The caller has just written rel's bytes and knows them (size, sha256)."""
        self.rewritten[rel] = (size, sha256)
        self.known.pop(rel, None)

    def sha256(self, path: str, key: str = "") -> tuple[str, int]:
        size, digest = self.digest(os.path.relpath(os.path.abspath(path), self.out_dir).replace(os.sep, "/"))
        return digest, size

    def save(self) -> None:
        """Nothing to keep: the records are the build's and sync_manifest's."""

    def digest(self, rel: str) -> tuple[int, str]:
        """(size, sha256) of OUT's package file rel, from its record where its file is the
        one recorded (module doc); bad input when its bytes changed without cause."""
        if rel in self.known:
            return self.known[rel]
        if rel in self.rewritten:
            self.known[rel] = self.rewritten[rel]
            return self.known[rel]
        path = os.path.join(self.out_dir, rel)
        entry = self.entries.get(rel)
        if entry is not None and self.as_stamped(rel, entry):
            self.known[rel] = entry
            return entry
        found = self._hash(rel)
        if entry is not None and found != entry and not (self.change is not None and self.change.rewritten(rel)):
            raise RocpkgInputError((path, f"its bytes are not the ones rocpkg recorded (size {found[0]}, sha256 "
                                          f"{found[1]}; manifest.json: size {entry[0]}, sha256 {entry[1]}): changed "
                                          f"after it was written, never indexed; build it again or put back the "
                                          f"file rocpkg wrote"))
        self.known[rel] = found
        return found

    def as_stamped(self, rel: str, known: tuple[int, str]) -> bool:
        """Whether OUT's file rel is as its state line stamped it, with the bytes known
        (size, sha256): its size, mtime and inode those recorded."""
        _fmt, _name, stamp = self.stamps.get(rel, (None, None, None))
        if stamp is None or (stamp["size"], stamp["sha256"]) != known:
            return False
        st = os.stat(os.path.join(self.out_dir, rel), follow_symlinks=False)
        return (st.st_size, st.st_mtime_ns, st.st_ino) == (stamp["size"], stamp["mtime_ns"], stamp["ino"])

    def _hash(self, rel: str) -> tuple[int, str]:
        digest = HashingWriter(None)
        with open_file(self.out_dir, rel) as fh:
            copy_stream(fh, digest)
        self.read.append(rel)
        return digest.count, digest.hexdigest()
