"""Looking inside OUT and removing one release, as a maintainer does: `rocpkg ls`, `show`,
`diff` and `rm`, run as a user runs them.

One OUT is built once, holding two releases of the small test config: 1.0.0-1 (deb and
rpm) and 1.0.0-2 (deb, rpm and pacman), indexed and unsigned. Each case checks what the
user sees (exit status, lines, the --json document and its schema) against what the
real tools read from the package files, and that OUT is byte for byte as it was where
nothing may change: a refusal, `rm --dry-run`, and an `rm` killed half-way (rolled back
by the next command). A finished `rm` leaves a repository that verify, apt's and dnf's
metadata agree on.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import refusal_lines, snapshot
from test_hostile_input import CONFIG
from test_hostile_out import REPO, run

from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

R1, R2 = "1.0.0-1", "1.0.0-2"
FAULTPOINT = Path(__file__).with_name("faultpoint.py")


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory) -> Path:
    """root/out with R1 (deb, rpm; built at 2023-11-14) and R2 (deb, rpm, pacman; 2024-03-09)."""
    root = tmp_path_factory.mktemp("look")
    (root / "package.json").write_text(json.dumps(CONFIG))
    make_sample_artifacts(root / "artifacts", load_config(root / "package.json"), targets=["gfx1100", "gfx1101"],
                          size_mb=0.05)
    for release, formats, epoch in (("1", "deb,rpm", "1700000000"), ("2", "deb,rpm,pacman", "1710000000")):
        done = run("build", "-c", root / "package.json", "-a", root / "artifacts", "-o", root / "out", "-q",
                   "--release", release, "--formats", formats, "-j", "2", "--repo", env={"SOURCE_DATE_EPOCH": epoch})
        assert done.returncode == 0, done.stderr
    return root


@pytest.fixture
def out(two_releases, tmp_path) -> Path:
    """A copy of the two-release OUT of one case's own."""
    shutil.copytree(two_releases / "out", tmp_path / "out", symlinks=True)
    return tmp_path / "out"


def ok(*args) -> subprocess.CompletedProcess:
    done = run(*args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def files_of(out: Path, release: str) -> list[dict]:
    doc = manifest(out)
    mine = set(next(r for r in doc["releases"] if r["id"] == release)["files"])
    return [e for e in doc["packages"] if e["file"] in mine]


# -- ls ------------------------------------------------------------------------------------------

def test_ls_lists_each_release_with_channel_date_size_and_packages_per_format(two_releases):
    out = two_releases / "out"
    lines = ok("ls", out).stdout.splitlines()
    assert lines[0] == f"{out}: 2 releases, 65 package files, " + lines[0].rsplit(", ", 1)[1]
    assert lines[1].split() == ["release", "channel", "date", "size", "deb", "rpm", "pacman", "targets"]
    first, second = lines[2].split(), lines[3].split()
    assert first[:3] == [R1, "release", "2023-11-14"] and first[5:9] == ["13", "13", "-", "gfx1100,"]
    assert second[:4] == [R2, "*", "release", "2024-03-09"] and second[6:9] == ["13", "13", "13"]
    assert "newest release of its series" in lines[4]

    doc = json.loads(ok("ls", out, "--json").stdout)
    assert doc["schema"] == "rocpkg-ls/1" and doc["out"] == str(out)
    rows = {r["id"]: r for r in doc["releases"]}
    assert list(rows) == [R1, R2]
    for release, row in rows.items():
        entries = files_of(out, release)
        assert row["size"] == sum(e["size"] for e in entries)
        assert row["packages"] == {f: sum(1 for e in entries if e["format"] == f)
                                   for f in ("deb", "rpm", "pacman") if any(e["format"] == f for e in entries)}
        assert row["channel"] == "release" and row["targets"] == ["gfx1100", "gfx1101"]
    assert rows[R1]["date"] == "2023-11-14" and not rows[R1]["newest_of_series"] and rows[R2]["newest_of_series"]
    assert set(rows[R2]["packages"]) == {"deb", "rpm", "pacman"}


def test_ls_quiet_prints_the_release_ids_only(two_releases):
    assert ok("ls", two_releases / "out", "-q").stdout.splitlines() == [R1, R2]


def test_ls_of_a_directory_without_releases_is_one_error_line(tmp_path):
    (tmp_path / "empty").mkdir()
    refusal_lines(run("ls", tmp_path / "empty"), ["manifest.json", "holds no release"])


# -- show ----------------------------------------------------------------------------------------

def test_show_reads_the_package_back_in_every_format_it_exists_in(two_releases):
    out = two_releases / "out"
    name = "ns-blas1.0-gfx1100"
    doc = json.loads(ok("show", out, name, "--json").stdout)
    assert doc["schema"] == "rocpkg-show/1" and doc["query"] == name
    shown = {p["format"]: p for p in doc["packages"]}
    assert list(shown) == ["deb", "rpm", "pacman"]         # the newest release holds all three
    assert {p["release_id"] for p in shown.values()} == {R2}
    deb = out / shown["deb"]["file"]
    # what dpkg and rpm themselves read from the same files
    assert shown["deb"]["depends"] == [d.strip() for d in subprocess.run(
        ["dpkg-deb", "-f", deb, "Depends"], capture_output=True, text=True, check=True).stdout.split(",")]
    requires = subprocess.run(["rpm", "-qp", "--requires", out / shown["rpm"]["file"]], capture_output=True,
                              text=True, check=True).stdout.splitlines()
    assert set(shown["rpm"]["depends"]) <= set(requires) and shown["rpm"]["depends"]
    assert shown["pacman"]["depends"] == ["ns-blas-host1.0=1.0.0-2"]
    for p in shown.values():
        assert p["name"] == name and (p["version"], p["release"]) == ("1.0.0", "2") and p["kind"] == "device"
        assert p["size"] == os.path.getsize(out / p["file"]) and p["target"] == "gfx1100"

    lines = ok("show", out, name).stdout.splitlines()
    assert [line for line in lines if line.startswith("== ")] == [
        f"== deb: {name} 1.0.0-2 (amd64), release {R2}", f"== rpm: {name} 1.0.0-2 (x86_64), release {R2}",
        f"== pacman: {name} 1.0.0-2 (x86_64), release {R2}"]
    assert f"  depends: {shown['deb']['depends'][0]}" in lines


def test_show_a_version_any_case_and_the_file_list(two_releases):
    out = two_releases / "out"
    doc = json.loads(ok("show", out, f"NS-BASE1.0={R1}", "--files", "--json").stdout)
    shown = {p["format"]: p for p in doc["packages"]}
    assert list(shown) == ["deb", "rpm"] and {p["release_id"] for p in shown.values()} == {R1}
    listed = subprocess.run(["dpkg-deb", "-c", out / shown["deb"]["file"]], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert len(shown["deb"]["files"]) == len([line for line in listed if not line.endswith(" ./")])
    rpm_files = subprocess.run(["rpm", "-qpl", out / shown["rpm"]["file"]], capture_output=True, text=True,
                               check=True).stdout.split()
    assert {f["path"] for f in shown["rpm"]["files"]} == set(rpm_files)


@pytest.mark.parametrize("query,needles", [
    ("ns-blsa", ["ns-blsa", "closest: ns-blas"]),
    ("ns-base=9.9", ["ns-base=9.9", f"OUT has {R1}, {R2}"]),
])
def test_show_of_what_out_lacks_names_the_closest(out, query, needles):
    before = snapshot(out)
    refusal_lines(run("show", out, query), needles)
    assert snapshot(out) == before


# -- diff ----------------------------------------------------------------------------------------

def test_diff_says_added_removed_and_changed_packages_with_sizes(two_releases):
    out = two_releases / "out"
    doc = json.loads(ok("diff", out, R1, R2, "--json").stdout)
    assert doc["schema"] == "rocpkg-diff/1" and (doc["a"], doc["b"]) == (R1, R2)
    deb, pacman = doc["formats"]["deb"], doc["formats"]["pacman"]
    assert (len(deb["added"]), len(deb["removed"]), len(deb["changed"]), deb["unchanged"]) == (0, 0, 13, 0)
    assert len(pacman["added"]) == 13 and not pacman["removed"] and not pacman["changed"]
    assert pacman["size_a"] == 0 and pacman["size_b"] == sum(p["size"] for p in pacman["added"])
    change = next(c for c in deb["changed"] if c["name"] == "ns")
    assert (change["from"]["release"], change["to"]["release"]) == ("1", "2")
    assert change["size_change"] == change["to"]["size"] - change["from"]["size"]
    assert deb["size_b"] == sum(e["size"] for e in files_of(out, R2) if e["format"] == "deb")

    lines = ok("diff", out, R1, R2).stdout.splitlines()
    assert lines[0] == f"{R1} -> {R2}"
    assert any(line.startswith("== pacman: 13 added, 0 removed, 0 changed, 0 unchanged;") for line in lines)
    assert any(line.startswith("  + ns-blas1.0-gfx1101 1.0.0-2 (") for line in lines)
    assert any(line.startswith("  ~ ns 1.0.0-1 -> 1.0.0-2, ") for line in lines)
    backwards = json.loads(ok("diff", out, R2, R1, "--json").stdout)["formats"]["pacman"]
    assert len(backwards["removed"]) == 13 and not backwards["added"]
    quiet = ok("diff", out, R1, R2, "-q").stdout.splitlines()
    assert len(quiet) == 4 and all(line.startswith(("==", R1)) for line in quiet)


def test_diff_of_an_unknown_release_names_the_closest(out):
    before = snapshot(out)
    refusal_lines(run("diff", out, R1, "1.0.0-3"), ["B", "no release '1.0.0-3'", "closest: 1.0.0-"])
    assert snapshot(out) == before


# -- rm ------------------------------------------------------------------------------------------

def test_rm_dry_run_says_what_would_go_and_leaves_out_byte_identical(out):
    before = snapshot(out)
    done = ok("rm", out, R1, "--dry-run")
    assert done.stdout.splitlines()[0] == f"would remove release {R1}: 26 package files; OUT would hold {R2}"
    doc = json.loads(ok("rm", out, R1, "--dry-run", "--json").stdout)
    assert doc["schema"] == "rocpkg-rm/1" and doc["dry_run"] is True and doc["removed"] == [R1]
    assert sorted(doc["files"]) == sorted(e["file"] for e in files_of(out, R1)) and doc["kept"] == [R2]
    assert snapshot(out) == before


@pytest.mark.parametrize("args,needles", [
    ((R2,), ["RELEASE", f"{R2} is the newest release of series 1.0", "--allow-newest"]),
    (("1.0.0-9",), ["RELEASE", "no release '1.0.0-9'", "closest: 1.0.0-"]),
    ((R1, "--base-url", "ftp://example.org/x"), ["ftp://example.org/x"]),
])
def test_rm_refusals_leave_out_as_it_was(out, args, needles):
    before = snapshot(out)
    refusal_lines(run("rm", out, *args), needles)
    assert snapshot(out) == before


def _packages_index(out: Path) -> str:
    path = out / "deb/dists/stable/main/binary-amd64/Packages"
    return path.read_text() if path.exists() else gzip.decompress(path.with_suffix(".gz").read_bytes()).decode()


def test_rm_removes_one_release_as_one_change_and_out_indexes_fine(out):
    gone = files_of(out, R1)
    doc = json.loads(ok("rm", out, R1, "--json").stdout)
    assert doc["removed"] == [R1] and doc["kept"] == [R2] and len(doc["files"]) == 26
    assert doc["repositories"] and all(os.path.isabs(p) for p in doc["repositories"])
    for entry in gone:
        assert not (out / entry["file"]).exists()
    assert [r["id"] for r in manifest(out)["releases"]] == [R2]
    assert not (out / ".rocpkg/journal.json").exists() and not (out / ".rocpkg/journal.d").exists()
    # apt's and dnf's metadata list exactly what is left, and verify finds them consistent
    packages = _packages_index(out)
    assert "Version: 1.0.0-1\n" not in packages and packages.count("Version: 1.0.0-2\n") == 13
    primary = next((out / "rpm/repodata").glob("*primary.xml*")).read_bytes()
    primary = gzip.decompress(primary) if primary[:2] == b"\x1f\x8b" else primary
    assert b'rel="1"' not in primary and primary.count(b'rel="2"') >= 13
    verified = run("verify", out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert ok("ls", out, "-q").stdout.splitlines() == [R2]
    # and the last release goes only when asked for
    refusal_lines(run("rm", out, R2), ["--allow-newest"])
    assert ok("rm", out, R2, "--allow-newest").stdout.startswith(f"removed release {R2}: 39 package files; "
                                                                 f"OUT holds no release")


def test_rm_killed_half_way_is_rolled_back_by_the_next_command(out):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    before = {k: v for k, v in snapshot(out).items() if not k.startswith(".rocpkg")}
    killed = subprocess.run([sys.executable, FAULTPOINT, "manifest.json#1", "kill", "rm", out, R1],
                            capture_output=True, text=True, env=env)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert (out / ".rocpkg/journal.json").exists()     # killed inside the change
    listed = ok("ls", out, "-q")
    assert "repaired: " in listed.stderr and "rolled back an interrupted rocpkg rm" in listed.stderr
    assert listed.stdout.splitlines() == [R1, R2]
    assert {k: v for k, v in snapshot(out).items() if not k.startswith(".rocpkg")} == before
