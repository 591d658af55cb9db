"""Hostile URLs, paths and names: what rocpkg writes into a source line, a control file or
an error line is one thing, read the same way by apt, dnf and zypper.

- Every source line's URL (--base-url of repo/build/prune/promote, the default file://OUT,
  export's DEST) goes through rocpkg.formats.urls: an OUT or DEST whose path holds a space, a
  comma, '#', '"', '$', ';', '%' or non-ASCII is percent-encoded, and real apt, dnf and
  zypper clients fetch from it; a bare absolute path is a file:// URL; an upper-case scheme
  is lowered; what no client reads (a line break, `file:relative`, a fragment, a scheme
  they lack) is refused with exit 2, one `error:` line naming the option or path, and the
  work directory byte for byte as it was (never a section injected into rocm.repo).
- A name check is a full match: a SONAME ending in a newline adds no line to a .deb's
  shlibs file; a package name, version or suite with a trailing newline is refused.
- An error line is one line whatever it names: control characters are escaped.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_run import refusal_lines, snapshot
from repo_helpers import AptClient, ZypperClient
from test_hostile_out import Work, built, run  # noqa: F401  (built: the module's fixture)
from test_shlibs import CONFIG as SHLIBS_CONFIG

from rocpkg.errors import RocpkgInputError
from rocpkg.formats import preflight
from rocpkg.inputs import config_strings
from rocpkg.formats.urls import keyring_path, source_url

# a directory name with every character a source line could misread
HOSTILE_DIR = "a b,c#d\"e$f;g%h\u00e9"
PACKAGE = "ns-base"                     # a package of the built release with no dependency outside it


@pytest.fixture
def work(built, tmp_path) -> Work:
    shutil.copytree(built, tmp_path / "w", symlinks=True)
    return Work(tmp_path / "w")


def _moved_out(work: Work, name: str) -> Path:
    """work's OUT moved to work.root/<name>/out (the parent directory carries the name)."""
    target = work.root / name / "out"
    target.parent.mkdir()
    os.rename(work.out, target)
    return target


# -- the rule itself -------------------------------------------------------------------------

ACCEPTED = [
    ("HTTPS://Repo.Example.ORG/rocm/", "https://repo.example.org/rocm"),
    ("https://repo.example.org:8443/a/", "https://repo.example.org:8443/a"),
    ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ("https://h/a\"b,c$d;e/\u00e9", "https://h/a%22b%2Cc%24d%3Be/%C3%A9"),
    ("https://h/a%20b/c%zz", "https://h/a%20b/c%25zz"),
    ("file:/srv/repo", "file:///srv/repo"),
    ("FILE:///srv/repo/", "file:///srv/repo"),
    ("/srv/my repo,1/#x\"y$z;%", "file:///srv/my%20repo%2C1/%23x%22y%24z%3B%25"),
    ("/srv/\u00e9/\udcff", "file:///srv/%C3%A9/%FF"),
]


@pytest.mark.parametrize("given,written", ACCEPTED)
def test_a_url_or_absolute_path_is_written_as_every_client_reads_it(given, written):
    assert source_url(given) == written
    assert source_url(written) == written        # the rule applied to its own output changes nothing


REFUSED = [
    ("https://h/x\n[evil]\nbaseurl=http://evil/", "control character"),
    ("/srv/x\rdeb http://evil/ stable main", "control character"),
    ("/srv/\x1b[31mred", "control character"),
    ("file:relative", "file:///ABSOLUTE/PATH"),
    ("file://host/srv/x", "file:///ABSOLUTE/PATH"),
    ("relative/path", "absolute path"),
    ("https://h/x#frag", "fragment"),
    ("https://h/x?q=1", "query"),
    ("ftp://h/x", "scheme 'ftp'"),
    ("s3://bucket/x", "scheme 's3'"),
    ("https://user:secret@h/x", "password"),
    ("https://h/x y", "space"),
    ("https://h:99999/x", "not a URL"),
    ("https://ex\u00e4mple.org/x", "xn--"),
    ("", "absolute path"),
]


@pytest.mark.parametrize("given,why", REFUSED)
def test_what_no_client_reads_is_refused_naming_the_option(given, why):
    with pytest.raises(RocpkgInputError) as refused:
        source_url(given, "--base-url")
    [(where, what)] = refused.value.problems
    assert where == "--base-url" and why in what and "\n" not in what and "\r" not in what


@pytest.mark.parametrize("path", ["/a b/rocm.gpg", "/a,b/rocm.gpg", "/a\"b/rocm.gpg", "/a\nb/rocm.gpg", "rel.gpg"])
def test_a_keyring_path_apt_signed_by_cannot_hold_is_refused(path):
    with pytest.raises(RocpkgInputError):
        keyring_path(path, "DEST")
    assert keyring_path("/srv/k#1$é/rocm.gpg") == "/srv/k#1$é/rocm.gpg"


# -- real clients read what rocpkg writes for a hostile OUT -----------------------------------

def _dnf_makecache(tmp: Path, repo_file: Path) -> subprocess.CompletedProcess:
    """dnf reading only repo_file's repository (metadata fetched and, signed, checked)."""
    repos = tmp / "repos"
    repos.mkdir(parents=True)
    shutil.copy(repo_file, repos / repo_file.name)
    conf = tmp / "dnf.conf"
    conf.write_text(f"[main]\nreposdir={repos}\ncachedir={tmp / 'cache'}\n")
    return subprocess.run(["dnf", "-y", "--config", str(conf), "--installroot", str(tmp / "root"),
                           f"--setopt=reposdir={repos}", "--releasever=1", "makecache"],
                          capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, timeout=300)


def _apt_fetches(tmp: Path, sources: str, name: str = PACKAGE, deb822: bool = False) -> None:
    """apt reads the source (one-line, or deb822 in sources.list.d), updates from it and
    downloads `name`'s .deb through it."""
    apt = AptClient(tmp, "" if deb822 else sources)
    if deb822:
        (tmp / "etc/apt/sources.list.d/rocm.sources").write_text(sources)
    update = apt.run("update")
    assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    download = apt.run("download", name)
    assert download.returncode == 0, download.stdout + download.stderr
    assert list((tmp / "downloads").glob(f"{name}_*.deb"))


def _clients_fetch(tmp: Path, list_file: Path, repo_file: Path) -> None:
    _apt_fetches(tmp / "apt", list_file.read_text())
    made = _dnf_makecache(tmp / "dnf", repo_file)
    assert made.returncode == 0 and "Metadata cache created" in made.stdout, made.stdout + made.stderr
    zypper = ZypperClient(tmp / "zypper", [repo_file], key=None)
    refreshed = zypper.run("refresh")
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    fetched = zypper.run("download", PACKAGE)
    assert fetched.returncode == 0 and list((tmp / "zypper").rglob(f"{PACKAGE}-*.rpm")), \
        fetched.stdout + fetched.stderr


def test_an_out_whose_path_holds_space_comma_and_more_is_read_by_apt_dnf_and_zypper(work, tmp_path):
    out = _moved_out(work, HOSTILE_DIR)
    done = run("repo", out)
    assert done.returncode == 0, done.stderr
    listed = (out / "rocm.list").read_text()
    assert listed.count("\n") == 1 and "%20" in listed and "%2C" in listed and "%23" in listed, listed
    repo = (out / "rocm.repo").read_text()
    assert repo.count("[") == 1 and "baseurl=file://" in repo and " " not in repo.split("baseurl=")[1].split("\n")[0]
    _clients_fetch(tmp_path / "clients", out / "rocm.list", out / "rocm.repo")


def test_a_signed_out_with_a_space_and_comma_gets_a_key_url_dnf_reads(work, tmp_path, signer):
    out = _moved_out(work, "signed x,y")
    done = run("repo", out, "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id)
    assert done.returncode == 0, done.stderr
    assert "gpgkey=file://" in (out / "rocm.repo").read_text() and "%20" in (out / "rocm.repo").read_text()
    made = _dnf_makecache(tmp_path / "dnf", out / "rocm.repo")     # repo_gpgcheck=1: the key fetched by its URL
    assert made.returncode == 0 and "Metadata cache created" in made.stdout, made.stdout + made.stderr


def test_a_bare_absolute_path_and_an_upper_case_scheme_are_base_urls(work, tmp_path):
    served = work.root / "served here, 1"
    shutil.copytree(work.out, served)
    done = run("repo", work.out, "--base-url", f"{served}/")
    assert done.returncode == 0, done.stderr
    listed = (work.out / "rocm.list").read_text()
    assert f"file://{str(served).replace(' ', '%20').replace(',', '%2C')}/deb stable main" in listed, listed
    _apt_fetches(tmp_path / "apt", listed)
    assert run("repo", work.out, "--base-url", "HTTPS://Repo.Example.ORG/rocm/").returncode == 0
    assert "https://repo.example.org/rocm/deb stable" in (work.out / "rocm.list").read_text()
    assert "baseurl=https://repo.example.org/rocm/rpm\n" in (work.out / "rocm.repo").read_text()


def test_a_signed_repo_with_a_hostile_base_path_writes_setup_sources_apt_reads(work, tmp_path, signer):
    served = work.root / HOSTILE_DIR
    done = run("repo", work.out, "--base-url", served, "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id)
    assert done.returncode == 0, done.stderr
    setup = next(work.out.glob("*-repo.deb"))
    unpacked = tmp_path / "setup"
    subprocess.run(["dpkg-deb", "-x", setup, unpacked], check=True)
    sources = next(unpacked.rglob("*.sources")).read_text()
    assert "URIs: file://" in sources and "%2C" in sources, sources
    shutil.copytree(work.out, served)
    keyring = next(unpacked.rglob("*-archive-keyring.gpg"))       # as installed, in this test's place
    _apt_fetches(tmp_path / "apt", re.sub(r"(?m)^Signed-By: .*$", f"Signed-By: {keyring}", sources), deb822=True)
    for repo_file in unpacked.rglob("*.repo"):
        assert repo_file.read_text().count("[") == 1 and "%23" in repo_file.read_text()


def test_an_export_into_a_dest_with_a_space_and_comma_is_read_by_apt_dnf_and_zypper(work, tmp_path):
    dest = work.root / "bundle, 1" / "dest"
    dest.parent.mkdir()
    done = run("export", work.out, dest, PACKAGE)
    assert done.returncode == 0, done.stderr
    assert "%20" in (dest / "rocm.list").read_text() and "%2C" in (dest / "rocm.repo").read_text()
    _clients_fetch(tmp_path / "clients", dest / "rocm.list", dest / "rocm.repo")


# -- refusals: exit 2, one error line, nothing written -----------------------------------------

KEYS = ["--gpg-home", "{gnupg}", "--sign-key", "{key}"]
BUILD = ["build", "-c", "{root}/package.json", "-a", "{root}/artifacts", "--formats", "deb,rpm", "--repo"]
NEWLINE_DIR = "x\n[evil]\nenabled=1"

REFUSAL_CASES = [
    ("repo-out-newline", lambda w: _moved_out(w, NEWLINE_DIR), ["repo", "{moved}"], ["control character"]),
    ("repo-base-file-relative", None, ["repo", "{out}", "--base-url", "file:relative"], ["--base-url"]),
    ("repo-base-fragment", None, ["repo", "{out}", "--base-url", "https://h/x#y"], ["--base-url", "fragment"]),
    ("repo-base-quote-newline", None, ["repo", "{out}", "--base-url", "https://h/\"x\n"], ["--base-url"]),
    ("repo-base-ftp", None, ["repo", "{out}", "--base-url", "ftp://h/x"], ["--base-url", "ftp"]),
    ("repo-base-relative", None, ["repo", "{out}", "--base-url", "served/here"], ["--base-url", "absolute"]),
    ("repo-base-credentials", None, ["repo", "{out}", "--base-url", "https://u:p@h/x"], ["--base-url"]),
    ("build-out-newline", None, [*BUILD, "-o", "{root}/" + NEWLINE_DIR], ["control character"]),
    ("build-base-fragment", None, [*BUILD, "-o", "{root}/fresh", "--base-url", "https://h/#x"], ["--base-url"]),
    ("prune-out-newline", lambda w: _moved_out(w, NEWLINE_DIR), ["prune", "{moved}", "--keep", "1"],
     ["control character"]),
    ("prune-base-ftp", None, ["prune", "{out}", "--keep", "1", "--base-url", "ftp://h/x"], ["--base-url"]),
    ("promote-dst-newline", None, ["promote", "{out}", "{root}/" + NEWLINE_DIR, "--release", "1.0.0-1"],
     ["control character"]),
    ("export-dest-newline", None, ["export", "{out}", "{root}/" + NEWLINE_DIR, PACKAGE], ["control character"]),
    ("export-signed-dest-comma", None, ["export", "{out}", "{root}/a,b", PACKAGE, *KEYS], ["{root}/a,b", "','"]),
    ("export-signed-dest-space", None, ["export", "{out}", "{root}/a b", PACKAGE, *KEYS], ["{root}/a b", "' '"]),
]


@pytest.mark.parametrize("setup,args,needles", [pytest.param(s, a, n, id=i) for i, s, a, n in REFUSAL_CASES])
def test_a_url_no_client_reads_is_refused_before_anything_is_written(work, signer, setup, args, needles):
    moved = setup(work) if setup else work.out
    fill = dict(out=work.out, root=work.root, moved=moved, gnupg=signer.gnupg_home, key=signer.key_id)
    args = [a.format(**fill) for a in args]
    before = snapshot(work.root)
    errors = refusal_lines(run(*args, env={"SOURCE_DATE_EPOCH": "1700000000"}),
                           [n.format(**fill) for n in needles])
    assert len(errors) == 1, errors
    assert snapshot(work.root) == before, "the work dir changed"


# -- full-match name checks --------------------------------------------------------------------

@pytest.mark.parametrize("check", [
    lambda v: preflight.DEB_NAME.match(v), lambda v: preflight.RPM_NAME.match(v),
    lambda v: preflight.DEB_ARCH.match(v), lambda v: preflight.RPM_ARCH.match(v),
    lambda v: not preflight.deb_version_problem(v), lambda v: not preflight.rpm_version_problem(v),
    lambda v: config_strings.VERSION_RE.match(v),
], ids=["deb-name", "rpm-name", "deb-arch", "rpm-arch", "deb-version", "rpm-version", "version"])
def test_a_name_check_is_a_full_match_a_trailing_newline_fails(check):
    assert check("1abc")
    assert not check("1abc\n")


def test_a_soname_ending_in_a_newline_adds_no_line_to_the_shlibs_file(tmp_path):
    work = tmp_path / "gcc"
    work.mkdir()
    (work / "foo.c").write_text("int foo(int x) { return x + 1; }\n")
    subprocess.run(["gcc", "-s", "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1\n",
                    "-o", "libfoo.so.1", "foo.c"], cwd=work, check=True, capture_output=True)
    artifacts = tmp_path / "artifacts"
    lib = artifacts / "foo_lib_generic" / "foo" / "stage" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(work / "libfoo.so.1", lib / "libfoo.so.1")
    (artifacts / "foo_lib_generic" / "artifact_manifest.txt").write_text("foo/stage\n")
    config = dict(SHLIBS_CONFIG, packages=SHLIBS_CONFIG["packages"][:1])
    (tmp_path / "package.json").write_text(json.dumps(config))
    done = run("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", tmp_path / "out", "--formats", "deb")
    assert done.returncode == 0, done.stderr
    assert "warning:" in done.stderr and "'libfoo.so.1\\n'" in done.stderr, done.stderr    # named, left out
    deb = next((tmp_path / "out").rglob("rocm-foo7.1_*.deb"))
    shlibs = subprocess.run(["dpkg-deb", "-I", deb, "shlibs"], capture_output=True, text=True)
    assert shlibs.returncode != 0 and not shlibs.stdout, shlibs.stdout      # no file, so no second line


# -- one problem, one line ---------------------------------------------------------------------

def test_a_name_with_a_newline_is_echoed_escaped_on_one_error_line(work):
    errors = work.refused("export", "{out}", "{dest}", "ns-base\nerror: forged", needles=["ns-base\\x0aerror: forged"])
    assert errors == [e for e in errors if not e.startswith("error: forged")] and len(errors) == 1


def test_a_package_json_name_with_a_newline_forges_no_error_line(tmp_path):
    doc = {"settings": {"version": "1.0.0"},
           "packages": [{"Package": "ns-base\nerror: forged", "Description_Short": "x", "Metapackage": True}]}
    (tmp_path / "package.json").write_text(json.dumps(doc))
    (tmp_path / "artifacts").mkdir()
    result = run("build", "-c", tmp_path / "package.json", "-a", tmp_path / "artifacts", "-o", tmp_path / "out")
    errors = refusal_lines(result, ["ns-base\\x0aerror: forged"])
    assert not [line for line in result.stderr.splitlines() if line.startswith("error: forged")], result.stderr
    assert errors and not (tmp_path / "out").exists()


@pytest.mark.parametrize("char", ["\r", "\x1b", "\t", "\u2028"])
def test_every_control_character_in_an_error_line_is_escaped(work, char):
    errors = work.refused("export", "{out}", "{dest}", f"ns{char}x")
    assert len(errors) == 1 and char not in errors[0], errors
    assert f"ns\\x{ord(char):02x}x" in errors[0] or f"ns\\u{ord(char):04x}x" in errors[0], errors
