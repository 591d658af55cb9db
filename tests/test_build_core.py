"""The build core: the plan is plain data, complete before the first write; the checks run
once, on it, before the first package is handed out; then each package is published as
soon as its writer returns, so a build killed late keeps every package it finished and
the rerun writes only the rest, into the bytes of an uninterrupted build."""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import rocpkg, snapshot
from test_build import output_files
from test_staging import carry_fat_binary

from rocpkg.builder import gate, packing
from rocpkg.builder.workers import Workers
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.model import FILE
from rocpkg.store.outdir import STAGING_DIR
from rocpkg.store.state import read_states
from rocpkg.plan.make import Plan, make_plan

ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
BUILD = ["build", "--formats", "deb,rpm", "-j", "2"]
# the log the patched writer and checks append to (one O_APPEND write a line: whole lines
# from every process); set by the tests that patch them, inherited by the forked workers
LOG = "ROCPKG_TEST_CORE_LOG"


def _packages(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.suffix in (".deb", ".rpm")
                  and not p.relative_to(out).as_posix().startswith(".rocpkg/"))


def _summary(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return json.loads(done.stdout)["totals"]


# `rocpkg build` killed (SIGKILL, as a crash) the moment it reports its K-th package done,
# the writer of package BLOCKED ("format name") never answering until then
KILLED_AT_REPORT = """
import os, signal, sys, time
from rocpkg.builder import packing, run

build_one, build_release = packing.build_one, run.build_release
KILL_AT, BLOCKED = int(sys.argv[1]), sys.argv[2]

def blocked(task):
    if f"{task.spec.format} {task.spec.name}" == BLOCKED:
        time.sleep(600)
    return build_one(task)

def killed_at(*args, progress=None, **kwargs):
    def report(event):
        if progress is not None:
            progress(event)
        if event.done == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
    return build_release(*args, progress=report, **kwargs)

packing.build_one, run.build_release = blocked, killed_at
from rocpkg.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


def _first_with_a_host_elf(artifacts: Path) -> str:
    """The first package handed out (largest first) that ships a host ELF, as "format name"."""
    config = load_config(None)
    plan = make_plan(config, scan(str(artifacts), config.settings["families"]), formats=["deb", "rpm"])
    shipping = [s for specs in plan.packages.values() for s in specs
                if any(fe.type == FILE and plan.facts[fe.source].elf == "host" for fe in s.files)]
    first = min(shipping, key=lambda s: (-s.payload_size, s.format, s.name))
    return f"{first.format} {first.name}"


def test_a_build_killed_after_most_packages_keeps_them_and_the_rerun_writes_only_the_rest(small_release, tmp_path):
    reference, out = tmp_path / "reference", tmp_path / "out"
    whole = _summary(rocpkg(*BUILD, "--json", "-a", small_release, "-o", reference, env=ENV))
    total = whole["built"]
    assert total > 10 and whole["up_to_date"] == 0
    # one package shipping a host ELF is still being written when the build is killed at
    # [total - 1/total]: every package reported is in OUT, recorded as finished
    blocked = _first_with_a_host_elf(small_release)
    killed = subprocess.Popen([sys.executable, "-c", KILLED_AT_REPORT, str(total - 1), blocked] + BUILD
                              + ["-a", str(small_release), "-o", str(out)],
                              env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert killed.wait(timeout=120) == -signal.SIGKILL
    finally:
        os.killpg(killed.pid, signal.SIGKILL)   # its workers die with it, as in a crash
    assert not (out / "manifest.json").exists()
    assert len(_packages(out)) == total - 1
    fmt, name = blocked.split()
    recorded = {fmt: read_states(str(out), fmt) for fmt in ("deb", "rpm")}
    assert sum(map(len, recorded.values())) == total - 1 and name not in recorded[fmt]

    again = _summary(rocpkg(*BUILD, "--json", "-a", small_release, "-o", out, env=ENV))

    assert (again["up_to_date"], again["built"]) == (total - 1, 1)
    assert output_files(out) == output_files(reference)
    assert not (out / STAGING_DIR).exists()
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def _log(line: str) -> None:
    fd = os.open(os.environ[LOG], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


_real_build_one = packing.build_one
_real_refusals = gate.refusals


def _logged_build_one(task):
    """packing.build_one, noted in the log as it starts (a module function: the workers
    take it by name)."""
    _log(f"package {task.spec.format} {task.spec.name}")
    return _real_build_one(task)


def _logged_refusals(*args, **kwargs):
    found = _real_refusals(*args, **kwargs)
    _log("checked")
    return found


@pytest.fixture
def logged(tmp_path, monkeypatch):
    """The writer and the checks noted in a log as they run, in this process and in the
    workers a build forks from it; returns the call that reads the log."""
    log = tmp_path / "log"
    monkeypatch.setenv(LOG, str(log))
    monkeypatch.setattr(packing, "build_one", _logged_build_one)
    monkeypatch.setattr(gate, "refusals", _logged_refusals)
    return lambda: log.read_text().splitlines() if log.exists() else []


def _build_in_process(artifacts: Path, out: Path, *extra: str) -> int:
    """`rocpkg build -j 2` run in this process (its workers are forked from here)."""
    from rocpkg.cli.main import main

    return main(BUILD + ["-a", str(artifacts), "-o", str(out), "-q", *extra])


def test_the_checks_run_once_before_the_first_package_is_handed_out(small_release, tmp_path, logged):
    out = tmp_path / "out"
    assert _build_in_process(small_release, out) == 0
    log = logged()
    manifest = json.loads((out / "manifest.json").read_text())
    assert log[0] == "checked" and log.count("checked") == 1
    assert sorted(log[1:]) == sorted(f"package {p['format']} {p['name']}" for p in manifest["packages"])


def test_a_refused_build_writes_nothing_and_leaves_out_as_it_was(small_release_copy, tmp_path, logged, capsys):
    out = tmp_path / "out"
    assert _build_in_process(small_release_copy, out, "--release", "1") == 0
    before = snapshot(out)
    written = len(logged())
    library = str(carry_fat_binary(small_release_copy))

    assert _build_in_process(small_release_copy, out, "--release", "2") == 2

    err = capsys.readouterr().err
    assert "[device-code-in-host]" in err and library in err and "Traceback" not in err
    assert logged()[written:] == ["checked"]   # checked, refused: no writer started
    assert snapshot(out) == before


def _plain(value) -> bool:
    """Data only: no callable, no running work, anywhere inside."""
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return True
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def test_a_plan_is_plain_data_with_the_host_search_in_when_it_is_returned(small_release_copy):
    library = str(carry_fat_binary(small_release_copy))
    config = load_config(None)
    with Workers(2) as workers:
        catalog = scan(str(small_release_copy), config.settings["families"], embedded_objects=False,
                       starmap_async=workers.starmap_async)
        plan = make_plan(config, catalog, formats=["deb", "rpm"])
        assert catalog.pending is None      # waited for by make_plan
    assert plan.facts[library].host_code[0][0] == "fat-binary"
    assert "object" not in {str(f.type) for f in dataclasses.fields(Plan)}
    assert not hasattr(plan, "settle_facts")
    assert all(_plain(getattr(plan, f.name)) for f in dataclasses.fields(plan))
    assert pickle.loads(pickle.dumps(plan)) == plan
