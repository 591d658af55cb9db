"""rocpkg.store.state: the journal a build records each package in, as a crash, a merge of
shards' trees and an OUT written by an older rocpkg leave it."""
from __future__ import annotations

import json
import os

from rocpkg.store.state import STATE_DIR, StateJournal, forget, read_states, rewrite_states


def _state(n: int, file: str = "deb/pool/main/a.deb") -> dict:
    return {"fingerprint": f"f{n}", "file": file, "size": n, "sha256": "0" * 64, "mtime_ns": n, "ino": n}


def test_the_last_line_of_a_name_wins_and_each_line_is_on_disk_once_recorded(tmp_path):
    journal = StateJournal(str(tmp_path))
    journal.record("deb", "a", _state(1))
    journal.record("deb", "b", _state(2))
    assert read_states(str(tmp_path), "deb") == {"a": _state(1), "b": _state(2)}   # before close
    journal.record("deb", "a", _state(3))
    journal.close()
    assert read_states(str(tmp_path), "deb") == {"a": _state(3), "b": _state(2)}
    assert read_states(str(tmp_path), "rpm") == {}


def test_a_line_a_crash_cut_short_is_skipped_and_kept_apart_from_the_next(tmp_path):
    journal = StateJournal(str(tmp_path))
    journal.record("deb", "a", _state(1))
    journal.close()
    path = tmp_path / STATE_DIR / "deb.jsonl"
    with open(path, "ab") as fh:
        fh.write(b'{"name": "b", "fingerprint": "f')      # killed mid-write
    journal = StateJournal(str(tmp_path))
    journal.record("deb", "c", _state(3))
    journal.close()
    assert read_states(str(tmp_path), "deb") == {"a": _state(1), "c": _state(3)}


def test_a_rewrite_keeps_one_line_per_name_and_joins_shards_and_older_state_files(tmp_path):
    out = str(tmp_path)
    legacy = tmp_path / STATE_DIR / "deb"          # rocpkg before the journal: a file per package
    legacy.mkdir(parents=True)
    (legacy / "old.json").write_text(json.dumps(_state(1)))
    (legacy / "a.json").write_text(json.dumps(_state(1)))
    for shard in ((1, 2), (2, 2)):
        journal = StateJournal(out, shard)
        journal.record("deb", f"s{shard[0]}", _state(shard[0]))
        journal.record("deb", "a", _state(5))
        journal.close()
    states = read_states(out, "deb")
    assert states == {"old": _state(1), "a": _state(5), "s1": _state(1), "s2": _state(2)}

    rewrite_states(out, "deb", states)
    assert sorted(os.listdir(tmp_path / STATE_DIR)) == ["deb.jsonl"]
    lines = (tmp_path / STATE_DIR / "deb.jsonl").read_text().splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["a", "old", "s1", "s2"]
    assert read_states(out, "deb") == states


def test_forgetting_removed_files_drops_only_their_states(tmp_path):
    out = str(tmp_path)
    journal = StateJournal(out)
    journal.record("deb", "a", _state(1, "deb/pool/main/a.deb"))
    journal.record("deb", "b", _state(2, "deb/pool/main/b.deb"))
    journal.record("rpm", "a", _state(3, "rpm/x86_64/a.rpm"))
    journal.close()
    forget(out, {"deb/pool/main/a.deb", "rpm/x86_64/a.rpm"})
    assert read_states(out, "deb") == {"b": _state(2, "deb/pool/main/b.deb")}
    assert read_states(out, "rpm") == {}


def test_a_journal_planted_as_a_symlink_is_not_appended_through(tmp_path):
    import errno

    import pytest

    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(b"")
    (tmp_path / STATE_DIR).mkdir(parents=True)
    (tmp_path / STATE_DIR / "deb.jsonl").symlink_to(elsewhere)
    journal = StateJournal(str(tmp_path))
    with pytest.raises(OSError) as raised:
        journal.record("deb", "a", _state(1))
    assert raised.value.errno == errno.ELOOP and raised.value.filename.endswith("deb.jsonl")
    assert elsewhere.read_bytes() == b""
    assert read_states(str(tmp_path), "deb") == {}      # nor read through


def test_a_record_without_every_field_is_no_record(tmp_path):
    """Hand-edited or damaged: that package is built again, and nothing that reads the
    states (the build, `rocpkg repo`) meets a missing field."""
    journal = StateJournal(str(tmp_path))
    journal.record("deb", "a", _state(1))
    journal.record("deb", "b", {k: v for k, v in _state(2).items() if k != "ino"})
    journal.record("deb", "c", {**_state(3), "size": "3"})
    journal.close()
    assert read_states(str(tmp_path), "deb") == {"a": _state(1)}
