"""`rocpkg build`: a maintainer builds a whole release into OUT, runs it again after a
change and only what changed is rewritten, resumes a killed build, and splits a release
over CI runners whose trees merge into the same bytes."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocpkg.builder.schedule import assign_shards, shard_weight
from rocpkg.formats.registry import file_name
from rocpkg.repo.index import assemble_manifest
from rocpkg.errors import RocpkgInputError
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.plan.make import make_plan

ROCPKG = [sys.executable, "-m", "rocpkg.cli"]


def rocpkg(*args, check: bool = True, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(ROCPKG + [str(a) for a in args], capture_output=True, text=True, **kw)
    if check:
        assert result.returncode == 0, f"rocpkg {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result


def make_artifacts(path: Path, size_mb: float = 1.0) -> Path:
    rocpkg("sample-artifacts", path, "--size-mb", size_mb)
    return path


def load_plan(artifacts: Path):
    config = load_config(None)
    return make_plan(config, scan(str(artifacts), config.settings["families"]))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def output_files(out: Path) -> dict[str, bytes]:
    """Every file a build publishes (not its private state), relative path -> sha256."""
    found = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if path.is_file() and not rel.startswith((".rocpkg/", "manifest.d/")):
            found[rel] = sha256(path)
    return found


def stats(out: Path) -> dict[str, tuple[int, int]]:
    return {rel: (os.stat(out / rel).st_mtime_ns, os.stat(out / rel).st_ino)
            for rel in output_files(out) if rel != "manifest.json"}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    return make_artifacts(tmp_path_factory.mktemp("build") / "artifacts")


@pytest.fixture(scope="module")
def built(artifacts, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("build") / "out"
    rocpkg("build", "-a", artifacts, "-o", out)
    return out


def test_build_writes_pools_metadata_and_a_manifest_with_every_package(artifacts, built):
    plan = load_plan(artifacts)
    manifest = json.loads((built / "manifest.json").read_text())
    listed = {(e["format"], e["name"]) for e in manifest["packages"]}
    assert listed == {(fmt, s.name) for fmt, specs in plan.packages.items() for s in specs}
    for entry in manifest["packages"]:
        path = built / entry["file"]
        assert entry["sha256"] == sha256(path) and entry["size"] == path.stat().st_size
        if entry["format"] == "deb":
            assert entry["file"].startswith("deb/pool/main/")
            assert (built / "control" / f"{entry['name']}.control").is_file()
        else:
            assert entry["file"].startswith(f"rpm/{entry['arch']}/")
            assert (built / "control" / f"{entry['name']}.spec").is_file()
    device = next(e for e in manifest["packages"] if e["kind"] == "device" and e["format"] == "deb")
    assert device["target"] and device["depends"]
    assert [(e["format"], e["name"]) for e in manifest["packages"]] == sorted(listed)


def test_the_packages_are_accepted_by_dpkg_and_rpm(built):
    manifest = json.loads((built / "manifest.json").read_text())
    deb = next(e for e in manifest["packages"] if e["format"] == "deb" and e["kind"] == "device")
    info = subprocess.run(["dpkg-deb", "--info", built / deb["file"]], capture_output=True, text=True, check=True)
    assert f"Package: {deb['name']}" in info.stdout
    rpm = next(e for e in manifest["packages"] if e["format"] == "rpm" and e["kind"] == "device")
    query = subprocess.run(["rpm", "-qp", "--qf", "%{NAME}", built / rpm["file"]], capture_output=True, text=True,
                           check=True)
    assert query.stdout == rpm["name"]


def test_a_second_build_rewrites_nothing(artifacts, built):
    before = stats(built)
    manifest_before = (built / "manifest.json").read_bytes()
    result = rocpkg("build", "-a", artifacts, "-o", built)
    assert stats(built) == before
    assert (built / "manifest.json").read_bytes() == manifest_before
    totals = next(line for line in result.stdout.splitlines() if line.startswith("all "))
    packages = len(json.loads(manifest_before)["packages"])
    assert totals.split()[1:3] == ["0", str(packages)]  # built 0, every package up to date
    print(result.stdout.splitlines()[-1])


def test_a_changed_source_file_rebuilds_exactly_the_packages_that_ship_it(tmp_path):
    artifacts = make_artifacts(tmp_path / "artifacts")
    out = tmp_path / "out"
    rocpkg("build", "-a", artifacts, "-o", out)
    plan = load_plan(artifacts)
    archive = next(f.source for s in plan.packages["deb"] if s.kind == "device" and s.target == "gfx942"
                   for f in s.files if f.source.endswith("TensileLibrary_lazy_gfx942.dat"))
    shipping = {(fmt, file_name(s)) for fmt, specs in plan.packages.items() for s in specs
                if any(f.source == archive for f in s.files)}
    assert len(shipping) == 2  # its device package, once per format
    before = stats(out)
    data = bytearray(Path(archive).read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes (a tuning database: its contents are opaque to rocpkg)
    Path(archive).write_bytes(bytes(data))

    rocpkg("build", "-a", artifacts, "-o", out)
    after = stats(out)
    changed = {rel for rel in before if after[rel] != before[rel]}
    expected = {f"deb/pool/main/{name}" if fmt == "deb" else f"rpm/x86_64/{name}" for fmt, name in shipping}
    expected |= {f"control/{name.split('_')[0]}.control" for fmt, name in shipping if fmt == "deb"}
    expected |= {f"control/{name.rsplit('-', 2)[0]}.spec" for fmt, name in shipping if fmt == "rpm"}
    assert changed == expected
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["packages"]:
        assert entry["sha256"] == sha256(out / entry["file"])


def test_a_source_changed_while_its_package_is_written_is_rebuilt_next_time(tmp_path, monkeypatch):
    """A package's record holds its sources as they were before the writer read them: a
    file that changes while its package is written no longer matches, and the next build
    writes the package again. (Taken after the write, the record would match the changed
    file, and the package would keep bytes of the old one.)"""
    import rocpkg.formats.deb.package
    from rocpkg.builder.run import build_release
    from rocpkg.model import BuildOptions

    artifacts = make_artifacts(tmp_path / "artifacts")
    out = tmp_path / "out"
    options = BuildOptions(source_date_epoch=1700000000)
    plan = load_plan(artifacts)
    spec = next(s for s in plan.packages["deb"] if s.kind == "device")
    source = next(f.source for f in spec.files if f.type == "file")
    write_deb = rocpkg.formats.deb.package.write_deb

    def write_then_change_a_source(written, out_dir, opts, *more):
        built = write_deb(written, out_dir, opts, *more)
        if written.name == spec.name:
            st = os.stat(source)
            os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return built

    monkeypatch.setattr(rocpkg.formats.deb.package, "write_deb", write_then_change_a_source)
    build_release(plan, out, formats=["deb"], options=options, jobs=1)
    monkeypatch.undo()
    again = build_release(load_plan(artifacts), out, formats=["deb"], options=options, jobs=1)
    assert {o.name for o in again.packages if o.rebuilt} == {spec.name}
    third = build_release(load_plan(artifacts), out, formats=["deb"], options=options, jobs=1)
    assert not any(o.rebuilt for o in third.packages)


def test_a_killed_build_run_again_gives_the_bytes_of_an_uninterrupted_one(tmp_path):
    artifacts = make_artifacts(tmp_path / "artifacts", size_mb=16)
    interrupted, reference = tmp_path / "interrupted", tmp_path / "reference"
    proc = subprocess.Popen(ROCPKG + ["build", "-a", str(artifacts), "-o", str(interrupted), "-j", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        # a package counts as finished once its state is recorded (after its file is renamed in)
        if any(p.stat().st_size for p in interrupted.glob(".rocpkg/state/*.jsonl")):
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (interrupted / "manifest.json").exists()
    partial = [p for p in interrupted.rglob("*") if p.suffix in (".deb", ".rpm")]
    print(f"killed after {len(partial)} packages")

    resumed = rocpkg("build", "-a", artifacts, "-o", interrupted, "-j", "1")
    rocpkg("build", "-a", artifacts, "-o", reference, "-j", "2")
    assert output_files(interrupted) == output_files(reference)
    assert not [p for p in interrupted.rglob("*.tmp-*")]
    totals = next(line for line in resumed.stdout.splitlines() if line.startswith("all ")).split()
    rebuilt, kept = int(totals[1]), int(totals[2])
    assert kept >= 1 and rebuilt >= 1  # the packages finished before the kill were kept
    print(resumed.stdout.splitlines()[-1])


def test_two_shards_merged_equal_the_unsharded_build(artifacts, built, tmp_path):
    shard_dirs = [tmp_path / "runner1", tmp_path / "runner2"]
    for index, out in enumerate(shard_dirs, 1):
        rocpkg("build", "-a", artifacts, "-o", out, "--shard", f"{index}/2")
        assert not (out / "manifest.json").exists()
        assert (out / "manifest.d" / f"shard-{index}-of-2.json").is_file()
    parts = [set(output_files(out)) for out in shard_dirs]
    assert parts[0] and parts[1] and not parts[0] & parts[1]

    merged = tmp_path / "merged"
    for out in shard_dirs:  # what a CI job does after downloading every runner's artifact
        shutil.copytree(out, merged, dirs_exist_ok=True)
    rocpkg("repo", merged)  # indexes the union and joins the manifest parts
    release = output_files(built)
    assert {rel: digest for rel, digest in output_files(merged).items() if rel in release} == release
    extra = set(output_files(merged)) - set(release)
    assert extra and all(rel.startswith(("deb/dists/", "rpm/repodata/", "rocm.")) for rel in extra)
    # each runner's state journal came along: the merged tree is up to date as a whole
    assert sorted(p.name for p in (merged / ".rocpkg" / "state").iterdir()) == [
        "deb.jsonl", "rpm.jsonl"]      # `rocpkg repo` recorded the copies and joined the journals
    again = rocpkg("build", "-a", artifacts, "-o", merged)
    assert next(line for line in again.stdout.splitlines() if line.startswith("all ")).split()[1] == "0"


def test_shards_are_size_balanced_and_deterministic(artifacts):
    plan = load_plan(artifacts)
    specs = [s for fmt in ("deb", "rpm") for s in plan.packages[fmt]]
    for n in (2, 3, 4):
        parts = assign_shards(specs, n)
        assert sorted(file_name(s) for part in parts for s in part) == sorted(file_name(s) for s in specs)
        loads = [sum(shard_weight(s) for s in part) for part in parts]
        assert max(loads) - min(loads) <= max(shard_weight(s) for s in specs)
        again = assign_shards(list(reversed(specs)), n)
        assert [[file_name(s) for s in p] for p in again] == [[file_name(s) for s in p] for p in parts]


def test_a_missing_shard_is_refused_when_merging(artifacts, tmp_path):
    out = tmp_path / "out"
    rocpkg("build", "-a", artifacts, "-o", out, "--shard", "2/3", "--formats", "deb")
    with pytest.raises(RocpkgInputError, match="shard 1 of 3 is missing"):
        assemble_manifest(out)


def test_shards_of_different_dates_are_refused_when_merging(artifacts, tmp_path):
    """Runners that dated their shards differently (SOURCE_DATE_EPOCH unset, inputs unpacked
    with new times) made packages that differ from one build's: the merge says so."""
    merged = tmp_path / "merged"
    for index, date in ((1, "1700000000"), (2, "1700000001")):
        out = tmp_path / f"runner{index}"
        rocpkg("build", "-a", artifacts, "-o", out, "--shard", f"{index}/2", "--formats", "deb",
               env={**os.environ, "SOURCE_DATE_EPOCH": date})
        shutil.copytree(out, merged, dirs_exist_ok=True)
    with pytest.raises(RocpkgInputError, match="set the same SOURCE_DATE_EPOCH on every runner"):
        assemble_manifest(merged)


@pytest.mark.parametrize("when", [7258118400, -86400])
def test_inputs_dated_outside_what_rpm_stores_are_refused_without_source_date_epoch(artifacts, tmp_path, when):
    copy = tmp_path / "artifacts"
    shutil.copytree(artifacts, copy, symlinks=True)
    manifest = next(copy.glob("*/artifact_manifest.txt"))
    os.utime(manifest, (when, when))
    if when < 0:        # every input that old: the newest is the one that counts
        for other in copy.glob("*/artifact_manifest.txt"):
            os.utime(other, (when, when))
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    done = rocpkg("build", "-a", copy, "-o", tmp_path / "out", "--formats", "deb", check=False, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "SOURCE_DATE_EPOCH" in done.stderr and "set SOURCE_DATE_EPOCH" in done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_shard_and_jobs_are_input_errors(artifacts, tmp_path):
    for args, message in ((["--shard", "3/2"], "--shard"), (["--shard", "x"], "--shard"), (["-j", "0"], "-j")):
        result = rocpkg("build", "-a", artifacts, "-o", tmp_path / "o", *args, check=False)
        assert result.returncode == 2
        assert result.stderr.startswith(f"error: {message}:")


def test_source_date_epoch_from_the_environment_dates_the_packages(artifacts, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1234567890"}
    rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb", env=env)
    manifest = json.loads((out / "manifest.json").read_text())
    deb = next(e for e in manifest["packages"] if e["kind"] == "host")
    listing = subprocess.run(["dpkg-deb", "-c", out / deb["file"]], capture_output=True, text=True, check=True)
    assert listing.stdout and all(" 2009-02-13 23:31 " in line for line in listing.stdout.splitlines())


def test_rpms_signed_later_by_rocpkg_repo_stay_recorded_and_are_not_rebuilt(artifacts, tmp_path):
    from repo_helpers import kill_gpg_agent, make_signer

    out = tmp_path / "out"
    rocpkg("build", "-a", artifacts, "-o", out, "--formats", "rpm")
    signer, home = make_signer()
    try:
        rocpkg("repo", out, "--gpg-home", home, "--sign-key", signer.key_id)
    finally:
        kill_gpg_agent(home)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["packages"]:
        assert entry["sha256"] == sha256(out / entry["file"])
    signed = stats(out)
    again = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "rpm")
    assert stats(out) == signed  # the build keeps the signed files
    assert next(line for line in again.stdout.splitlines() if line.startswith("all ")).split()[1] == "0"


def test_ctrl_c_stops_a_parallel_build_at_once_and_a_rerun_finishes_it(tmp_path):
    artifacts = make_artifacts(tmp_path / "artifacts", size_mb=16)
    out = tmp_path / "out"
    # a terminal's foreground job takes Ctrl-C; one started by a shell as a background job
    # (`cmd &`, as a CI runner may start the suite) inherits SIGINT ignored, and so would
    # the build: give it the foreground job's default
    proc = subprocess.Popen(ROCPKG + ["build", "-a", str(artifacts), "-o", str(out), "-j", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.suffix in (".deb", ".rpm") for p in out.glob("*/**/*")):
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    started = time.monotonic()
    _, err = proc.communicate(timeout=60)
    print(f"stopped {time.monotonic() - started:.2f} s after Ctrl-C")
    # everything it said, if it did not exit 130: one failure in about 20 runs once ended
    # killed by SIGINT after "error: interrupted" (not reproduced in 159 runs since)
    assert proc.returncode == 130 and err.rstrip().endswith("error: interrupted"), (proc.returncode, err[-4000:])
    assert "Traceback" not in err
    rocpkg("build", "-a", artifacts, "-o", out, "-j", "2")
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(entry["sha256"] == sha256(out / entry["file"]) for entry in manifest["packages"])


def test_a_signed_build_with_repo_publishes_signed_repositories_and_rpms(artifacts, tmp_path):
    from repo_helpers import kill_gpg_agent, make_signer

    out = tmp_path / "out"
    signer, home = make_signer()
    try:
        fingerprint = signer.fingerprint
        result = rocpkg("build", "-a", artifacts, "-o", out, "--repo", "--gpg-home", home, "--sign-key", signer.key_id)
    finally:
        kill_gpg_agent(home)
    assert f"signed by {fingerprint}" in result.stdout
    for path in ("deb/dists/stable/InRelease", "rpm/repodata/repomd.xml.asc", "rocm.gpg", "rocm.asc"):
        assert (out / path).is_file(), path
    manifest = json.loads((out / "manifest.json").read_text())
    rpm = next(e for e in manifest["packages"] if e["format"] == "rpm" and e["kind"] == "device")
    assert rpm["sha256"] == sha256(out / rpm["file"])
    db = tmp_path / "rpmdb"
    subprocess.run(["rpm", "--dbpath", db, "--import", out / "rocm.asc"], check=True, capture_output=True)
    check = subprocess.run(["rpm", "--dbpath", db, "-K", out / rpm["file"]], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.rstrip().endswith("digests signatures OK"), check.stdout


def test_an_output_directory_that_cannot_be_created_exits_2_with_one_line(artifacts, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = rocpkg("build", "-a", artifacts, "-o", blocker / "out", check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {blocker}")


def test_the_indexers_reuse_the_digests_the_build_took(built):
    """The build records each package's size and sha256 with the file's stamp (its state
    line): `rocpkg repo`'s digest source (rocpkg.store.recorded) then reads no package
    again, and what it gives matches the manifest."""
    from rocpkg.store.recorded import Recorded

    manifest = json.loads((built / "manifest.json").read_text())
    recorded = Recorded(str(built))
    for entry in manifest["packages"]:
        assert recorded.digest(entry["file"]) == (entry["size"], entry["sha256"])
    assert recorded.read == []
