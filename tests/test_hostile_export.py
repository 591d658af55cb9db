"""`rocpkg export` under the discipline of the other commands that read OUT: a suite that
is not one directory name, a symlink where DEST, DEST.tar or DEST.tar.sha256 goes, a pool
file that is a symlink or a FIFO, a package whose bytes are not the recorded ones, another
command holding OUT's lock and a disk that fails at any step of the bundle are each refused
with exit 2 and an `error:` line naming the value or file, no traceback, and the work dir
(OUT, DEST and the files beside them) byte-identical; a promote killed half-way is rolled
back before export reads OUT, so the bundle holds the repaired release; a release older
than the newest (an ASAN build beside a newer normal release) is exported by its names."""
from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import refusal_lines, snapshot
from test_hostile_out import REPO, TIMEOUT, Work, built, run, work  # noqa: F401 (fixtures)

FAULTPOINT = Path(__file__).with_name("faultpoint.py")
NAME = "ns"         # the release's top package: its closure is most of the release


def _env() -> dict:
    return dict(os.environ, SOURCE_DATE_EPOCH="1700000000",
                PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO), os.environ.get("PYTHONPATH", "")]))


def _faulted(at: str, mode: str, *args) -> subprocess.CompletedProcess:
    """rocpkg ARGS with tests/faultpoint.py failing (or killing) the change `at`."""
    return subprocess.run([sys.executable, str(FAULTPOINT), at, mode, *[str(a) for a in args]], capture_output=True,
                          text=True, env=_env(), timeout=TIMEOUT)


def _exported(w: Work, *names: str) -> subprocess.CompletedProcess:
    done = run("export", w.out, w.dest, *names)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


BASE = "deb/pool/main/ns-base1.0_1.0.0-1_amd64.deb"      # in NAME's closure


def _pool(w: Work) -> Path:
    return w.out / BASE


def _bundled_debs(w: Work) -> list[str]:
    return sorted(p.name for p in (w.dest / "deb").rglob("*.deb"))


def test_the_untouched_out_exports(work):
    _exported(work, NAME)
    assert {p.name for p in work.root.iterdir()} >= {"dest", "dest.tar", "dest.tar.sha256"}
    assert not [p for p in work.root.iterdir() if ".tmp-" in p.name]
    assert os.path.basename(BASE) in _bundled_debs(work)


# -- 1. the suite is one directory name ---------------------------------------------------------

@pytest.mark.parametrize("suite", ["../../../x", "../x", "a/b", "..", ".", "/abs", "stable\n", "sta ble", "-x", ""])
def test_a_suite_that_is_not_one_directory_name_is_refused(work, suite):
    errors = work.refused("export", "{out}", "{dest}", NAME, f"--suite={suite}", needles=["--suite"])
    assert any("is not a suite name" in line for line in errors), errors
    assert not (work.root / "x").exists()


# -- 2. never written through a symlink -----------------------------------------------------------

@pytest.mark.parametrize("where", ["dest", "dest.tar", "dest.tar.sha256"])
@pytest.mark.parametrize("target", ["{root}/victim", "{root}/nowhere"])
def test_a_symlink_where_the_bundle_goes_is_never_followed(work, where, target):
    os.symlink(target.format(root=work.root), work.root / where)
    work.refused("export", "{out}", "{dest}", NAME, needles=[f"{{root}}/{where}: is a symlink"])
    assert not (work.root / "nowhere").exists()


def test_a_dest_whose_parent_is_missing_is_refused(work):
    work.refused("export", "{out}", "{root}/no/such/dest", NAME, needles=["{root}/no/such: no such directory"])


# -- 3. OUT's package files are read as OUT's own -------------------------------------------------

def _pool_link_outside(w: Work) -> None:
    """ns-base1.0's pool file replaced by a symlink to a copy outside OUT: the same bytes."""
    pool = _pool(w)
    outside = w.root / "outside.deb"
    shutil.copy(pool, outside)
    pool.unlink()
    os.symlink(outside, pool)


def _pool_dir_link(w: Work) -> None:
    shutil.move(w.out / "deb/pool/main", w.root / "elsewhere")
    os.symlink(w.root / "elsewhere", w.out / "deb/pool/main")


def _pool_fifo(w: Work) -> None:
    _pool(w).unlink()
    os.mkfifo(_pool(w))


@pytest.mark.parametrize("setup, needles", [
    (_pool_link_outside, [f"{{out}}/{BASE}", "symlink"]),
    (_pool_dir_link, ["{out}/deb/pool/main", "symlink"]),
    (_pool_fifo, [f"{{out}}/{BASE}", "FIFO"]),
], ids=["file-symlink-outside", "pool-dir-symlink", "fifo"])
def test_a_pool_file_is_never_followed_or_read_unless_a_regular_file(work, setup, needles):
    setup(work)
    work.refused("export", "{out}", "{dest}", NAME, needles=needles)


# -- 4. the lock, and repair first ----------------------------------------------------------------

def test_export_waits_for_no_writer_it_is_refused_while_one_holds_the_lock(work):
    with open(work.out / ".rocpkg" / "lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        work.refused("export", "{out}", "{dest}", NAME, needles=["{out}", "another rocpkg"])


@pytest.mark.parametrize("at", ["deb/pool#2", "Packages#1", "repomd.xml#1"])
def test_a_half_promoted_release_is_rolled_back_before_it_is_exported(work, at):
    """SRC holds 1.0.0-1 and -2; promoting -2 into OUT (which holds -1) is killed in its copy
    or after its manifest names -2: export repairs OUT first and bundles -1, never -2."""
    src = work.root / "src"
    shutil.copytree(work.out, src, symlinks=True)
    done = run("build", "-c", work.config, "-a", work.artifacts, "-o", src, "--formats", "deb,rpm", "-j", "2",
               "--release", "2", "--repo", "-q", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert done.returncode == 0, done.stderr
    before = snapshot(work.out)
    killed = _faulted(at, "kill", "promote", src, work.out, "--release", "1.0.0-2")
    assert killed.returncode == -9, killed.stderr
    assert (work.out / ".rocpkg" / "journal.json").exists()
    repaired = _exported(work, NAME)
    assert "rolled back an interrupted rocpkg promote" in repaired.stderr
    assert snapshot(work.out) == before
    debs = _bundled_debs(work)
    assert debs and all("_1.0.0-1_" in d for d in debs), debs
    assert run("verify", work.out).returncode == 0


def test_the_library_repairs_before_it_reads_too(work):
    from rocpkg.repo.export import export_closure

    src = work.root / "src"
    shutil.copytree(work.out, src, symlinks=True)
    assert run("build", "-c", work.config, "-a", work.artifacts, "-o", src, "--formats", "deb,rpm", "-j", "2",
               "--release", "2", "--repo", "-q", env={"SOURCE_DATE_EPOCH": "1700000000"}).returncode == 0
    killed = _faulted("Packages#1", "kill", "promote", src, work.out, "--release", "1.0.0-2")
    assert killed.returncode == -9, killed.stderr
    result = export_closure(str(work.out), str(work.dest), [NAME])
    assert not (work.out / ".rocpkg" / "journal.json").exists()
    assert {"ns", "ns-base1.0"} <= set(result.packages["deb"]) and all("_1.0.0-1_" in d for d in _bundled_debs(work))


# -- 5. nothing bundled, indexed or signed that verify would refuse ------------------------------

def _flip_byte(w: Work) -> None:
    pool = _pool(w)
    data = bytearray(pool.read_bytes())
    data[-1] ^= 0xFF
    pool.write_bytes(bytes(data))


def _append_byte(w: Work) -> None:
    with open(_pool(w), "ab") as fh:
        fh.write(b"\0")


def _tampered_and_recorded(w: Work) -> None:
    """The file changed and manifest.json edited to match it: the index still says otherwise."""
    import hashlib

    _flip_byte(w)
    data = _pool(w).read_bytes()

    def edit(doc):
        entry = next(e for e in doc["packages"] if e["file"] == BASE)
        entry["sha256"] = hashlib.sha256(data).hexdigest()
    w.manifest(edit)


@pytest.mark.parametrize("setup, needles", [
    (_flip_byte, [f"{{out}}/{BASE}", "manifest.json recorded", "tampered"]),
    (_append_byte, [f"{{out}}/{BASE}", "manifest.json recorded"]),
    (_tampered_and_recorded, [f"{{out}}/{BASE}", "Packages lists"]),
], ids=["same-size", "grown", "manifest-edited-to-match"])
def test_a_package_verify_refuses_is_never_bundled(work, setup, needles, signer):
    setup(work)
    assert run("verify", work.out).returncode != 0
    work.refused("export", "{out}", "{dest}", NAME, "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id,
                 needles=needles)


# -- 6. every release OUT records ---------------------------------------------------------------

def test_an_asan_release_beside_a_newer_normal_release_is_exported(work):
    for extra in (["--build-variant", "asan"], ["--release", "2"]):
        done = run("build", "-c", work.config, "-a", work.artifacts, "-o", work.out, "--formats", "deb,rpm", "-j",
                   "2", "--repo", "-q", *extra, env={"SOURCE_DATE_EPOCH": "1700000000"})
        assert done.returncode == 0, done.stderr
    ids = [r["id"] for r in json.loads((work.out / "manifest.json").read_text())["releases"]]
    assert ids == ["1.0.0-1", "1.0.0-1+asan", "1.0.0-2"]
    _exported(work, "rocm-asan-gfx110x")
    debs = _bundled_debs(work)
    assert "rocm-asan-gfx110x_1.0.0-1_all.deb" in debs and all("asan" in d and "_1.0.0-1_" in d for d in debs), debs
    newest = work.root / "newest"
    done = run("export", work.out, newest, "rocm-gfx110x")
    assert done.returncode == 0, done.stderr
    debs = sorted(p.name for p in (newest / "deb").rglob("*.deb"))
    assert debs and all("asan" not in d and "_1.0.0-2_" in d for d in debs), debs


# -- 7. DEST, DEST.tar and DEST.tar.sha256: all three or none ------------------------------------

def test_a_size_limit_while_the_tarball_is_written_leaves_nothing(work):
    """Every package and index fits under the limit, the tarball does not (EFBIG, as a full disk)."""
    largest = max(p.stat().st_size for p in work.out.rglob("*") if p.is_file())
    limit = largest + 4096

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    before = snapshot(work.root)
    done = subprocess.run([sys.executable, "-m", "rocpkg.cli", "export", str(work.out), str(work.dest), NAME],
                          capture_output=True, text=True, env=_env(), timeout=TIMEOUT, preexec_fn=limited)
    refusal_lines(done, [f"{work.dest}.tar", "File too large"])
    assert snapshot(work.root) == before


@pytest.mark.parametrize("at, mode, needles", [
    ("dest.tar#1", "ENOSPC", ["{dest}.tar", "No space left"]),               # DEST already in place
    ("dest.tar.sha256#1", "EROFS", ["{dest}.tar.sha256", "Read-only"]),      # DEST and DEST.tar in place
    ("Packages#1", "ENOSPC", ["No space left"]),                              # while the bundle is indexed
    ("dest.tmp-", "EIO", ["{dest}.tmp-", "Input/output error"]),             # its first directory
])
def test_a_failure_at_any_step_of_the_bundle_leaves_none_of_it(work, at, mode, needles):
    before = snapshot(work.root)
    done = _faulted(at if "#" in at else f"{at}#1", mode, "export", work.out, work.dest, NAME)
    refusal_lines(done, [str(n).format(dest=work.dest) for n in needles])
    assert snapshot(work.root) == before
