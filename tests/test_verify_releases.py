"""`rocpkg verify OUT` on a repository that holds several releases: each release is
checked on its own (or one, --release V-R), then the union; two releases of one OUT are not
"duplicate packages"."""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from cli_run import rocpkg
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("releases")
    make_sample_artifacts(root / "artifacts", load_config(None), targets=["gfx1100"], size_mb=0.2)
    out = root / "out"
    for version in ("7.1.0", "7.1.1"):
        done = rocpkg("build", "-a", root / "artifacts", "-o", out, "--version", version, "--formats", "deb")
        assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_release_verifies_and_the_union_too(two_releases):
    done = rocpkg("verify", two_releases, "--json", "--formats", "deb")
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["ok"] and not [p for p in report["problems"] if p["check"] == "duplicate-package"]


def test_one_release_is_checked_alone(two_releases):
    done = rocpkg("verify", two_releases, "--release", "7.1.0-1", "--json", "--formats", "deb")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["counts"]["deb"]["packages"] < sum(1 for _ in (two_releases / "deb/pool/main").glob("*.deb"))


def test_an_unknown_release_is_one_error_line(two_releases):
    done = rocpkg("verify", two_releases, "--release", "9.9.9-1")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "9.9.9-1" in errors[0], done.stderr


def test_the_counts_cover_every_release_checked(two_releases):
    """The summary and --json count the packages and kernels of every release verify checked,
    and name those releases: a sum over the releases, each release's own counts alone."""
    manifest = json.loads((two_releases / "manifest.json").read_text())
    built = Counter(f"{p['version']}-{p['release']}" for p in manifest["packages"] if p["format"] == "deb")
    assert sorted(built) == ["7.1.0-1", "7.1.1-1"]
    whole = json.loads(rocpkg("verify", two_releases, "--json", "--formats", "deb").stdout)
    alone = {r: json.loads(rocpkg("verify", two_releases, "--json", "--formats", "deb", "--release", r).stdout)
             for r in built}
    assert whole["releases"] == {"deb": ["7.1.0-1", "7.1.1-1"]}
    assert whole["counts"]["deb"]["packages"] == sum(built.values())
    for r, report in alone.items():
        assert report["releases"] == {"deb": [r]} and report["counts"]["deb"]["packages"] == built[r]
        assert report["counts"]["deb"]["kernels_checked"] > 0
    for key, total in whole["counts"]["deb"].items():
        assert total == sum(report["counts"]["deb"][key] for report in alone.values()), key
    assert {c["release"] for c in whole["closures"]} == set(built)

    done = rocpkg("verify", two_releases, "--formats", "deb")
    assert done.returncode == 0, done.stderr[-3000:]
    counts = whole["counts"]["deb"]
    line = [line for line in done.stdout.splitlines() if line.startswith("== deb: ")]
    assert line and re.match(rf"== deb: 2 releases \(7\.1\.0-1, 7\.1\.1-1\): {counts['packages']} packages, "
                             rf".* {counts['kernels_checked']} kernels checked, 0 problems$", line[0]), done.stdout
