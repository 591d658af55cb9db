"""OUT as the build and the repository commands share it: one writer at a time, no
temporary left behind, and a staging area where a build writes each package until it is
whole.

These are the "written aside" half of the one way OUT changes (rocpkg.store.journal):
every file is written whole beside its place (`NAME.tmp-PID`) and renamed over it. A
build's packages are written aside in OUT/.rocpkg/staging rather than beside their place,
because an RPM is signed in place after its writer returns: each is moved to its place in
the pool with one rename once whole and signed, so a package in the pool is always a
finished one, whenever the build is killed. A dead run's temporaries and staging area
are removed by the next command that takes the lock (stale_temporaries, one rule for all).
A build whose checks refuse it (rocpkg.builder.gate, run before the first package is
written) removes every directory it made, OUT itself included: OUT is as it was.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat

from rocpkg.errors import RocpkgInputError
from rocpkg.store.files import OWN_DIRS, check_tree, kind_of, open_dir, own_top_file, refusal

LOCK_FILE = os.path.join(".rocpkg", "lock")
STAGING_DIR = os.path.join(".rocpkg", "staging")
MANIFEST_PARTS = "manifest.d"
TMP_RE = re.compile(r"\.tmp-\d+\Z")


def remove_staging(out_dir: str) -> None:
    """The staging area and what it holds; one that is a symlink is removed, not followed."""
    staging = os.path.join(out_dir, STAGING_DIR)
    if os.path.islink(staging):
        os.unlink(staging)
    else:
        shutil.rmtree(staging, ignore_errors=True)


def own_top_temporary(name: str) -> bool:
    """A temporary `*.tmp-<pid>` of one of rocpkg's own files at OUT's top (manifest.json,
    the client snippets, the keys, the setup copies), never another file that merely looks
    like one."""
    return bool(TMP_RE.search(name)) and own_top_file(TMP_RE.sub("", name))


def stale_temporaries(out_dir: str) -> list[str]:
    """What dead runs left, relative paths: temporaries `*.tmp-PID` of rocpkg's writers
    (rocpkg.formats.streams.AtomicOutput) in rocpkg's own trees — at OUT's top only those of
    its own files, never another file that merely looks like one — and a build's staging
    area. Only the OUT lock's holder may remove them: a live writer holds it."""
    found = [STAGING_DIR] if os.path.lexists(os.path.join(out_dir, STAGING_DIR)) else []
    for top in OWN_DIRS:
        root = os.path.join(out_dir, top)
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, out_dir)
            dirnames[:] = [d for d in dirnames if os.path.join(rel_dir, d) != STAGING_DIR]
            found += [os.path.join(rel_dir, name) for name in filenames if TMP_RE.search(name)]
    try:
        found += [name for name in os.listdir(out_dir) if own_top_temporary(name)]
    except OSError:
        pass
    return sorted(found)


def remove_stale_temporaries(out_dir: str) -> int:
    """Remove what stale_temporaries finds (the caller holds the lock: nobody else
    writes); how many it removed."""
    swept = stale_temporaries(out_dir)
    for rel in swept:
        if rel == STAGING_DIR:
            remove_staging(out_dir)
        else:
            os.unlink(os.path.join(out_dir, rel))
    return len(swept)


class OutLock:
    """One writer per OUT at a time, build or publish (flock: released by the kernel even
    after kill -9). Leaving on an exception (a full disk, Ctrl-C) removes the temporaries
    the run left: the lock holder is the only writer. Re-entrant within a process: prune
    and promote hold it across the re-index that publish_repositories does.

    The lock file is opened without following a symlink and never truncated; entering
    refuses an OUT whose own trees hold a symlink or a special file (outfiles.check_tree),
    before the holder reads or writes anything."""

    held: dict[str, int] = {}

    def __init__(self, out_dir: str):
        self.out_dir = os.path.realpath(out_dir)     # OUT itself is the user's to name
        self.path = os.path.join(self.out_dir, LOCK_FILE)

    def __enter__(self):
        if self.held.get(self.path):
            self.held[self.path] += 1
            self.fh = None
            return self
        check_tree(self.out_dir, discarded=(STAGING_DIR,))    # before the lock file is made: a refused OUT stays as it was
        self.fh = os.fdopen(self._open(), "w")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise RocpkgInputError((self.out_dir, "another rocpkg build or repo is writing into this directory")) \
                from None
        self.held[self.path] = 1
        return self

    def _open(self) -> int:
        """The lock file's descriptor: OUT/.rocpkg made when missing, neither it nor the
        lock a symlink, the lock a regular file (created empty, never truncated)."""
        try:
            dir_fd = open_dir(self.out_dir, os.path.dirname(LOCK_FILE), create=True)
        except FileNotFoundError:
            raise RocpkgInputError((self.out_dir, "no such directory")) from None
        name = os.path.basename(LOCK_FILE)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
        except OSError as exc:
            raise refusal(self.out_dir, LOCK_FILE, exc, dir_fd, name) from None
        finally:
            os.close(dir_fd)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise RocpkgInputError((self.path, f"is {kind_of(mode)}, not a regular file"))
        return fd

    def __exit__(self, exc_type, exc, tb):
        self.held[self.path] -= 1
        if self.fh is None:
            return False        # an inner hold: the outer one cleans up
        try:
            if exc_type is not None:  # a failed or interrupted run leaves no temporary behind
                remove_stale_temporaries(self.out_dir)
        except OSError:
            pass  # the original error is the one to report
        finally:
            self.fh.close()
        return False


class Staging:
    """OUT locked, with a staging directory per format where a build writes its packages.
    `commit(staged, final)` moves a whole one into place. Leaving removes the staging area
    and, on an exception when nothing was committed, every directory entering made (the
    lock's, OUT's own): a refused build leaves OUT as it found it. The caller stops its
    writers before leaving."""

    def __init__(self, out_dir: str, formats):
        self.out_dir = out_dir
        self.formats = list(formats)
        self.made: list[str] = []       # directories this build created, parents first
        self.lock_made = False
        self.committed = 0
        self._dirs: set[str] = set()

    def dir(self, fmt: str) -> str:
        """Where a format's packages are written until they are whole."""
        return os.path.join(self.out_dir, STAGING_DIR, fmt)

    def __enter__(self) -> "Staging":
        self._make(os.path.join(self.out_dir, os.path.dirname(LOCK_FILE)))
        self.lock_made = not os.path.lexists(os.path.join(self.out_dir, LOCK_FILE))
        self.lock = OutLock(self.out_dir)
        try:
            self.lock.__enter__()
        except BaseException:
            self._unmake()
            raise
        try:
            remove_stale_temporaries(self.out_dir)
            for fmt in self.formats:
                os.makedirs(self.dir(fmt))
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def commit(self, staged: str, final: str) -> None:
        """Move a staged package to its place (same file system: a rename)."""
        parent = os.path.dirname(final)
        if parent not in self._dirs:
            os.makedirs(parent, exist_ok=True)
            self._dirs.add(parent)
        os.replace(staged, final)
        self.committed += 1

    def __exit__(self, exc_type, exc, tb):
        try:
            remove_staging(self.out_dir)
        finally:
            self.lock.__exit__(exc_type, exc, tb)
        if exc_type is not None and not self.committed:
            self._unmake()
        return False

    def _make(self, path: str) -> None:
        missing = []
        while not os.path.lexists(path):
            missing.append(path)
            path = os.path.dirname(path)
        for directory in reversed(missing):
            os.mkdir(directory)
            self.made.append(directory)

    def _unmake(self) -> None:
        """Remove what entering made: the lock file it created, then its directories
        (deepest first; one that holds something else stays)."""
        try:
            if self.lock_made:
                os.unlink(os.path.join(self.out_dir, LOCK_FILE))
        except OSError:
            pass
        for directory in reversed(self.made):
            try:
                os.rmdir(directory)
            except OSError:
                pass
