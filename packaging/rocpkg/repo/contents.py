"""What OUT holds, as `rocpkg ls`, `show` and `diff` tell it: its releases with their
channel, date, size and package counts per format, one package's records in every
format, and two releases' added, removed and changed packages.

Everything here is read from OUT/manifest.json (rocpkg.store.releases: read safely,
checked whole) except a package's own metadata, which `package_metadata` reads back
through its format's Reader (rocpkg.formats.plugin.Reader), after OUT's trees are checked
to hold no symlink and no special file. Nothing is written. A name or release OUT does
not have is bad input naming the closest ones.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

from rocpkg.errors import RocpkgInputError
from rocpkg.formats import registry
from rocpkg.inputs.channels import date_of_epoch
from rocpkg.repo.retention import channel_of
from rocpkg.store import releases


# the relations `show` gives, in its order
SHOWN_RELATIONS = ("depends", "pre_depends", "recommends", "suggests", "provides", "conflicts", "breaks", "replaces",
                   "obsoletes")


@dataclass
class ReleaseRow:
    """One release of OUT, as `ls` lists it."""

    id: str
    version: str
    release: str
    channel: str                # dev, nightly, prerelease, release; "" when neither recorded nor in its version
    date: str                   # YYYY-MM-DD (UTC) of the date it was built with; "" undated
    size: int                   # bytes of its package files, as the manifest records them
    packages: dict[str, int]    # format -> number of package files
    targets: list[str]
    newest: bool                # the newest release of its series (removing it needs --allow-newest)

    def to_dict(self) -> dict:
        return {"id": self.id, "version": self.version, "release": self.release, "channel": self.channel,
                "date": self.date, "size": self.size, "packages": dict(self.packages), "targets": list(self.targets),
                "newest_of_series": self.newest}


def read_releases(out_dir: str) -> tuple[dict, list[releases.ReleaseRecord]]:
    """(manifest document, its releases oldest first); bad input when OUT has no manifest."""
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise RocpkgInputError((out_dir, "no such directory"))
    doc = releases.read_manifest(out_dir)
    if doc is None:
        raise RocpkgInputError((os.path.join(out_dir, releases.MANIFEST),
                                "missing: OUT holds no release (build one with `rocpkg build -o OUT`)"))
    return doc, releases.manifest_releases(doc)


def newest_of_series(records: list[releases.ReleaseRecord]) -> set[str]:
    """The ids of the newest release of each series (release_order)."""
    newest: dict[str, releases.ReleaseRecord] = {}
    for record in records:
        best = newest.get(record.series)
        if best is None or releases.release_order(record) > releases.release_order(best):
            newest[record.series] = record
    return {r.id for r in newest.values()}


def release_rows(doc: dict, records: list[releases.ReleaseRecord]) -> list[ReleaseRow]:
    """Each release's row, oldest first."""
    entries = {e["file"]: e for e in doc.get("packages", [])}
    newest = newest_of_series(records)
    rows = []
    for record in records:
        mine = [entries[f] for f in record.files if f in entries]
        counts: dict[str, int] = {}
        for entry in mine:
            counts[entry["format"]] = counts.get(entry["format"], 0) + 1
        rows.append(ReleaseRow(record.id, record.version, record.release, channel_of(record),
                               date_of_epoch(record.date) if record.date else "",
                               sum(e["size"] for e in mine),
                               {fmt: counts[fmt] for fmt in registry.NAMES if fmt in counts},
                               list(record.targets), record.id in newest))
    return rows


def setup_entries(doc: dict) -> list[dict]:
    """The repository's setup packages (in no release)."""
    return [e for e in doc.get("packages", []) if e.get("kind") == releases.SETUP_KIND]


def find_record(records: list[releases.ReleaseRecord], release_id: str, where: str) -> releases.ReleaseRecord:
    """The release of this id; bad input naming the closest ids otherwise."""
    for record in records:
        if record.id == release_id:
            return record
    ids = [r.id for r in records]
    raise RocpkgInputError((where, f"no release {release_id!r} in OUT; {closest(release_id, ids)}"))


def closest(word: str, known: list[str], what: str = "release") -> str:
    """"closest: a, b" (difflib) or, with none close, how many `what` (a noun, made plural
    by an s) there are and a few of them."""
    near = difflib.get_close_matches(word, known, n=4, cutoff=0.5)
    if near:
        return f"closest: {', '.join(near)}"
    shown = ", ".join(known[-4:])
    return f"OUT has {len(known)} {what}{'' if len(known) == 1 else 's'}" + (f" ({'..., ' if len(known) > 4 else ''}{shown})" if known else "")


# -- one package --------------------------------------------------------------------------------

@dataclass
class Found:
    """One package file of OUT that a `show` name means: its manifest entry and release."""

    entry: dict
    release: str        # release id; "" for a setup package


def find_package(doc: dict, records: list[releases.ReleaseRecord], text: str) -> list[Found]:
    """The package files NAME[=VERSION] means, one per format: NAME regardless of case
    (rocm-gfx110X, rocm-gfx110x), in the newest release holding it, or in the release whose
    id, version or version-release is VERSION. Bad input naming the closest names when
    there is none."""
    name, _, version = text.partition("=")
    if not name:
        raise RocpkgInputError((text, "wants NAME or NAME=VERSION"))
    owner = {f: r.id for r in records for f in r.files}
    candidates = [Found(e, owner.get(e["file"], "")) for e in doc.get("packages", [])
                  if e["name"].lower() == name.lower()]
    if not candidates:
        names = sorted({e["name"] for e in doc.get("packages", [])})
        raise RocpkgInputError((name, f"no package of that name in OUT; {closest(name, names, 'package name')}"))
    if version:
        wanted = [c for c in candidates if version in (c.release, c.entry["version"],
                                                        f"{c.entry['version']}-{c.entry['release']}")]
        if not wanted:
            have = sorted({c.release or f"{c.entry['version']}-{c.entry['release']}" for c in candidates})
            raise RocpkgInputError((text, f"no version {version!r} of {name}; OUT has {', '.join(have)}"))
        candidates = wanted
    order = {r.id: i for i, r in enumerate(records)}
    best: dict[str, Found] = {}
    for found in candidates:        # per format, the newest release's (a setup package stands alone)
        fmt = found.entry["format"]
        if fmt not in best or order.get(found.release, -1) > order.get(best[fmt].release, -1):
            best[fmt] = found
    return [best[fmt] for fmt in registry.NAMES if fmt in best]


def package_metadata(out_dir: str, found: Found, with_files: bool = False) -> dict:
    """One package's record and its metadata read back from the file by its format's
    Reader: relations in the format's syntax, and with_files its file list (from the
    metadata, or one streamed pass over the payload where the format keeps none)."""
    from rocpkg.store.files import check_tree
    from rocpkg.store.outdir import STAGING_DIR
    from rocpkg.verify.readback import reader_of

    entry = found.entry
    check_tree(out_dir, discarded=(STAGING_DIR,))       # what the reader opens is no symlink, no FIFO
    reader = reader_of(entry["format"])
    spec = reader.read_meta(os.path.join(out_dir, entry["file"]))
    doc = {"format": entry["format"], "name": spec.name, "version": spec.version, "release": spec.release,
           "epoch": spec.epoch, "arch": spec.arch, "kind": entry.get("kind", ""), "target": entry.get("target", ""),
           "release_id": found.release, "file": entry["file"], "size": entry["size"], "sha256": entry["sha256"]}
    for key in SHOWN_RELATIONS:
        values = list(getattr(spec, key, []) or [])
        if values:
            doc[key] = values
    if with_files:
        listing = spec.files if reader.files_in_metadata else _payload_listing(reader, out_dir, entry, spec)
        doc["files"] = [{"path": f.path, "type": f.type, "size": f.size} for f in listing]
    return doc


@dataclass
class _Listing:
    """A PayloadVisitor that only lists the entries (takes no bytes)."""

    entries: list = field(default_factory=list)

    def wants(self, path: str) -> bool:
        return False

    def visit(self, entry, stream) -> None:
        self.entries.append(entry)


def _payload_listing(reader, out_dir: str, entry: dict, spec) -> list:
    listing = _Listing()
    reader.read_payload(os.path.join(out_dir, entry["file"]), spec, listing)
    return listing.entries


# -- two releases ------------------------------------------------------------------------------

def release_diff(doc: dict, records: list[releases.ReleaseRecord], a: str, b: str) -> dict:
    """Release b against release a, per format: packages added (only in b), removed (only
    in a) and changed (in both, other bytes), each with its sizes; the unchanged ones
    counted. Packages are matched by name; a versioned name (rocm-core7.1) that moves to
    another ABI is one removed and one added."""
    first, second = find_record(records, a, "A"), find_record(records, b, "B")
    entries = {e["file"]: e for e in doc.get("packages", [])}

    def table(record) -> dict[tuple[str, str], dict]:
        return {(entries[f]["format"], entries[f]["name"]): entries[f] for f in record.files if f in entries}

    old, new = table(first), table(second)
    result = {"a": first.id, "b": second.id, "formats": {}}
    for fmt in registry.NAMES:
        olds = {n: e for (f, n), e in old.items() if f == fmt}
        news = {n: e for (f, n), e in new.items() if f == fmt}
        if not olds and not news:
            continue
        added = [_side(news[n]) for n in sorted(set(news) - set(olds))]
        removed = [_side(olds[n]) for n in sorted(set(olds) - set(news))]
        changed, same = [], 0
        for n in sorted(set(olds) & set(news)):
            if olds[n]["sha256"] == news[n]["sha256"]:
                same += 1
            else:
                changed.append({"name": n, "from": _side(olds[n]), "to": _side(news[n]),
                                "size_change": news[n]["size"] - olds[n]["size"]})
        result["formats"][fmt] = {"added": added, "removed": removed, "changed": changed, "unchanged": same,
                                  "size_a": sum(e["size"] for e in olds.values()),
                                  "size_b": sum(e["size"] for e in news.values())}
    return result


def _side(entry: dict) -> dict:
    return {"name": entry["name"], "version": entry["version"], "release": entry["release"], "size": entry["size"],
            "file": entry["file"]}
