"""A repository's later life: prune old releases, promote a tested release into another
channel. Each changes OUT (DST) as one journaled change (rocpkg.store.journal): it completes, or
OUT is left byte for byte as it was — packages, manifest, indexes, signatures, snippets
and rocpkg's records — whether the change fails (a full disk, a missing key: undone on
the way out) or is killed (undone by the next rocpkg command on that tree).

prune: per release series (MAJOR.MINOR), keep the N newest releases and every release on
the keep list; the others' package files leave the pool, the manifest forgets them and
the indexes are rewritten, all under the OUT lock. The files leave the pool first
(Change.set_aside: their bytes kept in the journal until the change is complete), so that
the indexers, which index what the pool holds, do not list them. rm (remove_release)
removes one release by its id the same way.

promote: the release's package files are copied byte for byte (no rebuild) from SRC into
DST at the same paths, after checking them against SRC's manifest; DST's manifest
records the release and DST is re-indexed and re-signed with DST's key. A file DST
already holds with other bytes under the same name is refused before anything is copied.
A DST that promote created is removed again when the promote fails. A DST whose indexes
are signed, or a new (or unindexed) DST promoted from a signed SRC, is never indexed
without a key: it would be a channel clients trust unchecked (trusted=yes).

Each re-index records the repository settings it ran with (rocpkg.store.settings) inside
its journaled change: a refused, failed or killed command leaves them as they were.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Iterable

from rocpkg.store import releases

from rocpkg.repo import retention
from rocpkg.repo.contents import find_record
from rocpkg.store.dates import published_source_date_epoch
from rocpkg.repo.index import publish_repositories
from rocpkg.repo.publish_record import refuse_overlap
from rocpkg.errors import RocpkgInputError
from rocpkg.store.journal import Change
from rocpkg.store.settings import RepoSettings, write_settings
from rocpkg.store.state import forget as forget_states, record_copies
from rocpkg.formats.streams import AtomicOutput, HashingWriter, copy_stream
from rocpkg.store.files import open_file
from rocpkg.store.indexes import formats_present
from rocpkg.verify.keys import index_signatures
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


def channel_name(out_dir: str) -> str | None:
    """The channel OUT's releases are of (rocpkg.repo.retention.channel_of), when they are
    all of one; None otherwise (or when OUT records no release)."""
    doc = releases.read_manifest(out_dir) if os.path.isdir(out_dir) else None
    found = {retention.channel_of(r) for r in releases.manifest_releases(doc)} if doc else set()
    return found.pop() if len(found) == 1 and "" not in found else None


def _require_signer_if_signed(out_dir: str, signer) -> None:
    """Re-indexing a signed repository without its key would publish it unsigned."""
    if signer is not None:
        return
    signed = index_signatures(out_dir)
    if signed:
        name = channel_name(out_dir)
        raise RocpkgInputError((out_dir, f"{f'channel {name} is signed' if name else 'its indexes are signed'} "
                                         f"({signed[0]}): give its key (--sign-key, --gpg-home) to re-sign them; "
                                         f"rocpkg never turns a signed repository into an unsigned one"))


def _reindex(out_dir: str, suite: str, signer, base_url: str | None,
             settings: RepoSettings | None = None) -> dict[str, str]:
    snippets, _ = publish_repositories(out_dir, suite=suite, signer=signer, base_url=base_url,
                                       source_date_epoch=published_source_date_epoch(out_dir))
    if settings is not None:
        write_settings(out_dir, settings)
    return snippets


def index_recorded(out_dir: str | os.PathLike, settings: RepoSettings, *, signer=None,
                   source_date_epoch: int | None = None) -> tuple[dict[str, str], str | None]:
    """`rocpkg repo`: index (and sign) OUT with settings' suite and base URL
    (rocpkg.repo.index.publish_repositories) and record the settings, as one journaled
    change. Returns publish_repositories' (snippets, manifest path)."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    if not os.path.isdir(out_dir):      # checked before the lock: nothing is created for a missing OUT
        raise RocpkgInputError((out_dir, "no such directory: build a release into it first"))
    with Change(out_dir, "repo"):
        found = publish_repositories(out_dir, suite=settings.suite or "stable", signer=signer,
                                     source_date_epoch=source_date_epoch, base_url=settings.base_url)
        write_settings(out_dir, settings)
    return found


def _manifest_to_change(out_dir: str, verb: str) -> dict:
    """OUT's manifest, which a command that removes releases changes; bad input naming OUT
    or its manifest when there is none."""
    if not os.path.isdir(out_dir):
        raise RocpkgInputError((out_dir, "no such directory"))
    doc = releases.read_manifest(out_dir)
    if doc is None:
        raise RocpkgInputError((os.path.join(out_dir, releases.MANIFEST), f"missing: OUT has no releases to {verb}"))
    return doc


def prune(out_dir: str | os.PathLike, *, keep: int | None = None, keep_list: Iterable[str] = (),
          suite: str = "stable", signer=None, base_url: str | None = None, dry_run: bool = False,
          policy=None, allow_empty: bool = False, settings: RepoSettings | None = None) -> LifecycleResult:
    """Remove all but the `keep` newest releases of each series (and those on keep_list)
    from OUT and re-index it, as one step; or, given a rocpkg.repo.retention.Policy instead of
    keep, the releases it removes. dry_run: only say what would go. Removing every release
    is refused unless allow_empty. settings: recorded in OUT with the change."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    doc = _manifest_to_change(out_dir, "prune")
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
    return _forget(out_dir, doc, doomed, "prune", suite=suite, signer=signer, base_url=base_url, dry_run=dry_run,
                   allow_empty=allow_empty, settings=settings)


def remove_release(out_dir: str | os.PathLike, release_id: str, *, suite: str = "stable", signer=None,
                   base_url: str | None = None, dry_run: bool = False, allow_newest: bool = False,
                   settings: RepoSettings | None = None) -> LifecycleResult:
    """Remove one release by its id from OUT and re-index it, as one journaled change, as
    prune removes releases (its package files leave the pool, the manifest forgets it).
    The newest release of a series (its users' upgrade target) only with allow_newest
    (OUT's last release too). dry_run: only say what would go. settings: recorded in OUT
    with the change."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    doc = _manifest_to_change(out_dir, "remove")
    records = releases.manifest_releases(doc)
    record = find_record(records, release_id, "RELEASE")
    later = [r for r in records if r.series == record.series and releases.release_order(r) > releases.release_order(record)]
    if not later and not allow_newest:
        raise RocpkgInputError(("RELEASE", f"{release_id} is the newest release of series {record.series}: its users "
                                           f"would be left with an older one; give --allow-newest to remove it"))
    return _forget(out_dir, doc, [record], "rm", suite=suite, signer=signer, base_url=base_url, dry_run=dry_run,
                   allow_empty=allow_newest, settings=settings)


def _forget(out_dir: str, doc: dict, doomed: list, command: str, *, suite: str, signer, base_url: str | None,
            dry_run: bool, allow_empty: bool, settings: RepoSettings | None) -> LifecycleResult:
    """The releases `doomed` leave OUT in one journaled change `command`: their package
    files set aside, the manifest without them, OUT re-indexed and settings recorded
    (dry_run: only the result). Leaving no release is refused unless allow_empty."""
    new_doc, dropped = releases.forget_releases(doc, [r.id for r in doomed])
    result = LifecycleResult(kept=[r.id for r in releases.manifest_releases(new_doc)],
                             removed=[r.id for r in doomed], files=dropped)
    if dry_run or not doomed:
        return result
    if not result.kept and not allow_empty:
        raise RocpkgInputError((command, f"would remove every release of {out_dir} ({', '.join(result.removed)}), "
                                         f"leaving a repository with nothing to install: give --allow-empty "
                                         f"if that is meant"))
    _require_signer_if_signed(out_dir, signer)
    with Change(out_dir, command) as change:
        paths = [os.path.join(out_dir, rel) for rel in dropped]
        change.set_aside(*(path for path in paths if os.path.lexists(path)))     # one sync for them all
        releases.write_manifest(out_dir, new_doc)
        result.snippets = _reindex(out_dir, suite, signer, base_url, settings)
        forget_states(out_dir, set(dropped))
    return result


def promote(src: str | os.PathLike, dst: str | os.PathLike, release_id: str, *, suite: str = "stable",
            signer=None, base_url: str | None = None, dry_run: bool = False,
            settings: RepoSettings | None = None) -> LifecycleResult:
    """Copy release `release_id`'s package files from SRC into DST unchanged, record the
    release in DST's manifest, and re-index (and with a signer, re-sign) DST. dry_run:
    every check, then only say what would be copied (files: those DST lacks). settings:
    recorded in DST with the change."""
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
    _require_signer_if_signed(dst, signer)
    src_signed = index_signatures(src) if signer is None else []
    if src_signed and not any(form.repo.indexed(dst) for form in formats_present(dst)):
        channel = retention.channel_of(record) or "new"
        raise RocpkgInputError((dst, f"a {channel} channel promoted from {src}, whose indexes are signed "
                                     f"({src_signed[0]}): give the key (--sign-key, --gpg-home) to sign "
                                     f"it; rocpkg never makes an unsigned copy of a signed channel"))
    if dry_run:
        doc = releases.read_manifest(dst) if os.path.isdir(dst) else None
        held = {r.id for r in releases.manifest_releases(doc)} if doc is not None else set()
        return LifecycleResult(kept=sorted(held | {release_id}), files=[e["file"] for e in todo])
    made_dst = not os.path.lexists(dst)
    os.makedirs(dst, exist_ok=True)
    try:
        _require_signer_if_signed(dst, signer)
        with Change(dst, "promote"):
            for entry in todo:
                _copy_checked(src, dst, entry)
            record_copies(dst, src, todo)       # DST's repo then reads none of them again
            releases.write_release(dst, record, entries)
            snippets = _reindex(dst, suite, signer, base_url, settings)
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
