"""Input that used to end in a traceback or a hang: numbers Python cannot convert or
datetime cannot hold, JSON that json.loads takes silently (a repeated key, 1e999, NaN), a
version with a space read back from manifest.json, a .deb whose ar header lies about a
member's size, and a package list that is a FIFO.

Each case copies the small built release of tests/test_hostile_out.py, breaks one thing,
and runs the command a user would: exit 2, `error:` lines naming the file and the JSON
path, the option or the variable (and the allowed range), no traceback, within the
subprocess timeout, and the work directory byte-identical to what it was before.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from test_hostile_out import Work, built, run, work  # noqa: F401  (built, work: its fixtures)

HUGE = "9" * 5000                   # past Python's 4300-digit int-string limit
EPOCH_RANGE = "from 0 to 4294967295"


def build_args(work: Work, *extra) -> list:
    return ["build", "-c", work.config, "-a", work.artifacts, "-o", work.out, "--formats", "deb", *extra]


# -- package.json: numbers and keys json.loads takes or cannot convert ------------------------

def _replace_in_config(old: str, new: str):
    def change(w: Work):
        text = w.config.read_text()
        assert old in text
        w.config.write_text(text.replace(old, new, 1))
    return change


CONFIG_CASES = [
    ("settings-int-5000-digits", _replace_in_config('"version": "1.0.0"', f'"version": "1.0.0", "epoch": 1{HUGE}'),
     ["settings.epoch", "5001 digits"]),
    ("negative-int-5000-digits", _replace_in_config('"version": "1.0.0"', f'"version": "1.0.0", "epoch": -{HUGE}'),
     ["settings.epoch", "5000 digits"]),
    ("definition-int-5000-digits", _replace_in_config('"Package": "ns-base"', f'"Package": "ns-base", "Epoch": {HUGE}'),
     ["packages[0].Epoch", "5000 digits"]),
    ("number-out-of-range", _replace_in_config('"version": "1.0.0"', '"version": "1.0.0", "compression_level": 1e999'),
     ["settings.compression_level", "1e999"]),
    ("nan", _replace_in_config('"version": "1.0.0"', '"version": "1.0.0", "compression_level": NaN'),
     ["settings.compression_level", "NaN"]),
    ("minus-infinity", _replace_in_config('"version": "1.0.0"', '"version": "1.0.0", "epoch": -Infinity'),
     ["settings.epoch", "-Infinity"]),
    ("duplicate-setting", _replace_in_config('"version": "1.0.0"', '"version": "2.0", "version": "1.0.0"'),
     ["settings", "'version' appears twice"]),
    ("duplicate-in-a-definition", _replace_in_config('"Package": "ns-blas"', '"Package": "x", "Package": "ns-blas"'),
     ["packages[1]", "'Package' appears twice"]),
    ("duplicate-deep", _replace_in_config('"Name": "base"', '"Name": "base", "Name": "base"'),
     ["packages[0].Artifactory[0].Artifact_Subdir[0]", "'Name' appears twice"]),
    ("duplicate-top-level", lambda w: w.config.write_text('{"packages": [], ' + w.config.read_text()[1:]),
     ["(document)", "'packages' appears twice"]),
]


@pytest.mark.parametrize("change,needles", [pytest.param(c, n, id=i) for i, c, n in CONFIG_CASES])
def test_package_json_numbers_and_keys_are_refused_by_json_path(work, change, needles):
    change(work)
    errors = work.refused(*build_args(work), needles=[work.config, *needles])
    assert len(errors) == 1, errors


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_package_json_that_is_no_regular_file_is_refused_without_blocking(work, kind):
    config = {"fifo": work.root / "fifo.json", "directory": work.root, "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(config)
    work.config = config
    work.refused(*build_args(work), needles=[config, {"fifo": "a FIFO", "directory": "a directory",
                                                      "device": "a character device"}[kind]])


# -- OUT's records: the same strict JSON ------------------------------------------------------

def _manifest_text(old: str, new: str):
    def change(doc):
        text = json.dumps(doc)
        assert old in text
        return text.replace(old, new, 1)
    return change


MANIFEST_CASES = [
    ("size-5000-digits", lambda doc: _manifest_text(f'"size": {doc["packages"][0]["size"]}', f'"size": {HUGE}')(doc),
     ["packages[0].size", "5000 digits"]),
    ("date-1e999", lambda doc: _manifest_text('"date": 1700000000', '"date": 1e999')(doc),
     ["releases[0].date", "1e999"]),
    ("date-nan", lambda doc: _manifest_text('"date": 1700000000', '"date": NaN')(doc), ["releases[0].date", "NaN"]),
    ("duplicate-key-in-a-package", lambda doc: _manifest_text('"name": ', '"name": "x", "name": ')(doc),
     ["packages[0]", "'name' appears twice"]),
    ("release-version-with-a-space", lambda doc: doc["releases"][0].update(version="7.1 0"),
     ["releases[0].version", "'7.1 0'"]),
    ("release-release-with-a-space", lambda doc: doc["releases"][0].update(release="1 0"),
     ["releases[0].release", "'1 0'"]),
    ("release-version-with-a-hyphen", lambda doc: doc["releases"][0].update(version="7.1-0"),
     ["releases[0].version", "'7.1-0'"]),
    ("release-version-with-an-epoch", lambda doc: doc["releases"][0].update(version="3:7.1"),
     ["releases[0].version", "'3:7.1'"]),
]


@pytest.mark.parametrize("change,needles", [pytest.param(c, n, id=i) for i, c, n in MANIFEST_CASES])
@pytest.mark.parametrize("command", ["verify", "prune", "repo", "build"])
def test_a_manifest_json_never_takes_is_refused_by_json_path(work, change, needles, command):
    work.manifest(change)
    args = {"verify": ["verify", "{out}"], "prune": ["prune", "{out}", "--keep", "1"], "repo": ["repo", "{out}"],
            "build": build_args(work, "--release", "2")}[command]
    work.refused(*args, needles=["{out}/manifest.json", *needles])


# -- dates and counts past what datetime and int() take ---------------------------------------

@pytest.mark.parametrize("policy", [f"nightly={HUGE}", f"nightly={HUGE}d", "dev=100001", "release=100001y"])
def test_a_policy_count_or_age_out_of_range_is_refused(work, policy):
    errors = work.refused("prune", "{out}", "--policy", policy, needles=["--policy", "from 0 to 100000"])
    assert len(errors) == 1, errors


@pytest.mark.parametrize("epoch", ["1" + "0" * 30, HUGE, "-5", "4294967296", "12e5"])
@pytest.mark.parametrize("command", ["prune-age", "prune-count", "build-nightly", "plan-nightly"])
def test_a_source_date_epoch_out_of_range_is_refused_naming_the_range(work, epoch, command):
    args = {"prune-age": ["prune", "{out}", "--policy", "nightly=30d"],
            "prune-count": ["prune", "{out}", "--policy", "nightly=3"],
            "build-nightly": build_args(work, "--channel", "nightly"),
            "plan-nightly": ["plan", "-c", work.config, "-a", work.artifacts, "--channel", "nightly"]}[command]
    errors = work.refused(*args, needles=["SOURCE_DATE_EPOCH", EPOCH_RANGE], env={"SOURCE_DATE_EPOCH": epoch})
    assert len(errors) == 1, errors


def test_a_shard_index_of_5000_digits_is_refused(work):
    work.refused(*build_args(work, "--shard", f"{HUGE}/2"), needles=["--shard", "1 <= I <= N <= 10000"])


# -- a .deb whose ar headers lie -----------------------------------------------------------------

def _ar_members(data: bytes) -> list[tuple[int, int]]:
    """(header offset, size) of each ar member."""
    found, at = [], 8
    while at < len(data):
        size = int(data[at + 48:at + 58])
        found.append((at, size))
        at += 60 + size + size % 2
    return found


def _set_ar_field(deb: Path, member: int, field: slice, value: bytes) -> None:
    data = bytearray(deb.read_bytes())
    at = _ar_members(bytes(data))[member][0]
    data[at + field.start:at + field.stop] = value.ljust(field.stop - field.start)
    deb.write_bytes(bytes(data))


SIZE, DATE = slice(48, 58), slice(16, 28)


@pytest.mark.parametrize("member,field,value,needle", [
    (0, SIZE, b"-5", "size '-5' is not decimal digits"),
    (1, SIZE, b"-60", "size '-60' is not decimal digits"),     # control.tar: was tarfile's traceback
    (2, SIZE, b"-1", "size '-1' is not decimal digits"),
    (1, SIZE, b"0x10", "size '0x10' is not decimal digits"),
    (1, SIZE, b"99999999", "its 99999999 bytes end past the file's"),
    (2, SIZE, b"9999999999", "its 9999999999 bytes end past the file's"),
    (1, DATE, b"-7", "date '-7' is not decimal digits"),
], ids=["debian-binary-negative", "control-negative", "data-negative", "control-hex", "control-past-eof",
        "data-past-eof", "date-negative"])
def test_verify_names_a_deb_member_whose_ar_header_lies(work, member, field, value, needle):
    deb = work.deb()
    _set_ar_field(deb, member, field, value)
    name = ["debian-binary", "control.tar", "data.tar"][member]
    errors = work.refused("verify", "{out}", needles=[deb.name, needle])
    assert any(f"ar member '{name}" in line and needle in line for line in errors), errors


def test_verify_names_a_control_member_that_is_no_tar(work):
    """A control.tar.gz that is gzip of something else: tarfile's error is a verify problem."""
    deb = work.deb()
    data = deb.read_bytes()
    (head, size), (second, _) = _ar_members(data)[1], _ar_members(data)[2]
    body = gzip.compress(b"x" * 100, mtime=0)
    header = bytearray(data[head:head + 60])
    header[48:58] = str(len(body)).encode().ljust(10)
    deb.write_bytes(data[:head] + bytes(header) + body + b"\n" * (len(body) % 2) + data[second:])
    work.refused("verify", "{out}", needles=[deb.name, "truncated header"])



@pytest.mark.parametrize("line", ["[" * 100_000 + "]" * 100_000, '{"name": "ns", "name": "ns-base"}',
                                  '{"name": "ns", "size": 1' + "0" * 5000 + "}"])
def test_a_state_record_rocpkg_never_writes_is_no_record(work, line):
    """The per-package state only spares rebuilding unchanged packages: a line json cannot
    take (nested past its recursion, a repeated key, a 5000-digit integer) is no record,
    that package is built again, never a traceback."""
    with open(work.out / ".rocpkg/state/deb.jsonl", "a") as journal:
        journal.write(line + "\n")
    done = run(*build_args(work, "--release", "2"), env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
