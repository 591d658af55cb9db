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
repomd.xml and its signature, last, removals after: rocpkg.repo.apt, rocpkg.repo.dnf).
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
           keeps them (rocpkg.out.state) — that step of a build is resumed, not undone.
A change is complete the moment its journal.json is removed (one unlink): a journal.d
left without one is only removed. Temporaries of dead runs (`*.tmp-PID`
under rocpkg's parts of OUT) and a killed build's staging area are swept by the same
step, under the OUT lock (every writer of OUT holds it, so none of them is alive).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

from rocpkg.formats.registry import REGISTERED
from rocpkg.errors import RocpkgInputError
from rocpkg.out.files import OWN_DIRS, own_top_files   # a rollback removes only what a change made in these
from rocpkg.out.outdir import LOCK_FILE, STAGING_DIR, TMP_RE, OutLock, own_top_temporary, remove_staging

JOURNAL = os.path.join(".rocpkg", "journal.json")
JOURNAL_DIR = os.path.join(".rocpkg", "journal.d")
SAVED = os.path.join(JOURNAL_DIR, "saved")
SCHEMA = "rocpkg-journal/1"
# never listed, saved or restored: the lock, the journal itself
_PRIVATE = (LOCK_FILE, JOURNAL, JOURNAL_DIR)
# appended to in place (rocpkg.out.state): saved by copy, not by link
_APPENDED = os.path.join(".rocpkg", "state") + os.sep


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
    """journal.json, atomically and durably: temporary, fsync, rename, fsync of .rocpkg."""
    path = os.path.join(out_dir, JOURNAL)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, json.dumps(doc, indent=0, sort_keys=True).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_journal(out_dir: str) -> dict | None:
    path = os.path.join(out_dir, JOURNAL)
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RocpkgInputError((path, f"not a readable rocpkg journal ({exc}): move it away to use this tree, "
                                      f"after checking the tree against its last publish")) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("files"), list) \
            or not isinstance(doc.get("dirs"), list):
        raise RocpkgInputError((path, f"not a {SCHEMA} journal"))
    return doc


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
    except OSError:
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
        what = Recovery(out_dir, "rolled back", str(doc.get("command", "")), int(doc.get("pid") or 0))
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
    looked for only with a journal; a build sweeps them itself, rocpkg.out.outdir.Staging),
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
