"""The normalised file list (rocpkg.formats.filelist): a parent that is not a directory is refused,
missing parents are added; held to a plain walk of every path's whole chain of ancestors."""
from __future__ import annotations

import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.filelist import UNLISTED_BASE_DIRS, checked_files, sort_key, with_parents
from rocpkg.model import DIR, FILE, FileEntry


def _entry(path: str, kind: str) -> FileEntry:
    return FileEntry(path, kind, 0o755 if kind == DIR else 0o644, source="/src" if kind == FILE else None)


def _reference_problems(entries: dict[str, FileEntry]) -> list[tuple[str, str]]:
    """Every path's chain walked to the root: the nearest ancestor entry not a directory."""
    problems = []
    for path in entries:
        parent = posixpath.dirname(path)
        while parent not in ("/", ""):
            existing = entries.get(parent)
            if existing is not None and existing.type != DIR:
                problems.append((f"p: {path}", f"its parent {parent} is not a directory"))
                break
            parent = posixpath.dirname(parent)
    return problems


def _reference_with_parents(entries: dict[str, FileEntry]) -> list[str]:
    paths = set(entries)
    for path in entries:
        parent = posixpath.dirname(path)
        while parent not in ("/", ""):
            if parent not in UNLISTED_BASE_DIRS:
                paths.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(paths, key=sort_key)


_NAMES = st.sampled_from(["rocm", "lib", "a", "b", "x.so"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=5).map(lambda parts: "/opt/" + "/".join(parts))
_TREES = st.dictionaries(_PATHS, st.sampled_from([FILE, DIR]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(_TREES)
def test_a_parent_that_is_no_directory_is_found_as_a_whole_walk_finds_it(tree):
    entries = [_entry(path, kind) for path, kind in tree.items()]
    expected = _reference_problems({e.path: e for e in entries})
    if expected:
        with pytest.raises(RocpkgInputError) as caught:
            checked_files("p", entries)
        assert sorted(caught.value.problems) == sorted(expected)
        with pytest.raises(RocpkgInputError):
            with_parents("p", entries)
        return
    checked = checked_files("p", entries)
    assert [e.path for e in checked] == sorted(tree, key=sort_key)
    listed = with_parents("p", checked)
    assert [e.path for e in listed] == _reference_with_parents({e.path: e for e in checked})
    added = [e for e in listed if e.path not in tree]
    assert all(e.type == DIR and e.mode == 0o755 for e in added)


def test_files_below_a_file_each_name_it():
    entries = [_entry("/opt/rocm/lib", FILE), _entry("/opt/rocm/lib/x.so", FILE),
               _entry("/opt/rocm/lib/a/b.so", FILE), _entry("/opt/rocm/include/h.h", FILE)]
    with pytest.raises(RocpkgInputError) as caught:
        checked_files("rocm-x", entries)
    assert sorted(caught.value.problems) == [
        ("rocm-x: /opt/rocm/lib/a/b.so", "its parent /opt/rocm/lib is not a directory"),
        ("rocm-x: /opt/rocm/lib/x.so", "its parent /opt/rocm/lib is not a directory"),
    ]
