"""SHA-256 of package files, remembered between publishes (createrepo_c --update's
idea): a republish of a repository holding hundreds of GiB of packages re-reads only
the files that changed since the last one.

A file's remembered digest is trusted only while its size, mtime, ctime and inode are
all unchanged: any rewrite (a rebuild renamed into place, an in-place header
signature) changes at least one of them. The cache is a plain JSON file under OUT's
private `.rocpkg/` directory, written atomically.

A cache is only ever a shortcut, so a damaged one is discarded, never an error: it is
read as OUT's own files are (rocpkg.store.files: never through a symlink or from a FIFO,
bounded), and a cache that is not a JSON object, or an entry that is not
[size, mtime_ns, ctime_ns, inode, sha256] with integers and 64 hex digits, is dropped;
those files are hashed again and the next save writes the cache anew.
"""
from __future__ import annotations

import json
import os
import re
import time

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.streams import AtomicOutput, hash_file
from rocpkg.store.files import read_json

CACHE_DIR = ".rocpkg"
RACY_NS = 1_000_000_000      # far above any filesystem's timestamp granularity
_SHA256 = re.compile(r"[0-9a-f]{64}")


class DigestCache:
    """sha256 and size of files under one root, keyed by path relative to it."""

    def __init__(self, out_dir: str | os.PathLike, name: str):
        self.path = os.path.join(os.fspath(out_dir), CACHE_DIR, f"digests-{name}.json")
        try:
            doc = read_json(os.fspath(out_dir), f"{CACHE_DIR}/digests-{name}.json", "digest cache")
        except (OSError, RocpkgInputError):
            doc = None
        self.entries: dict[str, list] = {key: entry for key, entry in doc.items() if _whole(entry)} \
            if isinstance(doc, dict) else {}
        self.seen: dict[str, list] = {}

    def sha256(self, path: str, key: str) -> tuple[str, int]:
        """(hex sha256, size) of the file at path, from the cache when it is unchanged."""
        st = os.stat(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        entry = self.entries.get(key)
        if entry and entry[:4] == stamp:
            self.seen[key] = entry
            return entry[4], st.st_size
        started = time.time_ns()
        digest = hash_file(path, ("sha256",))
        # Remembered only when unchanged while read and settled before it (git's "racy
        # clean" rule: a same-size rewrite within one timestamp tick would look alike).
        settled = max(st.st_mtime_ns, st.st_ctime_ns) < started - RACY_NS
        if settled and [*_stamp(path)] == stamp:
            self.seen[key] = stamp + [digest.hexdigest()]
        return digest.hexdigest(), digest.count

    def remember(self, path: str, key: str, sha256: str) -> None:
        """Record a digest its writer took of the file it has just written (the build
        hashes each package as it finishes it), so the next publish reads none of them.
        The file's stamp is taken now, after the rename into place."""
        self.seen[key] = self.entries[key] = [*_stamp(path), sha256]

    def save(self, prune: bool = True) -> None:
        """Keep the entries of the files looked up this time (the others are gone); a
        build (prune=False) keeps the entries of the packages it did not touch too."""
        kept = self.seen if prune else {**self.entries, **self.seen}
        with AtomicOutput(self.path) as f:
            f.write(json.dumps(kept, sort_keys=True, indent=0).encode("utf-8"))


def _whole(entry) -> bool:
    """Whether a cache entry is [size, mtime_ns, ctime_ns, inode, sha256]."""
    return isinstance(entry, list) and len(entry) == 5 and all(type(v) is int for v in entry[:4]) \
        and isinstance(entry[4], str) and bool(_SHA256.fullmatch(entry[4]))


def _stamp(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino
