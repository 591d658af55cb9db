"""Changes of OUT: the one way rocpkg changes a tree it owns as a whole.

Every file rocpkg writes in OUT is written whole beside its place (`NAME.tmp-PID`, or a
build's package in OUT/.rocpkg/staging) and renamed over it, so a reader sees the old
bytes or the new. A command that changes several files that must agree (repo and build's
--repo step, prune, promote, retention) does it as one Change under OUT's lock: before it
makes, replaces or removes a file or makes a directory, the path is appended to the
change's journal (.rocpkg/journal.d/touched.jsonl, one line, fsynced) and, when it holds
bytes, those are kept as a hard link in .rocpkg/journal.d/saved/<path>; nothing else of
OUT is read or saved. The change is complete when .rocpkg/journal.json (its header:
command, pid, start) is unlinked. The next rocpkg command on the tree, whatever it is,
reads an unfinished journal and undoes exactly what it lists, newest first: saved bytes
renamed back, paths it made removed; then the temporaries of dead runs are swept. A
build's packages are not a Change: each is complete once its state line is appended
(rocpkg.store.state), so a killed build keeps the packages it finished.

Writers learn nothing of this: rocpkg.formats.streams tells its watchers of each path
before AtomicOutput writes it, remove_file removes it or make_dirs makes it, and a Change
is the watcher while it runs (Change.keep for a file replaced another way, Change.set_aside
for one removed). A line is durable before its path changes, so a line a kill cut short
names a path that did not change and is ignored. Why back and not forward: finishing a
re-index needs the signing key the interrupted command had, and the next command may have
none (verify, publish); going back needs nothing but the journal. Per command:
  prune    the files it removed return, the manifest and indexes are the old ones: run it again.
  promote  the files it copied into DST go, DST's manifest and indexes are the old ones.
  repo     the indexes, signatures and snippets are the old ones (and RPMs whose headers
           it signed are unsigned again): run repo again.
  build    its index step (--repo) goes back like repo; its packages stay, recorded.

A journal read back is as hostile as any record of OUT: read bounded and never through a
symlink (rocpkg.store.files), its header and every line checked whole (_check_header,
_entries), every path one of rocpkg's own parts of OUT; a line that would remove a package
file the manifest as it was lists is refused. One that fails is refused naming the
journal and the field or line; nothing is rolled back.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass

from rocpkg.errors import RocpkgInputError
from rocpkg.formats import streams
from rocpkg.formats.streams import write_all, write_durable
from rocpkg.store.files import OWN_DIRS, own_top_file, parse_json, parts_of, read_file, read_json
from rocpkg.store.manifest_schema import SCHEMA as MANIFEST_SCHEMA, check_manifest
from rocpkg.store.outdir import LOCK_FILE, MANIFEST_PARTS, TMP_RE, OutLock, remove_stale_temporaries, \
    stale_temporaries

JOURNAL = os.path.join(".rocpkg", "journal.json")
JOURNAL_DIR = os.path.join(".rocpkg", "journal.d")
TOUCHED = os.path.join(JOURNAL_DIR, "touched.jsonl")
SAVED = os.path.join(JOURNAL_DIR, "saved")
SCHEMA = "rocpkg-journal/2"
# never journaled, saved or restored: the lock, the journal itself
_PRIVATE = (LOCK_FILE, JOURNAL, JOURNAL_DIR)
# the manifest and its shard parts: the package files they list are never a change's own
_MANIFESTS = ("manifest.json", MANIFEST_PARTS)
# journal.json's fields (_check_header); a line of touched.jsonl is {"saved": path} or {"new": path}
_FIELDS = ("schema", "command", "pid", "started", "made")
_KINDS = ("saved", "new")
_COMMAND = re.compile(r"[a-z]{1,32}")
_MAX_PID = (1 << 31) - 1
_MAX_TIME = (1 << 63) - 1
_HINT = "move the journal away to use this tree, after checking the tree against its last publish"
_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Recovery:
    """What the start of a command did to a tree: an interrupted `command` rolled back
    ("rolled back"), or temporaries of dead runs swept ("swept")."""

    out_dir: str
    action: str
    command: str = ""
    pid: int = 0
    restored: int = 0       # files put back as they were
    removed: int = 0        # files the interrupted change had made, removed
    swept: int = 0          # temporaries and staging areas of dead runs


def _read_journal(out_dir: str) -> tuple[dict, list[tuple[str, str]]] | None:
    """(journal.json, the lines of touched.jsonl as (kind, path)) read as OUT's own files
    are (rocpkg.store.files: never through a symlink, a regular file, at most RECORD_LIMIT
    bytes) and checked whole; None when there is no journal. A journal that is not one is
    bad input, never acted on."""
    path = os.path.join(out_dir, JOURNAL)
    try:
        data = read_file(out_dir, JOURNAL.replace(os.sep, "/"))
        log = read_file(out_dir, TOUCHED.replace(os.sep, "/")) if data is not None else None
    except OSError as exc:
        raise RocpkgInputError((path, f"not a readable rocpkg journal ({exc.strerror or exc}): {_HINT}")) from None
    if data is None:
        return None
    doc = parse_json(data, path, "rocpkg journal")
    problem = _check_header(doc)
    if problem:
        raise RocpkgInputError((f"{path}: {problem[0]}", f"{problem[1]}: not a {SCHEMA} journal; {_HINT}"))
    return doc, _entries(out_dir, log or b"")


def _check_header(doc) -> tuple[str, str] | None:
    """(field, what is wrong) when doc is not a whole rocpkg-journal/2 header; None when it is."""
    if not isinstance(doc, dict):
        return "(document)", "wants an object"
    unknown = sorted(set(doc) ^ set(_FIELDS))
    if unknown:
        return unknown[0], "missing" if unknown[0] in _FIELDS else "not a journal field"
    if doc["schema"] != SCHEMA:
        return "schema", f"wants {SCHEMA!r}"
    if not isinstance(doc["command"], str) or not _COMMAND.fullmatch(doc["command"]):
        return "command", "wants a command name"
    for key, high in (("pid", _MAX_PID), ("started", _MAX_TIME)):
        if type(doc[key]) is not int or not (1 if key == "pid" else 0) <= doc[key] <= high:
            return key, f"wants an integer up to {high}"
    if not isinstance(doc["made"], list):
        return "made", "wants a list"
    for index, rel in enumerate(doc["made"]):
        if rel not in (os.path.dirname(LOCK_FILE), LOCK_FILE):
            return f"made[{index}]", f"{str(rel)[:80]!r} is not what entering a change makes"
    return None


def _entries(out_dir: str, log: bytes) -> list[tuple[str, str]]:
    """touched.jsonl's lines as (kind, path), each checked: one of {"saved": path} or
    {"new": path}, the path one of rocpkg's own in OUT. The last line, when a kill cut it
    short (no newline), names a path that never changed: left out."""
    where = os.path.join(out_dir, TOUCHED)
    lines = log.split(b"\n")
    found = []
    for number, line in enumerate(lines[:-1], 1):
        entry = parse_json(line, f"{where}: line {number}", "rocpkg journal line")
        kind = next(iter(entry), None) if isinstance(entry, dict) and len(entry) == 1 else None
        if kind not in _KINDS or not _own_path(entry[kind]):
            raise RocpkgInputError((f"{where}: line {number}", f"{line[:80]!r} is not {{\"saved\" or \"new\": "
                                                               f"one of rocpkg's own paths in OUT}}; {_HINT}"))
        found.append((kind, entry[kind]))
    return found


def _own_path(rel) -> bool:
    """Whether rel is a path a journal may name: a file or directory of rocpkg's parts of
    OUT, not the lock or the journal."""
    if not isinstance(rel, str):
        return False
    try:
        parts = parts_of(rel)
    except RocpkgInputError:
        return False
    private = rel in _PRIVATE or rel.startswith(JOURNAL_DIR + os.sep)
    top = parts[0] in OWN_DIRS if len(parts) > 1 else parts[0] in OWN_DIRS or own_top_file(rel)
    return top and not private


def recorded_packages(root: str) -> set[str]:
    """The package files the manifest and its shard parts under root list (root: OUT, or
    the journal's saved copies), read and checked as manifest.json always is; a document
    without a schema is not rocpkg's and lists none."""
    found: set[str] = set()
    rels = ["manifest.json"]
    try:
        rels += sorted(f"{MANIFEST_PARTS}/{n}" for n in os.listdir(os.path.join(root, MANIFEST_PARTS))
                       if re.fullmatch(r"shard-\d+-of-\d+\.json", n))
    except OSError:
        pass
    for rel in rels:
        doc = read_json(root, rel, "manifest")
        if not isinstance(doc, dict) or "schema" not in doc:
            continue
        path = os.path.join(root, rel)
        if doc["schema"] != MANIFEST_SCHEMA:
            raise RocpkgInputError((path, f"not a {MANIFEST_SCHEMA} manifest"))
        check_manifest(doc, path)
        found |= {entry["file"] for entry in doc.get("packages", [])}
        found |= {name for record in doc.get("releases", []) for name in record.get("files", [])}
    return found


def _check_consistent(out_dir: str, entries: list[tuple[str, str]]) -> None:
    """Refuse a journal whose rollback would delete a package the manifest recorded before
    the change (read from its saved copy when the change replaced it): a change only ever
    makes packages no manifest of OUT lists yet, so only a damaged or forged journal fails here."""
    made = {rel for kind, rel in entries if kind == "new"}
    if not made:
        return
    saved = os.path.join(out_dir, SAVED)
    recorded = recorded_packages(saved if os.path.lexists(os.path.join(saved, "manifest.json")) else out_dir)
    wrong = sorted(made & recorded)
    if wrong:
        more = f" and {len(wrong) - 1} more" if len(wrong) > 1 else ""
        raise RocpkgInputError((os.path.join(out_dir, TOUCHED), f"would remove {wrong[0]!r}{more}, which the "
                                                                f"manifest lists: a contradictory journal is never "
                                                                f"acted on; {_HINT}"))


class Change:
    """One journaled change of OUT (module doc): entering takes the OUT lock, undoes an
    interrupted change and starts the journal; while it runs, every path a writer touches
    is journaled first (the watcher of rocpkg.formats.streams); leaving normally completes
    it; leaving on an exception rolls it back, so that OUT is as it was (the lock file and
    .rocpkg too, when entering made them). Nested in one process (prune's and promote's
    re-index), the inner change is part of the outer one. The journal's lines are appended
    with one write each on a descriptor opened O_APPEND: threads and forked processes may
    touch paths at once."""

    active: dict[str, "Change"] = {}

    def __init__(self, out_dir: str, command: str):
        self.out_dir = os.path.realpath(out_dir)
        self.command = command
        self.outer: Change | None = None
        self.recovered: list[Recovery] = []
        self.touched: dict[str, str] = {}       # path -> "saved" or "new", as journaled
        self.fd = -1
        self._mutex = threading.Lock()

    def __enter__(self) -> "Change":
        self.outer = self.active.get(self.out_dir)
        if self.outer is not None:
            return self.outer
        made = [p for p in (os.path.dirname(LOCK_FILE), LOCK_FILE) if not os.path.lexists(os.path.join(self.out_dir, p))]
        self.lock = OutLock(self.out_dir)
        self.lock.__enter__()
        try:
            self.recovered = _recover_locked(self.out_dir)
            os.mkdir(os.path.join(self.out_dir, JOURNAL_DIR))
            self.fd = os.open(os.path.join(self.out_dir, TOUCHED), _LOG_FLAGS, 0o644)
            _write_journal(self.out_dir, {"schema": SCHEMA, "command": self.command, "pid": os.getpid(),
                                          "started": int(time.time()), "made": made})
        except BaseException as exc:
            self._leave(type(exc), exc, made)
            raise
        self.made = made
        self.active[self.out_dir] = self
        streams.WATCHERS.append(self.touch)
        return self

    def touch(self, *paths: str) -> None:
        """Journal each path before it is made, replaced or removed: the directories above
        it that are missing, then the path itself, its bytes saved when it has some; all
        the lines in one write and one sync. Paths outside OUT, temporaries and the
        journal's own are not OUT's to journal."""
        rels = []
        for path in paths:
            full = os.path.abspath(path)
            rel = os.path.relpath(os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full)),
                                  self.out_dir)
            if not (rel.startswith(os.pardir) or TMP_RE.search(rel) or rel in self.touched) and _own_path(rel):
                rels.append(rel)
        if not rels:
            return
        with self._mutex:
            lines: dict[str, str] = {}
            for rel in rels:
                missing, step = [], os.path.dirname(rel)
                while step and not os.path.lexists(os.path.join(self.out_dir, step)):
                    missing.append(step)
                    step = os.path.dirname(step)
                for directory in reversed(missing):
                    lines.setdefault(directory, "new")
                target = os.path.join(self.out_dir, rel)
                if os.path.isfile(target) and not os.path.islink(target):
                    _save(self.out_dir, rel)        # saved before its line says so
                    lines.setdefault(rel, "saved")
                elif not os.path.lexists(target):
                    lines.setdefault(rel, "new")
            lines = {rel: kind for rel, kind in lines.items() if rel not in self.touched}
            if lines:
                write_all(self.fd, b"".join(json.dumps({kind: rel}).encode() + b"\n" for rel, kind in lines.items()))
                os.fdatasync(self.fd)
                self.touched.update(lines)

    def set_aside(self, *paths: str) -> None:
        """Remove files of OUT as part of the change (a rollback puts them back)."""
        self.touch(*paths)
        for path in paths:
            os.unlink(path)

    def keep(self, *paths: str) -> None:
        """Before files of OUT are replaced by a writer that does not go through
        rocpkg.formats.streams (RPMs signed in a copy renamed over each): journaled, their
        bytes saved until the change is complete. Many paths at once cost one sync."""
        self.touch(*paths)

    def rewritten(self, rel: str) -> bool:
        """Whether this change replaced the bytes of OUT's file rel (an OUT-relative path),
        in this process or in another that journaled it (a pool of signers): the journal
        on disk is read again for a path this process has not seen."""
        rel = rel.replace("/", os.sep)
        if rel not in self.touched:
            found = _read_journal(self.out_dir)
            for kind, path in found[1] if found else ():
                self.touched.setdefault(path, kind)
        return self.touched.get(rel) == "saved"

    def __exit__(self, exc_type, exc, tb):
        if self.outer is not None:
            return False
        del self.active[self.out_dir]
        streams.WATCHERS.remove(self.touch)
        self._leave(exc_type, exc, self.made)
        return False

    def _leave(self, exc_type, exc, made: list[str]) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            if exc_type is None:
                _finish(self.out_dir)
            else:
                _undo(self.out_dir)
        except OSError:
            if exc_type is None:        # the journal could not be removed: undone as a failure
                exc_type = OSError
                _undo(self.out_dir)
                raise
        finally:
            self.lock.__exit__(exc_type, exc, None)
            if exc_type is not None and not os.path.exists(os.path.join(self.out_dir, JOURNAL)):
                for rel in reversed(made):      # the lock file, then .rocpkg, when entering made them
                    try:
                        (os.rmdir if rel == os.path.dirname(LOCK_FILE) else os.unlink)(os.path.join(self.out_dir, rel))
                    except OSError:
                        pass


def active_change(out_dir: str) -> Change | None:
    """The change this process is making to OUT, if any."""
    return Change.active.get(os.path.realpath(out_dir))


def _write_journal(out_dir: str, doc: dict) -> None:
    """journal.json, whole and durable before the change touches anything (write_durable:
    temporary, every write and fsync checked, rename, fsync of .rocpkg); one that cannot
    be written whole (a full disk, a file-size limit) fails the change before it starts."""
    write_durable(os.path.join(out_dir, JOURNAL), json.dumps(doc, indent=0, sort_keys=True).encode() + b"\n")


def _save(out_dir: str, rel: str) -> None:
    """The bytes of OUT's file rel kept in saved/: a hard link (rocpkg replaces its files by
    rename and never writes one in place, so the link keeps the old bytes), a copy where
    the file system has no hard links. A copy saved before (another process of the change)
    is kept."""
    source, target = os.path.join(out_dir, rel), os.path.join(out_dir, SAVED, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target, follow_symlinks=False)
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (1, 18, 38, 95):       # EPERM, EXDEV, ENOSYS, EOPNOTSUPP: no hard links here
            raise
        shutil.copy2(source, target, follow_symlinks=False)


def _undo(out_dir: str) -> None:
    """A failed change rolled back on the way out; when the rollback fails too (the disk
    that failed the change), the journal stays and the next command rolls it back."""
    try:
        found = _read_journal(out_dir)
        if found is not None:
            _roll_back(out_dir, found[1])
        else:           # failed before its journal was written: nothing changed yet
            _finish(out_dir)
    except (OSError, RocpkgInputError):
        pass


def _finish(out_dir: str) -> None:
    """The change is complete: the journal goes, then its saved files."""
    try:
        os.unlink(os.path.join(out_dir, JOURNAL))
    except FileNotFoundError:
        pass
    shutil.rmtree(os.path.join(out_dir, JOURNAL_DIR), ignore_errors=True)


def _roll_back(out_dir: str, entries: list[tuple[str, str]]) -> tuple[int, int]:
    """Undo what the journal lists, newest first: a saved file renamed back over its path,
    a path the change made removed (a directory once empty of all but dead temporaries).
    Idempotent (a rollback killed half-way is done again). Returns (restored, removed)."""
    restored = removed = 0
    for kind, rel in reversed(entries):
        target = os.path.join(out_dir, rel)
        if kind == "saved":
            saved = os.path.join(out_dir, SAVED, rel)
            if not os.path.lexists(saved):
                continue        # put back by an earlier, interrupted rollback
            try:
                same = os.path.samefile(saved, target)
            except FileNotFoundError:
                same = False
            if not same:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(saved, target)
                restored += 1
        elif os.path.isdir(target) and not os.path.islink(target):
            for name in os.listdir(target):
                if TMP_RE.search(name) and not os.path.isdir(os.path.join(target, name)):
                    os.unlink(os.path.join(target, name))
            try:
                os.rmdir(target)
            except OSError:
                pass            # holds what the change did not make
        elif os.path.lexists(target):
            os.unlink(target)
            removed += 1
    _finish(out_dir)
    return restored, removed


def _recover_locked(out_dir: str) -> list[Recovery]:
    """Under the lock: an unfinished journal rolled back, then the temporaries of dead
    runs swept."""
    found: list[Recovery] = []
    journal = _read_journal(out_dir)
    if journal is not None:
        doc, entries = journal
        _check_consistent(out_dir, entries)
        what = Recovery(out_dir, "rolled back", doc["command"], doc["pid"])
        what.restored, what.removed = _roll_back(out_dir, entries)
        found.append(what)
    elif os.path.lexists(os.path.join(out_dir, JOURNAL_DIR)):
        shutil.rmtree(os.path.join(out_dir, JOURNAL_DIR), ignore_errors=True)    # killed before its journal
    swept = remove_stale_temporaries(out_dir)
    if swept:
        found.append(Recovery(out_dir, "swept", swept=swept))
    return found


def needs_recovery(out_dir: str, sweep: bool = True) -> bool:
    """Whether OUT holds an unfinished journal, or (sweep) what a dead run left; no lock."""
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        return False
    return os.path.lexists(os.path.join(out_dir, JOURNAL)) or os.path.lexists(os.path.join(out_dir, JOURNAL_DIR)) \
        or (sweep and bool(stale_temporaries(out_dir)))


def recover(out_dir: str | os.PathLike, sweep: bool = True) -> list[Recovery]:
    """What every rocpkg command does first with each tree it reads or writes: an
    interrupted change rolled back, the temporaries of dead runs swept (sweep=False:
    looked for only with a journal; a build sweeps them itself, rocpkg.store.outdir.Staging),
    under the OUT lock; nothing (and no lock taken) when there is nothing to do. A tree
    that cannot be written (read-only, not ours to write) while it needs this is an
    error that says what is wrong."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    if not needs_recovery(out_dir, sweep):
        return []
    try:
        private = os.path.join(out_dir, os.path.dirname(LOCK_FILE))
        if not os.access(private if os.path.isdir(private) else out_dir, os.W_OK):
            raise PermissionError(os.strerror(13))
        with OutLock(out_dir):
            return _recover_locked(os.path.realpath(out_dir))
    except OSError as exc:
        found = _read_journal(out_dir)
        doc = found[0] if found else None
        what = (f"an interrupted rocpkg {doc['command']} (pid {doc['pid']}) left it half-changed"
                if doc else "a killed rocpkg run left temporaries in it")
        raise RocpkgInputError((out_dir, f"{what}, and it cannot be repaired here ({exc.strerror or exc}): "
                                         f"run any rocpkg command on it where it can be written")) from None
