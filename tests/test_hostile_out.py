"""Hostile OUT and destinations: what rocpkg wrote, read back, is as untrusted as its input.

One small release (deb and rpm, indexed, unsigned) is built once; each case copies it,
breaks one thing the way a careless or hostile user or tool would (a symlink planted in
OUT, a FIFO where a package was, a damaged manifest, a publish destination that is OUT
or holds it, a damaged publish record, an option out of range), and runs the command a
user would. Every case ends in exit 2 with an `error:` line naming the path or field, no
traceback, within a timeout (a FIFO must never hang a reader), and the whole work
directory (OUT, DEST and the files beside them) byte-identical to what it was before.
The last section holds what publish may and may not remove when it succeeds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_run import refusal_lines, snapshot
from test_hostile_input import CONFIG

from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def run(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO),
                                                           os.environ.get("PYTHONPATH", "")]))
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "rocpkg.cli", *[str(a) for a in args]], capture_output=True,
                          text=True, env=environ, errors="backslashreplace", timeout=TIMEOUT, cwd=cwd)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A work dir holding package.json, artifacts and out/ (deb and rpm, indexed)."""
    root = tmp_path_factory.mktemp("built")
    (root / "package.json").write_text(json.dumps(CONFIG))
    make_sample_artifacts(root / "artifacts", load_config(root / "package.json"), targets=["gfx1100"], size_mb=0.05)
    done = run("build", "-c", root / "package.json", "-a", root / "artifacts", "-o", root / "out",
               "--formats", "deb,rpm", "-j", "2", "--repo", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert done.returncode == 0, done.stderr
    return root


class Work:
    """One case's copy of the work dir: out/ (the built OUT), dest/ (absent until a case
    makes it), victim (a file beside them that nothing may touch)."""

    def __init__(self, root: Path):
        self.root = root
        self.out = root / "out"
        self.dest = root / "dest"
        self.victim = root / "victim"
        self.victim.write_bytes(b"a file beside OUT that rocpkg never wrote\n")
        self.config = root / "package.json"
        self.artifacts = root / "artifacts"

    def deb(self) -> Path:
        return sorted((self.out / "deb/pool/main").glob("*.deb"))[0]

    def rpm(self) -> Path:
        return sorted((self.out / "rpm").glob("*/*.rpm"))[0]

    def manifest(self, change) -> None:
        """Apply change(doc) to out/manifest.json; a returned value replaces it."""
        doc = json.loads((self.out / "manifest.json").read_text())
        replaced = change(doc)
        text = replaced if isinstance(replaced, (str, bytes)) else json.dumps(doc if replaced is None else replaced)
        (self.out / "manifest.json").write_bytes(text if isinstance(text, bytes) else text.encode())

    def refused(self, *args, needles=(), env=None) -> list[str]:
        """Run rocpkg ARGS (`{out}`, `{dest}`, `{root}` filled in) and check the refusal."""
        args = [str(a).format(out=self.out, dest=self.dest, root=self.root) for a in args]
        before = snapshot(self.root)
        needles = [str(n).format(out=self.out, dest=self.dest, root=self.root) for n in needles]
        errors = refusal_lines(run(*args, env=env), needles)
        assert snapshot(self.root) == before, "the work dir changed"
        return errors


@pytest.fixture
def work(built, tmp_path) -> Work:
    shutil.copytree(built, tmp_path / "w", symlinks=True)
    return Work(tmp_path / "w")


def test_the_untouched_out_verifies_and_publishes(work):
    assert run("verify", work.out).returncode == 0
    done = run("publish", work.out, work.dest)
    assert done.returncode == 0, done.stderr
    assert (work.dest / ".rocpkg-publish.json").is_file()


# -- publish: where DEST may not be ----------------------------------------------------------

def _link(where: str, target: str):
    def make(w: Work):
        os.symlink(str(target).format(out=w.out, root=w.root), str(where).format(out=w.out, root=w.root))
    return make


def _mkdir(rel: str):
    return lambda w: (w.root / rel).mkdir(parents=True, exist_ok=True)


def _write(rel: str, data: bytes):
    def make(w: Work):
        (w.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (w.root / rel).write_bytes(data)
    return make


def _fifo(rel: str):
    def make(w: Work):
        path = w.root / rel
        if path.exists():
            path.unlink()
        os.mkfifo(path)
    return make


def _record(doc) -> bytes:
    return json.dumps({"schema": "rocpkg-publish/1", "files": doc}).encode()


GOOD_SHA = "0" * 64
GOOD_MD5 = "0" * 32
PUBLISH_CASES = [
    ("dest-is-out", None, ["{out}"], ["{out}", "is OUT itself"]),
    ("dest-inside-out", None, ["{out}/www"], ["{out}/www", "inside"]),
    ("dest-inside-out-deb", None, ["{out}/deb"], ["{out}/deb", "inside"]),
    ("dest-holds-out", None, ["{root}"], ["{root}", "holds OUT"]),
    ("dest-symlink-to-out", _link("{root}/alias", "{out}"), ["{root}/alias"], ["{root}/alias", "is OUT itself"]),
    ("dest-symlink-to-parent", _link("{root}/up", "{root}"), ["{root}/up"], ["{root}/up", "holds OUT"]),
    ("dest-a-file", None, ["{root}/victim"], ["{root}/victim", "not a directory"]),
    ("record-not-json", _write("dest/.rocpkg-publish.json", b"{not json"), ["{dest}"],
     ["{dest}/.rocpkg-publish.json", "not a readable publish record"]),
    ("record-not-utf8", _write("dest/.rocpkg-publish.json", b'{"schema": "\xff"}'), ["{dest}"],
     ["{dest}/.rocpkg-publish.json"]),
    ("record-other-schema", _write("dest/.rocpkg-publish.json", b'{"schema": "x", "files": {}}'), ["{dest}"],
     ["{dest}/.rocpkg-publish.json", "not a rocpkg-publish/1"]),
    ("record-files-a-list", _write("dest/.rocpkg-publish.json", b'{"schema": "rocpkg-publish/1", "files": []}'),
     ["{dest}"], ["{dest}/.rocpkg-publish.json"]),
    ("record-dotdot", _write("dest/.rocpkg-publish.json",
                             _record({"../victim": {"size": 42, "sha256": GOOD_SHA, "md5": GOOD_MD5}})),
     ["{dest}"], ["files['../victim']"]),
    ("record-absolute", _write("dest/.rocpkg-publish.json",
                               _record({"/etc/passwd": {"size": 1, "sha256": GOOD_SHA, "md5": GOOD_MD5}})),
     ["{dest}"], ["files['/etc/passwd']"]),
    ("record-names-itself", _write("dest/.rocpkg-publish.json",
                                   _record({".rocpkg-publish.json": {"size": 1, "sha256": GOOD_SHA, "md5": GOOD_MD5}})),
     ["{dest}"], ["names the record itself"]),
    ("record-size-a-string", _write("dest/.rocpkg-publish.json",
                                    _record({"a": {"size": "1", "sha256": GOOD_SHA, "md5": GOOD_MD5}})),
     ["{dest}"], ["files['a']"]),
    ("record-huge-integer", _write("dest/.rocpkg-publish.json",
                                   b'{"schema": "rocpkg-publish/1", "files": {"a": {"size": 1' + b"0" * 5000 + b"}}}"),
     ["{dest}"], ["{dest}/.rocpkg-publish.json", "not a readable publish record"]),
    ("record-duplicate-key", _write("dest/.rocpkg-publish.json",
                                    b'{"schema": "rocpkg-publish/1", "files": {}, "files": {"x": 1}}'),
     ["{dest}"], ["appears twice"]),
    ("record-a-symlink", lambda w: (w.dest.mkdir(), os.symlink(w.victim, w.dest / ".rocpkg-publish.json")),
     ["{dest}"], ["{dest}/.rocpkg-publish.json", "symlink"]),
    ("record-a-fifo", lambda w: (w.dest.mkdir(), os.mkfifo(w.dest / ".rocpkg-publish.json")),
     ["{dest}"], ["{dest}/.rocpkg-publish.json", "FIFO"]),
    ("dest-deb-a-symlink", lambda w: (w.dest.mkdir(), (w.root / "elsewhere").mkdir(),
                                      os.symlink(w.root / "elsewhere", w.dest / "deb")),
     ["{dest}"], ["{dest}/deb", "symlink"]),
    ("dest-package-a-symlink", lambda w: ((w.dest / "rpm").mkdir(parents=True),
                                          os.symlink(w.victim, w.dest / "rocm.repo")),
     ["{dest}"], ["{dest}/rocm.repo", "symlink"]),
    ("s3-bucket-root", None, ["s3://some-bucket"], ["DEST", "whole bucket"]),
    ("s3-bucket-root-slash", None, ["s3://some-bucket/"], ["DEST", "whole bucket"]),
    ("s3-prefix-dotdot", None, ["s3://some-bucket/a/../b"], ["DEST"]),
    ("s3-bad-bucket", None, ["s3://Bad_Bucket/x"], ["DEST"]),
    ("s3-bad-endpoint", None, ["s3://some-bucket/x", "--endpoint-url", "not a url"], ["--endpoint-url"]),
    ("s3-endpoint-no-host", None, ["s3://some-bucket/x", "--endpoint-url", "http://"], ["--endpoint-url"]),
    ("dest-other-scheme", None, ["ftp://host/x"], ["DEST"]),
]


@pytest.mark.parametrize("setup,args,needles", [pytest.param(s, a, n, id=i) for i, s, a, n in PUBLISH_CASES])
def test_publish_refuses_a_destination_it_may_not_write(work, setup, args, needles):
    if setup:
        setup(work)
    work.refused("publish", "{out}", *args, needles=needles)


# -- OUT's own files: symlinks, special files ------------------------------------------------

def _replace_with_link(rel: str, target: str = "{root}/victim"):
    def make(w: Work):
        path = w.out / rel
        if path.is_dir() and not path.is_symlink():
            shutil.move(str(path), str(w.root / "moved"))
            target_path = str(w.root / "moved")
        else:
            if path.exists() or path.is_symlink():
                path.unlink()
            target_path = target.format(root=w.root, out=w.out)
        os.symlink(target_path, path)
    return make


def _pool_fifo(w: Work):
    os.mkfifo(w.out / "deb/pool/main/zz-planted_1.0_all.deb")


def _rpm_device(w: Work):
    os.symlink("/dev/zero", w.out / "rpm/x86_64/zz-planted-1.0-1.x86_64.rpm")


OUT_CASES = [
    ("lock-a-symlink", _replace_with_link(".rocpkg/lock"), ["repo", "{out}"], [".rocpkg/lock"]),
    ("lock-a-symlink-publish", _replace_with_link(".rocpkg/lock"), ["publish", "{out}", "{dest}"], [".rocpkg/lock"]),
    ("lock-a-fifo", _fifo("out/.rocpkg/lock"), ["repo", "{out}"], [".rocpkg/lock"]),
    ("rocpkg-dir-a-symlink", _replace_with_link(".rocpkg"), ["repo", "{out}"], ["{out}/.rocpkg", "symlink"]),
    ("rpm-dir-a-symlink", _replace_with_link("rpm"), ["repo", "{out}"], ["{out}/rpm", "symlink"]),
    ("deb-dir-a-symlink", _replace_with_link("deb"), ["publish", "{out}", "{dest}"], ["{out}/deb", "symlink"]),
    ("rocm-asc-a-symlink", _replace_with_link("rocm.asc"), ["publish", "{out}", "{dest}"], ["{out}/rocm.asc"]),
    ("rocm-list-a-symlink", _replace_with_link("rocm.list"), ["repo", "{out}"], ["{out}/rocm.list", "symlink"]),
    ("manifest-a-symlink", _replace_with_link("manifest.json"), ["verify", "{out}"], ["{out}/manifest.json"]),
    ("manifest-to-dev-zero", _replace_with_link("manifest.json", "/dev/zero"), ["verify", "{out}"],
     ["{out}/manifest.json"]),
    ("manifest-a-fifo", _fifo("out/manifest.json"), ["verify", "{out}"], ["{out}/manifest.json", "FIFO"]),
    ("manifest-a-fifo-repo", _fifo("out/manifest.json"), ["repo", "{out}"], ["{out}/manifest.json"]),
    ("manifest-a-directory", lambda w: ((w.out / "manifest.json").unlink(), (w.out / "manifest.json").mkdir()),
     ["verify", "{out}"], ["{out}/manifest.json"]),
    ("pool-fifo-verify", _pool_fifo, ["verify", "{out}"], ["zz-planted_1.0_all.deb", "FIFO"]),
    ("pool-fifo-repo", _pool_fifo, ["repo", "{out}"], ["zz-planted_1.0_all.deb", "FIFO"]),
    ("pool-fifo-publish", _pool_fifo, ["publish", "{out}", "{dest}"], ["zz-planted_1.0_all.deb", "FIFO"]),
    ("rpm-fifo-publish", _fifo("out/rpm/x86_64/zz-planted-1.0-1.x86_64.rpm"), ["publish", "{out}", "{dest}"],
     ["zz-planted-1.0-1.x86_64.rpm", "FIFO"]),
    ("rpm-to-dev-zero-verify", _rpm_device, ["verify", "{out}"], ["zz-planted-1.0-1.x86_64.rpm", "symlink"]),
    ("rpm-to-dev-zero-repo", _rpm_device, ["repo", "{out}"], ["zz-planted-1.0-1.x86_64.rpm", "symlink"]),
    ("release-file-a-symlink", _replace_with_link("deb/dists/stable/Release"), ["verify", "{out}"],
     ["deb/dists/stable/Release", "symlink"]),
    ("state-journal-a-symlink", _replace_with_link(".rocpkg/state/deb.jsonl"), ["repo", "{out}"],
     ["deb.jsonl", "symlink"]),
]


@pytest.mark.parametrize("setup,args,needles", [pytest.param(s, a, n, id=i) for i, s, a, n in OUT_CASES])
def test_out_is_read_without_following_a_symlink_or_opening_a_special_file(work, setup, args, needles):
    setup(work)
    work.refused(*args, needles=needles)
    assert work.victim.read_bytes() == b"a file beside OUT that rocpkg never wrote\n"


# -- manifest.json: one schema ---------------------------------------------------------------

def _package_field(key, value, index=0):
    def change(doc):
        doc["packages"][index][key] = value
    return change


def _release_field(key, value):
    def change(doc):
        doc["releases"][0][key] = value
    return change


MANIFEST_CASES = [
    ("file-dotdot", _package_field("file", "../victim"), ["packages[0].file"]),
    ("file-absolute", _package_field("file", "/dev/zero"), ["packages[0].file"]),
    ("file-other-format", _package_field("file", "rpm/x86_64/a.rpm"), ["packages[0].file"]),
    ("file-inner-dotdot", _package_field("file", "deb/pool/../../victim"), ["packages[0].file"]),
    ("size-a-string", _package_field("size", "12"), ["packages[0].size"]),
    ("size-negative", _package_field("size", -1), ["packages[0].size"]),
    ("sha256-short", _package_field("sha256", "abc"), ["packages[0].sha256"]),
    ("format-unknown", _package_field("format", "snap"), ["packages[0].format"]),
    ("name-missing", lambda doc: doc["packages"][0].pop("name") and None, ["packages[0].name"]),
    ("name-a-number", _package_field("name", 7), ["packages[0].name"]),
    ("packages-an-object", lambda doc: doc.update(packages={}), ["manifest.json"]),
    ("release-files-dotdot", _release_field("files", ["../victim"]), ["releases[0].files[0]"]),
    ("release-date-a-string", _release_field("date", "yesterday"), ["releases[0].date"]),
    ("release-date-past-rpm", _release_field("date", 1 << 40), ["releases[0].date"]),
    ("release-version-missing", lambda doc: doc["releases"][0].pop("version") and None, ["releases[0].version"]),
    ("releases-not-a-list", lambda doc: doc.update(releases="7.1"), ["releases"]),
    ("release-formats-unknown", _release_field("formats", ["deb", "apk"]), ["releases[0].formats[1]"]),
    ("truncated", lambda doc: json.dumps(doc)[:50], ["manifest.json", "not a readable manifest"]),
    ("not-utf8", lambda doc: b'{"schema": "rocpkg-manifest/1", "packages": [], "x": "\xff"}',
     ["manifest.json", "not a readable manifest"]),
    ("huge-integer", lambda doc: '{"schema": "rocpkg-manifest/1", "packages": [], "n": 1' + "0" * 5000 + "}",
     ["manifest.json", "not a readable manifest"]),
    ("duplicate-key", lambda doc: '{"schema": "rocpkg-manifest/1", "packages": [], "packages": []}',
     ["manifest.json", "appears twice"]),
    ("not-an-object", lambda doc: "[1, 2]", ["manifest.json"]),
]


@pytest.mark.parametrize("change,needles", [pytest.param(c, n, id=i) for i, c, n in MANIFEST_CASES])
@pytest.mark.parametrize("command", ["verify", "prune"])
def test_a_damaged_manifest_is_refused_naming_the_field(work, change, needles, command):
    work.manifest(change)
    args = ["verify", "{out}"] if command == "verify" else ["prune", "{out}", "--keep", "1"]
    work.refused(*args, needles=needles)


# -- what publish removes, and what it never removes -------------------------------------------

def test_publish_into_a_web_root_keeps_what_it_did_not_write(work):
    (work.dest / ".well-known").mkdir(parents=True)
    (work.dest / "index.html").write_text("<h1>our site</h1>")
    (work.dest / ".well-known/security.txt").write_text("Contact: x")
    (work.dest / "deb").mkdir()
    (work.dest / "deb/README").write_text("not rocpkg's")
    assert run("publish", work.out, work.dest).returncode == 0
    assert run("publish", work.out, work.dest).returncode == 0
    assert (work.dest / "index.html").read_text() == "<h1>our site</h1>"
    assert (work.dest / ".well-known/security.txt").is_file() and (work.dest / "deb/README").is_file()


def test_publish_removes_only_what_an_earlier_publish_put_there(work):
    assert run("publish", work.out, work.dest).returncode == 0
    record = json.loads((work.dest / ".rocpkg-publish.json").read_text())
    assert "manifest.json" in record["files"]
    # OUT no longer has rocm.list: the published copy goes; a foreign file beside it stays
    (work.out / "rocm.list").unlink()
    (work.dest / "rocm.sources").write_text("foreign")
    done = run("publish", work.out, work.dest, "--no-check")
    assert done.returncode == 0, done.stderr
    assert "1 removed" in done.stdout
    assert not (work.dest / "rocm.list").exists() and (work.dest / "rocm.sources").exists()
    assert "rocm.list" not in json.loads((work.dest / ".rocpkg-publish.json").read_text())["files"]


def test_publish_leaves_a_recorded_file_someone_else_has_since_rewritten(work):
    assert run("publish", work.out, work.dest).returncode == 0
    (work.out / "rocm.list").unlink()
    (work.dest / "rocm.list").write_text("ours now\n")
    assert run("publish", work.out, work.dest, "--no-check").returncode == 0
    assert (work.dest / "rocm.list").read_text() == "ours now\n"


# -- integrity: no cache in a verdict, no foreign package --------------------------------------

def _foreign_deb(w: Work):
    shutil.copy(w.deb(), w.out / "deb/pool/main/zz-foreign_1.0_all.deb")


def _foreign_rpm(w: Work):
    shutil.copy(w.rpm(), w.rpm().with_name("zz-foreign-1.0-1.x86_64.rpm"))


FOREIGN_CASES = [
    ("deb-repo", _foreign_deb, ["repo", "{out}"], ["zz-foreign_1.0_all.deb", "no manifest records it"]),
    ("deb-publish", _foreign_deb, ["publish", "{out}", "{dest}"], ["zz-foreign_1.0_all.deb", "unrecorded-package"]),
    ("deb-verify", _foreign_deb, ["verify", "{out}"], ["zz-foreign_1.0_all.deb", "no manifest records it"]),
    ("rpm-repo", _foreign_rpm, ["repo", "{out}"], ["zz-foreign-1.0-1.x86_64.rpm", "no manifest records it"]),
    ("rpm-publish", _foreign_rpm, ["publish", "{out}", "{dest}"], ["zz-foreign-1.0-1.x86_64.rpm"]),
]


@pytest.mark.parametrize("setup,args,needles", [pytest.param(s, a, n, id=i) for i, s, a, n in FOREIGN_CASES])
def test_a_package_no_manifest_records_is_reported_and_never_indexed_or_published(work, setup, args, needles):
    setup(work)
    work.refused(*args, needles=needles)


def test_verify_hashes_a_changed_package_whatever_its_stamp_says(work):
    """An edited package with its stamp put back (same size, mtime and inode as its state
    line records) is still tampered: verdicts never read the stamps."""
    deb = work.deb()
    data = bytearray(deb.read_bytes())
    data[-1] ^= 1
    stat_before = deb.stat()
    deb.write_bytes(bytes(data))
    os.utime(deb, ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))
    work.refused("verify", "{out}", needles=[deb.name, "manifest.json recorded"])


@pytest.mark.parametrize("what", ["missing", "a-directory"])
def test_a_package_file_the_manifest_lists_and_out_lacks_is_one_line_naming_it(work, what):
    """repo's manifest sync (rocpkg.repo.index.sync_manifest) names the listed package file
    that is gone (or is no file): exit 2, no traceback, OUT as it was (the re-index undone);
    verify names it as a problem."""
    deb = work.deb()
    deb.unlink()
    if what == "a-directory":
        deb.mkdir()
    index = next(i for i, e in enumerate(json.loads((work.out / "manifest.json").read_text())["packages"])
                 if e["file"].endswith("/" + deb.name))
    errors = work.refused("repo", "{out}", needles=[str(deb), f"manifest.json lists it (packages[{index}].file"])
    assert len(errors) == 1, errors
    if what == "missing":
        work.refused("verify", "{out}", needles=[deb.name, "manifest.json lists it but it is not in OUT"])


def _release_id(work) -> str:
    record = json.loads((work.out / "manifest.json").read_text())["releases"][0]
    return f"{record['version']}-{record['release']}"


@pytest.mark.parametrize("where", ["file", "pool"])
def test_promote_never_follows_a_symlink_in_src(work, where):
    """A package file of SRC (or its pool directory) replaced by a symlink to the same
    bytes elsewhere: promote refuses it naming the path, DST is not made."""
    deb = work.deb()
    if where == "file":
        shutil.copy(deb, work.root / "elsewhere.deb")
        deb.unlink()
        deb.symlink_to(work.root / "elsewhere.deb")
        named = deb
    else:
        named = deb.parent
        shutil.copytree(named, work.root / "elsewhere")
        shutil.rmtree(named)
        named.symlink_to(work.root / "elsewhere")
    errors = work.refused("promote", "{out}", "{dest}", "--release", _release_id(work), needles=[str(named), "symlink"])
    assert not work.dest.exists() and errors


def test_promote_never_follows_a_symlink_where_dst_holds_the_file(work):
    deb = work.deb()
    target = work.dest / deb.relative_to(work.out)
    target.parent.mkdir(parents=True)
    target.symlink_to(deb)          # the same bytes: followed, it would pass as already there
    work.refused("promote", "{out}", "{dest}", "--release", _release_id(work), needles=[str(target), "symlink"])


# -- bounded read-back -------------------------------------------------------------------------

def test_a_huge_sparse_elf_member_is_read_through_a_window_never_spilled(tmp_path, monkeypatch):
    """A .deb of a few KB whose data.tar holds a 768 MiB ELF (a header, then zeros):
    verify's read-back keeps a bounded window in memory and writes nothing to TMPDIR."""
    from rocpkg.verify.readback import read_tree_release

    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text("Package: huge\nVersion: 1.0-1\nArchitecture: amd64\n"
                                         "Maintainer: T <t@example.org>\nDescription: huge\n")
    (root / "opt/lib").mkdir(parents=True)
    elf = root / "opt/lib/libhuge.so"
    with open(elf, "wb") as fh:
        fh.write(b"\x7fELF\x02\x01\x01" + bytes(57))
        fh.truncate(768 << 20)
    deb = tmp_path / "huge_1.0-1_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zzstd", "-z1", "--build", root, deb], check=True,
                   capture_output=True)
    assert deb.stat().st_size < 1 << 20
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))     # where a spill would go
    view = read_tree_release("deb", [str(deb)], 1)     # in this process: its tempdir is the one watched
    assert list(spill.iterdir()) == []
    assert "huge" in view.specs and not [p for p in view.problems if p.check == "unreadable"]


# -- damaged indexes: one error line, and `repo` writes them anew ---------------------------------

RELEASE = "deb/dists/stable/Release"
PACKAGES = "deb/dists/stable/main/binary-amd64/Packages"
REPOMD = "rpm/repodata/repomd.xml"


def _edit(rel: str, change):
    def make(w: Work):
        path = w.out / rel
        path.write_bytes(change(path.read_bytes()))
    return make


def _primary(w: Work) -> str:
    return next(str(p.relative_to(w.out)) for p in (w.out / "rpm/repodata").glob("*primary.xml.gz"))


INDEX_CASES = [
    ("release-size-not-a-number", _edit(RELEASE, lambda b: b.replace(b"SHA256:\n", b"SHA256:\n 00 lots x/Packages\n")),
     [RELEASE, "damaged index"]),
    ("release-not-utf8", _edit(RELEASE, lambda b: b + b"\xff\xfe\n"), [RELEASE, "damaged index"]),
    ("packages-not-utf8", _edit(PACKAGES, lambda b: b + b"\xff\xfe\n"), [PACKAGES, "damaged index"]),
    ("packages-size-not-a-number", _edit(PACKAGES, lambda b: b.replace(b"\nSize: ", b"\nSize: x", 1)),
     [PACKAGES, "damaged index"]),
    ("repomd-not-xml", _edit(REPOMD, lambda b: b"not xml <"), [REPOMD, "damaged index"]),
    ("repomd-truncated", _edit(REPOMD, lambda b: b[: len(b) // 2]), [REPOMD, "damaged index"]),
    ("repomd-size-not-a-number", _edit(REPOMD, lambda b: b.replace(b"<size>", b"<size>x", 1)),
     [REPOMD, "damaged index"]),
    ("repomd-a-fifo", _fifo(f"out/{REPOMD}"), [REPOMD, "FIFO"]),
    ("primary-not-gzip", lambda w: (w.out / _primary(w)).write_bytes(b"not gzip"), ["primary.xml.gz", "damaged"]),
]


@pytest.mark.parametrize("setup,needles", [pytest.param(s, n, id=i) for i, s, n in INDEX_CASES])
def test_a_damaged_index_is_one_error_line_and_repo_writes_it_anew(work, setup, needles):
    setup(work)
    work.refused("verify", "{out}", needles=[f"{{out}}/{n}" if "/" in n else n for n in needles])
    if "fifo" not in str(needles).lower():
        repaired = run("repo", work.out)
        assert repaired.returncode == 0, repaired.stderr
        assert run("verify", work.out).returncode == 0


# -- options out of range -----------------------------------------------------------------------

BUILD = ["build", "-c", "{root}/package.json", "-a", "{root}/artifacts", "--formats", "deb"]
RANGE_CASES = [
    ("jobs-500", [*BUILD, "-o", "{out}", "-j", "500"], None, ["-j", "from 1 to 256"]),
    ("jobs-0", [*BUILD, "-o", "{out}", "-j", "0"], None, ["-j"]),
    ("shard-huge-count", [*BUILD, "-o", "{out}", "--shard", "1/100000000"], None, ["--shard"]),
    ("shard-zero", [*BUILD, "-o", "{out}", "--shard", "0/3"], None, ["--shard"]),
    ("shard-past-count", [*BUILD, "-o", "{out}", "--shard", "4/3"], None, ["--shard"]),
    ("output-is-artifacts", [*BUILD, "-o", "{root}/artifacts"], None, ["-o", "is the artifacts directory"]),
    ("output-inside-artifacts", [*BUILD, "-o", "{root}/artifacts/out"], None, ["-o", "inside the artifacts"]),
    ("sde-past-rpm", [*BUILD, "-o", "{out}"], {"SOURCE_DATE_EPOCH": "99999999999"}, ["SOURCE_DATE_EPOCH"]),
    ("sde-5000-digits", [*BUILD, "-o", "{out}"], {"SOURCE_DATE_EPOCH": "9" * 5000}, ["SOURCE_DATE_EPOCH"]),
    ("sde-negative", [*BUILD, "-o", "{out}"], {"SOURCE_DATE_EPOCH": "-1"}, ["SOURCE_DATE_EPOCH"]),
    ("base-url-newline", ["repo", "{out}", "--base-url", "http://a.example/x\ndeb http://evil/ stable main"], None,
     ["--base-url", "control character"]),
    ("base-url-space", ["repo", "{out}", "--base-url", "http://a.example/x y"], None, ["--base-url"]),
    ("base-url-no-scheme", ["repo", "{out}", "--base-url", "a.example/x"], None, ["--base-url"]),
    ("base-url-other-scheme", ["repo", "{out}", "--base-url", "javascript://x"], None, ["--base-url"]),
    ("base-url-bad-port", ["repo", "{out}", "--base-url", "http://a.example:port/x"], None, ["--base-url"]),
]


@pytest.mark.parametrize("args,env,needles", [pytest.param(a, e, n, id=i) for i, a, e, n in RANGE_CASES])
def test_an_option_out_of_range_is_refused(work, args, env, needles):
    work.refused(*args, needles=needles, env=env)
