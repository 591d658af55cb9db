"""OUT's journal and durable writes, as hostile as any other record of OUT.

A journal (rocpkg.store.journal) tells the next command what to delete and what to put back,
so one that is damaged, forged or contradictory must be refused, never acted on: each case
leaves a real journal of an interrupted change (a process that entered a Change and died),
breaks it, and runs `verify`: exit 2, one `error:` line naming the journal and the field,
no traceback, and the work directory byte-identical. A journal that cannot be written whole
(a file-size limit, a full disk) fails its command before the change begins.
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
TOUCHED = ".rocpkg/journal.d/touched.jsonl"
SAVED = ".rocpkg/journal.d/saved"
# a change that has removed one package file and replaced manifest.json, then died
DIE_IN_A_CHANGE = """
import glob, os, sys
from rocpkg.formats.streams import write_atomic
from rocpkg.store.journal import Change
change = Change(sys.argv[1], sys.argv[2]).__enter__()
change.set_aside(sorted(glob.glob(os.path.join(sys.argv[1], "deb/pool/**/*.deb"), recursive=True))[0])
write_atomic(os.path.join(sys.argv[1], "manifest.json"), b"{}")
os._exit(9)
"""


def interrupted(w: Work, command: str = "prune") -> dict:
    """Leave a real journal of an interrupted change in OUT (a process that began one,
    removed a package, replaced the manifest and died); its header."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO)]))
    died = subprocess.run([sys.executable, "-c", DIE_IN_A_CHANGE, str(w.out), command], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert died.returncode == 9, died.stderr
    return json.loads((w.out / JOURNAL).read_text())


def forge(w: Work, change) -> None:
    """Apply change(doc) to the interrupted change's journal header; a returned value replaces it."""
    doc = interrupted(w)
    replaced = change(doc)
    data = replaced if isinstance(replaced, bytes) else json.dumps(doc if replaced is None else replaced).encode()
    (w.out / JOURNAL).write_bytes(data)


def packages(w: Work) -> list[str]:
    return sorted(str(p.relative_to(w.out)) for p in w.out.rglob("*") if p.suffix in (".deb", ".rpm")
                  and not str(p.relative_to(w.out)).startswith(".rocpkg"))


def test_an_intact_journal_is_rolled_back_and_keeps_every_package(work):
    before, manifest = packages(work), (work.out / "manifest.json").read_bytes()
    interrupted(work)
    lines = [json.loads(line) for line in (work.out / TOUCHED).read_text().splitlines()]
    assert [next(iter(line)) for line in lines] == ["saved", "saved"], lines      # only what it touched
    assert len(packages(work)) == len(before) - 1
    done = run("verify", work.out)
    assert done.returncode == 0 and "rolled back an interrupted rocpkg prune" in done.stderr, done.stderr
    assert "2 files put back" in done.stderr, done.stderr
    assert packages(work) == before and not (work.out / ".rocpkg/journal.d").exists()
    assert (work.out / "manifest.json").read_bytes() == manifest


def _line(text: bytes):
    def change(w: Work):
        with open(w.out / TOUCHED, "ab") as fh:
            fh.write(text + b"\n")
    return change


@pytest.mark.parametrize("change, needles", [
    # a rollback removes what a change made: never a package the manifest records
    (lambda w: _line(json.dumps({"new": packages(w)[0]}).encode())(w), ["touched.jsonl", "which the manifest lists"]),
    (_line(b'{"new": "../victim"}'), ["touched.jsonl: line 3", "../victim"]),
    (_line(b'{"new": "/etc/passwd"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": "deb/../../victim"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": "elsewhere/file"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": ".rocpkg/journal.json"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": ".rocpkg/lock"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"gone": "manifest.json"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": "rocm.list", "saved": "rocm.list"}'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": 3}'), ["touched.jsonl: line 3"]),
    (_line(b'["new", "rocm.list"]'), ["touched.jsonl: line 3"]),
    (_line(b'{"new": "rocm.list"'), ["touched.jsonl: line 3", "not a readable rocpkg journal line"]),
    (_line(b"\xff\xfe"), ["touched.jsonl: line 3"]),
], ids=["recorded-package", "parent", "absolute", "climbs", "foreign", "journal", "lock", "kind", "two-kinds",
        "number", "list", "cut-inside", "binary"])
def test_a_journal_line_that_is_not_one_is_refused_never_acted_on(work, change, needles):
    interrupted(work)
    before = snapshot(work.root)
    change(work)
    before = {k: v for k, v in before.items() if k != "out/" + TOUCHED}
    work.refused("verify", "{out}", needles=needles)
    work.refused("repo", "{out}", needles=needles)
    assert {k: v for k, v in snapshot(work.root).items() if k != "out/" + TOUCHED} == before


def test_a_line_cut_short_by_a_kill_names_no_change_and_is_ignored(work):
    """A line is written whole before its path changes: one without its newline (the kill
    came during its write) changed nothing, and the rest of the journal is rolled back."""
    before = packages(work)
    interrupted(work)
    with open(work.out / TOUCHED, "ab") as fh:
        fh.write(b'{"new": "rocm.li')
    done = run("verify", work.out)
    assert done.returncode == 0 and "rolled back" in done.stderr, done.stderr
    assert packages(work) == before


def _set(key, value):
    def change(doc):
        doc[key] = value
    return change


def _drop(key):
    def change(doc):
        del doc[key]
    return change


@pytest.mark.parametrize("change, needles", [
    (_set("pid", "4242"), ["journal.json: pid", "wants an integer"]),
    (_set("pid", True), ["journal.json: pid"]),
    (_set("pid", -1), ["journal.json: pid"]),
    (_set("pid", 10 ** 30), ["journal.json: pid"]),
    (lambda doc: b'{"pid": ' + b"9" * 5000 + b"}", ["journal.json", "not a readable rocpkg journal"]),
    (_set("started", "yesterday"), ["journal.json: started"]),
    (_set("command", "prune\nerror: forged"), ["journal.json: command"]),
    (_set("command", 7), ["journal.json: command"]),
    (_set("made", ["victim"]), ["journal.json: made["]),
    (_set("made", None), ["journal.json: made", "wants a list"]),
    (_set("schema", "rocpkg-journal/1"), ["journal.json: schema"]),
    (_drop("made"), ["journal.json: made", "missing"]),
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
    limit = size - 1        # the journal's header is the change's first write
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
