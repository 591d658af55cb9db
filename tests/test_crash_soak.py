"""A kill at any instant, or a failing disk at any step, leaves a repository that the next
command repairs (rocpkg.store.journal): random sequences of build/repo/prune/promote/publish on
a small release, the last command killed (SIGKILL) at a random instant or at a chosen
change of the file system (tests/faultpoint.py), then the invariants: after the next
command, and after the killed one is run again, OUT is either as it was before the
killed command or as that command completes it (so no published byte is lost or changed
but by a completed prune or promote), `rocpkg verify` passes (indexes match the pool,
signatures valid), no temporary or journal is left, and on some rounds a real apt client
installs from it. A failed (not killed) prune, promote or repo leaves OUT byte for byte as
it was, rocpkg's records included, whatever step fails: a change of the file system
refused (tests/faultpoint.py), or a write cut short by a file-size limit (RLIMIT_FSIZE)
or a full disk (a small tmpfs), the journal's own write included.

ROCPKG_SOAK_ROUNDS (default 16) and ROCPKG_SOAK_SEED (default 40) set the soak's length
and its sequence; ROCPKG_EVERY_STEP=1 fails the commands at every step instead of a
spread of steps."""
from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cli_run
from repo_helpers import AptClient, planned_installs
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

ROUNDS = int(os.environ.get("ROCPKG_SOAK_ROUNDS", "16"))
SEED = int(os.environ.get("ROCPKG_SOAK_SEED", "40"))
EVERY_STEP = os.environ.get("ROCPKG_EVERY_STEP") == "1"
ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1764547200"}
SMALL = ["--pkg-names", "rocm-fft", "--with-deps", "-j", "2"]
FAULTPOINT = [sys.executable, str(Path(__file__).with_name("faultpoint.py"))]
# records that name inodes and times (rocpkg.store.state, the digest cache): equal only byte for
# byte to themselves, so compared only where OUT must be exactly as it was
STAMPED = (".rocpkg/state", ".rocpkg/digests-")


def rocpkg(*args, fault: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    prefix = FAULTPOINT + list(fault) if fault else cli_run.ROCPKG
    return subprocess.run(prefix + [str(a) for a in args], capture_output=True, text=True, env=ENV)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


def tree(out: Path, stamps: bool = True) -> dict:
    found = cli_run.snapshot(out) or {}
    return found if stamps else {k: v for k, v in found.items() if not k.startswith(STAMPED)}


def published(snapshot: dict) -> dict:
    """The package files and the manifest of a tree's snapshot (a command run again on a
    complete tree may drop index files two generations old: not these)."""
    return {k: v for k, v in snapshot.items() if k.endswith((".deb", ".rpm")) or k == "manifest.json"}


def leftovers(out: Path) -> list[str]:
    """Temporaries, staging areas and journals: none may outlive the next command."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if ".tmp-" in p.name or p.name in ("staging", "journal.json", "journal.d"))


class Trees:
    """A small OUT with releases 7.1.0-1 and -2 (base), and SRC: the same with -3, the
    release promote copies."""

    def __init__(self, root: Path):
        self.root = root
        self.artifacts = root / "artifacts"
        make_sample_artifacts(self.artifacts, load_config(None), targets=["gfx942"], size_mb=0.05)
        self.base = root / "base"
        for release in ("1", "2"):
            ok(rocpkg(*self.build_args(self.base, release)))
        self.src = root / "src"
        shutil.copytree(self.base, self.src)
        ok(rocpkg(*self.build_args(self.src, "3")))

    def build_args(self, out: Path, release: str = "3") -> list:
        return ["build", "-a", self.artifacts, "-o", out, "--repo", "--version", "7.1.0", "--release", release, *SMALL]

    def command(self, name: str, out: Path) -> list:
        return {"prune": ["prune", out, "--keep", "1"], "repo": ["repo", out],
                "promote": ["promote", self.src, out, "--release", "7.1.0-3"],
                "build": self.build_args(out), "publish": ["publish", out, self.root / "published"]}[name]

    def fresh(self, out: Path, like: Path | None = None) -> Path:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(like or self.base, out)
        return out


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    return Trees(tmp_path_factory.mktemp("soak"))


def changes(trees: Trees, name: str, out: Path) -> tuple[int, dict]:
    """Run the command whole on OUT as it is (a copy put back after): how many changes of
    the file system it makes, and OUT as it completes it."""
    saved = out.with_name(out.name + "-before")
    trees.fresh(saved, out)
    done = ok(rocpkg(*trees.command(name, out), fault=("0", "kill")))
    complete = tree(out, stamps=False)
    trees.fresh(out, saved)
    shutil.rmtree(saved)
    return int(done.stderr.rsplit("faultpoint: ", 1)[1].split()[0]), complete


def kill(trees: Trees, name: str, out: Path, rng: random.Random, steps: int) -> str:
    """The command killed: at a random change of the file system, or after a random delay."""
    if rng.random() < 0.5:
        at = rng.randint(1, max(1, steps))
        done = rocpkg(*trees.command(name, out), fault=(str(at), "kill"))
        assert done.returncode in (-signal.SIGKILL, 0), done.stderr
        return f"killed at change {at} of {steps}"
    started = time.monotonic()
    proc = subprocess.Popen(cli_run.ROCPKG + [str(a) for a in trees.command(name, out)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    delay = rng.uniform(0.05, 0.9)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return f"killed after {time.monotonic() - started:.2f} s"


def repaired(trees: Trees, name: str, out: Path, before: dict, complete: dict, how: str) -> None:
    """The next command repairs OUT: as it was, or as the killed command completes it."""
    if name == "build":     # a killed build's packages stay (resumed): the build run again finishes it
        ok(rocpkg(*trees.command(name, out)))
    elif name != "publish":
        verdict = rocpkg("verify", out)
        assert verdict.returncode == 0, f"{how}\n{verdict.stderr}"
    assert leftovers(out) == [], how
    now = tree(out, stamps=False)
    if name == "build":     # run again on a tree whose index step was complete: compared as a re-run
        assert published(now) == published(complete), how
    else:
        assert now in (before, complete), (how, sorted(set(now) ^ set(before) ^ set(complete))[:8])
    ok(rocpkg("verify", out))


def apt_installs(out: Path, root: Path) -> None:
    apt = AptClient(root, f"deb [trusted=yes] file://{out / 'deb'} stable main\n", Path("/var/lib/dpkg/status"))
    update = apt.run("update")
    assert update.returncode == 0 and "E:" not in update.stderr, update.stdout + update.stderr
    install = apt.run("install", "-s", "rocm-fft")
    assert install.returncode == 0 and "rocm-fft" in planned_installs(install.stdout), install.stdout + install.stderr
    fetched = apt.run("install", "-y", "--download-only", "rocm-fft")
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr


def test_a_killed_command_is_repaired_by_the_next_and_completes_when_run_again(trees, tmp_path):
    rng = random.Random(SEED)
    out = tmp_path / "out"
    for round_ in range(ROUNDS):
        trees.fresh(out)
        for name in rng.sample(["repo", "prune", "promote", "publish"], rng.randint(0, 2)):
            ok(rocpkg(*trees.command(name, out)))       # a random history first
        name = rng.choice(["prune", "promote", "repo", "build", "prune", "promote", "publish"])
        steps, complete = changes(trees, name, out)
        before = tree(out, stamps=False)
        how = f"round {round_}: {name} " + kill(trees, name, out, rng, steps)
        repaired(trees, name, out, before, complete, how)
        ok(rocpkg(*trees.command(name, out)))           # the killed command, run again
        assert published(tree(out)) == published(complete) and leftovers(out) == [], how
        ok(rocpkg("verify", out))
        if round_ % 8 == 0:
            apt_installs(out, tmp_path / f"apt-{round_}")


@pytest.mark.parametrize("name, at", [
    ("prune", "dists/stable/main/binary-amd64/Packages#1"),      # inside its re-index
    ("prune", "repodata#2"),
    ("promote", "deb/pool#3"),                                  # inside its copy
    ("promote", "rpm/x86_64#1"),
    ("repo", "stable/Release#1"),                             # an unsigned repo has no InRelease to remove
])
def test_a_kill_inside_the_change_is_rolled_back_by_verify_and_the_rerun_completes(trees, tmp_path, name, at):
    out = trees.fresh(tmp_path / "out")
    steps, complete = changes(trees, name, out)
    before = tree(out)
    killed = rocpkg(*trees.command(name, out), fault=(at, "kill"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (out / ".rocpkg" / "journal.json").exists()
    verdict = ok(rocpkg("verify", out))
    assert f"rolled back an interrupted rocpkg {'repo' if name == 'repo' else name}" in verdict.stderr
    assert tree(out) == before and leftovers(out) == []
    ok(rocpkg(*trees.command(name, out)))
    assert tree(out, stamps=False) == complete


def test_a_prune_killed_past_its_midpoint_is_finished_by_running_it_again(trees, tmp_path):
    out = trees.fresh(tmp_path / "out")
    steps, complete = changes(trees, "prune", out)
    killed = rocpkg(*trees.command("prune", out), fault=("rpm/repodata#2", "kill"))
    assert killed.returncode == -signal.SIGKILL
    again = ok(rocpkg("prune", out, "--keep", "1"))
    assert "rolled back an interrupted rocpkg prune" in again.stderr
    assert "removed 1 release (" in again.stdout
    assert tree(out, stamps=False) == complete
    ok(rocpkg("verify", out))


def test_a_read_only_tree_with_an_unfinished_journal_is_reported_not_verified(trees, tmp_path):
    out = trees.fresh(tmp_path / "out")
    assert rocpkg(*trees.command("prune", out), fault=("Packages#1", "kill")).returncode == -signal.SIGKILL
    view = tmp_path / "read-only"
    view.mkdir()
    if subprocess.run(["mount", "--bind", "-o", "ro", str(out), str(view)], capture_output=True).returncode:
        pytest.skip("a read-only bind mount needs root")
    try:
        done = rocpkg("verify", view)
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "an interrupted rocpkg prune" in done.stderr and "cannot be repaired here" in done.stderr, done.stderr
    assert "rolled back an interrupted rocpkg prune" in ok(rocpkg("verify", out)).stderr


def test_temporaries_of_dead_runs_are_swept_only_where_rocpkg_writes(trees, tmp_path):
    out = trees.fresh(tmp_path / "out")
    dead = [out / "rpm" / "repodata" / ".primary.xml.gz.tmp-16011", out / "deb" / "dists" / "stable" / "Release.tmp-99"]
    for path in dead:
        path.write_bytes(b"half")
    foreign = [out / "notes.tmp-12", out / "deb" / "pool" / "main" / "README.tmp-x"]
    (out / "elsewhere").mkdir()
    foreign.append(out / "elsewhere" / "data.tmp-77")
    for path in foreign:
        path.write_bytes(b"mine")
    done = rocpkg("verify", out)
    assert "removed 2 temporaries" in done.stderr
    assert not any(p.exists() for p in dead) and all(p.exists() for p in foreign)
    # the pool's look-alike is no temporary of rocpkg's: a file OUT does not record, reported
    assert done.returncode == 2 and "deb/pool/main/README.tmp-x: -: OUT does not record it" in done.stderr, done.stderr


# -- failing each command at every step: OUT (DST) byte for byte as it was -------------------

@pytest.mark.parametrize("name", ["prune", "promote", "repo"])
def test_a_command_failing_at_any_step_leaves_out_as_it_was(trees, tmp_path, name):
    out = trees.fresh(tmp_path / "out")
    steps, complete = changes(trees, name, out)
    before = tree(out)
    errnos = ["ENOSPC", "EIO", "EFBIG", "EROFS"]
    spread = range(1, steps + 1) if EVERY_STEP else sorted({*range(1, steps + 1, max(1, steps // 24)), steps})
    for at in spread:
        trees.fresh(out)
        done = rocpkg(*trees.command(name, out), fault=(str(at), errnos[at % len(errnos)]))
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode != 0:
            assert done.returncode == 2 and done.stderr.count("error:") == 1, (at, done.stderr)
            assert tree(out) == before, f"{name} failed at change {at} of {steps}: OUT changed"
            assert leftovers(out) == [], (at, leftovers(out))
        else:       # the failed change was a cleanup after the change was complete
            ok(rocpkg("verify", out))
            assert tree(out, stamps=False) == complete and leftovers(out) == [], at


# -- file-size limits and full disks: a write fails part-way, the journal's first ------------

def size_limited(limit: int):
    """A preexec_fn: writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored, as a full
    disk fails them with ENOSPC)."""
    def limit_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limit_size


def written_sizes(trees: Trees, name: str, out: Path) -> tuple[int, int]:
    """The command on OUT as it is (OUT put back after): the size of the journal it writes
    (killed as it renames journal.json into place, its temporary left), its first write,
    and of the largest file it writes."""
    saved = out.with_name(out.name + "-sizes")
    trees.fresh(saved, out)
    before = tree(out, stamps=False)
    killed = rocpkg(*trees.command(name, out), fault=("journal.json#1", "kill"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = max(p.stat().st_size for p in (out / ".rocpkg").glob("journal.json.tmp-*"))
    trees.fresh(out, saved)
    _, complete = changes(trees, name, out)
    shutil.rmtree(saved)
    largest = max(len(v[2]) for k, v in complete.items() if v[0] == "file" and before.get(k) != v)
    return journal, largest


def failed_whole(trees: Trees, name: str, out: Path, done: subprocess.CompletedProcess, before: dict,
                 complete: dict, how: str) -> None:
    """A command a failing write stopped: refused (one error line, OUT byte for byte as it
    was) or complete; the next command finds nothing to repair, verify passes, and the
    command run again completes it."""
    assert "Traceback" not in done.stderr, (how, done.stderr)
    if done.returncode != 0:
        assert done.returncode == 2 and done.stderr.count("error:") == 1, (how, done.stderr)
        assert tree(out) == before, f"{how}: OUT changed"
    else:
        assert tree(out, stamps=False) == complete, how
    assert leftovers(out) == [], (how, leftovers(out))
    verdict = ok(rocpkg("verify", out))
    assert "rolled back" not in verdict.stderr, how
    ok(rocpkg(*trees.command(name, out)))
    assert published(tree(out)) == published(complete) and leftovers(out) == [], how
    ok(rocpkg("verify", out))


@pytest.mark.parametrize("name", ["prune", "promote", "repo"])
def test_a_file_size_limit_fails_the_command_whole_and_the_rerun_completes(trees, tmp_path, name):
    """RLIMIT_FSIZE below the journal's size (its first write: the journal itself fails,
    nothing of OUT is copied before it), then at random sizes up to the largest file the
    command writes."""
    out = trees.fresh(tmp_path / "out")
    journal, largest = written_sizes(trees, name, out)
    _, complete = changes(trees, name, out)
    before = tree(out)
    rng = random.Random(f"{SEED}-{name}")
    limits = [journal // 2, journal - 1, *sorted(rng.randint(journal, max(journal, largest)) for _ in range(3))]
    for limit in limits:
        trees.fresh(out)
        done = subprocess.run(cli_run.ROCPKG + [str(a) for a in trees.command(name, out)], capture_output=True,
                              text=True, env=ENV, preexec_fn=size_limited(limit))
        how = f"{name} under a {limit}-byte file-size limit (journal {journal} bytes)"
        if limit < journal:
            assert done.returncode == 2 and "File too large" in done.stderr, (how, done.stderr)
        failed_whole(trees, name, out, done, before, complete, how)


@pytest.fixture
def small_disk(tmp_path):
    """A file system of its own (tmpfs, 64 MiB) that a test fills."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
                      capture_output=True).returncode:
        pytest.skip("mounting a small file system needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path, free: int) -> None:
    """Leave `free` bytes free on disk (a filler file of real blocks)."""
    info = os.statvfs(disk)
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.posix_fallocate(fd, 0, max(1, info.f_bavail * info.f_frsize - free))
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["prune", "promote", "repo"])
def test_a_full_disk_fails_the_command_whole_and_the_rerun_completes(trees, small_disk, name):
    """The disk full below the journal's size, then with random room up to the largest
    file the command writes."""
    out = trees.fresh(small_disk / "out")
    journal, largest = written_sizes(trees, name, out)
    _, complete = changes(trees, name, out)
    before = tree(out)
    rng = random.Random(f"{SEED}-{name}-disk")
    for free in [journal // 2, *sorted(rng.randint(journal, 2 * max(journal, largest)) for _ in range(3))]:
        trees.fresh(out)
        fill(small_disk, free)
        try:
            done = rocpkg(*trees.command(name, out))
        finally:
            os.unlink(small_disk / "filler")
        how = f"{name} on a disk with {free} bytes free (journal {journal} bytes)"
        if free < journal // 2 + 4096:
            assert done.returncode == 2 and "No space left" in done.stderr, (how, done.stderr)
        failed_whole(trees, name, out, done, before, complete, how)


# -- the setup packages' stable-name copies at OUT's top (rocpkg.repo.setup) -----------------

def _setup_copies_match_the_manifest(out: Path) -> None:
    """OUT/<top>-repo.deb and .rpm (top: rocm-fft, the subset's top meta-package) are byte for byte the setup packages manifest.json records."""
    doc = __import__("json").loads((out / "manifest.json").read_text())
    setup = {e["format"]: e["file"] for e in doc["packages"] if e.get("kind") == "setup"}
    assert sorted(setup) == ["deb", "rpm"], setup
    for fmt, rel in setup.items():
        assert (out / f"rocm-fft-repo.{fmt}").read_bytes() == (out / rel).read_bytes(), fmt


@pytest.mark.parametrize("at", ["rocm-fft-repo.deb#1", "rocm-fft-repo.rpm#1"])
@pytest.mark.parametrize("mode", ["kill", "ENOSPC"])
def test_a_repo_stopped_at_its_setup_copies_puts_them_back_with_the_indexes(trees, tmp_path, signer, at, mode):
    """A signed repo with a new --base-url writes new setup packages and, last, their
    stable-name copies at OUT's top: killed (or failing) at either copy, OUT is back as it
    was, copies included, consistent with the manifest and indexes; run again, it completes."""
    out = trees.fresh(tmp_path / "out")
    keys = ["--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]
    ok(rocpkg("repo", out, *keys, "--base-url", "https://one.example.org/rocm"))
    _setup_copies_match_the_manifest(out)
    before = tree(out)
    again = ["repo", out, *keys, "--base-url", "https://two.example.org/rocm"]     # new setup packages
    stopped = rocpkg(*again, fault=(at, mode))
    if mode == "kill":
        assert stopped.returncode == -signal.SIGKILL, stopped.stderr
        assert (out / ".rocpkg" / "journal.json").exists()
        assert "rolled back an interrupted rocpkg repo" in ok(rocpkg("verify", out)).stderr
    else:
        assert stopped.returncode == 2 and "Traceback" not in stopped.stderr, stopped.stderr
    assert tree(out) == before and leftovers(out) == []
    _setup_copies_match_the_manifest(out)
    ok(rocpkg(*again))
    _setup_copies_match_the_manifest(out)
    assert (out / "rocm-fft-repo.deb").read_bytes() != before["rocm-fft-repo.deb"][2]
    ok(rocpkg("verify", out))
