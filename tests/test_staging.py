"""A build runs its checks on the complete plan (the host ELFs' search included) before it
writes a package: a refused build leaves OUT as it found it, whether OUT did not exist, was
empty, or held an earlier release. Then each package is written into OUT/.rocpkg/staging
and moved into place as soon as it is whole (rocpkg.store.outdir)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from cli_run import rocpkg, snapshot
from rocpkg.builder import gate
from rocpkg.builder.run import build_release
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.errors import RocpkgInputError
from rocpkg.model import BuildOptions
from rocpkg.store.outdir import STAGING_DIR
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


def test_no_package_is_written_while_the_checks_run(artifacts, tmp_path, monkeypatch):
    """With workers ready to write, nothing is staged while verify's checks run (they take
    a while here); the refusal then leaves no OUT behind."""
    carry_fat_binary(artifacts)
    config = load_config(None)
    plan = make_plan(config, scan(str(artifacts), config.settings["families"]), formats=["deb"])
    out = tmp_path / "out"
    seen = []
    checks = gate.refusals

    def slow_refusals(*args, **kwargs):
        deadline = time.monotonic() + 0.5
        staged = out / STAGING_DIR / "deb"
        while time.monotonic() < deadline:
            if staged.exists():
                seen.extend(p.name for p in staged.iterdir())
            time.sleep(0.01)
        return checks(*args, **kwargs)

    monkeypatch.setattr(gate, "refusals", slow_refusals)

    with pytest.raises(RocpkgInputError) as refused:
        build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=2)

    assert seen == []
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
    from rocpkg.builder import packing

    def never(task):
        raise AssertionError(f"{task.spec.name} written before the checks passed")

    monkeypatch.setattr(packing, "build_one", never)

    with pytest.raises(RocpkgInputError):
        build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1)
    assert not out.exists()


# -- the catalog's search of host data sections, on the build's workers --------------------


def test_the_host_search_on_workers_finds_what_the_threads_find(artifacts):
    from rocpkg.builder.workers import Workers

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
    from rocpkg.builder.workers import Workers

    library = carry_fat_binary(artifacts)
    families = load_config(None).settings["families"]
    with Workers(2) as workers:
        catalog = scan(str(artifacts), families, embedded_objects=False,
                       starmap_async=_after_replacing(library, workers, artifacts.parent / "walked-library"))
        with pytest.raises(RocpkgInputError) as refused:
            make_plan(load_config(None), catalog)
    assert any(str(library) == where and "was replaced" in what for where, what in refused.value.problems)


def _host_elfs(plan) -> list[str]:
    return sorted(source for source, facts in plan.facts.items() if facts.elf == "host")


def test_each_host_elf_is_searched_once_by_the_plan_before_a_package_is_written(artifacts, tmp_path, monkeypatch):
    """The plan's search reads every host ELF of the catalog once (a second read is the
    writer's); the build searches nothing, whether its packages are written or up to date."""
    from rocpkg.inputs import host_code

    config = load_config(None)
    out = tmp_path / "out"
    read = []
    found_in = host_code.found_in

    def counted(source, identity, embedded_objects):
        read.append(source)
        return found_in(source, identity, embedded_objects)

    monkeypatch.setattr(host_code, "found_in", counted)
    for rebuilt in (True, False):
        plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False),
                         formats=["deb"])
        assert sorted(read) == _host_elfs(plan)
        read.clear()
        result = build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1)
        assert read == [] and all(o.rebuilt == rebuilt for o in result.packages)


@pytest.mark.parametrize("jobs", [1, 2])
def test_device_code_in_a_host_elf_refuses_the_build_before_a_package_is_written(artifacts, tmp_path, jobs):
    from rocpkg.builder.workers import Workers

    library = str(carry_fat_binary(artifacts))
    config = load_config(None)
    out = tmp_path / "out"
    with Workers(jobs) as workers:
        plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False,
                                      starmap_async=workers.starmap_async), formats=["deb", "rpm"])
        assert plan.facts[library].host_code[0][0] == "fat-binary"    # in the plan when it is returned
        with pytest.raises(RocpkgInputError) as refused:
            build_release(plan, out, formats=["deb", "rpm"], options=OPTIONS, jobs=jobs, workers=workers)
    assert any("[device-code-in-host]" in what and library in where + what for where, what in refused.value.problems)
    assert not out.exists()


def test_each_package_is_in_place_with_its_control_file_and_state_when_it_is_reported(artifacts, tmp_path):
    """Published as soon as its writer returns: when progress reports a package, its file,
    its control file and its state are in OUT, before the next package is reported."""
    from rocpkg.store.state import read_states

    config = load_config(None)
    out = tmp_path / "out"
    plan = make_plan(config, scan(str(artifacts), config.settings["families"]), formats=["deb"])
    seen = []

    def progress(event):
        if event.last is not None:
            name = event.last.name
            seen.append(((out / event.last.file).is_file(),
                         (out / "control" / f"{name}.control").read_text().startswith(f"Package: {name}\n"),
                         read_states(str(out), "deb")[name]["sha256"] == event.last.sha256))

    result = build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=2, progress=progress)
    assert len(seen) == len(result.packages) > 1
    assert all(all(published) for published in seen)
    assert not (out / STAGING_DIR).exists()


def test_a_package_whose_source_changed_since_planning_fails_alone(artifacts, tmp_path):
    """A host library that shrank after planning: its package's writer refuses it (a
    problem, not a refusal of the release); the build says why and every other package is
    published, so the rerun writes that one alone."""
    from rocpkg.store.state import read_states

    config = load_config(None)
    out = tmp_path / "out"
    plan = make_plan(config, scan(str(artifacts), config.settings["families"], embedded_objects=False),
                     formats=["deb"])
    library = next(s for s in _host_elfs(plan) if s.endswith("librocrand.so.1.0"))
    with open(library, "r+b") as fh:
        fh.truncate(os.path.getsize(library) - 1)
    failing = {s.name for s in plan.packages["deb"] if any(fe.source == library for fe in s.files)}
    assert failing

    with pytest.raises(RocpkgInputError) as refused:
        build_release(plan, out, formats=["deb"], options=OPTIONS, jobs=1)
    assert any(library in what and "changed since planning" in what for _, what in refused.value.problems)
    recorded = set(read_states(str(out), "deb"))
    assert recorded == {s.name for s in plan.packages["deb"]} - failing
    assert not (out / "manifest.json").exists()


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
    with open(path, "rb") as handle, SourceFile("test", str(path), len(image)) as source:
        search.start(handle)
        assert b"".join(bytes(c) for c in search.watch(source.chunks())) == image
    assert search.whole
    assert search.findings(path) == host_device_code(path, embedded_objects=False) != []


def _after_replacing(library: Path, workers, keep: Path):
    """starmap_async that swaps `library` for a copy (a new inode) when the search of its
    batch starts, once. The original stays linked at `keep` (outside the artifacts), so the
    copy cannot be given the inode number the walk recorded (a file system reuses a freed
    one)."""
    def start(function, arguments):
        if any(args[0] == str(library) for args in arguments) and not keep.exists():
            os.link(library, keep)
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


def test_a_package_task_that_raises_is_raised_where_its_result_would_be(tmp_path):
    from rocpkg.builder.workers import Workers

    log = str(tmp_path / "log")
    with Workers(2) as workers:
        results = workers.unordered(_package, [("package", 0, log), ("broken", 1, log)])
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


def _build_in_process(artifacts: Path, out: Path, *extra: str) -> int:
    """`rocpkg build -j 2` as the command runs it, in this process."""
    from rocpkg.cli.main import main

    return main(["build", "-a", str(artifacts), "-o", str(out), "--formats", "deb,rpm", "-j", "2", "-q", *extra])


def test_device_code_in_a_host_library_refuses_the_command_with_out_as_it_was(artifacts, tmp_path, capsys):
    library = str(carry_fat_binary(artifacts))
    out = tmp_path / "out"
    assert _build_in_process(artifacts, out) == 2
    err = capsys.readouterr().err
    assert "[device-code-in-host]" in err and library in err
    assert not out.exists()


def test_a_sweep_removes_rocpkgs_own_temporaries_and_no_lookalike(tmp_path):
    """One sweep (rocpkg.store.outdir: a build's start, a failed locked run, the recovery
    every command begins with), one rule: temporaries in rocpkg's trees and of its own top-level files."""
    from rocpkg.store.outdir import remove_stale_temporaries, stale_temporaries

    out = tmp_path / "out"
    (out / "deb" / "pool" / "main").mkdir(parents=True)
    ours = [out / "manifest.json.tmp-99", out / "deb" / "pool" / "main" / "x.deb.tmp-7"]
    theirs = [out / "notes.tmp-12", out / "index.html"]
    for path in ours + theirs:
        path.write_text("x")
    assert sorted(stale_temporaries(str(out))) == sorted(str(p.relative_to(out)) for p in ours)
    remove_stale_temporaries(str(out))
    assert [p.exists() for p in ours + theirs] == [False, False, True, True]
