"""OUT's journal and durable writes, as hostile as any other record of OUT.

A journal (rocpkg.store.journal) tells the next command what to delete and what to put back,
so one that is damaged, forged or contradictory must be refused, never acted on: each case
leaves a real journal of an interrupted change (a process that entered a Change and died),
breaks it, and runs `verify`: exit 2, one `error:` line naming the journal and the field,
no traceback, and the work directory byte-identical. A journal that cannot be written whole
(a file-size limit, a full disk) fails its command before the change begins. A digest
cache is only a shortcut: a damaged one is discarded and rebuilt.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_run import refusal_lines, snapshot
from test_crash_soak import size_limited
from test_hostile_out import REPO, TIMEOUT, Work, built, run, work  # noqa: F401 (fixtures)

JOURNAL = ".rocpkg/journal.json"
SAVED = ".rocpkg/journal.d/saved"
DIE_IN_A_CHANGE = """
import os, sys
from rocpkg.store.journal import Change
Change(sys.argv[1], sys.argv[2]).__enter__()
os._exit(9)
"""


def interrupted(w: Work, command: str = "prune") -> dict:
    """Leave a real journal of an interrupted change in OUT (a process that began one and
    died); its document."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO)]))
    died = subprocess.run([sys.executable, "-c", DIE_IN_A_CHANGE, str(w.out), command], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert died.returncode == 9, died.stderr
    return json.loads((w.out / JOURNAL).read_text())


def forge(w: Work, change) -> None:
    """Apply change(doc) to the interrupted change's journal; a returned value replaces it."""
    doc = interrupted(w)
    replaced = change(doc)
    data = replaced if isinstance(replaced, bytes) else json.dumps(doc if replaced is None else replaced).encode()
    (w.out / JOURNAL).write_bytes(data)


def packages(w: Work) -> list[str]:
    return sorted(str(p.relative_to(w.out)) for p in w.out.rglob("*") if p.suffix in (".deb", ".rpm")
                  and not str(p.relative_to(w.out)).startswith(".rocpkg"))


def test_an_intact_journal_is_rolled_back_and_keeps_every_package(work):
    before = packages(work)
    interrupted(work)
    done = run("verify", work.out)
    assert done.returncode == 0 and "rolled back an interrupted rocpkg prune" in done.stderr, done.stderr
    assert packages(work) == before and not (work.out / ".rocpkg/journal.d").exists()


def _omit(predicate):
    def change(doc):
        doc["files"] = [f for f in doc["files"] if not predicate(f)]
    return change


@pytest.mark.parametrize("change, needles", [
    # the saved manifest lists them: a rollback would delete every package file of OUT
    (_omit(lambda f: f.endswith((".deb", ".rpm"))), ["journal.json: files", "which its saved manifest lists"]),
    (_omit(lambda f: f.startswith("rpm/") and f.endswith(".rpm")), ["journal.json: files", ".rpm'"]),
    # a saved index left out: it would be removed and its saved bytes dropped
    (_omit(lambda f: f.endswith("Release")), ["journal.json: files", "Release', which it saved"]),
    (_omit(lambda f: f == "manifest.json"), ["journal.json: files", "'manifest.json', which it saved"]),
], ids=["no-packages", "no-rpms", "no-release", "no-manifest"])
def test_a_journal_contradicting_what_it_saved_is_refused_never_acted_on(work, change, needles):
    forge(work, change)
    work.refused("verify", "{out}", needles=needles)
    work.refused("repo", "{out}", needles=needles)


def test_a_saved_manifest_listing_more_than_the_journal_is_refused(work):
    """The journal left as it was, the saved manifest lists a package the journal does not:
    the journal is refused (OUT's package stays), not rolled back."""
    doc = interrupted(work)
    manifest = json.loads((work.out / SAVED / "manifest.json").read_text())
    extra = dict(manifest["packages"][0], file="deb/pool/main/x/extra_1_amd64.deb")
    manifest["packages"].append(extra)
    (work.out / SAVED / "manifest.json").unlink()       # a hard link of OUT's: replaced, not edited
    (work.out / SAVED / "manifest.json").write_text(json.dumps(manifest))
    (work.out / extra["file"]).parent.mkdir(parents=True, exist_ok=True)
    (work.out / extra["file"]).write_bytes(b"a package the journal does not know")
    assert extra["file"] not in doc["files"]
    work.refused("verify", "{out}", needles=["journal.json: files", "extra_1_amd64.deb"])


def _set(key, value):
    def change(doc):
        doc[key] = value
    return change


def _drop(key):
    return lambda doc: doc.pop(key) and None


@pytest.mark.parametrize("change, needles", [
    (_set("pid", "4242"), ["journal.json: pid", "wants an integer"]),
    (_set("pid", True), ["journal.json: pid"]),
    (_set("pid", -1), ["journal.json: pid"]),
    (_set("pid", 10 ** 30), ["journal.json: pid"]),
    (lambda doc: b'{"pid": ' + b"9" * 5000 + b"}", ["journal.json", "not a readable rocpkg journal"]),
    (_set("started", "yesterday"), ["journal.json: started"]),
    (_set("command", "prune\nerror: forged"), ["journal.json: command"]),
    (_set("command", 7), ["journal.json: command"]),
    (_set("files", {"manifest.json": 1}), ["journal.json: files", "wants a list"]),
    (lambda doc: doc["files"].append(3), ["journal.json: files[", "not one of rocpkg's own paths"]),
    (lambda doc: doc["files"].append({"file": "x"}), ["journal.json: files["]),
    (lambda doc: doc["files"].append(["deb"]), ["journal.json: files["]),
    (lambda doc: doc["files"].append("../victim"), ["journal.json: files[", "'../victim'"]),
    (lambda doc: doc["files"].append("/etc/passwd"), ["journal.json: files["]),
    (lambda doc: doc["files"].append("deb/../../victim"), ["journal.json: files["]),
    (lambda doc: doc["files"].append("elsewhere/file"), ["journal.json: files["]),
    (lambda doc: doc["files"].append(".rocpkg/journal.json"), ["journal.json: files["]),
    (lambda doc: doc["files"].append(doc["files"][0]), ["journal.json: files", "names a path twice"]),
    (lambda doc: doc["dirs"].append("../out2"), ["journal.json: dirs["]),
    (_set("dirs", None), ["journal.json: dirs", "wants a list"]),
    (_set("made", ["victim"]), ["journal.json: made["]),
    (_set("intent", []), ["journal.json: intent"]),
    (_set("schema", "rocpkg-journal/0"), ["journal.json: schema"]),
    (_drop("files"), ["journal.json: files", "missing"]),
    (_set("surprise", 1), ["journal.json: surprise", "not a journal field"]),
    (lambda doc: [], ["journal.json: (document)"]),
    (lambda doc: b'{"schema": 1, "schema": 2}', ["journal.json", "appears twice"]),
    (lambda doc: b"\xff\xfe", ["journal.json", "not a readable rocpkg journal"]),
    (lambda doc: json.dumps(doc).encode()[:-40], ["journal.json", "not a readable rocpkg journal"]),
])
def test_a_journal_with_wrong_fields_is_refused_naming_the_field(work, change, needles):
    forge(work, change)
    errors = work.refused("verify", "{out}", needles=needles)
    assert len(errors) == 1, errors


def test_a_journal_past_the_record_limit_is_refused_unread(work):
    """journal.json is bounded as every record of OUT is (RECORD_LIMIT): its size is
    refused before a byte is read (a sparse file of 257 MiB)."""
    interrupted(work)
    os.truncate(work.out / JOURNAL, 257 << 20)
    before = {k: v for k, v in snapshot(work.root).items() if k != "out/" + JOURNAL}
    done = run("verify", work.out)
    refusal_lines(done, ["journal.json", "more than the 268435456 rocpkg reads"])
    assert {k: v for k, v in snapshot(work.root).items() if k != "out/" + JOURNAL} == before
    assert os.path.getsize(work.out / JOURNAL) == 257 << 20


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_journal_that_is_not_a_regular_file_is_refused_without_a_hang(work, kind):
    path = work.out / JOURNAL
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        os.symlink(work.victim, path)
    else:
        path.mkdir()
    work.refused("verify", "{out}", needles=["journal.json"])


# -- a journal that cannot be written whole: the change never begins --------------------------

def test_a_journal_larger_than_the_file_size_limit_fails_the_command_before_it_changes_out(work):
    """Under RLIMIT_FSIZE below the journal's size (EFBIG, as a full disk), `repo` fails
    writing its journal: exit 2 naming it, nothing changed, no journal or temporary left;
    without the limit the same command completes."""
    doc = interrupted(work, "repo")
    size = len(json.dumps(doc, indent=0, sort_keys=True)) + 1
    assert run("verify", work.out).returncode == 0        # rolled back: OUT as it was
    # above every file the change saves by copy (the state journals), below the journal
    limit = max(p.stat().st_size for p in (work.out / ".rocpkg/state").iterdir()) + 1
    assert limit < size, (limit, size)
    before = snapshot(work.root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO)]))
    done = subprocess.run([sys.executable, "-m", "rocpkg.cli", "repo", str(work.out)], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT, preexec_fn=size_limited(limit))
    refusal_lines(done, ["journal.json", "File too large"])
    assert snapshot(work.root) == before
    assert run("repo", work.out).returncode == 0
    assert run("verify", work.out).returncode == 0


def test_a_short_write_is_continued_and_a_failed_one_raised(tmp_path, monkeypatch):
    """write_all: os.write may write part of what it is given (a size limit reached, a
    signal); the rest is written, and an error after a short write is raised, not taken
    as the whole."""
    from rocpkg.formats import streams

    real = os.write
    monkeypatch.setattr(streams.os, "write", lambda fd, data: real(fd, bytes(data[:7])))
    target = tmp_path / "journal.json"
    data = json.dumps({"files": [f"deb/pool/main/p{i}.deb" for i in range(500)]}).encode()
    streams.write_durable(str(target), data)
    assert target.read_bytes() == data and os.listdir(tmp_path) == ["journal.json"]

    calls = []

    def fails_after_one_short_write(fd, data):
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(27, os.strerror(27))      # EFBIG
        return real(fd, bytes(data[:7]))

    monkeypatch.setattr(streams.os, "write", fails_after_one_short_write)
    with pytest.raises(OSError) as raised:
        streams.write_durable(str(target), b"x" * 100)
    assert raised.value.filename == str(target) and len(calls) == 2
    assert target.read_bytes() == data and os.listdir(tmp_path) == ["journal.json"]


# -- the digest cache: a shortcut, discarded when damaged -------------------------------------

@pytest.mark.parametrize("cache", [
    b"[]", b'"deb"', b"null", b"{", b'{"x": 1}', b'{"deb/pool/a.deb": [1, 2]}',
    b'{"deb/pool/a.deb": [1, 2, 3, 4, 5]}', b'{"deb/pool/a.deb": ["1", 2, 3, 4, "' + b"0" * 64 + b'"]}',
    b'{"a": 1, "a": 2}', b"\xff",
], ids=["list", "string", "null", "cut", "int-entry", "short-entry", "int-digest", "string-size", "dup", "binary"])
def test_a_damaged_digest_cache_is_discarded_and_rebuilt(work, cache):
    from rocpkg.store.digest_cache import DigestCache

    for fmt in ("deb", "rpm"):
        (work.out / f".rocpkg/digests-{fmt}.json").write_bytes(cache)
    assert DigestCache(work.out, "deb").entries == {}
    done = run("repo", work.out)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    for fmt in ("deb", "rpm"):      # written anew (empty until the copied packages settle: the racy rule)
        assert isinstance(json.loads((work.out / f".rocpkg/digests-{fmt}.json").read_text()), dict)
    assert run("verify", work.out).returncode == 0


def test_a_digest_cache_keeps_its_whole_entries_and_drops_the_rest(tmp_path):
    from rocpkg.store.digest_cache import DigestCache

    whole = [10, 1, 2, 3, "ab" * 32]
    (tmp_path / ".rocpkg").mkdir()
    (tmp_path / ".rocpkg/digests-deb.json").write_text(json.dumps(
        {"deb/pool/a.deb": whole, "deb/pool/b.deb": [10, 1, 2, True, "ab" * 32], "deb/pool/c.deb": whole[:4]}))
    assert DigestCache(tmp_path, "deb").entries == {"deb/pool/a.deb": whole}
    os.unlink(tmp_path / ".rocpkg/digests-deb.json")
    os.mkfifo(tmp_path / ".rocpkg/digests-deb.json")     # never opened for reading: no hang
    assert DigestCache(tmp_path, "deb").entries == {}
