"""Index what OUT holds: each format's tree (OUT/deb/pool, OUT/rpm, OUT/pacman) as its
client's repository, through the format's Repository (rocpkg.formats.plugin), signed with a
key when given; the client snippets; and manifest.json kept in line with the files (shard
parts joined, packages whose bytes rocpkg changed in place recorded anew), all as one
journaled change of OUT (rocpkg.store.journal). Packages are indexed from what the build
recorded (rocpkg.store.recorded): an unchanged package file is not read again, and one
whose bytes differ from its record without cause is refused. The repository commands run
through here, never through the builder."""
from __future__ import annotations

import dataclasses
import json
import os
import stat

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import suite_problem
from rocpkg.formats.registry import NAMES, REGISTERED
from rocpkg.formats.sign import ARMORED_KEY_NAME
from rocpkg.formats.streams import write_atomic
from rocpkg.store import releases
from rocpkg.store.files import kind_of, read_json
from rocpkg.store.journal import Change, active_change
from rocpkg.store.manifest_schema import check_manifest, read_parts
from rocpkg.store.outdir import MANIFEST_PARTS
from rocpkg.store.recorded import Recorded
from rocpkg.store.state import recorded_states, rewrite_states, stamped
from rocpkg.repo.urls import repository_url



def assemble_manifest(out_dir: str | os.PathLike) -> str | None:
    """Join OUT/manifest.d/shard-*-of-N.json (N runners' trees copied into one OUT) into
    OUT/manifest.json, the same file an unsharded build writes. Refuses a missing shard
    or parts of different plans or dates. Returns the path, or None when there are no parts."""
    out_dir = os.fspath(out_dir)
    parts_dir = os.path.join(out_dir, MANIFEST_PARTS)
    docs = read_parts(out_dir)
    if not docs:
        return None
    problems = []
    first = docs[0][1]
    count = first["shard"][1]

    def date(doc: dict):
        return (doc.get("release_record") or {}).get("date")

    for name, doc in docs:
        if (doc["plan"], doc["version"], doc["release"], doc["shard"][1]) != \
                (first["plan"], first["version"], first["release"], count):
            problems.append((name, f"built from another plan or split than {docs[0][0]}"))
        elif date(doc) != date(first):
            problems.append((name, f"dated {date(doc)} (SOURCE_DATE_EPOCH), {docs[0][0]} {date(first)}: "
                                   f"set the same SOURCE_DATE_EPOCH on every runner"))
    have = {doc["shard"][0] for _, doc in docs}
    for index in range(1, count + 1):
        if index not in have:
            problems.append((parts_dir, f"shard {index} of {count} is missing"))
    if problems:
        raise RocpkgInputError(*problems)
    entries = [e for _, doc in docs for e in doc["packages"]]
    record = releases.ReleaseRecord.from_dict(first.get("release_record") or first)   # (older parts: none)
    allowed = tuple(a for _, doc in docs for a in doc.get("release_record", {}).get("allowed", []))
    return releases.write_release(out_dir, dataclasses.replace(record, files=(), allowed=allowed), entries)


def publish_repositories(out_dir: str, *, suite: str, signer=None, source_date_epoch: int | None = None,
                         base_url: str | None = None) -> tuple[dict[str, str], str | None]:
    """Index (and with a signer, sign) what OUT holds: every registered format whose tree
    is in OUT (OUT/<format>/<its package root>), through its Repository; write each one's
    client snippet; bring manifest.json in line (RPM headers signed in place changed their
    bytes). Signed and with a base_url, also the setup packages (rocpkg.repo.setup), indexed
    with the rest and copied to their stable names. Holds the OUT lock. Returns ({format:
    its snippet's path} for the formats present, and "<format>-setup": the stable-name
    copies; the manifest's path)."""
    from rocpkg.repo import setup as repo_setup

    if not os.path.isdir(out_dir):  # checked before the lock: nothing is created for a missing OUT
        raise RocpkgInputError((out_dir, "no such directory: build a release into it first"))
    if problem := suite_problem(suite):
        raise RocpkgInputError(("--suite", problem))
    from rocpkg.verify.integrity import unrecorded_packages

    root = repository_url(out_dir, base_url)      # every source line's URL, checked before anything is written

    foreign = unrecorded_packages(out_dir)      # indexing a file no build of rocpkg wrote would vouch for it
    if foreign:
        raise RocpkgInputError(*foreign)
    base = root if base_url is not None else None
    snippets: dict[str, str] = {}
    # one journaled change (rocpkg.store.journal): indexes, signatures and snippets all new, or all as they were
    with Change(out_dir, "repo") as change:
        present = [form for form in REGISTERED.values()
                   if os.path.isdir(os.path.join(out_dir, form.name, form.package_root))]
        setup = repo_setup.write_setup_packages(out_dir, formats=[form.name for form in present], base_url=base,
                                                suite=suite, signer=signer, source_date_epoch=source_date_epoch) \
            if base and signer is not None and present else []
        recorded = Recorded(out_dir, change=change)     # after the setup packages: they are new bytes
        rewritten: dict[str, tuple[int, str]] = {}      # packages an indexer replaced in place (RPMs signed)
        for form in present:
            form.repo.index(out_dir, suite=suite, signer=signer, source_date_epoch=source_date_epoch,
                            digests=recorded, change=change, rewritten=rewritten)
            snippets[form.name] = form.repo.write_snippet(out_dir, suite=suite, url=f"{root}/{form.name}",
                                                          key_url=base and f"{base}/{ARMORED_KEY_NAME}")
        if not snippets:
            trees = [os.path.join(form.name, form.package_root).rstrip(os.sep) for form in REGISTERED.values()]
            raise RocpkgInputError((out_dir, f"no {', '.join(trees[:-1])} or {trees[-1]} directory to index"))
        manifest = sync_manifest(out_dir, rewritten, recorded=recorded)  # joins shards' parts; records RPMs signed just now
        repo_setup.record_setup_packages(out_dir, setup)
        for package, copy in zip(setup, repo_setup.copy_stable_names(out_dir, setup)):
            snippets[f"{package.format}-setup"] = copy
    return snippets, manifest


def sync_manifest(out_dir: str | os.PathLike, rewritten: dict[str, tuple[int, str]] | None = None, *,
                  recorded: Recorded | None = None) -> str | None:
    """Bring OUT/manifest.json in line with the files under OUT: join the shard parts when
    they are newer than it (assemble_manifest), then record the bytes of every package
    file rocpkg changed in place — an RPM whose header `rocpkg repo --sign-key` signed —
    in the manifest and in its state (so that the next build keeps it and the next repo
    does not read it again). rewritten: OUT-relative path -> (size, sha256) of files the
    caller rewrote and hashed itself, recorded without being read; recorded: the digest
    source the indexers used in this change (what they read is not read again). A file
    whose bytes differ from its record without cause is bad input
    (rocpkg.store.recorded). Returns the manifest's path, None when OUT has none."""
    out_dir = os.fspath(out_dir)
    path = os.path.join(out_dir, "manifest.json")
    parts_dir = os.path.join(out_dir, MANIFEST_PARTS)
    if os.path.isdir(parts_dir):
        newest = max((os.stat(os.path.join(parts_dir, n)).st_mtime_ns for n in os.listdir(parts_dir)), default=0)
        if not os.path.exists(path) or os.stat(path).st_mtime_ns < newest:
            assemble_manifest(out_dir)
    doc = read_json(out_dir, "manifest.json", "manifest")
    if doc is None:
        return None
    check_manifest(doc, path)
    _check_listed_files(out_dir, doc)
    if recorded is None:
        recorded = Recorded(out_dir, change=active_change(out_dir))
    for rel, known in (rewritten or {}).items():
        recorded.note(rel, *known)
    changed = False
    states = recorded_states(out_dir, NAMES)
    earlier: dict[str, list[tuple[str, dict]]] = {}
    for entry in doc["packages"]:
        size, sha256 = recorded.digest(entry["file"])
        if (size, sha256) != (entry["size"], entry["sha256"]):
            entry["size"], entry["sha256"] = size, sha256
            changed = True
        if recorded.as_stamped(entry["file"], (size, sha256)):
            continue
        # stamped anew, so that the next repo reads it no more: its name's state, or an earlier line
        state = states[entry["format"]].get(entry["name"])
        if state is not None and state.get("file") == entry["file"]:
            states[entry["format"]][entry["name"]] = stamped(out_dir, state, size, sha256)
            earlier.setdefault(entry["format"], [])
        else:
            line = recorded.stamps.get(entry["file"], (None, entry["name"], {"fingerprint": ""}))
            base = {"fingerprint": line[2].get("fingerprint", ""), "file": entry["file"]}
            earlier.setdefault(entry["format"], []).append((line[1], stamped(out_dir, base, size, sha256)))
    for fmt in sorted(earlier):
        rewrite_states(out_dir, fmt, states[fmt], earlier=earlier[fmt])
    if changed:
        write_atomic(path, json.dumps(doc, indent=1).encode() + b"\n")
    return path


def _check_listed_files(out_dir: str, doc: dict) -> None:
    """Every package file manifest.json lists is in OUT, a regular file (never followed
    through a symlink); bad input naming each one that is not (the command that was
    re-indexing is then undone: OUT stays as it was)."""
    problems = []
    for index, entry in enumerate(doc["packages"]):
        path = os.path.join(out_dir, entry["file"])
        try:
            mode = os.stat(path, follow_symlinks=False).st_mode
        except FileNotFoundError:
            problems.append((path, f"manifest.json lists it (packages[{index}].file, {entry['name']} "
                                   f"{entry['version']}-{entry['release']}) but it is not in OUT: put the file "
                                   f"back (from a copy or a publish of OUT), then run the command again"))
            continue
        except NotADirectoryError:
            mode = 0
        if not stat.S_ISREG(mode):
            problems.append((path, f"manifest.json lists it (packages[{index}].file) as a package file, and it is "
                                   f"{kind_of(mode) if mode else 'under a file, not a directory'}"))
    if problems:
        raise RocpkgInputError(*problems)
