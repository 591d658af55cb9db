"""How OUT changes (rocpkg.store.journal, rocpkg.store.recorded): a command's change is
journaled path by path, only the paths it touches, and a kill in the middle of repo,
prune or promote is undone from exactly those lines; `rocpkg repo` indexes each package
from what the build recorded, reading a package file again only where its bytes
legitimately changed, and refuses one whose bytes differ from the record."""
from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from test_crash_soak import changes, leftovers, ok, rocpkg, tree, trees  # noqa: F401 (fixture)
from test_hostile_out import Work, built, run, work  # noqa: F401 (fixtures)

TOUCHED = Path(".rocpkg/journal.d/touched.jsonl")
SAVED = Path(".rocpkg/journal.d/saved")
SDE = {"SOURCE_DATE_EPOCH": "1700000000"}


def journaled(out: Path) -> list[tuple[str, str]]:
    return [next(iter(json.loads(line).items())) for line in (out / TOUCHED).read_text().splitlines()]


# -- a kill in the middle of each command: undone from the journal of what it touched ----------

@pytest.mark.parametrize("name, at", [
    ("repo", "rocm.repo#1"),            # the last files it writes: nearly the whole change journaled
    ("prune", "rocm.repo#1"),
    ("promote", "rocm.repo#1"),
])
def test_a_killed_command_journals_only_what_it_touched_and_recovery_undoes_exactly_that(trees, tmp_path, name, at):
    out = trees.fresh(tmp_path / "out")
    _, complete = changes(trees, name, out)
    before = tree(out)
    killed = rocpkg(*trees.command(name, out), fault=(at, "kill"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    lines = journaled(out)
    paths = {rel for _, rel in lines}
    own_files = [k for k, v in before.items() if v[0] == "file"]
    # only what the change touched: never the control files or a package it neither adds nor removes
    assert lines and len(paths) == len(lines) and paths <= set(before) | set(complete), sorted(paths)
    assert not any(p.startswith("control/") for p in paths), sorted(paths)
    moved = {k for k in set(before) | set(complete)
             if k.endswith((".deb", ".rpm")) and before.get(k) != complete.get(k)}
    assert {p for p in paths if p.endswith((".deb", ".rpm"))} <= moved, sorted(paths)
    if name == "prune":
        assert {p for kind, p in lines if kind == "saved" and p.endswith((".deb", ".rpm"))} == moved
    # the saved bytes are those of the "saved" lines, and nothing else
    saved = {str(p.relative_to(out / SAVED)) for p in (out / SAVED).rglob("*") if p.is_file()}
    assert saved == {p for kind, p in lines if kind == "saved"}
    # recovery acts on those lines only: an own file the change never touched is not put back
    untouched = next(k for k in sorted(own_files) if k.startswith("control/"))
    (out / untouched).write_bytes(b"edited after the kill\n")
    verdict = ok(rocpkg("verify", out))
    assert f"rolled back an interrupted rocpkg {name}" in verdict.stderr, verdict.stderr
    assert (out / untouched).read_bytes() == b"edited after the kill\n"
    (out / untouched).write_bytes(before[untouched][2])
    assert tree(out) == before and leftovers(out) == []
    ok(rocpkg(*trees.command(name, out)))
    assert tree(out, stamps=False) == complete


def test_a_completed_change_leaves_no_journal_and_saved_nothing_it_did_not_replace(trees, tmp_path):
    """An unsigned repo run again replaces indexes and snippets, never a package: nothing
    of the pool is journaled, and the journal is gone once the change is complete."""
    out = trees.fresh(tmp_path / "out")
    done = rocpkg("repo", out, fault=("rocm.repo#1", "kill"))
    assert done.returncode == -signal.SIGKILL
    lines = journaled(out)
    assert lines and not any(p.endswith((".deb", ".rpm")) for _, p in lines), lines
    ok(rocpkg("repo", out))
    assert not (out / ".rocpkg/journal.json").exists() and not (out / ".rocpkg/journal.d").exists()


# -- repo indexes from the record ---------------------------------------------------------------

def _packages_sha256(out: Path) -> dict[str, str]:
    """Filename -> SHA256 as the APT index lists them."""
    text = (out / "deb/dists/stable/main/binary-amd64/Packages").read_text()
    found = {}
    for stanza in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        found[fields["Filename"]] = fields["SHA256"]
    return found


def _recorded(out: Path, path: Path) -> dict:
    rel = str(path.relative_to(out))
    return next(e for e in json.loads((out / "manifest.json").read_text())["packages"] if e["file"] == rel)


def _flip_last_byte(path: Path, keep_stamp: bool) -> None:
    """Change the package's last byte in place (same inode and size); keep_stamp: its
    mtime put back, so that only reading its bytes can tell."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns if keep_stamp else st.st_mtime_ns + 10**9))


def test_repo_does_not_read_an_unchanged_package_again(work):
    """Once its stamp is recorded, a package file whose size, mtime and inode are those its
    state line records is indexed at its recorded SHA-256 without a byte of it read: bytes
    changed behind such a stamp are not seen by repo (verify, which hashes everything, is
    what finds them)."""
    ok(run("repo", work.out, env=SDE))       # the copy's new inodes read once and stamped
    deb = work.deb()
    recorded = _recorded(work.out, deb)
    _flip_last_byte(deb, keep_stamp=True)
    assert hashlib.sha256(deb.read_bytes()).hexdigest() != recorded["sha256"]
    ok(run("repo", work.out, env=SDE))
    assert _packages_sha256(work.out)[str(deb.relative_to(work.out / "deb"))] == recorded["sha256"]
    assert _recorded(work.out, deb)["sha256"] == recorded["sha256"]
    verdict = run("verify", work.out)
    assert verdict.returncode == 2 and deb.name in verdict.stderr, verdict.stderr


def test_repo_reads_no_package_of_a_tree_it_indexed_before(work, monkeypatch):
    """Counted in process: the second index of a tree reads no package file to hash it."""
    from rocpkg.repo.index import publish_repositories
    from rocpkg.store.recorded import Recorded

    ok(run("repo", work.out, env=SDE))
    hashed = []
    real = Recorded._hash
    monkeypatch.setattr(Recorded, "_hash", lambda self, rel: hashed.append(rel) or real(self, rel))
    publish_repositories(str(work.out), suite="stable", source_date_epoch=1700000000)
    assert hashed == []


@pytest.mark.parametrize("which", ["deb", "rpm"])
def test_repo_refuses_a_package_whose_bytes_differ_from_the_record(work, which):
    """A package file changed after the build (its stamp no longer the recorded one, and
    its bytes not the recorded ones) is bad input naming it: never indexed with a new
    hash, OUT byte for byte as it was."""
    ok(run("repo", work.out, env=SDE))
    path = work.deb() if which == "deb" else work.rpm()
    _flip_last_byte(path, keep_stamp=False)
    errors = work.refused("repo", "{out}", needles=[str(path), "not the ones rocpkg recorded"], env=SDE)
    assert len(errors) == 1, errors


def test_a_copied_tree_is_read_once_and_taken_at_its_record(work):
    """A package copied with other inodes but the recorded bytes (a merged or restored tree)
    is read once, found to be the recorded bytes, and stamped anew in its state."""
    deb = work.deb()
    data = deb.read_bytes()
    deb.unlink()
    deb.write_bytes(data)           # a new inode and mtime, the same bytes
    ok(run("repo", work.out, env=SDE))
    state = next(json.loads(line) for line in (work.out / ".rocpkg/state/deb.jsonl").read_text().splitlines()
                 if json.loads(line)["file"] == str(deb.relative_to(work.out)))
    assert (state["ino"], state["mtime_ns"]) == (deb.stat().st_ino, deb.stat().st_mtime_ns)
    assert ok(run("verify", work.out))


def test_sync_manifest_records_what_the_caller_rewrote_without_reading_it(work, monkeypatch):
    """sync_manifest(rewritten={path: (size, sha256)}): a file the caller rewrote in the
    change and hashed itself (an RPM signed on all cores) is recorded in the manifest and
    its state without being read again."""
    from rocpkg.formats.streams import write_atomic
    from rocpkg.repo.index import sync_manifest
    from rocpkg.store.journal import Change
    from rocpkg.store.recorded import Recorded

    ok(run("repo", work.out, env=SDE))
    rpm = work.rpm()
    rel = str(rpm.relative_to(work.out))
    new = rpm.read_bytes() + b"\0" * 16         # stands in for the signed bytes
    known = (len(new), hashlib.sha256(new).hexdigest())

    def no_read(self, rel):
        raise AssertionError(f"read {rel}")

    monkeypatch.setattr(Recorded, "_hash", no_read)
    with Change(str(work.out), "repo"):
        write_atomic(str(rpm), new)
        sync_manifest(str(work.out), rewritten={rel: known})
    entry = _recorded(work.out, rpm)
    assert (entry["size"], entry["sha256"]) == known
    state = json.loads([line for line in (work.out / ".rocpkg/state/rpm.jsonl").read_text().splitlines()
                        if json.loads(line)["file"] == rel][-1])
    assert (state["size"], state["sha256"], state["ino"]) == (*known, rpm.stat().st_ino)


def test_a_copied_tree_is_read_once_and_promoted_files_never(trees, tmp_path, monkeypatch):
    """A tree copied with new inodes (every package of both its releases, the earlier
    release's too) is read once and stamped anew; then neither a second index nor the
    index after a promote reads a package: promote stamps its copies with SRC's record."""
    from rocpkg.repo.index import publish_repositories
    from rocpkg.store.recorded import Recorded

    out = trees.fresh(tmp_path / "out")
    hashed = []
    real = Recorded._hash
    monkeypatch.setattr(Recorded, "_hash", lambda self, rel: hashed.append(rel) or real(self, rel))
    recorded = {e["file"] for e in json.loads((out / "manifest.json").read_text())["packages"]}
    publish_repositories(str(out), suite="stable", source_date_epoch=1764547200)
    assert sorted(hashed) == sorted(recorded)
    hashed.clear()
    publish_repositories(str(out), suite="stable", source_date_epoch=1764547200)
    assert hashed == []
    ok(rocpkg(*trees.command("promote", out)))
    publish_repositories(str(out), suite="stable", source_date_epoch=1764547200)
    assert hashed == []
    ok(rocpkg("verify", out))
