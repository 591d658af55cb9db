"""`rocpkg publish OUT DEST`: copy OUT's repositories to where clients read them, a
directory (rsync-style) or S3-compatible object storage (boto3), in the order that
keeps every reader consistent while the copy runs:

  1. content-addressed files: packages, APT by-hash indexes, DNF `<sha256>-*.xml.gz`,
     the public keys — nothing names them yet — and the setup packages' stable-name
     copies (OUT/<top>-repo[-<channel>].deb, .rpm: no index names them);
  2. the other index files (Packages, Packages.gz/.xz: apt fetches them by hash);
  3. the roots that name everything else, last, format by format, each in its
     Repository's order (Release, Release.gpg, InRelease; repomd.xml.asc, repomd.xml;
     a pacman database's signatures and files, <suite>.db last); then the client
     snippets and manifest.json;
  4. the publish record (rocpkg.repo.publish_record), then removals of what an earlier
     publish put there and OUT no longer has (pruned packages), so no index a client can
     still fetch names a file that is gone... unless it is older than this publish
     (keep_removed leaves them for a later run). Nothing else in DEST is ever removed.

Only changed files are sent: a file whose size and SHA-256 (S3: size and ETag = MD5, or
the sha256 stored in the object's metadata for multipart uploads) match is skipped.
OUT is checked first (rocpkg.verify.integrity): a tampered or stale OUT is not published.
"""
from __future__ import annotations

import contextlib
import mimetypes
import os
import posixpath
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import url_problem
from rocpkg.formats.registry import NAMES, REGISTERED
from rocpkg.formats.sign import ARMORED_KEY_NAME, KEYRING_NAME
from rocpkg.store.files import SETUP_COPY_RE, open_dir, open_file, parts_of, read_file, wrong_type
from rocpkg.store.outdir import TMP_RE
from rocpkg.repo.publish_record import RECORD, RECORD_LIMIT, parse_record, record_bytes, record_origin, \
    refuse_overlap
from rocpkg.formats.streams import HashingWriter, copy_stream

PUBLISHED_ROOTS = NAMES
LAST = (*(f.snippet for f in REGISTERED.values() if f.snippet), "manifest.json")
PUBLISHED_FILES = (KEYRING_NAME, ARMORED_KEY_NAME, *LAST)
MULTIPART_THRESHOLD = 64 << 20
WORKERS = 8


@dataclass(frozen=True)
class LocalFile:
    rel: str            # relative to OUT, "/"-separated: the key below DEST
    size: int
    sha256: str
    md5: str
    stage: int
    rank: int = 0       # its place among its format's roots (Repository.publish_stage)


@dataclass
class PublishResult:
    dest: str
    sent: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    adopted: str | None = None      # the other OUT the destination's record named, when adopted


def stage_of(rel: str) -> tuple[int, int]:
    """Upload order (module doc): 0 content-addressed, 1 other indexes, 2 root indexes,
    3 snippets and manifest; and a root's rank among its format's roots."""
    if rel in LAST:
        return 3, 0
    if rel in (KEYRING_NAME, ARMORED_KEY_NAME) or SETUP_COPY_RE.fullmatch(rel):
        return 0, 0
    return REGISTERED[rel.split("/", 1)[0]].repo.publish_stage(rel)


def _order(f: LocalFile) -> tuple:
    """Stage by stage; the roots format by format, each in its Repository's order (the
    detached signatures before what they sign, what a client reads first at the very end)."""
    return (f.stage, f.rel.split("/", 1)[0] if f.stage == 2 else "", f.rank, f.rel)


def local_files(out_dir: str) -> list[LocalFile]:
    """What OUT publishes, in upload order: deb/, rpm/ and the keys, snippets and manifest
    (not control/, .rocpkg/ or unfinished temporaries). Read as OUT's own files are
    (rocpkg.store.files): never through a symlink, regular files only."""
    candidates = [n for n in PUBLISHED_FILES if os.path.isfile(os.path.join(out_dir, n))]
    candidates += sorted(n for n in os.listdir(out_dir) if SETUP_COPY_RE.fullmatch(n)
                         and os.path.isfile(os.path.join(out_dir, n)))
    for root in PUBLISHED_ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(out_dir, root)):
            dirnames.sort()
            for name in filenames:
                if not TMP_RE.search(name):
                    candidates.append(os.path.relpath(os.path.join(dirpath, name), out_dir).replace(os.sep, "/"))

    def describe(rel: str) -> LocalFile:
        digest = HashingWriter(None, ("sha256", "md5"))
        with open_file(out_dir, rel) as fh:
            copy_stream(fh, digest)
        return LocalFile(rel, digest.count, digest.hexdigest(), digest.hexdigest("md5"), *stage_of(rel))

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        found = list(pool.map(describe, sorted(candidates)))
    return sorted(found, key=_order)


# -- destinations -------------------------------------------------------------------------

class DirectoryDest:
    """A local directory (a web server's document root, a mounted share). Every path below
    it is reached without following a symlink (rocpkg.store.files)."""

    def __init__(self, path: str):
        self.root = os.path.abspath(path)
        self.label = self.root
        self.record_label = os.path.join(self.root, RECORD)

    def check(self, out_dir: str) -> None:
        refuse_overlap(out_dir, self.root)
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise RocpkgInputError((self.root, "is not a directory"))

    def read_record(self) -> bytes | None:
        return read_file(self.root, RECORD, RECORD_LIMIT) if os.path.isdir(self.root) else None

    def write_record(self, data: bytes) -> None:
        self._write(RECORD, lambda out: out.write(data))

    def listing(self) -> dict[str, int]:
        """Size of every regular file below the root (symlinks neither followed nor listed)."""
        found = {}
        for dirpath, _dirs, filenames in os.walk(self.root):
            for name in filenames:
                path = os.path.join(dirpath, name)
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    found[os.path.relpath(path, self.root).replace(os.sep, "/")] = info.st_size
        return found

    def preflight(self, files: list[LocalFile]) -> None:
        """Refuse, before a byte is sent, a symlink or a non-directory where a published
        path needs a directory, and anything but a regular file where it puts a file."""
        problems, seen = [], {}
        for f in files:
            parts = f.rel.split("/")
            for depth in range(1, len(parts) + 1):
                rel = "/".join(parts[:depth])
                if rel not in seen:
                    seen[rel] = self._problem(rel, depth == len(parts))
                    if seen[rel]:
                        problems.append(seen[rel])
        if problems:
            raise RocpkgInputError(*problems)

    def _problem(self, rel: str, is_file: bool):
        return wrong_type(os.path.join(self.root, rel), not is_file, "publish puts")

    def same(self, f: LocalFile, size: int) -> bool:
        if size != f.size:
            return False
        with open_file(self.root, f.rel) as fh:
            digest = HashingWriter(None)
            copy_stream(fh, digest)
        return digest.hexdigest() == f.sha256

    def put(self, out_dir: str, f: LocalFile) -> None:
        with open_file(out_dir, f.rel) as fin:
            self._write(f.rel, lambda out: copy_stream(fin, out))

    def _write(self, rel: str, fill) -> None:
        """rel written as `<name>.tmp-<pid>` beside it, then renamed into place, through a
        descriptor of its directory (made when missing, never through a symlink)."""
        os.makedirs(self.root, exist_ok=True)
        parent, name = posixpath.split(rel)
        dir_fd = open_dir(self.root, parent, create=True)
        tmp = f"{name}.tmp-{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as out:
                    fill(out)
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
        except OSError as exc:
            raise RocpkgInputError((os.path.join(self.root, rel), f"cannot write it: {exc.strerror}")) from None
        finally:
            os.close(dir_fd)

    def remove(self, rel: str) -> None:
        """Unlink root/rel through its directory's descriptor, then its directories that
        are left empty (up to the root, which stays)."""
        parts = rel.split("/")
        for depth in range(len(parts), 0, -1):
            try:
                dir_fd = open_dir(self.root, "/".join(parts[:depth - 1]))
            except (OSError, RocpkgInputError):
                return
            try:
                if depth == len(parts):
                    os.unlink(parts[-1], dir_fd=dir_fd)
                else:
                    os.rmdir(parts[depth - 1], dir_fd=dir_fd)
            except OSError:
                return      # gone already, or a directory that still holds something
            finally:
                os.close(dir_fd)


class S3Dest:
    """s3://bucket/prefix on AWS or any S3-compatible server (endpoint_url). The bucket's
    root (no prefix) only when allow_bucket_root says so."""

    def __init__(self, url: str, endpoint_url: str | None = None, client=None, allow_bucket_root: bool = False):
        match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?", url)
        if not match or url_problem(url, ("s3",)):
            raise RocpkgInputError(("DEST", f"expected s3://BUCKET/PREFIX, got {url!r}"))
        self.bucket, prefix = match.group(1), (match.group(2) or "").strip("/")
        if prefix:
            parts_of(prefix, "DEST")
        elif not allow_bucket_root:
            raise RocpkgInputError(("DEST", f"{url} names a whole bucket: give a prefix (s3://{self.bucket}/PREFIX), "
                                            f"or --allow-bucket-root when the bucket holds nothing but this repository"))
        self.prefix = f"{prefix}/" if prefix else ""
        self.label = url
        self.record_label = f"s3://{self.bucket}/{self.prefix}{RECORD}"
        if client is None:
            client = _s3_client(endpoint_url)
        self.client = client
        self.etags: dict[str, str] = {}

    def check(self, out_dir: str) -> None:
        """An S3 destination cannot alias a local OUT."""

    def read_record(self) -> bytes | None:
        from botocore.exceptions import ClientError

        with self._errors(RECORD, "read"):
            try:
                obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + RECORD)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise
            if obj.get("ContentLength", 0) > RECORD_LIMIT:
                raise RocpkgInputError((self.record_label, f"more than {RECORD_LIMIT} bytes: not a publish "
                                                           f"record rocpkg wrote"))
            return obj["Body"].read(RECORD_LIMIT + 1)

    def write_record(self, data: bytes) -> None:
        with self._errors(RECORD, "write"):
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + RECORD, Body=data,
                                   ContentType="application/json", CacheControl="no-cache")

    def listing(self) -> dict[str, int]:
        from botocore.exceptions import BotoCoreError, ClientError

        found = {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.prefix):]
                    found[rel] = obj["Size"]
                    self.etags[rel] = obj.get("ETag", "").strip('"')
        except (BotoCoreError, ClientError) as exc:
            raise RocpkgInputError((self.label, f"cannot list the bucket: {exc}")) from None
        return found

    def preflight(self, files: list[LocalFile]) -> None:
        """Object keys cannot be symlinks: nothing to refuse."""

    def same(self, f: LocalFile, size: int) -> bool:
        if size != f.size:
            return False
        etag = self.etags.get(f.rel, "")
        if etag == f.md5:
            return True
        if "-" not in etag:         # a single-part upload's ETag is its MD5
            return False
        head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + f.rel)
        meta = {k.lower(): v for k, v in head.get("Metadata", {}).items()}
        return meta.get("sha256") == f.sha256

    def put(self, out_dir: str, f: LocalFile) -> None:
        from boto3.s3.transfer import TransferConfig

        extra = {"Metadata": {"sha256": f.sha256},
                 "ContentType": mimetypes.guess_type(f.rel)[0] or "application/octet-stream"}
        if f.stage:         # mutable names: caches must revalidate them
            extra["CacheControl"] = "no-cache"
        with self._errors(f.rel, "upload"), open_file(out_dir, f.rel) as fh:
            self.client.upload_fileobj(fh, self.bucket, self.prefix + f.rel, ExtraArgs=extra,
                                       Config=TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, use_threads=False))

    def remove(self, rel: str) -> None:
        with self._errors(rel, "remove"):
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + rel)

    @contextlib.contextmanager
    def _errors(self, rel: str, what: str):
        """A refused or failed request is one error line naming the object, not a traceback."""
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError, S3UploadFailedError) as exc:
            raise RocpkgInputError((f"{self.label.rstrip('/')}/{rel}", f"cannot {what} it: {exc}")) from None


def _s3_client(endpoint_url: str | None):
    """A boto3 S3 client; a malformed endpoint URL is bad input naming --endpoint-url."""
    import boto3

    if endpoint_url is not None and (problem := url_problem(endpoint_url)):
        raise RocpkgInputError(("--endpoint-url", problem))
    try:
        return boto3.client("s3", endpoint_url=endpoint_url)
    except ValueError as exc:       # botocore's invalid endpoint, a bad port
        raise RocpkgInputError(("--endpoint-url", f"{endpoint_url!r}: {exc}")) from None


def destination(dest: str, endpoint_url: str | None = None, allow_bucket_root: bool = False):
    if dest.startswith("s3://"):
        return S3Dest(dest, endpoint_url, allow_bucket_root=allow_bucket_root)
    if "://" in dest:
        raise RocpkgInputError(("DEST", f"expected a directory or s3://BUCKET/PREFIX, got {dest!r}"))
    return DirectoryDest(dest)


# -- publish ------------------------------------------------------------------------------

def publish(out_dir: str | os.PathLike, dest, *, keep_removed: bool = False, check: bool = True,
            progress: Callable[[str, LocalFile | str], None] | None = None, adopt: bool = False,
            dry_run: bool = False) -> PublishResult:
    """Copy OUT's repositories to dest (a DirectoryDest/S3Dest, or a path or s3:// URL),
    in the module doc's order, sending only what changed, then removing what an earlier
    publish recorded in dest and OUT no longer has (rocpkg.repo.publish_record: nothing else in
    dest is ever removed). check: refuse an OUT that fails the integrity check (signatures
    against OUT/rocm.gpg when OUT has one). A dest whose record names another OUT is
    refused unless adopt. dry_run: every check, then the result says what would be sent
    and removed, and nothing is written. Every refusal comes before a byte is sent."""
    from rocpkg.store.outdir import OutLock

    out_dir = os.path.abspath(os.fspath(out_dir))
    if not os.path.isdir(out_dir):
        raise RocpkgInputError((out_dir, "no such directory"))
    if not any(os.path.isdir(os.path.join(out_dir, r)) for r in PUBLISHED_ROOTS):
        raise RocpkgInputError((out_dir, f"no {' or '.join(r + '/' for r in PUBLISHED_ROOTS)} repository to publish "
                                         f"(run rocpkg repo OUT)"))
    if isinstance(dest, (str, os.PathLike)):
        dest = destination(os.fspath(dest))
    dest.check(out_dir)
    record = dest.read_record()
    owned = parse_record(record, dest.record_label)
    origin = record_origin(record, dest.record_label)
    if origin is not None and origin != out_dir and not adopt:
        raise RocpkgInputError((dest.label, f"its publish record ({dest.record_label}) says it was published from "
                                            f"another OUT, {origin}: publishing {out_dir} there would remove what "
                                            f"that OUT put there and this one lacks; give --adopt if this OUT "
                                            f"now serves it"))
    with OutLock(out_dir):          # nobody re-indexes OUT while it is being copied
        if check:
            _refuse_unsound(out_dir)
        files = local_files(out_dir)
        remote = {rel: size for rel, size in dest.listing().items() if rel != RECORD}
        dest.preflight(files)
        result = PublishResult(dest.label, adopted=origin if origin not in (None, out_dir) else None)
        current = {f.rel: (f.size, f.sha256, f.md5) for f in files}
        gone = {rel: entry for rel, entry in owned.items() if rel not in current}
        if dry_run:
            _plan(dest, files, remote, gone if not keep_removed else {}, result)
            return result
        _send(out_dir, dest, files, remote, result, progress)
        # the record lists what may go before anything goes: a publish cut short here
        # removes it next time
        _write_record(dest, record, record_bytes(out_dir, {**gone, **current}))
        if not keep_removed and gone:
            for rel, (size, sha256, md5) in sorted(gone.items()):
                if rel in remote and dest.same(LocalFile(rel, size, sha256, md5, 0), remote[rel]):
                    dest.remove(rel)        # still the bytes rocpkg put there
                    result.removed.append(rel)
                    if progress:
                        progress("removed", rel)
            _write_record(dest, None, record_bytes(out_dir, current))
    return result


def _plan(dest, files: list[LocalFile], remote: dict[str, int], gone: dict, result: PublishResult) -> None:
    """What a publish would send and remove (the same tests as _send and the removals),
    into result; nothing is written."""
    for f in files:
        if f.rel in remote and dest.same(f, remote[f.rel]):
            result.unchanged += 1
        else:
            result.sent.append(f.rel)
            result.bytes_sent += f.size
    for rel, (size, sha256, md5) in sorted(gone.items()):
        if rel in remote and dest.same(LocalFile(rel, size, sha256, md5, 0), remote[rel]):
            result.removed.append(rel)


def _refuse_unsound(out_dir: str) -> None:
    from rocpkg.verify.integrity import check_integrity
    from rocpkg.verify.keys import own_keyring

    problems = check_integrity(out_dir, keyring=own_keyring(out_dir))
    if problems:
        raise RocpkgInputError(*[(os.path.join(out_dir, p.path), f"{p.check}: {p.message}") for p in problems])


def _send(out_dir: str, dest, files: list[LocalFile], remote: dict[str, int], result: PublishResult,
          progress) -> None:
    """Every file dest lacks or holds other bytes of, stage by stage (module doc)."""
    for stage in sorted({f.stage for f in files}):
        todo = [f for f in files if f.stage == stage and not (f.rel in remote and dest.same(f, remote[f.rel]))]
        result.unchanged += sum(1 for f in files if f.stage == stage) - len(todo)
        if stage == 2:      # the roots one at a time, in order
            for f in todo:
                dest.put(out_dir, f)
        else:
            with ThreadPoolExecutor(max_workers=WORKERS) as pool:
                list(pool.map(lambda f: dest.put(out_dir, f), todo))
        for f in todo:
            result.sent.append(f.rel)
            result.bytes_sent += f.size
            if progress:
                progress("sent", f)


def _write_record(dest, before: bytes | None, data: bytes) -> None:
    if data != before:
        dest.write_record(data)
