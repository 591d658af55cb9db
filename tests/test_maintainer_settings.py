"""A repository a maintainer lives in, run as a maintainer runs it: the settings OUT
remembers (base URL, suite, signing key) across repo, prune, promote and export; verify
checking the signatures against OUT's own key; the destructive commands' refusals and dry
runs; --date as the release's date for retention; counts in the right number.

Three nightlies (--date 2026-10-01, -15, 11-20) are built and indexed once, signed, with an
http base URL; each case copies that work dir and runs the CLI on it. Every refusal is exit
2 with an `error:` line naming what it refuses and the work dir byte-identical
(cli_run.snapshot); every dry run leaves it byte-identical too."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import refusal_lines, snapshot
from repo_helpers import kill_gpg_agent, make_signer
from test_hostile_input import CONFIG
from test_hostile_out import run

from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

DATES = ("2026-10-01", "2026-10-15", "2026-11-20")
IDS = [f"1.0.0~{d.replace('-', '')}-1" for d in DATES]
URL = "http://repo.example.org/rocm/nightly"
NO_SDE = {"SOURCE_DATE_EPOCH": ""}      # the environment's SOURCE_DATE_EPOCH left unset


@pytest.fixture(scope="module")
def key():
    signer, home = make_signer()
    yield signer, home
    kill_gpg_agent(home)


@pytest.fixture(scope="module")
def nightlies(tmp_path_factory, key) -> Path:
    """package.json, artifacts, and out/: three dated nightlies, indexed and signed at URL."""
    signer, home = key
    root = tmp_path_factory.mktemp("nightlies")
    (root / "package.json").write_text(json.dumps(CONFIG))
    make_sample_artifacts(root / "artifacts", load_config(root / "package.json"), targets=["gfx1100"], size_mb=0.05)
    for date in DATES:
        done = run("build", "-c", root / "package.json", "-a", root / "artifacts", "-o", root / "out", "-q",
                   "--formats", "deb,rpm", "-j", "2", "--channel", "nightly", "--date", date, env=NO_SDE)
        assert done.returncode == 0, done.stderr
    done = run("repo", root / "out", "--base-url", URL, "--gpg-home", home, "--sign-key", signer.key_id)
    assert done.returncode == 0, done.stderr
    return root


class Work:
    def __init__(self, root: Path):
        self.root, self.out = root, root / "out"

    def refused(self, *args, needles=(), env=None) -> list[str]:
        """rocpkg ARGS must be refused and leave the whole work dir as it was."""
        before = snapshot(self.root)
        errors = refusal_lines(run(*args, env=env), needles)
        assert snapshot(self.root) == before, "the work dir changed"
        return errors

    def unchanged(self, *args, env=None):
        """rocpkg ARGS must succeed (a dry run) and leave the whole work dir as it was."""
        before = snapshot(self.root)
        done = ok(*args, env=env)
        assert snapshot(self.root) == before, "the work dir changed"
        return done

    def releases(self, tree: Path | None = None) -> list[str]:
        return [r["id"] for r in json.loads(((tree or self.out) / "manifest.json").read_text())["releases"]]


def ok(*args, env=None):
    done = run(*args, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


@pytest.fixture
def work(nightlies, tmp_path) -> Work:
    shutil.copytree(nightlies, tmp_path / "w", symlinks=True)
    return Work(tmp_path / "w")


def source_urls(tree: Path) -> tuple[str, str]:
    return (tree / "rocm.list").read_text(), (tree / "rocm.repo").read_text()


# -- --date is the release's date ------------------------------------------------------------

def test_date_is_the_release_date_that_prune_policy_ages_count_from(work):
    records = json.loads((work.out / "manifest.json").read_text())["releases"]
    assert [(r["id"], r["date"], r["channel"]) for r in records] == \
        [(IDS[0], 1790812800, "nightly"), (IDS[1], 1792022400, "nightly"), (IDS[2], 1795132800, "nightly")]
    done = ok("prune", work.out, "--policy", "nightly=30d", env=NO_SDE)
    assert "policy: ages count back from 2026-11-20 (the newest release's date)" in done.stderr
    assert f"removed 2 releases ({IDS[0]}, {IDS[1]})" in done.stdout
    assert work.releases() == [IDS[2]]
    assert ok("verify", work.out, "-q").returncode == 0


def test_source_date_epoch_moves_now_for_the_policy(work):
    """now = 2026-11-10: only the first nightly is more than 30 days old."""
    done = ok("prune", work.out, "--policy", "nightly=30d", env={"SOURCE_DATE_EPOCH": "1794268800"})
    assert "ages count back from 2026-11-10 (SOURCE_DATE_EPOCH)" in done.stderr
    assert done.stdout.startswith(f"removed 1 release ({IDS[0]}), 22 package files;"), done.stdout


# -- settings OUT remembers ------------------------------------------------------------------

def test_out_records_its_settings_and_repo_prune_promote_keep_the_http_url(work, key, tmp_path):
    signer, home = key
    recorded = json.loads((work.out / ".rocpkg/settings.json").read_text())
    assert recorded == {"schema": "rocpkg-settings/1", "base_url": URL, "suite": "stable",
                        "signer": {"gpg_home": home, "sign_key": [signer.key_id]}}
    listed = source_urls(work.out)
    assert f"{URL}/deb stable main" in listed[0] and f"baseurl={URL}/rpm" in listed[1]
    done = ok("repo", work.out)     # no option: the URL, suite and key OUT recorded
    assert f"signed by {signer.fingerprint}" in done.stdout
    assert "file://" not in done.stdout + done.stderr and "note:" not in done.stderr
    assert source_urls(work.out) == listed
    done = ok("prune", work.out, "--keep", "2")
    assert f"removed 1 release ({IDS[0]}), 22 package files; kept {IDS[1]}, {IDS[2]}" in done.stdout
    assert f"signed by {signer.fingerprint}" in done.stdout and done.stderr == ""
    assert source_urls(work.out) == listed
    # a new channel: its own URL, the key and suite of the repository it is promoted from
    stable = work.root / "stable"
    done = ok("promote", work.out, stable, "--release", IDS[2], "--base-url", "https://repo.example.org/rocm/stable")
    assert "promoted 1.0.0~20261120-1: 22 package files copied" in done.stdout
    assert f"signed by {signer.fingerprint}" in done.stdout
    assert "https://repo.example.org/rocm/stable/deb stable main" in (stable / "rocm.list").read_text()
    assert source_urls(work.out) == listed
    ok("promote", work.out, stable, "--release", IDS[1])     # no --base-url: stable's own
    assert "https://repo.example.org/rocm/stable/rpm" in (stable / "rocm.repo").read_text()
    assert ok("verify", stable, "-q").returncode == 0
    # export signs the bundle with OUT's recorded key
    done = ok("export", work.out, tmp_path / "bundle", "rocm-gfx110x")
    assert f"signed by {signer.fingerprint}" in done.stdout


def test_a_changed_setting_is_said_in_one_line_and_recorded(work):
    done = ok("repo", work.out, "--base-url", "http://mirror.example.org/rocm/")
    assert done.stderr.splitlines() == [f"base URL for channel nightly: {URL} -> http://mirror.example.org/rocm"]
    assert "http://mirror.example.org/rocm/deb stable main" in (work.out / "rocm.list").read_text()
    done = ok("prune", work.out, "--keep", "2", "--suite", "testing")
    assert "suite for channel nightly: stable -> testing" in done.stderr.splitlines()
    assert "http://mirror.example.org/rocm/deb testing main" in (work.out / "rocm.list").read_text()
    assert json.loads((work.out / ".rocpkg/settings.json").read_text())["suite"] == "testing"


def test_repo_unsigned_forgets_the_recorded_key(work, key):
    signer, home = key
    work.refused("repo", work.out, "--unsigned", "--sign-key", signer.key_id, needles=["--unsigned"])
    done = ok("repo", work.out, "--unsigned")
    assert f"signer for channel nightly: --sign-key {signer.key_id} --gpg-home {home} -> (none)" in done.stderr
    assert "signer" not in json.loads((work.out / ".rocpkg/settings.json").read_text())
    assert (work.out / "rocm.list").read_text().startswith("deb [trusted=yes]")
    # the key left from before is no verdict on a tree recorded unsigned; --keyring still checks
    assert "OK: no problem found (unsigned: signatures not checked)" in ok("verify", work.out).stdout
    done = run("verify", work.out, "--keyring", work.out / "rocm.gpg")
    assert done.returncode == 2 and "deb/dists/stable/InRelease: -: missing: the index is not signed" in done.stderr
    done = ok("prune", work.out, "--keep", "2")
    assert done.stdout.rstrip().endswith("unsigned")


def test_without_a_url_given_or_recorded_the_file_url_is_said_once(tmp_path, nightlies):
    out = tmp_path / "out"
    done = ok("build", "-c", nightlies / "package.json", "-a", nightlies / "artifacts", "-o", out, "--formats", "deb",
              "-j", "2", "--repo", "-q")
    done = ok("repo", out)
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {out}: no --base-url given and none recorded: its source lines name file://{out} "
                     f"(this machine only); give --base-url URL once, OUT remembers it"]
    assert "base_url" not in json.loads((out / ".rocpkg/settings.json").read_text())
    ok("repo", out, "--base-url", "http://a.example.org/r")
    done = ok("repo", out)
    assert "note:" not in done.stderr and "http://a.example.org/r/deb" in (out / "rocm.list").read_text()


@pytest.mark.parametrize("content, needle", [
    (b"{not json", "not a readable settings file"),
    (b'{"schema": "other/1"}', "not a rocpkg-settings/1 settings file"),
    (b'{"schema": "rocpkg-settings/1", "base_url": "http://a\\nb"}', "base_url"),
    (b'{"schema": "rocpkg-settings/1", "suite": "../x"}', "suite"),
    (b'{"schema": "rocpkg-settings/1", "signer": {"sign_key": ["a\\u001bb"]}}', "signer.sign_key"),
    (b'{"schema": "rocpkg-settings/1", "suite": "a", "suite": "b"}', "appears twice"),
    (b'{"schema": "rocpkg-settings/1", "mirror": "x"}', "mirror"),
])
def test_a_damaged_settings_file_is_refused_naming_it(work, content, needle):
    (work.out / ".rocpkg/settings.json").write_bytes(content)
    for command in (["repo", work.out], ["prune", work.out, "--keep", "1"]):
        errors = work.refused(*command, needles=[".rocpkg/settings.json", needle])
        assert len(errors) == 1, errors


def test_a_settings_file_that_is_a_symlink_a_fifo_or_huge_is_never_read(work, tmp_path):
    settings = work.out / ".rocpkg/settings.json"
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"schema": "rocpkg-settings/1", "base_url": "http://evil.example"}))
    settings.unlink()
    os.symlink(target, settings)
    work.refused("repo", work.out, needles=["settings.json"])
    settings.unlink()
    os.mkfifo(settings)
    work.refused("prune", work.out, "--keep", "1", needles=["settings.json", "FIFO"])
    settings.unlink()
    settings.write_bytes(b" " * (1 << 20))
    work.refused("repo", work.out, needles=["settings.json", "more than"])


# -- verify checks against OUT's own key -----------------------------------------------------

def test_verify_checks_signatures_against_outs_own_key_and_says_which(work, key):
    signer, _ = key
    done = ok("verify", work.out)
    assert f"signatures checked against OUT's own key {work.out}/rocm.gpg ({signer.fingerprint})" in done.stdout
    assert done.stdout.rstrip().endswith("OK: no problem found")
    doc = json.loads(ok("verify", work.out, "--json").stdout)
    assert doc["signatures"]["fingerprints"] == [signer.fingerprint] and doc["signatures"]["own_key"] is True
    done = ok("verify", work.out, "--keyring", work.out / "rocm.asc")
    assert f"signatures checked against the key {work.out}/rocm.asc ({signer.fingerprint})" in done.stdout


def test_an_edited_inrelease_fails_verify_without_keyring(work):
    inrelease = work.out / "deb/dists/stable/InRelease"
    inrelease.write_text(inrelease.read_text().replace("Suite: stable", "Suite: stab1e"))
    done = run("verify", work.out)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "deb/dists/stable/InRelease: -: not a good signature by the given key" in done.stderr
    assert "FAILED: 1 problem" in done.stdout and "OK" not in done.stdout


def test_an_unsigned_tree_is_said_to_be_unsigned(tmp_path, nightlies):
    out = tmp_path / "out"
    ok("build", "-c", nightlies / "package.json", "-a", nightlies / "artifacts", "-o", out, "--formats", "deb,rpm",
       "-j", "2", "--repo", "-q")
    done = ok("verify", out)
    assert "unsigned: signatures not checked" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == "OK: no problem found (unsigned: signatures not checked)"


def test_a_signed_tree_without_its_key_file_is_not_passed(work):
    (work.out / "rocm.gpg").unlink()
    (work.out / "rocm.asc").unlink()
    done = run("verify", work.out)
    assert done.returncode == 2 and "OK" not in done.stdout, done.stdout
    assert "the indexes are signed and OUT has no rocm.gpg or rocm.asc" in done.stderr


# -- destructive commands --------------------------------------------------------------------

def test_prune_keep_0_needs_allow_empty(work):
    work.refused("prune", work.out, "--keep", "0", needles=["prune", "--allow-empty", *IDS])
    done = work.unchanged("prune", work.out, "--keep", "0", "--dry-run")
    assert done.stdout.startswith(f"would remove 3 releases ({', '.join(IDS)}), 66 package files; kept none")
    assert "prune refuses it without --allow-empty" in done.stderr
    done = ok("prune", work.out, "--keep", "0", "--allow-empty")
    assert done.stdout.startswith("removed 3 releases") and work.releases() == []


def test_prune_and_promote_dry_runs_change_nothing(work):
    done = work.unchanged("prune", work.out, "--keep", "1", "--dry-run")
    assert done.stdout.startswith(f"would remove 2 releases ({IDS[0]}, {IDS[1]}), 44 package files; kept {IDS[2]}")
    done = work.unchanged("promote", work.out, work.root / "stable", "--release", IDS[2], "--dry-run",
                          "--base-url", "https://repo.example.org/stable")
    assert done.stdout.startswith(f"would promote {IDS[2]}: 22 package files to copy into {work.root / 'stable'}")
    assert not (work.root / "stable").exists()


def test_publish_dry_run_says_what_it_would_send_and_remove(work):
    dest = work.root / "web"
    ok("publish", work.out, dest)
    ok("prune", work.out, "--keep", "2")
    done = work.unchanged("publish", work.out, dest, "--dry-run")
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"would publish {work.out} to {dest}: ") and "22 files to remove" in lines[0], lines
    assert sum(1 for line in lines if line.startswith("  would remove ")) == 22
    done = ok("publish", work.out, dest)
    assert done.stdout.rstrip().endswith("22 removed")


def test_publishing_another_out_into_a_destination_needs_adopt(work):
    dest = work.root / "web"
    ok("publish", work.out, dest)
    other = work.root / "other"
    ok("promote", work.out, other, "--release", IDS[2], "--base-url", "http://repo.example.org/rocm/other")
    work.refused("publish", other, dest, needles=[str(dest), f"another OUT, {work.out}", "--adopt"])
    done = ok("publish", other, dest, "--adopt")
    assert f"its publish record named {work.out}" in done.stderr
    assert json.loads((dest / ".rocpkg-publish.json").read_text())["origin"]["out"] == str(other)
    assert "would publish" in ok("publish", other, dest, "--dry-run").stdout    # its own now: no --adopt


def test_promote_into_a_signed_channel_without_its_key_is_refused(work):
    """An OUT from before settings were recorded: nothing says which key signs it."""
    stable = work.root / "stable"
    ok("promote", work.out, stable, "--release", IDS[1], "--base-url", "http://repo.example.org/stable")
    for tree in (work.out, stable):
        (tree / ".rocpkg/settings.json").unlink()
    work.refused("promote", work.out, stable, "--release", IDS[2], needles=[str(stable), "channel nightly is signed",
                                                                           "--sign-key"])
    for dry in ((), ("--dry-run",)):
        work.refused("promote", work.out, work.root / "new", "--release", IDS[2], *dry,
                     needles=[str(work.root / "new"), "a nightly channel promoted from", "signed", "--sign-key"])
    assert not (work.root / "new").exists()


def test_a_bad_date_is_refused_before_anything_is_built(tmp_path, nightlies):
    out = tmp_path / "out"
    for date, needle in (("2026-13-01", "is not a date"), ("2200-01-01", "rpm's 32-bit dates")):
        errors = refusal_lines(run("build", "-c", nightlies / "package.json", "-a", nightlies / "artifacts", "-o",
                                   out, "--channel", "nightly", "--date", date, env=NO_SDE), ["--date", needle])
        assert len(errors) == 1
        assert not out.exists()
