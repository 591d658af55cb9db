"""Integrity end to end: every package file in OUT against manifest.json and against the
indexes each format's repository publishes it in (APT's Release -> Packages, DNF's
repomd.xml -> primary, a pacman database: rocpkg.formats.plugin.Repository), by size and
SHA-256, and the index signatures against a key.

The checks, each its own name in verify's report:
  tampered          a package's bytes differ from what manifest.json recorded (a setup
                    package's stable-name copy, from the package)
  missing-package   the manifest or an index names a package file that is not there
  index-mismatch    an index disagrees with what it describes: Release with a Packages
                    file, repomd.xml with primary.xml.gz, Packages/primary/a database with a
                    package whose bytes the manifest vouches for (or that the manifest lacks)
  stale-index       a package in OUT that no index lists (built after the last `repo`; a
                    format whose index holds one version per name leaves older ones out)
  unrecorded-package  a package file no manifest records (dropped into the pool, not built),
                    or a `<name>-repo.deb`/`.rpm` at OUT's top that is the stable-name copy of
                    no setup package the manifest records
  unrecorded-file   any other file under a format's tree that OUT does not record: not a
                    package, not an index file its repository names (Release/InRelease/
                    Release.gpg and what Release lists, repomd.xml, its signature, zypper's key
                    and the metadata it lists, a database and the signatures), not a by-hash or
                    DNF metadata file whose name is the digest of its bytes (an older
                    generation of an index)
  name-clash        two releases hold one package file, or one package name in two build
                    variants (one overwrote the other's package: rocpkg.store.releases.clashes)
  bad-signature     with a key: a signature the repository has over its indexes (InRelease,
                    Release.gpg, repomd.xml.asc, a database's and each package's .sig)
                    missing, not made by that key, or (InRelease) signing another text than
                    Release; a format's tree without any index to check

Reading only, and trusting nothing OUT holds but what is checked: every package and index
file is hashed in a stream (never a digest from a cache in OUT: a cache may make builds and
`repo` fast, never a verdict); nothing under OUT is written.
"""
from __future__ import annotations

import gzip
import os
import subprocess
import tempfile
from typing import Iterable

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.indexes import PackageRef
from rocpkg.formats.parallel import file_size, spread
from rocpkg.formats.registry import REGISTERED
from rocpkg.store.indexes import formats_present, index_opener, package_files, published_entries
from rocpkg.store.manifest_schema import read_parts
from rocpkg.store.outdir import STAGING_DIR, TMP_RE
from rocpkg.store.files import SETUP_COPY_RE, check_tree, open_file, own_top_files
from rocpkg.store.releases import SETUP_KIND, clashes, owned_packages, read_manifest
from rocpkg.verify.view import Problem
from rocpkg.formats.streams import HashingWriter, copy_stream

UNRECORDED = ("no manifest records it: rocpkg did not build it into this OUT (remove it, or build "
              "the release it belongs to)")
UNRECORDED_COPY = ("no setup package manifest.json records has this name: it is not the stable-name copy "
                   "of a setup package rocpkg wrote (remove it)")
UNRECORDED_FILE = ("OUT does not record it: not a package, nor an index file rocpkg wrote (remove it: "
                   "publish would copy it)")

# -- the check -----------------------------------------------------------------------------

class _Digests:
    """(size, sha256) of files under OUT, each read at most once and always hashed: a
    verdict never takes a digest from a cache found in the tree it judges. Files are
    opened as OUT's own are (rocpkg.store.files: no symlink, regular files only)."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.known: dict[str, tuple[int, str] | None] = {}

    def of(self, rel: str) -> tuple[int, str] | None:
        if rel not in self.known:
            self.known[rel] = _digest(self.out_dir, rel)
        return self.known[rel]

    def read_ahead(self, rels: Iterable[str], jobs: int | None) -> None:
        """Hash these files now, on `jobs` processes (rocpkg.formats.parallel.spread); a
        file that cannot be read is left for of(), which raises where the serial check would."""
        todo = sorted(set(rels) - set(self.known))
        for rel, found in zip(todo, spread(_digest_or_retry, [(self.out_dir, rel) for rel in todo], jobs,
                                          size=lambda item: file_size(os.path.join(*item)))):
            if found is not _RETRY:
                self.known[rel] = found


_RETRY = "retry"


def _digest(out_dir: str, rel: str) -> tuple[int, str] | None:
    """(size, sha256) of OUT's file rel, None when there is none."""
    try:
        with open_file(out_dir, rel) as fh:
            whole = HashingWriter(None)
            copy_stream(fh, whole)
        return whole.count, whole.hexdigest()
    except FileNotFoundError:
        return None


def _digest_or_retry(out_dir: str, rel: str):
    """_digest, or _RETRY where it raised (the error is raised again in the check's order)."""
    try:
        return _digest(out_dir, rel)
    except (OSError, RocpkgInputError):
        return _RETRY


def recorded_files(out_dir: str) -> set[str] | None:
    """The package files manifest.json and the shard parts in manifest.d record (both:
    a sharded OUT is indexed before its parts are joined); None when OUT has neither, a
    bare pool that no build of rocpkg wrote."""
    doc = read_manifest(out_dir)
    parts = read_parts(out_dir)
    if doc is None and not parts:
        return None
    return {e["file"] for d in [doc or {}] + [p for _, p in parts] for e in d.get("packages", [])}


def unrecorded_packages(out_dir: str | os.PathLike) -> list[tuple[str, str]]:
    """(path, why) of every package file in OUT that no manifest records: dropped in by
    someone, not built here. Indexing or publishing it would vouch for it."""
    out_dir = os.fspath(out_dir)
    check_tree(out_dir, discarded=(STAGING_DIR,))
    recorded = recorded_files(out_dir)
    if recorded is None:
        return []
    return [(os.path.join(out_dir, rel), UNRECORDED) for rel in sorted(package_files(out_dir)) if rel not in recorded]


def check_integrity(out_dir: str | os.PathLike, *, keyring: str | os.PathLike | None = None,
                    formats: Iterable[str] = tuple(REGISTERED), jobs: int | None = None):
    """Problems (verify's Problem) found comparing OUT's packages, manifest and
    indexes; with keyring (a binary or armored public key file), the index signatures too.
    The package files are hashed on `jobs` processes (None: one per usable core)."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    check_tree(out_dir, discarded=(STAGING_DIR,))
    formats = set(formats)
    digests = _Digests(out_dir)
    problems: list[Problem] = []

    def add(check, fmt, package, path, message):
        problems.append(Problem(check, package, path, "-", message, fmt))

    doc = read_manifest(out_dir)
    manifest = {e["file"]: e for e in (doc or {}).get("packages", []) if e["format"] in formats}
    digests.read_ahead([rel for rel, fmt in package_files(out_dir).items() if fmt in formats], jobs)
    for rel, entry in sorted(manifest.items()):
        actual = digests.of(rel)
        if actual is None:
            add("missing-package", entry["format"], entry["name"], rel, "manifest.json lists it but it is not in OUT")
        elif actual != (entry["size"], entry["sha256"]):
            add("tampered", entry["format"], entry["name"], rel,
                f"{actual[0]} bytes, sha256 {actual[1]}, but manifest.json recorded {entry['size']} bytes, "
                f"sha256 {entry['sha256']}")
        if entry.get("kind") == SETUP_KIND:     # its stable-name copy, OUT/<name>.<format>, is the same bytes
            copy = f"{entry['name']}.{entry['format']}"
            if digests.of(copy) not in (None, (entry["size"], entry["sha256"])):
                add("tampered", entry["format"], entry["name"], copy, f"differs from {rel}, the setup package "
                                                                      f"it is the stable-name copy of")

    listed: dict[str, set[str]] = {fmt: set() for fmt in REGISTERED}
    indexed = dict.fromkeys(REGISTERED, False)
    opener = index_opener(out_dir)
    for form in formats_present(out_dir):
        if form.name not in formats:
            continue
        indexed[form.name] = form.repo.indexed(out_dir)
        if indexed[form.name]:
            _check_index_files(out_dir, form.name, form.repo.index_files(out_dir, opener), digests, add)
        if keyring is not None and os.path.isdir(os.path.join(out_dir, form.name, form.package_root)):
            _check_signatures(out_dir, form, keyring, add)

    entries = [e for e in published_entries(out_dir) if e.format in formats]
    for entry in entries:
        listed[entry.format].add(entry.file)
        actual = digests.of(entry.file)
        recorded = manifest.get(entry.file)
        if actual is None:
            add("missing-package", entry.format, entry.name, entry.file, f"{entry.index} lists it but it is not in OUT")
        elif actual != (entry.size, entry.sha256):
            if recorded is not None and (recorded["size"], recorded["sha256"]) == (entry.size, entry.sha256):
                continue        # the package changed, not the index: reported as tampered
            add("index-mismatch", entry.format, entry.name, entry.file,
                f"{entry.index} lists {entry.size} bytes, sha256 {entry.sha256}, but the file has {actual[0]} "
                f"bytes, sha256 {actual[1]}")
    recorded = recorded_files(out_dir)
    pool = package_files(out_dir)
    unlisted: dict[str, list[PackageRef]] = {}
    for rel, fmt in sorted(pool.items()):
        if fmt in formats and recorded is not None and rel not in recorded:
            add("unrecorded-package", fmt, os.path.basename(rel), rel, UNRECORDED)
        elif fmt in formats and indexed[fmt] and rel not in listed[fmt]:
            e = manifest.get(rel, {"name": os.path.basename(rel)})
            unlisted.setdefault(fmt, []).append(PackageRef(fmt, e["name"], e.get("version", ""), e.get("release", ""),
                                                           e.get("arch", ""), rel))
    for fmt, refs in unlisted.items():
        for ref in REGISTERED[fmt].repo.stale(refs, [e for e in entries if e.format == fmt]):
            add("stale-index", fmt, ref.name, ref.file, "no repository index lists it: the indexes are stale "
                                                        "(run `rocpkg repo OUT`)")
    _check_ownership(out_dir, doc, pool if recorded is not None else None, digests, formats, add)
    return problems


def _check_ownership(out_dir: str, doc: dict | None, pool: dict[str, str] | None, digests: _Digests,
                     formats: set[str], add) -> None:
    """name-clash between the releases doc records; with pool (OUT's package files; None
    for a bare pool that no manifest describes), the setup copies and other files at OUT's
    top and under deb/ and rpm/ that OUT does not record. Of `formats` only."""
    for a, a_entry, b, b_entry, why in clashes(owned_packages(doc, [part for _, part in read_parts(out_dir)])):
        if a_entry["format"] in formats:
            add("name-clash", a_entry["format"], a_entry["name"], a_entry["file"],
                f"release {a.id} holds {a_entry['name']} ({a_entry['file']}) and release {b.id} holds "
                f"{b_entry['name']} ({b_entry['file']}): {why}")
    if pool is None:
        return
    for rel, fmt in foreign_setup_copies(out_dir, doc):
        if fmt in formats:
            add("unrecorded-package", fmt, rel, rel, UNRECORDED_COPY)
    for rel, fmt in unrecorded_files(out_dir, pool, digests):
        if fmt in formats:
            add("unrecorded-file", fmt, os.path.basename(rel), rel, UNRECORDED_FILE)


def foreign_setup_copies(out_dir: str, doc: dict | None) -> list[tuple[str, str]]:
    """(name, format) of each `<name>-repo.<format>` at OUT's top that is the stable-name
    copy of no setup package its manifest (doc) records (rocpkg.repo.setup)."""
    copies = {f"{e['name']}.{e['format']}" for e in (doc or {}).get("packages", []) if e.get("kind") == SETUP_KIND}
    return [(name, name.rsplit(".", 1)[1]) for name in own_top_files(out_dir)
            if SETUP_COPY_RE.fullmatch(name) and name not in copies]


def unrecorded_files(out_dir: str, packages: dict[str, str], digests: _Digests) -> list[tuple[str, str]]:
    """(path relative to OUT, format) of every file under a format's tree that is neither a
    package file (packages: rocpkg.store.indexes.package_files, judged against the manifest)
    nor an index file its repository names (module doc, unrecorded-file); temporaries of an
    unfinished write are not published and not listed."""
    opener = index_opener(out_dir)
    found = []
    for form in formats_present(out_dir):
        indexes = {f.path for f in form.repo.index_files(out_dir, opener)}
        for dirpath, dirnames, filenames in os.walk(os.path.join(out_dir, form.name)):
            dirnames.sort()
            for name in sorted(filenames):
                rel = os.path.relpath(os.path.join(dirpath, name), out_dir).replace(os.sep, "/")
                if rel in packages or rel in indexes or TMP_RE.search(name) \
                        or _named_by_digest(rel, form.repo.named_by_digest(rel), digests):
                    continue
                found.append((rel, form.name))
    return found


def _named_by_digest(rel: str, named: tuple[str, str] | None, digests: _Digests) -> bool:
    """Whether rel is a content-addressed index file (named: the (algorithm, digest) its
    name says, from its Repository) whose name is the digest of its bytes."""
    if named is None:
        return False
    algorithm, expected = named
    if algorithm == "sha256":
        actual = digests.of(rel)
        return actual is not None and actual[1] == expected
    digest = HashingWriter(None, (algorithm,))
    with open_file(digests.out_dir, rel) as fh:
        copy_stream(fh, digest)
    return digest.hexdigest(algorithm) == expected


def stale_index_problems(out_dir: str | os.PathLike) -> list:
    """The problems that mean OUT's indexes no longer describe its packages (a build after
    the last `repo`): none when OUT has no index yet."""
    out_dir = os.fspath(out_dir)
    if not any(form.repo.indexed(out_dir) for form in formats_present(out_dir)):
        return []
    return [p for p in check_integrity(out_dir) if p.check in ("stale-index", "index-mismatch")]


def _check_index_files(out_dir: str, fmt: str, files: list, digests: _Digests, add) -> None:
    """Each index file a root lists has the size and sha256 it lists (and the sha256 of
    its gzip'd text, where the root lists that)."""
    for f in files:
        if not f.owner:
            continue
        actual = digests.of(f.path)
        if actual is None:
            if f.required:
                add("index-mismatch", fmt, f.owner, f.path, f"{f.owner} lists it but it is not there")
        elif actual != (f.size, f.sha256):
            add("index-mismatch", fmt, f.owner, f.path, f"{f.owner} lists {f.size} bytes, sha256 {f.sha256}, but the "
                                                        f"file has {actual[0]} bytes, sha256 {actual[1]}")
    for f in files:
        if not f.owner or not f.open_sha256 or not os.path.isfile(os.path.join(out_dir, f.path)):
            continue
        try:
            with open_file(out_dir, f.path) as raw, gzip.open(raw, "rb") as fh:
                opened = HashingWriter(None)
                copy_stream(fh, opened)
        except (OSError, EOFError) as exc:
            add("index-mismatch", fmt, f.owner, f.path, f"unreadable: {exc}")
            continue
        if opened.hexdigest() != f.open_sha256:
            add("index-mismatch", fmt, f.owner, f.path, f"its text has sha256 {opened.hexdigest()}, {f.owner} lists "
                                                        f"open-checksum {f.open_sha256}")


# -- signatures ----------------------------------------------------------------------------

def _gpgv(keyring: str, *files: str) -> tuple[bool, bytes, str]:
    """(good signature, signed text for a clearsigned file, gpgv's last line)."""
    with tempfile.TemporaryDirectory(prefix="rocpkg-gpgv-") as home:
        ring = os.path.abspath(os.fspath(keyring))
        with open(ring, "rb") as fh:
            armored = fh.read(64).lstrip().startswith(b"-----BEGIN")
        if armored:      # gpgv reads binary keyrings only
            binary = os.path.join(home, "key.gpg")
            subprocess.run(["gpg", "--batch", "--homedir", home, "--yes", "--output", binary, "--dearmor", ring],
                           capture_output=True, check=False)
            ring = binary
        out = os.path.join(home, "signed")
        cmd = ["gpgv", "--homedir", home, "--keyring", ring]
        if len(files) == 1:
            cmd += ["--output", out]
        try:
            proc = subprocess.run(cmd + list(files), capture_output=True)
        except FileNotFoundError as exc:
            return False, b"", f"cannot run gpgv: {exc}"
        signed = b""
        if len(files) == 1 and os.path.exists(out):
            with open(out, "rb") as fh:
                signed = fh.read()
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return proc.returncode == 0, signed, lines[-1] if lines else f"exit {proc.returncode}"


def _check_signatures(out_dir: str, form, keyring, add) -> None:
    """Every signature the format's repository has over its indexes, by the given key."""
    found = form.repo.signatures(out_dir)
    if not found:
        add("bad-signature", form.name, "index", form.name, "no index to check a signature of: the repository "
                                                             "is not indexed (run `rocpkg repo OUT`)")
    for sig in found:
        if sig.clearsigned:
            _check_clearsigned(os.path.join(out_dir, sig.signature), os.path.join(out_dir, sig.signed), form.name,
                               out_dir, keyring, add)
        else:
            _check_signature(os.path.join(out_dir, sig.signature), os.path.join(out_dir, sig.signed), form.name,
                             out_dir, keyring, add)


def _check_signature(signature: str, signed: str, fmt: str, out_dir: str, keyring, add) -> None:
    rel = os.path.relpath(signature, out_dir)
    if not os.path.isfile(signature):
        add("bad-signature", fmt, os.path.basename(signed), rel, "missing: the index is not signed")
        return
    good, _, why = _gpgv(keyring, signature, signed)
    if not good:
        add("bad-signature", fmt, os.path.basename(signed), rel, f"not a good signature by the given key: {why}")


def _check_clearsigned(signature: str, signed: str, fmt: str, out_dir: str, keyring, add) -> None:
    """A clearsigned index (InRelease): by the key, and signing the very text of its plain twin."""
    name, rel = os.path.basename(signature), os.path.relpath(signature, out_dir)
    if not os.path.isfile(signature):
        add("bad-signature", fmt, name, rel, "missing: the index is not signed")
        return
    good, text, why = _gpgv(keyring, signature)
    if not good:
        add("bad-signature", fmt, name, rel, f"not a good signature by the given key: {why}")
        return
    with open(signed, "rb") as fh:
        plain = fh.read()
    if text.rstrip(b"\n") != plain.rstrip(b"\n"):
        add("bad-signature", fmt, name, rel, f"signs another text than the {os.path.basename(signed)} file beside it")
