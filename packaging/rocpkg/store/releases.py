"""The multi-release manifest: OUT holds many releases for years (nightlies, point releases,
promoted builds), and OUT/manifest.json remembers each of them.

manifest.json (schema rocpkg-manifest/1) keeps its single-release fields for the readers
that know only those ("version"/"release"/"plan" of the newest build) and adds:

    "releases": [{"id": "7.1.0-1", "version", "release", "targets", "formats", "allowed",
                  "plan", "files": [paths relative to OUT]}, ...]   oldest first
    "packages": every package of every release, one entry per file, and the repository's
                setup packages (kind "setup", rocpkg.repo.setup), which belong to no release

A build records its release without forgetting earlier ones; a rebuild of the same release
merges into its record (a deb run, then an rpm run). Which packages belong to a release is
its "files". A manifest written before "releases" existed reads as one release.

Also here: the pre-write check that published bytes never change under one
name-version-release (conflicting_rebuilds), which build calls before writing.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Iterable

from kpack.loader import FALLTHROUGH
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.indexes import PackageRef
from rocpkg.store.indexes import published_entries
from rocpkg.store.manifest_schema import check_manifest, read_parts
from rocpkg.store.files import read_json
from rocpkg.formats.streams import AtomicOutput

MANIFEST = "manifest.json"
SCHEMA = "rocpkg-manifest/1"
SETUP_KIND = "setup"        # a package entry of the repository itself, in no release: kept until replaced


@dataclass(frozen=True)
class ReleaseRecord:
    """One release that was built into (or promoted into) OUT."""

    version: str
    release: str
    targets: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    allowed: tuple = ()                 # problems build let through (--allow): gate.Refusal.to_dict()
    plan: str = ""
    files: tuple[str, ...] = ()         # package files, relative to OUT
    date: int = 0                       # the SOURCE_DATE_EPOCH it was built with
    kpack_lookup: str = FALLTHROUGH     # the runtime its checks modelled (kpack.loader)
    channel: str = ""                   # dev, nightly, prerelease or release (rocpkg.inputs.channels); "" none given
    epoch: int = 0                      # the packages' epoch
    variant: str = ""                   # the build variant ("asan", rocpkg.plan.naming); "" the normal build

    @property
    def id(self) -> str:
        """version-release, and +variant for a variant build (7.1.0-1+asan): a release and
        its ASAN build are two releases of OUT."""
        return f"{self.version}-{self.release}" + (f"+{self.variant}" if self.variant else "")

    @property
    def series(self) -> str:
        """What pruning and the version-order check compare within: MAJOR.MINOR, and
        +variant for a variant build (its releases upgrade each other, not the normal ones)."""
        return release_series(self.version) + (f"+{self.variant}" if self.variant else "")

    def to_dict(self) -> dict:
        doc = {"id": self.id, **asdict(self)}
        if self.kpack_lookup == FALLTHROUGH:   # the default is not written: older manifests lack it
            del doc["kpack_lookup"]
        for key in ("channel", "epoch", "variant"):        # nor are these when unset
            if not doc[key]:
                del doc[key]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in doc.items()}

    @classmethod
    def from_dict(cls, doc: dict) -> "ReleaseRecord":
        return cls(version=str(doc["version"]), release=str(doc["release"]),
                   targets=tuple(doc.get("targets", ())), formats=tuple(doc.get("formats", ())),
                   allowed=tuple(doc.get("allowed", ())), plan=str(doc.get("plan", "")),
                   files=tuple(doc.get("files", ())), date=int(doc.get("date") or 0),
                   kpack_lookup=str(doc.get("kpack_lookup", FALLTHROUGH)),
                   channel=str(doc.get("channel", "")), epoch=int(doc.get("epoch") or 0),
                   variant=str(doc.get("variant", "")))


def release_series(version: str) -> str:
    """The series a version belongs to for pruning: MAJOR.MINOR ("7.1" for 7.1.2 and for
    the nightly 7.1.3~20261130)."""
    parts = version.split(":")[-1].replace("~", ".").replace("+", ".").split(".")
    return ".".join(parts[:2])


def inputs_date(config_path: str | os.PathLike | None, artifacts_dir: str | os.PathLike) -> int | None:
    """The default release date (SOURCE_DATE_EPOCH when the environment sets none): the
    newest modification time of the package list given (not the bundled one, whose time
    is its installation's) and of the artifacts' artifact_manifest.txt files, which are
    written when the artifacts are produced; None when there are none. Touching one
    payload file does not move it, so an incremental build stays incremental."""
    paths = [os.fspath(config_path)] if config_path else []
    try:
        with os.scandir(artifacts_dir) as entries:
            paths += [os.path.join(e.path, "artifact_manifest.txt") for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        pass
    times = []
    for path in paths:
        try:
            times.append(int(os.stat(path, follow_symlinks=False).st_mtime))   # may be negative
        except OSError:
            continue
    return max(times) if times else None


def release_order(record: ReleaseRecord):
    """Debian version order of "version-release": what apt and dnf would call newer
    (a debian_support.Version), a variant build after the normal one of its version."""
    from debian.debian_support import Version

    return Version(f"{record.version}-{record.release}"), record.variant


# -- reading and writing -------------------------------------------------------------------

def read_manifest(out_dir: str | os.PathLike) -> dict | None:
    """OUT/manifest.json, or None when OUT has none. Read as OUT's own files are (never
    through a symlink, a regular file, bounded) and checked whole by rocpkg.store.manifest_schema:
    a damaged one is bad input naming the field."""
    path = os.path.join(os.fspath(out_dir), MANIFEST)
    doc = read_json(os.fspath(out_dir), MANIFEST, "manifest")
    if doc is None or isinstance(doc, dict) and "schema" not in doc:
        return None             # not rocpkg's: replaced by the next build, as it always was
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("packages"), list):
        raise RocpkgInputError((path, f"not a {SCHEMA} manifest"))
    return check_manifest(doc, path)


def manifest_releases(doc: dict | None) -> list[ReleaseRecord]:
    """Every release the manifest records, oldest first (a pre-"releases" manifest is one)."""
    if not doc:
        return []
    if "releases" in doc:
        records = [ReleaseRecord.from_dict(r) for r in doc["releases"]]
    elif "version" in doc:
        entries = doc["packages"]
        records = [ReleaseRecord(str(doc["version"]), str(doc["release"]),
                                 targets=tuple(sorted({e["target"] for e in entries if e.get("target")})),
                                 formats=tuple(sorted({e["format"] for e in entries})), plan=doc.get("plan", ""),
                                 files=tuple(sorted(e["file"] for e in entries)))]
    else:
        records = []
    return sorted(records, key=release_order)


def find_release(doc: dict | None, release_id: str, where: str = "--release") -> ReleaseRecord:
    for record in manifest_releases(doc):
        if record.id == release_id:
            return record
    known = ", ".join(r.id for r in manifest_releases(doc)) or "none"
    raise RocpkgInputError((where, f"no release {release_id!r} in the manifest (releases: {known})"))


def release_packages(doc: dict | None, release_id: str) -> list[dict]:
    """The manifest entries of one release's packages."""
    files = set(find_release(doc, release_id).files)
    return [e for e in (doc or {}).get("packages", []) if e["file"] in files]


def record_release(doc: dict | None, record: ReleaseRecord, entries: Iterable[dict]) -> dict:
    """A new manifest document: doc plus this release and its package entries. Earlier
    releases stay; the same release recorded again merges (files, formats, targets and
    allowed checks are joined, the entries of its files replaced)."""
    entries = list(entries)
    record = replace(record, targets=_union(record.targets, ()), formats=_union(record.formats, ()),
                     allowed=_union(record.allowed, ()), files=_union(record.files, (e["file"] for e in entries)))
    records = {r.id: r for r in manifest_releases(doc)}
    old = records.get(record.id)
    if old is not None:
        record = replace(record,
                         targets=_union(old.targets, record.targets), formats=_union(old.formats, record.formats),
                         allowed=_union(old.allowed, record.allowed), plan=record.plan or old.plan,
                         files=_union(old.files, record.files), date=max(old.date, record.date),
                         channel=record.channel or old.channel)
    records[record.id] = record
    packages = {e["file"]: e for e in (doc or {}).get("packages", [])}
    packages.update({e["file"]: e for e in entries})
    return _document(list(records.values()), packages.values(), newest=record)


def forget_releases(doc: dict, release_ids: Iterable[str]) -> tuple[dict, list[str]]:
    """(a document without those releases, the files no remaining release holds)."""
    gone = set(release_ids)
    kept = [r for r in manifest_releases(doc) if r.id not in gone]
    still = {f for r in kept for f in r.files}
    dropped = sorted({f for r in manifest_releases(doc) if r.id in gone for f in r.files} - still)
    packages = [e for e in doc["packages"] if e["file"] in still or e.get("kind") == SETUP_KIND]
    newest = max(kept, key=release_order) if kept else None
    return _document(kept, packages, newest=newest, base=doc), dropped


def manifest_bytes(doc: dict) -> bytes:
    return json.dumps(doc, indent=1).encode() + b"\n"


def write_manifest(out_dir: str | os.PathLike, doc: dict) -> str:
    path = os.path.join(os.fspath(out_dir), MANIFEST)
    with AtomicOutput(path) as fh:
        fh.write(manifest_bytes(doc))
    return path


def write_release(out_dir: str | os.PathLike, record: ReleaseRecord, entries: Iterable[dict]) -> str:
    """Record one build's release in OUT/manifest.json (read, merge, write atomically).
    The caller holds the OUT lock."""
    return write_manifest(out_dir, record_release(read_manifest(out_dir), record, entries))


def _union(a: Iterable, b: Iterable) -> tuple:
    """Sorted, without repeats; items are names or (allowed problems) small dicts."""
    items = {json.dumps(x, sort_keys=True): x for x in (*a, *b)}
    return tuple(items[k] for k in sorted(items))


def _document(records: list[ReleaseRecord], packages: Iterable[dict], newest: ReleaseRecord | None,
              base: dict | None = None) -> dict:
    records = sorted(records, key=release_order)
    doc = {"schema": SCHEMA}
    if newest is not None:
        doc.update(version=newest.version, release=newest.release, plan=newest.plan)
    elif base:
        doc.update({k: base[k] for k in ("version", "release", "plan") if k in base})
    doc["releases"] = [r.to_dict() for r in records]
    doc["packages"] = sorted(packages, key=lambda e: (e["format"], e["name"], e["version"], e["release"], e["file"]))
    return doc


# -- one owner per package name and file ------------------------------------------------------

@dataclass(frozen=True)
class Recorded:
    """What OUT records, read once for a build's checks: manifest.json (None before the
    first release), the shard parts not yet joined (manifest.d), and the package files
    each release of either owns (owned_packages)."""

    manifest: dict | None
    parts: list[dict]
    owned: list[tuple[ReleaseRecord, dict]]


def read_recorded(out_dir: str | os.PathLike) -> Recorded:
    """OUT's manifest.json and shard parts, each read and checked once (bad input refused)."""
    doc = read_manifest(out_dir)
    parts = [part for _, part in read_parts(os.fspath(out_dir))]
    return Recorded(doc, parts, owned_packages(doc, parts))


def owned_packages(doc: dict | None, parts: Iterable[dict] = ()) -> list[tuple[ReleaseRecord, dict]]:
    """(release, package entry) for each package file a release in OUT records: those of
    manifest.json's releases and those of the shard parts (manifest.d) not yet joined."""
    entries = {e["file"]: e for e in (doc or {}).get("packages", [])}
    owned = [(r, entries[f]) for r in manifest_releases(doc) for f in r.files if f in entries]
    for part in parts:
        record = ReleaseRecord.from_dict(part.get("release_record") or part)
        owned += [(record, e) for e in part.get("packages", [])]
    return owned


def _owner_clash(a: ReleaseRecord, a_entry: dict, b: ReleaseRecord, b_entry: dict) -> str | None:
    """Why two releases' packages clash: one package file recorded by two releases, or one
    package name (in one format) in two build variants (apt and dnf would take one for an
    upgrade of the other); None when they do not."""
    if a.id == b.id or a_entry["format"] != b_entry["format"]:
        return None
    if a_entry["file"] == b_entry["file"]:
        return f"both write {a_entry['file']}, one overwriting the other"
    if a_entry["name"] == b_entry["name"] and a.variant != b.variant:
        return f"one package name in two build variants ({a.variant or 'release'} and {b.variant or 'release'})"
    return None


def clashes(owned: list[tuple[ReleaseRecord, dict]]) -> list[tuple[ReleaseRecord, dict, ReleaseRecord, dict, str]]:
    """(release, entry, other release, its entry, why) for each pair of packages of two
    releases (owned: owned_packages) that write one file, or that have one name in two
    build variants (_owner_clash); each pair once."""
    groups: dict[tuple, list[tuple[ReleaseRecord, dict]]] = {}
    for record, entry in owned:
        groups.setdefault((entry["format"], "name", entry["name"]), []).append((record, entry))
        groups.setdefault((entry["format"], "file", entry["file"]), []).append((record, entry))
    found, seen = [], set()
    for (_, kind, _), group in groups.items():
        if len(group) < 2 or kind == "name" and len({r.variant for r, _ in group}) < 2:
            continue        # the usual case, each a glance: one release per file, one variant per name
        for i, (a, a_entry) in enumerate(group):
            for b, b_entry in group[i + 1:]:
                key = (a.id, a_entry["file"], b.id, b_entry["file"])
                why = None if key in seen else _owner_clash(a, a_entry, b, b_entry)
                if why:
                    seen.add(key)
                    found.append((a, a_entry, b, b_entry, why))
    return found


def name_clashes(out_dir: str | os.PathLike, planned: Iterable[PackageRef], new: ReleaseRecord,
                 owned: list[tuple[ReleaseRecord, dict]]) -> list[tuple[str, str]]:
    """Problems, before a byte is written, for every package a build of release `new` would
    write whose file another release in OUT records, or whose name a release of another
    build variant has (owned: owned_packages), indexed or not. Writes nothing."""
    mine = [(new, {"format": p.format, "name": p.name, "file": p.file}) for p in planned]
    problems = {}
    for a, a_entry, b, b_entry, why in clashes(owned + mine):
        if a is new or b is new:
            (_, item), (record, entry) = ((a, a_entry), (b, b_entry)) if a is new else ((b, b_entry), (a, a_entry))
            problems.setdefault(item["file"], (
                os.path.join(os.fspath(out_dir), item["file"]),
                f"{item['name']} of release {new.id} clashes with {entry['name']} of release {record.id} "
                f"({entry['file']}), recorded in OUT: {why}; package names must be unique across the releases "
                f"and build variants of one OUT (rename one package.json definition, or build into another OUT)"))
    return list(problems.values())


# -- published bytes never change -------------------------------------------------------------

@dataclass(frozen=True)
class Planned(PackageRef):
    """A package build is about to write: what it is, where it goes, and whether the
    build would rewrite it (its fingerprint differs from the one OUT's state recorded)."""

    rewrite: bool = True


def conflicting_rebuilds(out_dir: str | os.PathLike, planned: Iterable[Planned]) -> list[tuple[str, str]]:
    """Problems, before a byte is written, for every package the build would rewrite
    although an index in OUT (APT Packages, DNF primary) already publishes its
    name-version-release-architecture: the published bytes would change under the same
    name. (A package only built, not yet indexed, may be rebuilt.) Reads OUT, writes nothing."""
    planned = [p for p in planned if p.rewrite]
    if not planned:
        return []
    out_dir = os.fspath(out_dir)
    published = {(p.format, p.name, p.version, p.release, p.arch): p for p in published_entries(out_dir)}
    problems = []
    for item in planned:
        index = published.get((item.format, item.name, item.version, item.release, item.arch))
        if index is None:
            continue
        problems.append((os.path.join(out_dir, item.file),
                         f"{item.name} {item.version}-{item.release} {item.arch} is already published "
                         f"({index.index}) and its inputs or options changed since: rebuilding would replace "
                         f"published bytes under the same name; build a new release number "
                         f"(--release) or restore the inputs it was built from"))
    return problems
