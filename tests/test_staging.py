"""A build writes its packages into OUT/.rocpkg/staging while its checks run, and moves
them into place only once the checks pass (rocpkg.out.outdir): a refused build leaves OUT as
it found it, whether OUT did not exist, was empty, or held an earlier release."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from cli_run import rocpkg, snapshot
from rocpkg.build import gate
from rocpkg.build.run import build_release
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.errors import RocpkgInputError
from rocpkg.model import BuildOptions
from rocpkg.out.outdir import STAGING_DIR
from rocpkg.plan.make import make_plan

from kpack.elf import build_amdgpu_code_object, build_host_elf, build_offload_bundle
from kpack.marker import MARKER_SECTION, encode_marker, read_marker

OPTIONS = BuildOptions(source_date_epoch=1700000000)


@pytest.fixture
def artifacts(small_release_copy):
    return small_release_copy


def carry_fat_binary(artifacts: Path) -> Path:
    """Make one host library keep its fat binary: a [device-code-in-host] refusal."""
    library = artifacts / "rand_lib_generic" / "rocRAND" / "stage" / "lib" / "librocrand.so.1.0"
    bundle = build_offload_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", build_amdgpu_code_object("gfx942"))])
    library.write_bytes(build_host_elf({MARKER_SECTION: encode_marker(read_marker(library)), ".hip_fatbin": bundle},
                                       soname="librocrand.so.1"))
    return library


def refused_build(artifacts: Path, out: Path) -> str:
    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb,rpm", "-j", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "[device-code-in-host]" in done.stderr
    return done.stderr


def test_a_refused_build_into_a_new_directory_leaves_no_directory(artifacts, tmp_path):
    carry_fat_binary(artifacts)
    out = tmp_path / "new" / "out"

    refused_build(artifacts, out)

    assert not (tmp_path / "new").exists()


def test_a_refused_build_over_an_earlier_release_changes_nothing(artifacts, tmp_path):
    out = tmp_path / "out"
    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb,rpm", "--release", "1")
    assert done.returncode == 0, done.stderr
    before = snapshot(out)
    carry_fat_binary(artifacts)

    refused_build(artifacts, out)   # the same release: its packages would be rebuilt (and then refused)

    assert snapshot(out) == before
    assert not (out / STAGING_DIR).exists()


def test_the_packages_are_written_while_the_checks_run(artifacts, tmp_path, monkeypatch):
    """With workers, verify's checks start only after the first package has been staged
    (they wait for it here, so a build that checked first would never stage one); the
    refusal then removes it and OUT is not created."""
    carry_fat_binary(artifacts)
    config = load_config(None)
    plan = make_plan(config, scan(str(artifacts), config.settings["families"]), formats=["deb"])
    out = tmp_path / "out"
    seen = []
    checks = gate.refusals

    def refusals_after_a_staged_package(*args, **kwargs):
        deadline = time.monotonic() + 60
        staged = out / STAGING_DIR / "deb"
        while time.monotonic() < deadline and not seen:
            if staged.exists():
                seen.extend(p.name for p in staged.iterdir() if p.name.endswith(".deb"))
            time.sleep(0.01)
        return checks(*args, **kwargs)

    monkeypatch.setattr(gate, "refusals", refusals_after_a_staged_package)

    with pytest.raises(RocpkgInputError) as refused:
        build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=2)

    assert seen, "no package was staged while the checks ran"
    assert "device-code-in-host" in str(refused.value)
    assert not out.exists()


def test_a_killed_builds_staging_area_is_cleared_by_the_next_build(artifacts, tmp_path):
    out = tmp_path / "out"
    left = out / STAGING_DIR / "deb" / "rocm-left-over_1.0_amd64.deb"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"half a package")

    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb")

    assert done.returncode == 0, done.stderr
    assert not (out / STAGING_DIR).exists()
    assert not list(out.rglob("rocm-left-over*"))
    assert list((out / "deb" / "pool" / "main").glob("*.deb"))


def test_a_build_with_one_job_checks_before_it_writes(artifacts, tmp_path, monkeypatch):
    """Without workers nothing runs beside the checks: nothing is written before they pass."""
    carry_fat_binary(artifacts)
    config = load_config(None)
    plan = make_plan(config, scan(str(artifacts), config.settings["families"]), formats=["deb"])
    out = tmp_path / "out"
    from rocpkg.build import packing

    def never(task):
        raise AssertionError(f"{task.spec.name} written before the checks passed")

    monkeypatch.setattr(packing, "build_one", never)

    with pytest.raises(RocpkgInputError):
        build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1)
    assert not out.exists()


# -- the catalog's search of host data sections, on the build's workers --------------------


def test_the_host_search_on_workers_finds_what_the_threads_find(artifacts):
    from rocpkg.build.workers import Workers

    library = str(carry_fat_binary(artifacts))
    families = load_config(None).settings["families"]
    here = scan(str(artifacts), families, embedded_objects=False)
    with Workers(2) as workers:
        there = scan(str(artifacts), families, embedded_objects=False, starmap_async=workers.starmap_async)
        assert there.pending is not None
        there.settle()
    assert there.pending is None
    assert here.facts == there.facts
    assert here.facts[library].host_code and here.facts[library].host_code[0][0] == "fat-binary"


def test_a_host_library_replaced_while_the_workers_search_it_is_refused(artifacts):
    from rocpkg.build.workers import Workers

    library = carry_fat_binary(artifacts)
    families = load_config(None).settings["families"]
    with Workers(2) as workers:
        release = make_plan(load_config(None), scan(str(artifacts), families, embedded_objects=False,
                                                   starmap_async=_after_replacing(library, workers)))
        with pytest.raises(RocpkgInputError) as refused:
            release.settle_facts()
    assert any(str(library) == where and "was replaced" in what for where, what in refused.value.problems)


def _host_elfs(plan) -> list[str]:
    return sorted(source for source, facts in plan.facts.items() if facts.elf == "host")


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_build_searches_each_host_elf_while_its_writer_reads_it(artifacts, tmp_path, monkeypatch, jobs):
    """Issue 15: every input byte read once. The writer that packs a host ELF searches its
    data sections on the way; the file is not read again for the search (found_in)."""
    from rocpkg.inputs import host_code
    from rocpkg.build.workers import Workers

    def read_again(*args):
        raise AssertionError(f"{args[0]} was read again for its search")

    monkeypatch.setattr(host_code, "found_in", read_again)
    config = load_config(None)
    with Workers(jobs) as workers:
        plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False,
                                      starmap_async=workers.starmap_async, writers=True), formats=["deb", "rpm"])
        assert _host_elfs(plan)
        build_release(plan, tmp_path / "out", formats=["deb", "rpm"], options=OPTIONS, jobs=jobs, workers=workers)
    assert all(plan.facts[source].host_code == () for source in _host_elfs(plan))


@pytest.mark.parametrize("jobs", [1, 2])
def test_device_code_a_writer_finds_in_a_host_elf_refuses_the_build_before_a_package_is_published(
        artifacts, tmp_path, jobs):
    from rocpkg.build.workers import Workers

    library = str(carry_fat_binary(artifacts))
    config = load_config(None)
    out = tmp_path / "out"
    with Workers(jobs) as workers:
        plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False,
                                      starmap_async=workers.starmap_async, writers=True), formats=["deb", "rpm"])
        with pytest.raises(RocpkgInputError) as refused:
            build_release(plan, out, formats=["deb", "rpm"], options=OPTIONS, jobs=jobs, workers=workers)
    assert any("[device-code-in-host]" in what and library in where + what for where, what in refused.value.problems)
    assert plan.facts[library].host_code[0][0] == "fat-binary"
    assert not out.exists()


def test_packages_written_before_the_host_search_is_in_are_reported_then_moved(artifacts, tmp_path):
    """Progress counts each package as it is written; it moves into OUT only once every
    writer searching a host ELF has answered."""
    config = load_config(None)
    out = tmp_path / "out"
    plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False,
                                  writers=True), formats=["deb"])
    seen = []

    staged = []

    def progress(event):
        if event.last is not None:
            seen.append((event.done, (out / event.last.file).exists()))
            # a package waiting for the verdict has its control file in the staging area, not in OUT
            control = out / "control" / f"{event.last.name}.control"
            waiting = out / STAGING_DIR / "deb" / f"{Path(event.last.file).name}.metadata"
            staged.append((control.exists(), waiting.exists()))

    result = build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1, progress=progress)
    assert [done for done, _ in seen] == list(range(1, len(result.packages) + 1))
    assert any(not moved for _, moved in seen), "no package waited for the host search"
    assert all((out / o.file).exists() for o in result.packages)
    assert all(waiting != moved for (_, moved), (_, waiting) in zip(seen, staged))
    for outcome in result.packages:     # each control file moved into place with its package
        assert (out / "control" / f"{outcome.name}.control").read_text().startswith(f"Package: {outcome.name}\n")
    assert not (out / STAGING_DIR).exists()


def test_a_host_elf_its_writer_cannot_read_leaves_out_as_it_was(artifacts, tmp_path):
    """A package whose writer searches a host ELF fails (the file shrank since the walk):
    that file's verdict is unknown, so no package moves into OUT and the build says why."""
    config = load_config(None)
    out = tmp_path / "out"
    plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False,
                                  writers=True), formats=["deb"])
    library = next(s for s in _host_elfs(plan) if s.endswith("librocrand.so.1.0"))
    with open(library, "r+b") as fh:
        fh.truncate(os.path.getsize(library) - 1)

    with pytest.raises(RocpkgInputError) as refused:
        build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1)
    assert any(library in what and "changed since planning" in what for _, what in refused.value.problems)
    assert not out.exists()


def test_a_sparse_host_elf_is_searched_through_its_holes(tmp_path):
    """A writer reads a file's holes as zeros it never reads (rocpkg.formats.streams); the search
    sees them too, and a bundle after a hole is found."""
    from kpack.bundle import BUNDLE_MAGIC
    from kpack.placement import StreamedSearch, host_device_code
    from rocpkg.formats.streams import SourceFile

    bundle = build_offload_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", build_amdgpu_code_object("gfx942"))])
    image = build_host_elf({".text": b"\xc3", ".data": b"\1" + bytes(3 << 20) + bundle})
    path = tmp_path / "libsparse.so"
    with open(path, "wb") as fh:     # the zero run written as a hole
        start = image.index(bytes(1 << 20))
        end = image.index(BUNDLE_MAGIC)
        fh.write(image[:start])
        fh.seek(end - (end - start) % 4096)
        fh.write(image[end - (end - start) % 4096:])
    assert path.read_bytes() == image
    search = StreamedSearch(embedded_objects=False)
    with SourceFile("test", str(path), len(image), watch=search) as source:
        assert b"".join(bytes(c) for c in source.chunks()) == image
    assert search.whole
    assert search.findings(path) == host_device_code(path, embedded_objects=False) != []


def test_the_host_elfs_of_packages_already_built_are_searched_by_reading_them(artifacts, tmp_path, monkeypatch):
    from rocpkg.inputs import host_code

    config = load_config(None)
    out = tmp_path / "out"

    def planned():
        return make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False,
                                      writers=True), formats=["deb"])

    build_release(planned(), out, formats=["deb"], options=OPTIONS, jobs=1)
    read = []

    def found_in(source, identity, embedded_objects):
        read.append(source)
        return {"host_code": (), "device_error": ""}, None

    monkeypatch.setattr(host_code, "found_in", found_in)
    plan = planned()
    result = build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1)
    assert result.packages and not result.rebuilt
    assert sorted(read) == _host_elfs(plan)


def _after_replacing(library: Path, workers):
    """starmap_async that swaps `library` for a copy (a new inode) before the search starts."""
    def start(function, arguments):
        copy = library.with_name(library.name + ".new")
        shutil.copy2(library, copy)
        os.replace(copy, library)
        return workers.starmap_async(function, arguments)
    return start


def _started(kind: str, number: int, log: str, seconds: float = 0.0):
    """Note in `log` that a call began (one O_APPEND write: whole lines from any process)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{kind} {number}\n".encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    if kind == "broken":
        raise ValueError(f"task {number} failed")
    return kind, number


def _package(task):
    return _started(*task)


def test_held_checks_start_behind_each_workers_first_package_and_all_finish(tmp_path):
    from rocpkg.build.workers import Workers

    log = str(tmp_path / "log")
    with Workers(2, hold=True) as workers:
        checks = workers.starmap_async(_started, [("check", n, log) for n in range(6)])
        time.sleep(0.3)                                     # held: nothing starts while the plan is made
        assert not os.path.exists(log)
        tasks = [("package", n, log, 0.4 if n < 2 else 0.0) for n in range(8)]
        finished = list(workers.unordered_with_checks(_package, tasks))
        assert checks() == [("check", n) for n in range(6)]
    assert sorted(finished) == [("package", n) for n in range(8)]
    started = Path(log).read_text().split("\n")
    first_check = started.index("check 0")
    assert {"package 0", "package 1"} <= set(started[:first_check])


def test_a_held_check_waited_for_before_any_package_runs_at_once(tmp_path):
    from rocpkg.build.workers import Workers

    log = str(tmp_path / "log")
    with Workers(2, hold=True) as workers:
        assert workers.starmap_async(_started, [("check", n, log) for n in range(3)])() == [
            ("check", 0), ("check", 1), ("check", 2)]


def test_a_package_task_that_raises_is_raised_where_its_result_would_be(tmp_path):
    from rocpkg.build.workers import Workers

    log = str(tmp_path / "log")
    with Workers(2, hold=True) as workers:
        results = workers.unordered_with_checks(_package, [("package", 0, log), ("broken", 1, log)])
        with pytest.raises(ValueError, match="task 1 failed"):
            list(results)


def test_a_state_journal_planted_as_a_symlink_fails_the_build_before_anything_is_published(artifacts, tmp_path):
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(b"")
    (out / ".rocpkg" / "state").mkdir(parents=True)
    (out / ".rocpkg" / "state" / "deb.jsonl").symlink_to(elsewhere)

    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb")

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "deb.jsonl" in done.stderr
    assert elsewhere.read_bytes() == b""
    assert not (out / "deb").exists() and not (out / STAGING_DIR).exists()


def test_a_staging_area_planted_as_a_symlink_is_not_written_through(artifacts, tmp_path):
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / STAGING_DIR).parent.mkdir(parents=True)
    (out / STAGING_DIR).symlink_to(elsewhere)

    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb")

    assert done.returncode == 0, done.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (out / STAGING_DIR).exists()
    assert list((out / "deb" / "pool" / "main").glob("*.deb"))


# -- the host ELFs' search rides on the writers; publication waits for the whole set -------


def _build_in_process(artifacts: Path, out: Path, *extra: str) -> int:
    """`rocpkg build -j 2` as the command runs it, in this process (its workers forked
    from here see this test's patches)."""
    from rocpkg.cli.main import main

    return main(["build", "-a", str(artifacts), "-o", str(out), "--formats", "deb,rpm", "-j", "2", "-q", *extra])


def test_each_host_elf_is_searched_by_the_writer_that_packs_it_never_read_again(artifacts, tmp_path, monkeypatch):
    """Every host ELF a stale package ships is searched as its writer reads it (one writer
    per file: of a library's .deb and .rpm, the first), never read again for the search."""
    import json

    from rocpkg.inputs import host_code

    def read_again(*args):
        raise AssertionError(f"{args[0]} was read again for its search")

    monkeypatch.setattr(host_code, "found_in", read_again)
    out = tmp_path / "out"
    assert _build_in_process(artifacts, out, "--json") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert any(p["kind"] == "host" for p in manifest["packages"])
    assert not (out / STAGING_DIR).exists()


def test_publication_waits_for_the_whole_set_of_searched_files():
    """_HostVerdict: in once every file of the set has been searched, whatever the number
    or order of answers (a package searching no file, or one answering twice, counts for
    nothing)."""
    from rocpkg.build import run as build
    from rocpkg.build.packing import PackageOutcome, Written

    outcome = PackageOutcome("deb", "x", "1", "1", "amd64", "host", "", "", "x.deb", 1, "", (), 1, True, 0.0)

    def answer(*files):
        return Written(outcome, "", {}, "", (), frozenset(files))

    checks = []
    verdict = build._HostVerdict({"/a", "/b", "/c"}, None, lambda: checks.append(1))
    assert not verdict.take(answer("/a", "/b"))
    assert not verdict.take(answer())
    assert not verdict.take(answer("/a"))
    assert verdict.take(answer("/c"))
    assert checks == []     # nothing found: the checks that ran before stand


def test_device_code_in_a_host_library_a_writer_searches_refuses_the_build(artifacts, tmp_path, capsys):
    library = str(carry_fat_binary(artifacts))
    out = tmp_path / "out"
    assert _build_in_process(artifacts, out) == 2
    err = capsys.readouterr().err
    assert "[device-code-in-host]" in err and library in err
    assert not out.exists()


def test_a_sweep_removes_rocpkgs_own_temporaries_and_no_lookalike(tmp_path):
    """remove_stale_temporaries (a build's start, a failed locked run) and the journal's
    sweep share one rule: temporaries in rocpkg's trees and of its own top-level files."""
    from rocpkg.out.journal import stale_temporaries
    from rocpkg.out.outdir import remove_stale_temporaries

    out = tmp_path / "out"
    (out / "deb" / "pool" / "main").mkdir(parents=True)
    ours = [out / "manifest.json.tmp-99", out / "deb" / "pool" / "main" / "x.deb.tmp-7"]
    theirs = [out / "notes.tmp-12", out / "index.html"]
    for path in ours + theirs:
        path.write_text("x")
    assert sorted(stale_temporaries(str(out))) == sorted(str(p.relative_to(out)) for p in ours)
    remove_stale_temporaries(str(out))
    assert [p.exists() for p in ours + theirs] == [False, False, True, True]
