"""What each package in OUT was built from: OUT/.rocpkg/state/<format>.jsonl, a journal
of one JSON line per package written, `{"name": ..., "fingerprint": ..., "file": ...,
"size", "sha256", "mtime_ns", "ino"}`, the last line of a name winning (earlier
lines of a name whose file OUT still holds say how rocpkg wrote that file: recorded_stamps).

Why a journal: a build records each package as it is moved into place, and the record
must be durable before the next (a build killed at any point and run again keeps what
was recorded). A file per package would cost the build's parent a file creation each,
and a creation is expensive on a file system busy with the workers' writes; a line
appended is one write() on a descriptor held open. A line cut short by a crash does not
parse and is skipped (that package is built again); the journal is rewritten one line
per name when a whole (unsharded) build ends, so it does not grow with the builds.

A shard writes `<format>.shard-I-of-N.jsonl`, so that shards' OUT trees merged by
copying keep every shard's records; journals are read oldest first (a later build's
lines win). OUT trees of rocpkg before the journal hold `<format>/<name>.json`, one
file per package: read, under the journals' lines, until the next rewrite removes them.
"""
from __future__ import annotations

import json
import os

from rocpkg.formats.registry import NAMES as FORMATS
from rocpkg.formats.streams import AtomicOutput, remove_file, write_all
from rocpkg import strict_json

STATE_DIR = os.path.join(".rocpkg", "state")
# a state's fields and their types: a record without them all is no record (built again)
FIELDS = {"fingerprint": str, "file": str, "size": int, "sha256": str, "mtime_ns": int, "ino": int}
# never appended through a symlink planted in OUT (the open fails, naming the journal)
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def journal_name(fmt: str, shard: tuple[int, int] | None = None) -> str:
    return f"{fmt}.jsonl" if shard is None else f"{fmt}.shard-{shard[0]}-of-{shard[1]}.jsonl"


def recorded_states(out_dir: str, formats) -> dict[str, dict[str, dict]]:
    """Per format, name -> the state OUT recorded for it: one read of each format's journals."""
    return {fmt: read_states(out_dir, fmt) for fmt in formats}


def read_states(out_dir: str, fmt: str) -> dict[str, dict]:
    """name -> the state last recorded for it (none for a new OUT)."""
    return {name: state for name, state in _records(out_dir, fmt)}


def recorded_stamps(out_dir: str, fmt: str) -> dict[str, tuple[str, dict]]:
    """file -> (name, the state last recorded of that package file): also the files of
    earlier releases whose names have been built again since (what rewrite_states keeps
    of them), so that `rocpkg repo` knows every recorded file's size, mtime and inode
    (rocpkg.store.recorded)."""
    return {state["file"]: (name, state) for name, state in _records(out_dir, fmt)}


def _records(out_dir: str, fmt: str):
    """(name, state) of every whole record of the format, oldest first: the per-package
    files of older trees, then each journal's lines."""
    state_dir = os.path.join(out_dir, STATE_DIR)
    legacy = os.path.join(state_dir, fmt)
    try:
        names = sorted(os.listdir(legacy))
    except OSError:
        names = []
    for name in names:
        if name.endswith(".json"):
            state = _parsed(os.path.join(legacy, name))
            if _whole(state):
                yield name[:-len(".json")], state
    for path in _journals(state_dir, fmt):
        try:
            with open(path, "rb") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                state = strict_json.loads(line)
            except ValueError:      # cut short by a crash, or not JSON rocpkg writes: built again
                continue
            if isinstance(state, dict) and isinstance(state.get("name"), str):
                name = state.pop("name")
                if _whole(state):
                    yield name, state


def _journals(state_dir: str, fmt: str) -> list[str]:
    """The format's journals, oldest first (the main one last among equals)."""
    try:
        entries = [e for e in os.scandir(state_dir) if e.is_file(follow_symlinks=False)
                   and e.name.startswith(f"{fmt}.") and e.name.endswith(".jsonl")]
    except OSError:
        return []
    return [e.path for e in sorted(entries, key=lambda e: (e.stat().st_mtime_ns, e.name == f"{fmt}.jsonl", e.name))]


def _line(name: str, state: dict) -> bytes:
    """One journal line: the name, then the state's fields."""
    return json.dumps({"name": name, **state}).encode() + b"\n"


def _whole(state) -> bool:
    return isinstance(state, dict) and all(type(state.get(key)) is kind for key, kind in FIELDS.items())


def _parsed(path: str) -> dict | None:
    try:
        with open(path, "rb") as fh:
            state = strict_json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


class StateJournal:
    """The build's journals, one descriptor per format held open; record() appends one
    line in one write (write_all: a short write is continued, a failed one raised; durable
    in the page cache once it returns, as a renamed file was)."""

    def __init__(self, out_dir: str, shard: tuple[int, int] | None = None, formats=()):
        """formats: opened now, before the first package is moved into place (a journal
        that cannot be opened then fails the build with OUT as it was)."""
        self.out_dir, self.shard = out_dir, shard
        self.fds: dict[str, int] = {}
        try:
            for fmt in formats:
                self.fds[fmt] = self._open(fmt)
        except BaseException:
            self.close()
            raise

    def record(self, fmt: str, name: str, state: dict) -> None:
        fd = self.fds.get(fmt)
        if fd is None:
            fd = self.fds[fmt] = self._open(fmt)
        write_all(fd, _line(name, state))

    def _open(self, fmt: str) -> int:
        path = os.path.join(self.out_dir, STATE_DIR, journal_name(fmt, self.shard))
        try:
            fd = os.open(path, _OPEN_FLAGS, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, _OPEN_FLAGS, 0o644)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            write_all(fd, b"\n")    # a line a crash cut short stays apart from the next
        return fd

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def rewrite_states(out_dir: str, fmt: str, states: dict[str, dict], drop: set[str] = frozenset(),
                   earlier: list[tuple[str, dict]] = ()) -> None:
    """The format's states as one journal, one line per name in name order (written
    atomically), after one line for each package file of an earlier state of a name that
    OUT still holds (not in drop): the size, mtime and inode rocpkg wrote it with, which
    `rocpkg repo` checks it against (earlier: (name, state) of more such lines, or of new
    stamps of them). The shards' journals and the per-package files of older OUT trees go."""
    state_dir = os.path.join(out_dir, STATE_DIR)
    main = os.path.join(state_dir, journal_name(fmt))
    others = [p for p in _journals(state_dir, fmt) if p != main]
    if not states and not earlier and not os.path.exists(main) and not others \
            and not os.path.isdir(os.path.join(state_dir, fmt)):
        return
    current = {state["file"] for state in states.values()}
    kept = {state["file"]: (name, state) for name, state in [*_records(out_dir, fmt), *earlier]
            if state["file"] not in current and state["file"] not in drop}
    with AtomicOutput(main) as fh:
        for rel in sorted(kept):
            if os.path.isfile(os.path.join(out_dir, rel)):
                fh.write(_line(*kept[rel]))
        for name in sorted(states):
            fh.write(_line(name, states[name]))
    for path in others:
        remove_file(path)
    legacy = os.path.join(state_dir, fmt)
    if os.path.isdir(legacy) and not os.path.islink(legacy):
        for name in os.listdir(legacy):
            remove_file(os.path.join(legacy, name))
        os.rmdir(legacy)


def forget(out_dir: str, files: set[str]) -> None:
    """Drop the states of removed package files (a later build of that name then starts
    from scratch instead of trusting a record of a file that is gone)."""
    for fmt in FORMATS:
        states = read_states(out_dir, fmt)
        kept = {name: state for name, state in states.items() if state.get("file") not in files}
        if kept != states or files & set(recorded_stamps(out_dir, fmt)):
            rewrite_states(out_dir, fmt, kept, drop=files)


def record_copies(out_dir: str, source_dir: str, copied: list[dict]) -> None:
    """State lines in OUT for package files copied byte for byte from another OUT (promote;
    copied: their manifest entries): the source's record of each (what it was built
    from), stamped as the copy is, so that `rocpkg repo` takes the copy at its record
    without reading it. A name OUT already has a state for keeps it; the copy is then one
    of its earlier files."""
    for fmt in sorted({entry["format"] for entry in copied}):
        source = recorded_stamps(source_dir, fmt)
        states, earlier = read_states(out_dir, fmt), []
        for entry in (e for e in copied if e["format"] == fmt):
            fingerprint = source.get(entry["file"], ("", {}))[1].get("fingerprint", "")
            state = stamped(out_dir, {"fingerprint": fingerprint, "file": entry["file"]}, entry["size"],
                            entry["sha256"])
            if entry["name"] in states:
                earlier.append((entry["name"], state))
            else:
                states[entry["name"]] = state
        rewrite_states(out_dir, fmt, states, earlier=earlier)


def stamped(out_dir: str, state: dict, size: int, sha256: str) -> dict:
    """state with the size and SHA-256 of its file's bytes and the file's mtime and inode now."""
    st = os.stat(os.path.join(out_dir, state["file"]), follow_symlinks=False)
    return {**state, "size": size, "sha256": sha256, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
