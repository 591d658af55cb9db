"""Wrong results, refused: what passed verify or publish, or was silently overwritten, while
it should not have been. Each case runs the command a user would on a copy of a small built
OUT (tests/test_hostile_out.py's `built`): a refusal is exit 2 with `error:` lines naming the
file or value, no traceback, and the work dir (OUT, DEST, the files beside them)
byte-identical; a verify finding is a problem naming the file.

  - a `*-repo.deb`/`.rpm` at OUT's top that is no setup package's stable-name copy;
  - a file under deb/ or rpm/ that OUT does not record (not a package, not an index);
  - promote into a DST that is SRC (through a symlink), inside it, or holding it;
  - a format named twice in --formats;
  - a release hidden from manifest.json's releases list while its packages are recorded;
  - a package name (and so its file) of one release and build variant made by another.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import snapshot
from test_hostile_input import CONFIG
from test_hostile_out import Work, built, run, work  # noqa: F401  (fixtures)

from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


def _build(w: Work, *extra, out=None):
    return run("build", "-q", "-c", w.config, "-a", w.artifacts, "-o", out or w.out, *extra, env=EPOCH)


# -- a foreign setup copy at OUT's top ----------------------------------------------------------

@pytest.mark.parametrize("name", ["evil-repo.deb", "rocm-repo.rpm"])
def test_a_repo_package_at_outs_top_that_rocpkg_did_not_write_is_reported_and_never_published(work, name):
    """OUT/<name>-repo.<fmt> looks like a setup package's stable-name copy, but the manifest
    records no setup package of that name: verify reports it, publish refuses it."""
    source = work.deb() if name.endswith(".deb") else work.rpm()
    shutil.copy(source, work.out / name)
    work.refused("verify", "{out}", needles=[name, "no setup package manifest.json records"])
    work.refused("publish", "{out}", "{dest}", needles=[str(work.out / name), "unrecorded-package"])
    assert not work.dest.exists()


# -- a stray file in the package or index trees -------------------------------------------------

STRAYS = {
    "pool-text": "deb/pool/main/README",
    "pool-udeb": "deb/pool/main/ns-base_1.0.0-1_all.udeb",
    "rpm-arch": "rpm/x86_64/install.sh",
    "dists": "deb/dists/stable/main/binary-amd64/Packages.bz2",
    "suite-dir": "deb/dists/stable/extra/notes",
    "by-hash-lie": "deb/dists/stable/main/binary-amd64/by-hash/SHA256/" + "ab" * 32,
    "repodata-lie": "rpm/repodata/" + "cd" * 32 + "-primary.xml.gz",
    "repodata-other": "rpm/repodata/comps.xml",
}


@pytest.mark.parametrize("rel", list(STRAYS.values()), ids=list(STRAYS))
def test_a_file_out_does_not_record_is_reported_and_never_published(work, rel):
    path = work.out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not written by rocpkg\n")
    work.refused("verify", "{out}", needles=[rel, "OUT does not record it"])
    work.refused("publish", "{out}", "{dest}", needles=[str(path), "unrecorded-file"])
    assert not work.dest.exists()


def test_older_index_generations_named_by_their_digest_verify_and_publish(work):
    """A second release re-indexed: the older Packages stay under by-hash and the older DNF
    metadata beside the new (content-addressed, for clients that read the old roots); they
    are OUT's own and publish copies them."""
    before = {p.relative_to(work.out) for p in work.out.rglob("*") if "by-hash" in p.parts or "repodata" in p.parts}
    done = _build(work, "--formats", "deb,rpm", "--version", "1.0.1", "--repo")
    assert done.returncode == 0, done.stderr
    after = {p.relative_to(work.out) for p in work.out.rglob("*") if "by-hash" in p.parts or "repodata" in p.parts}
    assert before < after
    verified = run("verify", work.out)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr
    done = run("publish", work.out, work.dest)
    assert done.returncode == 0, done.stderr
    assert all((work.dest / rel).exists() for rel in before)


# -- promote into SRC itself ---------------------------------------------------------------------

@pytest.mark.parametrize("dst,why", [("link", "is SRC itself"), ("inside", "is SRC itself or inside it"),
                                     ("link-inside", "is SRC itself or inside it"), ("parent", "holds SRC")])
def test_promote_into_src_itself_or_a_tree_nested_with_it_is_refused(work, dst, why):
    """DST a symlink to SRC, a directory under SRC (or under a symlink to SRC), or the
    directory holding SRC: promote would rewrite SRC's own manifest and snippets."""
    link = work.root / "link"
    link.symlink_to(work.out)
    target = {"link": link, "inside": work.out / "copy", "link-inside": link / "copy", "parent": work.root}[dst]
    release = json.loads((work.out / "manifest.json").read_text())["releases"][0]["id"]
    work.refused("promote", "{out}", target, "--release", release, "--base-url", "https://example.org/repo",
                 needles=[str(target), why])


# -- --formats --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["build", "plan", "verify", "detect"])
@pytest.mark.parametrize("value", ["deb,deb", "rpm,deb,rpm"])
def test_a_format_named_twice_is_refused_before_anything_runs(work, command, value):
    args = {"build": ["build", "-c", work.config, "-a", work.artifacts, "-o", "{out}"],
            "plan": ["plan", "-c", work.config, "-a", work.artifacts],
            "verify": ["verify", "{out}"], "detect": ["detect", "-c", work.config]}[command]
    errors = work.refused(*args, "--formats", value, needles=["--formats", value, "more than once"])
    assert len(errors) == 1, errors


# -- a release hidden from the releases list -------------------------------------------------------

def test_a_release_dropped_from_the_releases_list_still_orders_the_next_build(work):
    """1.0.1 built into OUT, then its record cut from manifest.json's releases (its packages
    still recorded): 1.0.0-2 sorts below it, and build refuses it as it would with the
    record there."""
    done = _build(work, "--formats", "deb,rpm", "--version", "1.0.1")
    assert done.returncode == 0, done.stderr
    work.manifest(lambda doc: doc.update(releases=[r for r in doc["releases"] if r["id"] != "1.0.1-1"]))
    work.refused("build", "-c", work.config, "-a", work.artifacts, "-o", "{out}", "--release", "2",
                 needles=["1.0.0-2", "1.0.1-1", "version-order"], env=EPOCH)


# -- one owner per package name --------------------------------------------------------------------

@pytest.fixture(scope="module")
def clashing(tmp_path_factory) -> Path:
    """package.json with a definition `ns-base-asan` beside `ns-base` (whose ASAN build is
    named ns-base-asan), its artifacts; out/ holds the normal release, built, not indexed."""
    root = tmp_path_factory.mktemp("clash")
    config = copy.deepcopy(CONFIG)
    config["packages"].insert(1, {"Package": "ns-base-asan", "Description_Short": "Sanitizer tools",
                                  "Metapackage": True, "DEBDepends": ["ns-base"], "RPMRequires": ["ns-base"]})
    (root / "package.json").write_text(json.dumps(config))
    make_sample_artifacts(root / "artifacts", load_config(root / "package.json"), targets=["gfx1100"], size_mb=0.05)
    done = run("build", "-q", "-c", root / "package.json", "-a", root / "artifacts", "-o", root / "out", env=EPOCH)
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture
def clash(clashing, tmp_path) -> Work:
    shutil.copytree(clashing, tmp_path / "w", symlinks=True)
    return Work(tmp_path / "w")


ASAN_NEEDLES = ["ns-base-asan_1.0.0-1_all.deb", "release 1.0.0-1+asan", "release 1.0.0-1 ",
                "ns-base-asan-1.0.0-1.noarch.rpm", "must be unique"]


@pytest.mark.parametrize("indexed", [False, True], ids=["built", "indexed"])
def test_an_asan_build_whose_names_another_release_has_is_refused_naming_both(clash, indexed):
    if indexed:
        assert run("repo", clash.out).returncode == 0
    errors = clash.refused("build", "-c", clash.config, "-a", clash.artifacts, "-o", "{out}",
                           "--build-variant", "asan", needles=ASAN_NEEDLES, env=EPOCH)
    assert any("ns-base-asan1.0" in e and "two build variants" in e for e in errors), errors


def test_a_normal_build_whose_names_an_asan_release_has_is_refused(clash, tmp_path):
    """The other order: the ASAN release first (into a fresh OUT), then the normal one."""
    out = clash.root / "asan-first"
    assert _build(clash, "--build-variant", "asan", out=out).returncode == 0
    before = snapshot(clash.root)
    done = _build(clash, out=out)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert any("ns-base-asan_1.0.0-1_all.deb" in e and "release 1.0.0-1+asan" in e for e in errors), errors
    assert snapshot(clash.root) == before


def test_the_two_builds_go_into_one_out_when_no_name_clashes(clash):
    """Without the clashing definition both builds share OUT, as TheRock's do."""
    clash.config.write_text(json.dumps(CONFIG))
    out = clash.root / "both"
    assert _build(clash, out=out).returncode == 0
    assert _build(clash, "--build-variant", "asan", out=out).returncode == 0
    verified = run("verify", out)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr


def test_verify_reports_a_package_file_two_releases_hold(clash):
    """What an overwrite left behind (two releases recording one file) is a name-clash."""
    def add_asan(doc):
        record = dict(doc["releases"][0], id="1.0.0-1+asan", variant="asan",
                      files=["deb/pool/main/ns-base-asan_1.0.0-1_all.deb"])
        doc["releases"].append(record)
    clash.manifest(add_asan)
    errors = clash.refused("verify", "{out}", needles=["ns-base-asan_1.0.0-1_all.deb", "release 1.0.0-1 holds",
                                                       "release 1.0.0-1+asan holds", "one overwriting the other"])
    assert errors
    clash.refused("publish", "{out}", "{dest}", needles=["name-clash"])
