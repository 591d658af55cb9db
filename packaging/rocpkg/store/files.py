"""Files under a directory rocpkg owns (OUT, a publish destination), read and written as
hostile: a user or another tool may have put a symlink, a FIFO or a device where rocpkg
left a file, or edited what rocpkg wrote.

Every path is relative to its root and resolved one component at a time through
directory descriptors opened with O_NOFOLLOW (as the artifacts are read, rocpkg.inputs.catalog):
no component is ever a symlink, whatever it points at. A file is opened without blocking
and must be a regular file (a FIFO or a device is refused, never read), and its size is
checked against a limit before a byte of it is read. The root itself is the path the user
gave (it may be a symlink: the user named it).

check_tree() is the cheap whole-tree form of the same rule for the readers that walk
OUT's package trees with os.walk: it lstat()s every entry of the trees rocpkg writes and
refuses a symlink or a special file anywhere in them, before anything is read.
"""
from __future__ import annotations

import errno
import os
import re
import stat

from rocpkg import strict_json
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.registry import NAMES as FORMAT_NAMES, REGISTERED

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# what rocpkg writes at OUT's top: directories, then files
OWN_DIRS = (".rocpkg", *FORMAT_NAMES, "control", "manifest.d")
# (the keys: rocpkg.formats.sign's KEYRING_NAME, ARMORED_KEY_NAME; each format's client snippet)
OWN_FILES = ("manifest.json", "rocm.gpg", "rocm.asc", *(f.snippet for f in REGISTERED.values() if f.snippet))
# and the setup packages' stable-name copies, <top>-repo[-<channel>].<format> (rocpkg.repo.setup),
# whose <top>, the release's top meta-package, is a lower-case package name
SETUP_COPY_RE = re.compile(r"[a-z0-9][a-z0-9+.-]*-repo(?:-[a-z]+)?\.(?:%s)" % "|".join(map(re.escape, FORMAT_NAMES)))
RECORD_LIMIT = 256 << 20        # manifest.json, shard parts, journals, publish records
INDEX_LIMIT = 1 << 30           # an index file read back (Release, Packages, repomd.xml)


def own_top_file(name: str) -> bool:
    """Whether a name at OUT's top is one of rocpkg's own files (OWN_FILES, a setup copy)."""
    return name in OWN_FILES or bool(SETUP_COPY_RE.fullmatch(name))


def own_top_files(out_dir: str) -> list[str]:
    """rocpkg's own files at OUT's top, those there as regular files (a symlink is never
    one of them), sorted."""
    try:
        names = os.listdir(out_dir)
    except OSError:
        return []
    found = []
    for name in names:
        if own_top_file(name):
            try:
                if stat.S_ISREG(os.lstat(os.path.join(out_dir, name)).st_mode):
                    found.append(name)
            except OSError:
                pass
    return sorted(found)


def kind_of(mode: int) -> str:
    """What a file type is called in an error."""
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def parts_of(rel: str, where: str | None = None) -> list[str]:
    """The components of a relative path that stays beneath its root ('/'-separated, no
    '..', no '.', no empty component, no control character); bad input otherwise."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or any(ord(c) < 32 or ord(c) == 127 for c in rel):
        raise RocpkgInputError((where or str(rel), f"{rel!r} is not a relative path that stays inside its directory"))
    return parts


def refusal(root: str, rel: str, exc: OSError, parent_fd: int, name: str) -> RocpkgInputError:
    """What an open under root that failed is: a symlink met, or another error."""
    path = os.path.join(root, rel)
    try:
        mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode) or exc.errno == errno.ELOOP:
        return RocpkgInputError((path, "is a symlink: rocpkg never reads or writes its own files through one"))
    if exc.errno == errno.ENOTDIR:
        return RocpkgInputError((path, f"is {kind_of(mode)} where a directory belongs"))
    return RocpkgInputError((path, f"cannot be opened: {exc.strerror}"))


def open_dir(root: str, rel_dir: str = "", *, create: bool = False) -> int:
    """A descriptor of root/rel_dir, each component below root opened without following a
    symlink; create: missing components are made. FileNotFoundError when one is missing."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:
        raise RocpkgInputError((root, "is not a directory")) from None
    done: list[str] = []
    try:
        for part in parts_of(rel_dir, os.path.join(root, rel_dir)) if rel_dir else []:
            done.append(part)
            try:
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise refusal(root, "/".join(done), exc, fd, part) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(root: str, rel: str, limit: int | None = None):
    """root/rel opened for reading (a binary file object): no component a symlink, a
    regular file, at most limit bytes. FileNotFoundError when it is missing."""
    parts = parts_of(rel, os.path.join(root, rel))
    parent = open_dir(root, "/".join(parts[:-1]))
    try:
        try:
            fd = os.open(parts[-1], FILE_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise refusal(root, rel, exc, parent, parts[-1]) from None
    finally:
        os.close(parent)
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"is {kind_of(info.st_mode)}, not a regular file"
    elif limit is not None and info.st_size > limit:
        problem = f"is {info.st_size} bytes, more than the {limit} rocpkg reads of such a file"
    if problem:
        os.close(fd)
        raise RocpkgInputError((os.path.join(root, rel), problem))
    return os.fdopen(fd, "rb")


def read_file(root: str, rel: str, limit: int = RECORD_LIMIT) -> bytes | None:
    """The bytes of root/rel (open_file's rules), None when it does not exist."""
    try:
        with open_file(root, rel, limit) as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        return None
    if len(data) > limit:
        raise RocpkgInputError((os.path.join(root, rel), f"grew past {limit} bytes while read"))
    return data


def parse_json(data: bytes, where: str, what: str = "JSON"):
    """A JSON document, strictly (rocpkg.strict_json: no repeated key, no integer too long,
    no number out of range), UTF-8; bad input naming `where` and the JSON path otherwise."""
    try:
        return strict_json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError and strict_json's refusals are ValueErrors
        raise RocpkgInputError((where, f"not a readable {what}: {exc}")) from None


def read_json(root: str, rel: str, what: str = "JSON", limit: int = RECORD_LIMIT):
    """root/rel parsed by parse_json (read by read_file's rules); None when it is missing."""
    data = read_file(root, rel, limit)
    return None if data is None else parse_json(data, os.path.join(root, rel), what)


def wrong_type(path: str, want_dir: bool, role: str) -> tuple[str, str] | None:
    """(path, why) when path exists and is not a real directory (want_dir) or regular file;
    role says what rocpkg does there. lstat() only: a symlink is never followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(mode) if want_dir else stat.S_ISREG(mode):
        return None
    return (path, f"is {kind_of(mode)} where {role} {'a directory' if want_dir else 'a regular file'} "
                  f"(never followed)")


def check_tree(out_dir: str, roots: tuple[str, ...] = OWN_DIRS, files: tuple[str, ...] = OWN_FILES,
               discarded: tuple[str, ...] = ()) -> None:
    """Refuse (every problem, one line each) a symlink or special file where rocpkg keeps
    its own: at OUT's top (roots must be directories, files regular files) and anywhere
    inside the roots but the discarded paths (removed unread, never followed). Only
    lstat(): nothing is opened or read."""
    problems = []
    skipped = {os.path.join(out_dir, rel) for rel in discarded}

    def look(rel: str, want_dir: bool) -> bool:
        problem = wrong_type(os.path.join(out_dir, rel), want_dir, "rocpkg keeps")
        if problem:
            problems.append(problem)
        return problem is None and os.path.lexists(os.path.join(out_dir, rel))

    for name in files:
        look(name, False)
    for name in roots:
        if not look(name, True):
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.join(out_dir, name)):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skipped]
            filenames = [f for f in filenames if os.path.join(dirpath, f) not in skipped]
            for entry in dirnames + filenames:
                mode = os.lstat(os.path.join(dirpath, entry)).st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    problems.append((os.path.join(dirpath, entry), f"is {kind_of(mode)} inside a tree rocpkg "
                                                                   f"writes (never followed or read)"))
    if problems:
        raise RocpkgInputError(*problems)
