"""`rocpkg publish OUT DEST`: copy OUT's repositories to where clients read them, a
directory (rsync-style) or S3-compatible object storage (boto3), in the order that
keeps every reader consistent while the copy runs:

  1. content-addressed files: packages, APT by-hash indexes, DNF `<sha256>-*.xml.gz`,
     the public keys — nothing names them yet;
  2. the other index files (Packages, Packages.gz/.xz: apt fetches them by hash);
  3. the roots that name everything else, last: Release, Release.gpg, InRelease,
     repomd.xml.asc, repomd.xml; then the client snippets and manifest.json;
  4. only then, removals of what OUT no longer has (pruned packages), so no index a
     client can still fetch names a file that is gone... unless it is older than this
     publish (keep_removed leaves them for a later run).

Only changed files are sent: a file whose size and SHA-256 (S3: size and ETag = MD5, or
the sha256 stored in the object's metadata for multipart uploads) match is skipped.
OUT is checked first (rocpkg.integrity): a tampered or stale OUT is not published.
"""
from __future__ import annotations

import contextlib
import mimetypes
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from rocpkg.errors import RocpkgInputError
from rocpkg.streams import AtomicOutput, copy_stream, hash_file

PUBLISHED_ROOTS = ("deb", "rpm")
PUBLISHED_FILES = ("rocm.gpg", "rocm.asc", "rocm.list", "rocm.repo", "manifest.json")
ROOT_INDEXES = ("Release", "Release.gpg", "InRelease", "repomd.xml.asc", "repomd.xml")
LAST = ("rocm.list", "rocm.repo", "manifest.json")
_TEMPORARY = re.compile(r"\.tmp-\d+$")
_CONTENT_ADDRESSED = re.compile(r"(^deb/pool/|/by-hash/|^rpm/repodata/[0-9a-f]{64}-[^/]+$|\.rpm$|^rocm\.(gpg|asc)$)")
MULTIPART_THRESHOLD = 64 << 20
WORKERS = 8


@dataclass(frozen=True)
class LocalFile:
    rel: str            # relative to OUT, "/"-separated: the key below DEST
    size: int
    sha256: str
    md5: str
    stage: int


@dataclass
class PublishResult:
    dest: str
    sent: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    bytes_sent: int = 0


def stage_of(rel: str) -> int:
    """Upload order (module doc): 0 content-addressed, 1 other indexes, 2 root indexes,
    3 snippets and manifest."""
    name = rel.rsplit("/", 1)[-1]
    if rel in LAST:
        return 3
    if name in ROOT_INDEXES:
        return 2
    if _CONTENT_ADDRESSED.search(rel):
        return 0
    return 1


def _order(f: LocalFile) -> tuple:
    """Within the roots: the detached signatures before what they sign, InRelease (what
    apt reads first) and repomd.xml (what dnf reads first) at the very end."""
    name = f.rel.rsplit("/", 1)[-1]
    return (f.stage, ROOT_INDEXES.index(name) if f.stage == 2 else 0, f.rel)


def local_files(out_dir: str) -> list[LocalFile]:
    """What OUT publishes, in upload order: deb/, rpm/ and the keys, snippets and manifest
    (not control/, .rocpkg/ or unfinished temporaries)."""
    found = []
    candidates = [n for n in PUBLISHED_FILES if os.path.isfile(os.path.join(out_dir, n))]
    for root in PUBLISHED_ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(out_dir, root)):
            dirnames.sort()
            for name in filenames:
                if not _TEMPORARY.search(name) and not os.path.islink(os.path.join(dirpath, name)):
                    candidates.append(os.path.relpath(os.path.join(dirpath, name), out_dir).replace(os.sep, "/"))

    def describe(rel: str) -> LocalFile:
        digest = hash_file(os.path.join(out_dir, rel), ("sha256", "md5"))
        return LocalFile(rel, digest.count, digest.hexdigest(), digest.hexdigest("md5"), stage_of(rel))

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        found = list(pool.map(describe, sorted(candidates)))
    return sorted(found, key=_order)


# -- destinations -------------------------------------------------------------------------

class DirectoryDest:
    """A local directory (a web server's document root, a mounted share)."""

    def __init__(self, path: str):
        self.root = os.path.abspath(path)
        self.label = self.root

    def listing(self) -> dict[str, int]:
        found = {}
        for dirpath, _dirs, filenames in os.walk(self.root):
            for name in filenames:
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, self.root).replace(os.sep, "/")] = os.stat(path).st_size
        return found

    def same(self, f: LocalFile, size: int) -> bool:
        return size == f.size and hash_file(os.path.join(self.root, f.rel)).hexdigest() == f.sha256

    def put(self, out_dir: str, f: LocalFile) -> None:
        with open(os.path.join(out_dir, f.rel), "rb") as fin, AtomicOutput(os.path.join(self.root, f.rel)) as fout:
            copy_stream(fin, fout)

    def remove(self, rel: str) -> None:
        path = os.path.join(self.root, rel)
        os.unlink(path)
        parent = os.path.dirname(path)
        while parent != self.root and not os.listdir(parent):
            os.rmdir(parent)
            parent = os.path.dirname(parent)


class S3Dest:
    """s3://bucket/prefix on AWS or any S3-compatible server (endpoint_url)."""

    def __init__(self, url: str, endpoint_url: str | None = None, client=None):
        match = re.fullmatch(r"s3://([^/]+)/?(.*)", url)
        if not match:
            raise RocpkgInputError(("DEST", f"expected s3://BUCKET[/PREFIX], got {url!r}"))
        self.bucket, prefix = match.group(1), match.group(2).strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.label = url
        if client is None:
            import boto3

            client = boto3.client("s3", endpoint_url=endpoint_url)
        self.client = client
        self.etags: dict[str, str] = {}

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
        with self._errors(f.rel, "upload"):
            self.client.upload_file(os.path.join(out_dir, f.rel), self.bucket, self.prefix + f.rel, ExtraArgs=extra,
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


def destination(dest: str, endpoint_url: str | None = None):
    if dest.startswith("s3://"):
        return S3Dest(dest, endpoint_url)
    if "://" in dest:
        raise RocpkgInputError(("DEST", f"expected a directory or s3://BUCKET/PREFIX, got {dest!r}"))
    return DirectoryDest(dest)


# -- publish ------------------------------------------------------------------------------

def publish(out_dir: str | os.PathLike, dest, *, keep_removed: bool = False, check: bool = True,
            progress: Callable[[str, LocalFile | str], None] | None = None) -> PublishResult:
    """Copy OUT's repositories to dest (a DirectoryDest/S3Dest, or a path or s3:// URL),
    in the module doc's order, sending only what changed, removing what OUT no longer
    has after the new indexes are live. check: refuse an OUT that fails the integrity
    check (signatures against OUT/rocm.gpg when OUT has one)."""
    from rocpkg.outdir import OutLock

    out_dir = os.path.abspath(os.fspath(out_dir))
    if not os.path.isdir(out_dir):
        raise RocpkgInputError((out_dir, "no such directory"))
    if not any(os.path.isdir(os.path.join(out_dir, r)) for r in PUBLISHED_ROOTS):
        raise RocpkgInputError((out_dir, "no deb/ or rpm/ repository to publish (run rocpkg repo OUT)"))
    if isinstance(dest, (str, os.PathLike)):
        dest = destination(os.fspath(dest))
    with OutLock(out_dir):          # nobody re-indexes OUT while it is being copied
        if check:
            from rocpkg.integrity import check_integrity

            keyring = os.path.join(out_dir, "rocm.gpg")
            problems = check_integrity(out_dir, keyring=keyring if os.path.isfile(keyring) else None)
            if problems:
                raise RocpkgInputError(*[(os.path.join(out_dir, p.path), f"{p.check}: {p.message}")
                                        for p in problems])
        files = local_files(out_dir)
        remote = dest.listing()
        result = PublishResult(dest.label)
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
        if not keep_removed:
            wanted = {f.rel for f in files}
            for rel in sorted(set(remote) - wanted):
                dest.remove(rel)
                result.removed.append(rel)
                if progress:
                    progress("removed", rel)
    return result
