"""What OUT's published indexes say: the packages each format's repository indexes list
(rocpkg.formats.plugin.Repository.entries), each with its size and SHA-256, and the
package files OUT holds. Read by the integrity check and by build's pre-write check
(releases).

The indexes are OUT's own files read back, as hostile as any input: each format reads
them through index_opener (rocpkg.store.files: no symlink, a regular file, bounded), and a
damaged one (not UTF-8, not XML, a size that is not a number, a truncated stream) is bad
input naming the index and what is wrong, never a traceback. `rocpkg repo` writes them anew."""
from __future__ import annotations

import os

from rocpkg.formats.indexes import IndexEntry, Opener
from rocpkg.formats.registry import REGISTERED
from rocpkg.store.files import INDEX_LIMIT, open_file


def index_opener(out_dir: str) -> Opener:
    """rel -> OUT's file opened as OUT's own: never through a symlink, a regular file of at
    most INDEX_LIMIT bytes."""
    return lambda rel: open_file(out_dir, rel, INDEX_LIMIT)


def formats_present(out_dir: str) -> list:
    """The registered formats (rocpkg.formats.plugin.Format) whose tree OUT/<name>/ is there."""
    return [form for name, form in REGISTERED.items() if os.path.isdir(os.path.join(out_dir, name))]


def published_entries(out_dir: str | os.PathLike) -> list[IndexEntry]:
    """Every package OUT's indexes publish, of every format."""
    out_dir = os.fspath(out_dir)
    opener = index_opener(out_dir)
    return [entry for form in formats_present(out_dir) for entry in form.repo.entries(out_dir, opener)]


def package_files(out_dir: str) -> dict[str, str]:
    """Every package file under OUT (relative path -> format): each format's files of its
    suffix below its package root (deb/pool/**.deb, rpm/**.rpm), its index directories skipped."""
    found = {}
    for fmt, form in REGISTERED.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(out_dir, fmt, form.package_root)):
            dirnames[:] = sorted(d for d in dirnames if d not in form.index_dirs)
            for name in filenames:
                if name.endswith(form.suffix):
                    found[os.path.relpath(os.path.join(dirpath, name), out_dir).replace(os.sep, "/")] = fmt
    return found
