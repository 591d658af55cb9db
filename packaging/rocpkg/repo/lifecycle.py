"""A repository's later life: prune old releases, promote a tested release into another
channel. Each changes OUT (DST) as one journaled change (rocpkg.store.journal): it completes, or
OUT is left byte for byte as it was — packages, manifest, indexes, signatures, snippets
and rocpkg's records — whether the change fails (a full disk, a missing key: undone on
the way out) or is killed (undone by the next rocpkg command on that tree).

prune: per release series (MAJOR.MINOR), keep the N newest releases and every release on
the keep list; the others' package files leave the pool, the manifest forgets them and
the indexes are rewritten, all under the OUT lock. The files leave the pool first
(Change.set_aside: their bytes kept in the journal until the change is complete), so that
the indexers, which index what the pool holds, do not list them.

promote: the release's package files are copied byte for byte (no rebuild) from SRC into
DST at the same paths, after checking them against SRC's manifest; DST's manifest
records the release and DST is re-indexed and re-signed with DST's key. A file DST
already holds with other bytes under the same name is refused before anything is copied.
A DST that promote created is removed again when the promote fails.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Iterable

from rocpkg.store import releases

from rocpkg.repo import retention
from rocpkg.store.dates import published_source_date_epoch
from rocpkg.repo.index import publish_repositories
from rocpkg.repo.publish_record import refuse_overlap
from rocpkg.errors import RocpkgInputError
from rocpkg.store.journal import Change
from rocpkg.store.state import forget as forget_states, record_copies
from rocpkg.formats.streams import AtomicOutput, HashingWriter, copy_stream
from rocpkg.store.files import open_file
from rocpkg.store.indexes import formats_present
from rocpkg.formats.registry import NAMES


@dataclass
class LifecycleResult:
    """What prune or promote did: releases kept/removed or promoted, files moved."""

    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)      # package files deleted or copied
    snippets: dict[str, str] = field(default_factory=dict)


def releases_to_prune(records: Iterable[releases.ReleaseRecord], keep: int,
                      keep_list: Iterable[str] = ()) -> list[releases.ReleaseRecord]:
    """The releases prune removes: in each series all but the `keep` newest, never one
    whose id is on keep_list. Pure."""
    if keep < 0:
        raise RocpkgInputError(("--keep", f"expected a number of releases >= 0, got {keep}"))
    pinned = set(keep_list)
    by_series: dict[str, list[releases.ReleaseRecord]] = {}
    for record in records:
        by_series.setdefault(record.series, []).append(record)
    doomed = []
    for members in by_series.values():
        members.sort(key=releases.release_order, reverse=True)
        doomed += [r for r in members[keep:] if r.id not in pinned]
    return sorted(doomed, key=releases.release_order)


def _require_signer_if_signed(out_dir: str, signer) -> None:
    """Re-indexing a signed repository without its key would publish it unsigned."""
    if signer is not None:
        return
    signed = [os.path.join(out_dir, s.signature) for form in formats_present(out_dir)
              for s in form.repo.signatures(out_dir) if os.path.exists(os.path.join(out_dir, s.signature))]
    if signed:
        raise RocpkgInputError(("--sign-key", f"{out_dir}'s indexes are signed ({signed[0]}): give the key "
                                             f"(--sign-key, --gpg-home) to re-sign them"))


def _reindex(out_dir: str, suite: str, signer, base_url: str | None) -> dict[str, str]:
    snippets, _ = publish_repositories(out_dir, suite=suite, signer=signer, base_url=base_url,
                                       source_date_epoch=published_source_date_epoch(out_dir))
    return snippets


def prune(out_dir: str | os.PathLike, *, keep: int | None = None, keep_list: Iterable[str] = (),
          suite: str = "stable", signer=None, base_url: str | None = None, dry_run: bool = False,
          policy=None) -> LifecycleResult:
    """Remove all but the `keep` newest releases of each series (and those on keep_list)
    from OUT and re-index it, as one step; or, given a rocpkg.repo.retention.Policy instead of
    keep, the releases it removes. dry_run: only say what would go."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    if not os.path.isdir(out_dir):
        raise RocpkgInputError((out_dir, "no such directory"))
    doc = releases.read_manifest(out_dir)
    if doc is None:
        raise RocpkgInputError((os.path.join(out_dir, releases.MANIFEST), "missing: OUT has no releases to prune"))
    keep_list = list(keep_list)
    known = {r.id for r in releases.manifest_releases(doc)}
    unknown = [k for k in keep_list if k not in known]
    if unknown:
        raise RocpkgInputError(("--keep-release", f"no release {', '.join(unknown)} in {out_dir} "
                                                 f"(releases: {', '.join(sorted(known)) or 'none'})"))
    if policy is not None:      # by channel and age (rocpkg.repo.retention)
        doomed = retention.releases_to_remove(releases.manifest_releases(doc), policy, keep_list)
    elif keep is None:
        raise RocpkgInputError(("--keep", "give the number of releases kept per series, or a policy"))
    else:
        doomed = releases_to_prune(releases.manifest_releases(doc), keep, keep_list)
    new_doc, dropped = releases.forget_releases(doc, [r.id for r in doomed])
    result = LifecycleResult(kept=[r.id for r in releases.manifest_releases(new_doc)],
                             removed=[r.id for r in doomed], files=dropped)
    if dry_run or not doomed:
        return result
    _require_signer_if_signed(out_dir, signer)
    with Change(out_dir, "prune") as change:
        paths = [os.path.join(out_dir, rel) for rel in dropped]
        change.set_aside(*(path for path in paths if os.path.lexists(path)))     # one sync for them all
        releases.write_manifest(out_dir, new_doc)
        result.snippets = _reindex(out_dir, suite, signer, base_url)
        forget_states(out_dir, set(dropped))
    return result


def promote(src: str | os.PathLike, dst: str | os.PathLike, release_id: str, *, suite: str = "stable",
            signer=None, base_url: str | None = None) -> LifecycleResult:
    """Copy release `release_id`'s package files from SRC into DST unchanged, record the
    release in DST's manifest, and re-index (and with a signer, re-sign) DST."""
    src = os.path.abspath(os.fspath(src))
    dst = os.path.abspath(os.fspath(dst))
    refuse_overlap(src, dst, "promote", "SRC")
    doc = releases.read_manifest(src)
    if doc is None:
        raise RocpkgInputError((os.path.join(src, releases.MANIFEST), "missing: SRC has no releases"))
    record = releases.find_release(doc, release_id)
    entries = releases.release_packages(doc, release_id)
    problems, todo = [], []
    for entry in entries:
        rel = os.path.normpath(entry["file"])
        if os.path.isabs(rel) or rel.startswith("..") or rel.split(os.sep)[0] not in NAMES:
            problems.append((os.path.join(src, releases.MANIFEST), f"package file {entry['file']!r} is not "
                                                                    f"under {' or '.join(n + '/' for n in NAMES)}"))
            continue
        source, target = os.path.join(src, entry["file"]), os.path.join(dst, entry["file"])
        try:
            whole = _hash_own(src, entry["file"])
        except RocpkgInputError as exc:     # a symlink in the path, a FIFO: never followed or read
            problems += exc.problems
            continue
        except OSError as exc:
            problems.append((source, f"cannot read it: {exc.strerror}"))
            continue
        if (whole.count, whole.hexdigest()) != (entry["size"], entry["sha256"]):
            problems.append((source, f"sha256 {whole.hexdigest()} differs from the manifest's {entry['sha256']}: "
                                     f"refusing to promote bytes that are not the tested ones"))
            continue
        if os.path.lexists(target):
            try:
                there = _hash_own(dst, entry["file"]).hexdigest()
            except RocpkgInputError as exc:
                problems += exc.problems
                continue
            if there != entry["sha256"]:
                problems.append((target, f"DST already has {entry['file']} with other bytes; a published "
                                         f"package never changes under its name"))
            continue
        todo.append(entry)
    if problems:    # a symlinked directory is met by each file under it: named once
        raise RocpkgInputError(*dict.fromkeys(problems))
    made_dst = not os.path.lexists(dst)
    os.makedirs(dst, exist_ok=True)
    try:
        _require_signer_if_signed(dst, signer)
        with Change(dst, "promote"):
            for entry in todo:
                _copy_checked(src, dst, entry)
            record_copies(dst, src, todo)       # DST's repo then reads none of them again
            releases.write_release(dst, record, entries)
            snippets = _reindex(dst, suite, signer, base_url)
    except BaseException:
        if made_dst:
            shutil.rmtree(dst, ignore_errors=True)
        raise
    return LifecycleResult(kept=[r.id for r in releases.manifest_releases(releases.read_manifest(dst))],
                           files=[e["file"] for e in todo], snippets=snippets)


def _hash_own(root: str, rel: str) -> HashingWriter:
    """The digest of root/rel read as a file rocpkg owns (rocpkg.store.files.open_file): no
    component a symlink, a regular file; RocpkgInputError naming it otherwise."""
    digest = HashingWriter(None)
    with open_file(root, rel) as fh:
        copy_stream(fh, digest)
    return digest


def _copy_checked(src: str, dst: str, entry: dict) -> None:
    """Copy one package file of SRC into DST, read as _hash_own reads it, and refuse the
    copy (the change is undone) unless its bytes are still the manifest's."""
    with open_file(src, entry["file"]) as fin, AtomicOutput(os.path.join(dst, entry["file"])) as fout:
        copied = HashingWriter(fout)
        copy_stream(fin, copied)
        if (copied.count, copied.hexdigest()) != (entry["size"], entry["sha256"]):
            raise RocpkgInputError((os.path.join(src, entry["file"]), "changed while it was promoted: its bytes "
                                                                      "are no longer the manifest's"))
