"""Crash safety of OUT: every command that changes OUT (repo and build's index step,
prune, promote) does it as one journaled Change, and the next rocpkg command on that
tree, whatever it is, finishes or undoes a change a kill interrupted (recover()).

What a change leaves under OUT/.rocpkg while it runs:
  journal.json     the intent: the command, its pid, what it will add or
                   remove (package files with their sizes and SHA-256), and every file and
                   directory of rocpkg's own parts of OUT as they were (OWN_DIRS, and
                   its files at OUT's top: OWN_FILES, the setup packages' stable-name copies)
  journal.d/saved/ the files as they were, at their paths relative to OUT: a hard link of
                   each index, signature, key, snippet, setup copy, manifest and record
                   (rocpkg replaces those by rename, never writes one in place, so the link
                   keeps the old bytes; the state journals, appended to in place, are
                   copied), and each
                   package file the change removes or replaces, moved or linked there
                   just before (set_aside, keep)

The protocol: the saved files are made, then journal.json is written (temporary, fsync,
rename, fsync of the directory): a kill before that leaves a journal.d without a
journal.json, which is swept. The command then changes OUT in the order that keeps it a
valid repository at every instant where that is possible (new package files and by-hash
copies first, the indexes next, the signatures and the top files, Release, InRelease,
repomd.xml and its signature, last, removals after: each format's Repository.index).
Once the whole change is in place, journal.json goes first, then journal.d.

Recovery, by rule rather than per command: an unfinished journal is always rolled back —
every file of rocpkg's parts of OUT that is not as it was is put back from saved/, every
file and directory the change made is removed — so OUT is byte for byte the repository
it was before the interrupted command, indexes and signatures included; the command is
then run again. Why back and not forward, for every command: rolling a re-index forward
needs the signing key the interrupted command had, and the next command may be one that
has none (verify, publish, a build without --repo); going back needs nothing but the
journal. What this means per command:
  prune    the files it had removed from the pool return, the manifest and the indexes
           are the old ones again: run prune again (it removes the same releases).
  promote  the files it had copied into DST go, DST's manifest and indexes are the old
           ones: run promote again.
  repo     the indexes, signatures and snippets are the old ones (and RPMs whose headers
           it had signed are unsigned again): run repo again.
  build    its index step (--repo) goes back like repo; the packages it had already moved
           into the pool stay, recorded in its state journal, so that the build run again
           keeps them (rocpkg.store.state) — that step of a build is resumed, not undone.
A change is complete the moment its journal.json is removed (one unlink): a journal.d
left without one is only removed. Temporaries of dead runs (`*.tmp-PID`
under rocpkg's parts of OUT) and a killed build's staging area are swept by the same
step, under the OUT lock (every writer of OUT holds it, so none of them is alive).

A journal read back is as hostile as any record of OUT, and a rollback deletes what it
does not list: it is read bounded and never through a symlink (rocpkg.store.files), its
fields are checked whole (_check_journal), and it must agree with what it saved — every
file in saved/ but a package file, and every package file its saved manifest lists, is in
its file list (a change writes the manifest's packages into it, present or not). One that
does not is refused naming the journal and the field; nothing is rolled back.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass

from rocpkg.formats.registry import REGISTERED
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.streams import write_durable
from rocpkg.store.files import OWN_DIRS, own_top_file, own_top_files, parse_json, parts_of, read_file, read_json
from rocpkg.store.manifest_schema import SCHEMA as MANIFEST_SCHEMA, check_manifest
from rocpkg.store.outdir import LOCK_FILE, MANIFEST_PARTS, STAGING_DIR, TMP_RE, OutLock, own_top_temporary, \
    remove_staging

JOURNAL = os.path.join(".rocpkg", "journal.json")
JOURNAL_DIR = os.path.join(".rocpkg", "journal.d")
SAVED = os.path.join(JOURNAL_DIR, "saved")
SCHEMA = "rocpkg-journal/1"
# never listed, saved or restored: the lock, the journal itself
_PRIVATE = (LOCK_FILE, JOURNAL, JOURNAL_DIR)
# appended to in place (rocpkg.store.state): saved by copy, not by link
_APPENDED = os.path.join(".rocpkg", "state") + os.sep
# the manifest and its shard parts: the package files they list are never a change's own
_MANIFESTS = re.compile(rf"manifest\.json|{MANIFEST_PARTS}/shard-\d+-of-\d+\.json")
# journal.json's fields and what each holds (_check_journal)
_FIELDS = ("schema", "command", "pid", "started", "made", "intent", "files", "dirs")
_COMMAND = re.compile(r"[a-z]{1,32}")
_MAX_PID = (1 << 31) - 1
_MAX_TIME = (1 << 63) - 1
_HINT = "move the journal away to use this tree, after checking the tree against its last publish"


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


def _is_package(rel: str) -> bool:
    """A package file: listed, never linked at the start of a change (a link would change
    its ctime, and the digest cache would hash it again)."""
    return any(rel.startswith(os.path.join(f.name, f.package_root, "")) and rel.endswith(f.suffix)
               for f in REGISTERED.values())


def own_tree(out_dir: str) -> tuple[list[str], list[str]]:
    """rocpkg's files and directories under OUT (relative paths, sorted), without the
    lock and the journal."""
    files, dirs = own_top_files(out_dir), []
    for top in OWN_DIRS:
        root = os.path.join(out_dir, top)
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        dirs.append(top)
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, out_dir)
            dirnames[:] = sorted(d for d in dirnames if os.path.join(rel_dir, d) not in _PRIVATE)
            dirs += [os.path.join(rel_dir, d) for d in dirnames]
            files += [os.path.join(rel_dir, n) for n in filenames if os.path.join(rel_dir, n) not in _PRIVATE]
    return sorted(files), sorted(dirs)


def _write_journal(out_dir: str, doc: dict) -> None:
    """journal.json, whole and durable before a change begins (write_durable: temporary,
    every write and fsync checked, rename, fsync of .rocpkg); a journal that cannot be
    written whole (a full disk, a file-size limit) fails the change before it starts."""
    write_durable(os.path.join(out_dir, JOURNAL), json.dumps(doc, indent=0, sort_keys=True).encode() + b"\n")


def _read_journal(out_dir: str) -> dict | None:
    """journal.json read as OUT's own files are (rocpkg.store.files: never through a symlink,
    a regular file, at most RECORD_LIMIT bytes) and checked whole (_check_journal); None
    when there is none. A journal that is not one is bad input, never acted on."""
    path = os.path.join(out_dir, JOURNAL)
    try:
        data = read_file(out_dir, JOURNAL.replace(os.sep, "/"))
    except OSError as exc:
        raise RocpkgInputError((path, f"not a readable rocpkg journal ({exc.strerror or exc}): {_HINT}")) from None
    if data is None:
        return None
    doc = parse_json(data, path, "rocpkg journal")
    problem = _check_journal(doc)
    if problem:
        raise RocpkgInputError((f"{path}: {problem[0]}", f"{problem[1]}: not a {SCHEMA} journal; {_HINT}"))
    return doc


def _check_journal(doc) -> tuple[str, str] | None:
    """(field, what is wrong) when doc is not a whole rocpkg-journal/1 document: its
    fields, their types and ranges, every path one of rocpkg's own parts of OUT
    (parts_of: relative, inside OUT), none named twice; None when it is one."""
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
    if not isinstance(doc["intent"], dict):
        return "intent", "wants an object"
    for key in ("made", "files", "dirs"):
        if not isinstance(doc[key], list):
            return key, "wants a list"
        for index, rel in enumerate(doc[key]):
            if not _own_path(rel, directory=key == "dirs", made=key == "made"):
                return f"{key}[{index}]", f"{str(rel)[:80]!r} is not one of rocpkg's own paths in OUT"
        if len(set(doc[key])) != len(doc[key]):
            return key, "names a path twice"
    return None


def _own_path(rel, directory: bool, made: bool) -> bool:
    """Whether rel is a path a journal may name: what entering a change made (the lock
    file and its directory), or a file or directory of rocpkg's parts of OUT (own_tree)."""
    if made:
        return rel in (os.path.dirname(LOCK_FILE), LOCK_FILE)
    try:
        parts = parts_of(rel)
    except RocpkgInputError:
        return False
    private = rel in _PRIVATE or rel.startswith(JOURNAL_DIR + os.sep)
    top = parts[0] in OWN_DIRS if directory or len(parts) > 1 else own_top_file(rel)
    return top and not private


def recorded_packages(out_dir: str, files, saved: bool) -> set[str]:
    """The package files OUT's manifest and its shard parts list, as a change found them:
    each read from its copy in journal.d/saved (saved), else from OUT where `files` lists
    it (there since the change began, or put back by a rollback). Read and checked as
    manifest.json always is; a document without a schema is not rocpkg's and lists none."""
    saved_root = os.path.join(out_dir, SAVED)
    found: set[str] = set()
    for rel in sorted(r for r in files if _MANIFESTS.fullmatch(r)):
        root = saved_root if saved and os.path.lexists(os.path.join(saved_root, rel)) else out_dir
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


def _check_consistent(out_dir: str, doc: dict) -> None:
    """Refuse a journal a rollback could not trust: one that leaves out a file it saved
    (the rollback would remove the file and drop its saved bytes) or a package file its
    saved manifest lists (the rollback would delete a recorded package). A change writes
    both into its file list (Change), so only a damaged or forged journal fails here."""
    path = os.path.join(out_dir, JOURNAL)
    files = set(doc["files"])
    saved_root = os.path.join(out_dir, SAVED)
    for dirpath, _dirnames, filenames in os.walk(saved_root):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), saved_root)
            if rel not in files and not _is_package(rel):
                raise RocpkgInputError((f"{path}: files", f"leaves out {rel!r}, which it saved: "
                                                          f"a contradictory journal is never acted on; {_HINT}"))
    missing = sorted(recorded_packages(out_dir, files, saved=True) - files)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise RocpkgInputError((f"{path}: files", f"leaves out {missing[0]!r}{more}, which its saved manifest "
                                                  f"lists: a contradictory journal is never acted on; {_HINT}"))


class Change:
    """One journaled change of OUT (module doc): entering takes the OUT lock, finishes or
    undoes an interrupted change, saves what the change may replace and writes the
    journal; leaving normally completes it; leaving on an exception rolls it back, so
    that OUT is as it was (the lock file and .rocpkg too, when entering made them).
    Nested in one process (prune's and promote's re-index), the inner change is part of
    the outer one. intent: what the change will do (written into the journal)."""

    active: dict[str, "Change"] = {}

    def __init__(self, out_dir: str, command: str, intent: dict | None = None):
        self.out_dir = os.path.realpath(out_dir)
        self.command, self.intent = command, intent or {}
        self.outer: Change | None = None
        self.recovered: list[Recovery] = []

    def __enter__(self) -> "Change":
        self.outer = self.active.get(self.out_dir)
        if self.outer is not None:
            return self.outer
        made = [p for p in (os.path.dirname(LOCK_FILE), LOCK_FILE) if not os.path.lexists(os.path.join(self.out_dir, p))]
        self.lock = OutLock(self.out_dir)
        self.lock.__enter__()
        try:
            self.recovered = _recover_locked(self.out_dir)
            files, dirs = own_tree(self.out_dir)
            for rel in files:
                if not _is_package(rel):
                    _save(self.out_dir, rel, copy=rel.startswith(_APPENDED))
            # a package its manifest lists is never the change's own, even one OUT lacks now
            files = sorted({*files, *recorded_packages(self.out_dir, files, saved=False)})
            _write_journal(self.out_dir, {"schema": SCHEMA, "command": self.command, "pid": os.getpid(),
                                          "started": int(time.time()), "made": made,
                                          "intent": self.intent, "files": files, "dirs": dirs})
        except BaseException as exc:
            self._leave(type(exc), exc, made)
            raise
        self.made = made
        self.active[self.out_dir] = self
        return self

    def set_aside(self, path: str) -> None:
        """Remove a file of OUT as part of the change: it waits in journal.d until the
        change is complete (a rollback puts it back)."""
        rel = os.path.relpath(os.path.realpath(path), self.out_dir)
        target = os.path.join(self.out_dir, SAVED, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(os.path.join(self.out_dir, rel), target)

    def keep(self, path: str) -> None:
        """Before a file of OUT is replaced by another (rename over it): its bytes are kept
        (a hard link) until the change is complete."""
        rel = os.path.relpath(os.path.realpath(path), self.out_dir)
        if not os.path.lexists(os.path.join(self.out_dir, SAVED, rel)):
            _save(self.out_dir, rel, copy=False)

    def __exit__(self, exc_type, exc, tb):
        if self.outer is not None:
            return False
        del self.active[self.out_dir]
        self._leave(exc_type, exc, self.made)
        return False

    def _leave(self, exc_type, exc, made: list[str]) -> None:
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
    """The change this process is making to OUT, if any (for a writer that replaces a
    package file in place of another: Change.keep)."""
    return Change.active.get(os.path.realpath(out_dir))


def _save(out_dir: str, rel: str, copy: bool) -> None:
    source, target = os.path.join(out_dir, rel), os.path.join(out_dir, SAVED, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not copy:
        try:
            os.link(source, target, follow_symlinks=False)
            return
        except OSError:
            pass        # a file system without hard links: a copy keeps the bytes too
    shutil.copy2(source, target, follow_symlinks=False)


def _undo(out_dir: str) -> None:
    """A failed change rolled back on the way out; when the rollback fails too (the disk
    that failed the change), the journal stays and the next command rolls it back."""
    try:
        if os.path.exists(os.path.join(out_dir, JOURNAL)):
            _roll_back(out_dir, _read_journal(out_dir))
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


def _roll_back(out_dir: str, doc: dict) -> tuple[int, int]:
    """OUT's own parts as the journal found them: saved files put back where they differ,
    files and directories made since removed. Idempotent (a rollback killed half-way is
    done again). Returns (restored, removed)."""
    before_files, before_dirs = set(doc["files"]), set(doc["dirs"])
    saved_root = os.path.join(out_dir, SAVED)
    restored = removed = 0
    files, dirs = own_tree(out_dir)
    for rel in files:
        if rel not in before_files:
            os.unlink(os.path.join(out_dir, rel))
            removed += 1
    for dirpath, _dirnames, filenames in os.walk(saved_root):
        for name in filenames:
            saved = os.path.join(dirpath, name)
            rel = os.path.relpath(saved, saved_root)
            target = os.path.join(out_dir, rel)
            if rel not in before_files:
                continue
            try:
                same = os.path.samefile(saved, target)
            except FileNotFoundError:
                same = False
            if not same:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(saved, target)
                restored += 1
    for rel in sorted((d for d in dirs if d not in before_dirs), key=len, reverse=True):
        try:
            os.rmdir(os.path.join(out_dir, rel))
        except OSError:
            pass
    _finish(out_dir)
    return restored, removed


def _recover_locked(out_dir: str) -> list[Recovery]:
    """Under the lock: an unfinished journal rolled back, then the temporaries of dead
    runs swept."""
    found: list[Recovery] = []
    doc = _read_journal(out_dir)
    if doc is not None:
        _check_consistent(out_dir, doc)
        what = Recovery(out_dir, "rolled back", doc["command"], doc["pid"])
        what.restored, what.removed = _roll_back(out_dir, doc)
        found.append(what)
    elif os.path.lexists(os.path.join(out_dir, JOURNAL_DIR)):
        shutil.rmtree(os.path.join(out_dir, JOURNAL_DIR), ignore_errors=True)    # killed before its journal
    swept = stale_temporaries(out_dir)
    for rel in swept:
        if rel == STAGING_DIR:
            remove_staging(out_dir)
        else:
            os.unlink(os.path.join(out_dir, rel))
    if swept:
        found.append(Recovery(out_dir, "swept", swept=len(swept)))
    return found


def stale_temporaries(out_dir: str) -> list[str]:
    """What dead runs left, relative paths: temporaries `*.tmp-PID` of rocpkg's writers
    (rocpkg.formats.streams.AtomicOutput) in rocpkg's parts of OUT — at OUT's top only those of
    its own files — and a build's staging area. Only the OUT lock's holder may remove
    them: a live writer holds it."""
    files, dirs = own_tree(out_dir)
    found = [rel for rel in files if TMP_RE.search(rel) and not rel.startswith(STAGING_DIR + os.sep)]
    found += [rel for rel in dirs if rel == STAGING_DIR]
    try:
        names = os.listdir(out_dir)
    except OSError:
        names = []
    found += [n for n in names if own_top_temporary(n)]
    return sorted(found)


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
        doc = _read_journal(out_dir)
        what = (f"an interrupted rocpkg {doc['command']} (pid {doc['pid']}) left it half-changed"
                if doc else "a killed rocpkg run left temporaries in it")
        raise RocpkgInputError((out_dir, f"{what}, and it cannot be repaired here ({exc.strerror or exc}): "
                                         f"run any rocpkg command on it where it can be written")) from None
