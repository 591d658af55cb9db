"""The native .deb writer, judged by the Debian tools themselves: dpkg-deb reads what it
writes, dpkg installs and removes it in a throwaway root, lintian finds no error, and the
bytes only depend on the inputs and SOURCE_DATE_EPOCH."""
from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from debian.copyright import Copyright
from debian.deb822 import Deb822
from email.utils import format_datetime
from datetime import datetime, timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from rocpkg.plan.layout import alternatives, priority
from rocpkg.formats.deb import package as deb
from rocpkg.formats.deb import iter_deb_members, list_deb_files, read_deb_control, read_deb_control_file, write_deb
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.registry import file_name
from rocpkg.model import DIR, FILE, KIND_FILES, KIND_META, SYMLINK, BuildOptions, FileEntry, PackageSpec

SDE = 1700000000                       # Tue, 14 Nov 2023 22:13:20 +0000
PREFIX = "/opt/rocm-7.1.0"
REPO = Path(__file__).resolve().parents[1]
LINTIAN_OVERRIDES = REPO / "lintian-overrides.txt"
META_DEPENDS = ["amdrocm-core7.1 (= 7.1.0-1) | amdrocm-core-legacy", "libc6 (>= 2.34)"]


# -- the packages under test -------------------------------------------------------------


def make_spec(name: str, kind: str, files: list[FileEntry] = (), **fields) -> PackageSpec:
    defaults = dict(
        summary="ROCm test package for AMD GPUs",
        description="Built by the rocpkg test-suite from files it creates.\n\n"
                    "It stands for a real ROCm release package.",
        maintainer="ROCm Dev Support <rocm-dev.support@example.org>",
        vendor="Advanced Micro Devices, Inc", license="MIT",
        homepage="https://github.com/ROCm/TheRock", arch="amd64",
    )
    defaults.update(fields)
    return PackageSpec(format="deb", name=name, version="7.1.0", release="1", kind=kind,
                       files=sorted(files, key=lambda f: f.path), **defaults)


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """Payload files as a build leaves them: modes and mtimes not what the package says."""
    root = tmp_path / "artifacts"
    (root / "lib").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "share").mkdir()
    (root / "lib/libhip.so.7").write_bytes(bytes(range(256)) * 300 + b"tail")
    (root / "bin/hipinfo").write_text("#!/bin/sh\necho hipinfo\n")
    (root / "bin/hipinfo").chmod(0o755)
    (root / "bin/rocm-smi-helper").write_text("#!/bin/sh\necho helper\n")
    (root / "bin/rocm-smi-helper").chmod(0o644)          # setuid comes from the plan, not the disk
    (root / "share/README").write_text("ROCm 7.1.0\n")
    (root / "share/README").chmod(0o666)                 # group/other write must not survive
    os.utime(root / "share/README", (SDE + 10**6, SDE + 10**6))   # newer than SOURCE_DATE_EPOCH
    os.utime(root / "lib/libhip.so.7", (SDE - 3600, SDE - 3600))  # older: kept as is
    (root / "release").write_text("7.1.0\n")
    return root


def payload_file(sources: Path, rel: str, path: str, mode: int) -> FileEntry:
    source = sources / rel
    return FileEntry(path, FILE, mode, str(source), source.stat().st_size)


@pytest.fixture
def library(sources: Path) -> PackageSpec:
    """Files, directories, a symlink, an executable and a declared setuid file."""
    return make_spec("amdrocm-hip7.1", KIND_FILES, [
        FileEntry(PREFIX, DIR, 0o755),
        FileEntry(f"{PREFIX}/bin", DIR, 0o755),
        payload_file(sources, "bin/hipinfo", f"{PREFIX}/bin/hipinfo", 0o755),
        payload_file(sources, "bin/rocm-smi-helper", f"{PREFIX}/bin/rocm-smi-helper", 0o4755),
        FileEntry(f"{PREFIX}/lib", DIR, 0o755),
        FileEntry(f"{PREFIX}/lib/libhip.so", SYMLINK, 0o777, link_target="libhip.so.7"),
        payload_file(sources, "lib/libhip.so.7", f"{PREFIX}/lib/libhip.so.7", 0o644),
        FileEntry(f"{PREFIX}/share", DIR, 0o755),
        payload_file(sources, "share/README", f"{PREFIX}/share/README", 0o664),
    ], depends=["libc6 (>= 2.34)"], section="libs")


@pytest.fixture
def meta() -> PackageSpec:
    """No files: only relations, with alternatives and exact pins."""
    return make_spec("amdrocm7.1", KIND_META, arch="all", depends=META_DEPENDS,
                     recommends=["amdrocm-hip7.1 (= 7.1.0-1)"], section="metapackages")


@pytest.fixture
def scripted(sources: Path) -> PackageSpec:
    """Maintainer scripts that keep the /opt/rocm convenience link."""
    return make_spec("amdrocm-core7.1", KIND_FILES, [
        FileEntry(PREFIX, DIR, 0o755),
        payload_file(sources, "release", f"{PREFIX}/.info-version", 0o644),
    ], arch="all", prefix=PREFIX,
        scripts={"postinst": "postinst.j2", "prerm": "prerm.j2", "postrm": "postrm.j2"},
        links=alternatives(PREFIX), link_priority=priority("7.1.0"))


def build(spec: PackageSpec, out_dir: Path, **options) -> Path:
    options.setdefault("source_date_epoch", SDE)
    built = write_deb(spec, str(out_dir), BuildOptions(**options))
    assert Path(built.path) == out_dir / file_name(spec)
    return Path(built.path)


# -- the Debian tools ---------------------------------------------------------------------


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    if check:
        assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout}\n{result.stderr}"
    return result


def dpkg_contents(path: Path) -> dict[str, tuple[str, str, int]]:
    """`dpkg-deb --contents`: path -> (permissions, owner/group, size)."""
    listing = {}
    for line in run("dpkg-deb", "--contents", str(path)).stdout.splitlines():
        perms, owner, size, _date, _time, name, *_ = line.split()
        listing[name] = (perms, owner, int(size))
    return listing


def dpkg_tar_members(path: Path) -> list[tarfile.TarInfo]:
    """data.tar as dpkg-deb extracts it (--fsys-tarfile)."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(path)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return tar.getmembers()


def throwaway_root(path: Path, installed=("libc6",), version: str = "2.36-9") -> Path:
    """An empty dpkg database whose status holds `installed` at `version`: the base system."""
    admin = path / "var/lib/dpkg"
    for sub in ("info", "updates", "triggers"):
        (admin / sub).mkdir(parents=True, exist_ok=True)
    (path / "var/log").mkdir(parents=True, exist_ok=True)
    (path / "opt").mkdir(exist_ok=True)  # every base system has /opt, and no package lists it
    (admin / "available").write_text("")
    stanzas = []
    for name in installed:
        (admin / "info" / f"{name}.list").write_text("")
        stanzas.append(f"Package: {name}\nStatus: install ok installed\nPriority: required\n"
                       f"Section: libs\nMaintainer: Base <base@example.org>\nArchitecture: amd64\n"
                       f"Version: {version}\nDescription: base system of the throwaway root\n")
    (admin / "status").write_text("\n".join(stanzas))
    return path


def dpkg(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run("dpkg", "--root", str(root), "--force-script-chrootless", *args)


# -- dpkg-deb reads what rocpkg writes ----------------------------------------------------


@pytest.mark.parametrize("package", ["library", "meta", "scripted"])
def test_every_package_passes_dpkg_deb_info_and_contents(package, request, tmp_path):
    spec = request.getfixturevalue(package)
    path = build(spec, tmp_path / "out")
    info = run("dpkg-deb", "--info", str(path)).stdout
    assert f"Package: {spec.name}" in info
    for script in spec.scripts:
        assert f" {script} " in info
    contents = dpkg_contents(path)
    assert {owner for _, owner, _ in contents.values()} == {"root/root"}
    planned = {"./" + f.path.lstrip("/") + ("/" if f.type == DIR else ""): f.size for f in spec.files}
    assert {name: contents[name][2] for name in planned} == planned


def test_dpkg_deb_lists_files_with_sizes_modes_and_root_owner(library, tmp_path):
    path = build(library, tmp_path / "out")
    run("dpkg-deb", "--info", str(path))
    contents = dpkg_contents(path)
    assert list(contents)[:2] == ["./", "./opt/rocm-7.1.0/"]  # /opt is the base system's: never listed
    assert {owner for _, owner, _ in contents.values()} == {"root/root"}
    assert contents["./opt/rocm-7.1.0/lib/libhip.so.7"] == ("-rw-r--r--", "root/root", 256 * 300 + 4)
    assert contents["./opt/rocm-7.1.0/bin/hipinfo"][0] == "-rwxr-xr-x"
    assert contents["./opt/rocm-7.1.0/bin/rocm-smi-helper"][0] == "-rwsr-xr-x"
    assert contents["./opt/rocm-7.1.0/share/README"][0] == "-rw-r--r--"
    assert contents["./opt/rocm-7.1.0/lib/libhip.so"][0] == "lrwxrwxrwx"
    assert "./usr/share/doc/amdrocm-hip7.1/changelog.Debian.gz" in contents
    assert "./usr/share/doc/amdrocm-hip7.1/copyright" in contents


def test_parents_come_before_children_and_ancestors_are_root_dirs(library, tmp_path):
    members = dpkg_tar_members(build(library, tmp_path / "out"))
    names = [m.name for m in members]
    for index, name in enumerate(names):
        parent = os.path.dirname(name.rstrip("/"))
        if parent not in ("", ".", "./opt"):  # /opt is the base system's: never listed
            assert parent in names[:index], f"{name} before its parent"
    assert "./opt" not in names
    opt = next(m for m in members if m.name == "./opt/rocm-7.1.0")
    assert (opt.isdir(), opt.mode, opt.uid, opt.gid, opt.uname) == (True, 0o755, 0, 0, "root")


def test_dpkg_deb_field_shows_the_planned_fields(library, meta, tmp_path):
    fields = Deb822(run("dpkg-deb", "--field", str(build(meta, tmp_path / "out"))).stdout)
    assert fields["Package"] == "amdrocm7.1"
    assert fields["Version"] == "7.1.0-1"
    assert fields["Architecture"] == "all"
    assert fields["Depends"] == "amdrocm-core7.1 (= 7.1.0-1) | amdrocm-core-legacy, libc6 (>= 2.34)"
    assert fields["Recommends"] == "amdrocm-hip7.1 (= 7.1.0-1)"
    assert fields["Section"] == "metapackages"
    assert fields["Homepage"] == "https://github.com/ROCm/TheRock"
    assert "Pre-Depends" not in fields and "Conflicts" not in fields


def test_installed_size_counts_like_dpkg_gencontrol(library, tmp_path):
    """size // 1024 + 1 KiB per file and symlink, 1 KiB per directory the package owns
    (shared ancestors such as /opt and /usr/share/doc are not its own)."""
    path = build(library, tmp_path / "out")
    run("dpkg-deb", "-x", str(path), str(tmp_path / "x"))
    shared = {"./", "./opt/", "./usr/", "./usr/share/", "./usr/share/doc/"}
    expected = 0
    for name in dpkg_contents(path):
        if name in shared:
            continue
        target = tmp_path / "x" / name
        is_dir = target.is_dir() and not target.is_symlink()
        expected += 1 if is_dir else os.lstat(target).st_size // 1024 + 1
    assert int(Deb822(run("dpkg-deb", "--field", str(path)).stdout)["Installed-Size"]) == expected


def test_description_is_folded_as_debian_policy_wants(tmp_path):
    spec = make_spec("amdrocm-long7.1", KIND_META, arch="all",
                     summary="An extremely long synopsis that goes on and on about the AMD ROCm "
                             "software stack and all of its many components",
                     description=("Long paragraph words. " * 20) + "\n\n" + "Second paragraph.")
    description = Deb822(run("dpkg-deb", "--field", str(build(spec, tmp_path))).stdout)["Description"]
    synopsis, *extended = description.split("\n")
    assert len(synopsis) < 80 and synopsis.endswith("...")
    assert all(line.startswith(" ") and len(line) <= 80 for line in extended)
    assert " ." in extended and extended[-1] == " Second paragraph."


def test_changelog_is_dated_from_source_date_epoch(library, tmp_path):
    run("dpkg-deb", "-x", str(build(library, tmp_path / "out")), str(tmp_path / "x"))
    changelog_gz = tmp_path / "x/usr/share/doc/amdrocm-hip7.1/changelog.Debian.gz"
    assert changelog_gz.read_bytes()[4:8] == b"\0\0\0\0"          # gzip -n: mtime 0
    (tmp_path / "changelog").write_bytes(gzip.decompress(changelog_gz.read_bytes()))
    parsed = Deb822(run("dpkg-parsechangelog", "-l", str(tmp_path / "changelog")).stdout)
    assert parsed["Date"] == "Tue, 14 Nov 2023 22:13:20 +0000"
    assert parsed["Version"] == "7.1.0-1" and parsed["Source"] == "amdrocm-hip7.1"


def test_copyright_is_machine_readable_dep5(tmp_path):
    spec = make_spec("amdrocm-llvm7.1", KIND_META, license="ASL 2.0 with exceptions")
    run("dpkg-deb", "-x", str(build(spec, tmp_path / "out")), str(tmp_path / "x"))
    with open(tmp_path / "x/usr/share/doc/amdrocm-llvm7.1/copyright") as f:
        copyright_file = Copyright(f, strict=True)
    (files,) = copyright_file.all_files_paragraphs()
    assert files.files == ("*",)
    assert files.license.synopsis.startswith("Apache-2.0 with")
    assert "/usr/share/common-licenses/Apache-2.0" in next(copyright_file.all_license_paragraphs()).license.text


def test_mtimes_are_clamped_to_source_date_epoch(library, tmp_path):
    members = {m.name: m for m in dpkg_tar_members(build(library, tmp_path / "out"))}
    assert members["./opt/rocm-7.1.0/share/README"].mtime == SDE          # newer file: clamped
    assert members["./opt/rocm-7.1.0/lib/libhip.so.7"].mtime == SDE - 3600  # older file: kept
    assert members["./opt/rocm-7.1.0/lib/libhip.so"].mtime == SDE
    assert members["./opt/rocm-7.1.0"].mtime == SDE


# -- dpkg installs and removes it ---------------------------------------------------------


def test_dpkg_installs_and_removes_in_a_throwaway_root(library, meta, scripted, tmp_path):
    out = tmp_path / "out"
    debs = [str(build(spec, out)) for spec in (library, scripted, meta)]
    root = throwaway_root(tmp_path / "root")
    dpkg(root, "-i", *debs)

    installed = root / PREFIX.lstrip("/")
    assert (installed / "lib/libhip.so.7").stat().st_mode & 0o7777 == 0o644
    assert (installed / "bin/hipinfo").stat().st_mode & 0o7777 == 0o755
    assert (installed / "bin/rocm-smi-helper").stat().st_mode & 0o7777 == 0o4755
    assert (installed / "share/README").stat().st_mode & 0o7777 == 0o644
    assert os.readlink(installed / "lib/libhip.so") == "libhip.so.7"
    assert os.readlink(root / "etc/alternatives/rocm") == PREFIX          # postinst ran
    assert run("dpkg", "--root", str(root), "--verify").stdout == ""     # md5sums match the files
    status = run("dpkg-query", "--root", str(root), "-W", "-f", "${Package} ${db:Status-Abbrev}\n").stdout
    assert {line.split()[0]: line.split()[1] for line in status.splitlines()}["amdrocm7.1"] == "ii"

    dpkg(root, "-r", "amdrocm7.1", "amdrocm-core7.1", "amdrocm-hip7.1")
    assert not (root / "opt/rocm").is_symlink()                          # prerm ran
    assert list((root / "opt").iterdir()) == [] and not (root / "usr").exists()  # nothing left behind


def test_files_under_etc_become_conffiles(sources, tmp_path):
    """An /etc/ld.so.conf.d entry is the admin's to edit: dpkg must track it as a conffile."""
    (sources / "rocm.conf").write_text(f"{PREFIX}/lib\n")
    spec = make_spec("amdrocm-ldconfig7.1", KIND_FILES, [
        payload_file(sources, "rocm.conf", "/etc/ld.so.conf.d/rocm-7.1.0.conf", 0o644),
    ])
    path = build(spec, tmp_path / "out")
    assert read_deb_control_file(str(path), "conffiles") == b"/etc/ld.so.conf.d/rocm-7.1.0.conf\n"
    assert b"rocm-7.1.0.conf" not in read_deb_control_file(str(path), "md5sums")
    root = throwaway_root(tmp_path / "root")
    dpkg(root, "-i", str(path))
    conffiles = run("dpkg-query", "--root", str(root), "-W", "-f", "${Conffiles}", spec.name).stdout
    assert "/etc/ld.so.conf.d/rocm-7.1.0.conf" in conffiles


def test_a_package_without_etc_files_has_no_conffiles_member(library, tmp_path):
    assert read_deb_control_file(str(build(library, tmp_path / "out")), "conffiles") is None


def test_dpkg_refuses_the_meta_package_without_its_members(meta, tmp_path):
    root = throwaway_root(tmp_path / "root")
    result = run("dpkg", "--root", str(root), "-i", str(build(meta, tmp_path / "out")), check=False)
    assert result.returncode != 0
    assert "amdrocm-core7.1 (= 7.1.0-1) | amdrocm-core-legacy" in result.stderr


def test_the_link_of_another_release_is_left_alone(scripted, tmp_path):
    root = throwaway_root(tmp_path / "root")
    (root / "opt/rocm").symlink_to("rocm-7.0.2")
    dpkg(root, "-i", str(build(scripted, tmp_path / "out")))
    dpkg(root, "-r", "amdrocm-core7.1")
    assert os.readlink(root / "opt/rocm") == "rocm-7.0.2"


@pytest.mark.parametrize("compression", ["zstd", "xz", "gzip"])
def test_every_compression_installs(library, tmp_path, compression):
    path = build(library, tmp_path / "out", compression=compression)
    names = [m.name for m in iter_deb_members(str(path))]
    suffix = {"zstd": "zst", "xz": "xz", "gzip": "gz"}[compression]
    assert names == ["debian-binary", "control.tar.gz",
                     f"data.tar.{suffix}"]
    root = throwaway_root(tmp_path / "root")
    dpkg(root, "-i", str(path))
    assert (root / PREFIX.lstrip("/") / "lib/libhip.so.7").read_bytes().endswith(b"tail")


def test_lintian_finds_no_errors(library, meta, scripted, tmp_path):
    """xz: Debian 12's lintian predates zstd .debs (it calls data.tar.zst malformed)."""
    debs = [str(build(spec, tmp_path / "out", compression="xz")) for spec in (library, meta, scripted)]
    result = run("lintian", "--fail-on", "error", "--suppress-tags-from-file", str(LINTIAN_OVERRIDES),
                 *debs, check=False)
    errors = [line for line in result.stdout.splitlines() if line.startswith("E:")]
    assert errors == [] and result.returncode == 0, result.stdout + result.stderr


# -- reproducible -------------------------------------------------------------------------


def test_same_source_date_epoch_gives_identical_bytes(library, tmp_path):
    first = build(library, tmp_path / "a").read_bytes()
    second = build(library, tmp_path / "b", threads=1).read_bytes()
    assert first == second


def test_another_source_date_epoch_changes_the_bytes(library, tmp_path):
    assert build(library, tmp_path / "a").read_bytes() != build(library, tmp_path / "b", source_date_epoch=SDE + 86400).read_bytes()


def test_built_package_reports_size_and_sha256_of_the_file(library, tmp_path):
    import hashlib

    built = write_deb(library, str(tmp_path), BuildOptions(source_date_epoch=SDE))
    data = Path(built.path).read_bytes()
    assert (built.size, built.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert built.installed_size >= library.payload_size


# -- read back without dpkg ---------------------------------------------------------------


def test_reader_agrees_with_dpkg_deb(library, tmp_path):
    path = build(library, tmp_path)
    from_dpkg = [("/" + m.name.removeprefix(".").strip("/"), m.size, m.mode,
                  "dir" if m.isdir() else "symlink" if m.issym() else "file", m.linkname)
                 for m in dpkg_tar_members(path)]
    assert list_deb_files(str(path)) == from_dpkg
    assert dict(read_deb_control(str(path))) == dict(Deb822(run("dpkg-deb", "--field", str(path)).stdout))
    md5sums = read_deb_control_file(str(path), "md5sums").decode()
    assert "  opt/rocm-7.1.0/lib/libhip.so.7\n" in md5sums


# -- bad input ----------------------------------------------------------------------------


def assert_refused(spec: PackageSpec, out: Path, *fragments: str, **options) -> None:
    with pytest.raises(RocpkgInputError) as raised:
        build(spec, out, **options)
    where, what = raised.value.problems[0]
    text = f"{where}: {what}"
    assert spec.name in where
    for fragment in fragments:
        assert fragment in text
    assert not out.exists() or list(out.iterdir()) == []


def test_a_vanished_source_file_is_refused_and_nothing_written(library, sources, tmp_path):
    (sources / "lib/libhip.so.7").unlink()
    assert_refused(library, tmp_path / "out", "/opt/rocm-7.1.0/lib/libhip.so.7", "missing")


def test_a_source_file_that_shrank_is_refused(library, sources, tmp_path):
    os.truncate(sources / "lib/libhip.so.7", 100)
    assert_refused(library, tmp_path / "out", "/opt/rocm-7.1.0/lib/libhip.so.7", "100 bytes")


def test_a_file_that_shrinks_while_packing_is_refused(library, sources, tmp_path, monkeypatch):
    """Another process truncates the file after the writer opened it."""
    from rocpkg.formats.filelist import PackageSources

    opened = PackageSources.open

    def open_then_truncate(self, entry, *args):
        source = opened(self, entry, *args)
        if entry.source.endswith("lib/libhip.so.7"):
            os.truncate(sources / "lib/libhip.so.7", 10)
        return source

    monkeypatch.setattr(PackageSources, "open", open_then_truncate)
    assert_refused(library, tmp_path / "out", "/opt/rocm-7.1.0/lib/libhip.so.7", "changed while packing")


def test_an_unreadable_source_is_refused(library, sources, tmp_path):
    (sources / "lib/libhip.so.7").unlink()
    (sources / "lib/libhip.so.7").mkdir()            # unreadable as a file, even for root
    assert_refused(library, tmp_path / "out", "/opt/rocm-7.1.0/lib/libhip.so.7")


@pytest.mark.parametrize("name, why", [("bad\nname", "newline"), ("bad\udcffname", "UTF-8")])
def test_a_name_tar_cannot_hold_is_refused(library, sources, tmp_path, name, why):
    library.files.append(payload_file(sources, "release", f"{PREFIX}/{name}", 0o644))
    assert_refused(library, tmp_path / "out", name, why)


def test_a_data_member_over_the_ar_size_limit_is_refused(library, tmp_path, monkeypatch):
    monkeypatch.setattr(deb, "AR_MAX_MEMBER_SIZE", 1000)     # stands for 9999999999
    assert_refused(library, tmp_path / "out", "10-digit limit")


# -- the writer's own stanza check and date, held to python-debian and email.utils ---------


def test_every_rendered_stanza_is_what_python_debian_dumps(library, meta, scripted):
    from rocpkg.formats.render import render_deb

    for spec in (library, meta, scripted):
        text = render_deb(spec, BuildOptions(source_date_epoch=SDE)).control
        assert deb._checked_control(spec, text) == text == Deb822(text).dump()


_NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,12}", fullmatch=True)
_VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF, blacklist_characters="\x7f\x85"),
                  min_size=1, max_size=30).map(str.strip).filter(bool)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_NAMES, st.lists(_VALUES, min_size=1, max_size=3), max_size=6))
def test_a_canonical_stanza_passes_as_python_debian_reads_it(extra):
    spec = make_spec("amdrocm-x7.1", KIND_META)
    fields = {"Package": [spec.name], "Version": [spec.evr], "Architecture": ["all"],
              "Maintainer": ["A <a@example.org>"], "Description": ["synopsis", "more"]}
    for name, lines in extra.items():        # deb822 names are case-insensitive
        if name.lower() not in {f.lower() for f in fields}:
            fields[name] = lines
    text = "".join(f"{name}: {lines[0]}\n" + "".join(f" {line}\n" for line in lines[1:])
                   for name, lines in fields.items())
    assert deb._checked_control(spec, text) == Deb822(text).dump()
    assert list(Deb822(text)) == list(fields)


@pytest.mark.parametrize("text,why", [
    ("{good}\nPackage: other\n", "an empty line"),                       # a second stanza
    ("{good}Package: {name}\n", "line 6 repeats a field"),
    ("{good}PACKAGE: {name}\n", "line 6 repeats a field"),               # names are case-insensitive
    ("{good}X-Field: value \n", "line 6 is not"),                         # trailing blank
    ("{good}X-Field:value\n", "line 6 is not"),
    ("{good}# comment\n", "line 6 is not"),
    ("{good}X-Field: a\rX-Other: b\n", "U+000D"),
    (" continued\n{good}", "line 1 is not"),
    ("{good}X-Field: last", "ending in a newline"),
    ("{good}", "lacks Maintainer"),                                        # (Maintainer left out below)
])
def test_a_broken_stanza_is_refused(text, why):
    spec = make_spec("amdrocm-x7.1", KIND_META)
    good = (f"Package: {spec.name}\nVersion: {spec.evr}\nArchitecture: all\nMaintainer: A <a@example.org>\n"
            f"Description: synopsis\n")
    with pytest.raises(RocpkgInputError) as raised:
        if why == "lacks Maintainer":
            good = good.replace("Maintainer: A <a@example.org>\n", "")
        deb._checked_control(spec, text.replace("{good}", good).replace("{name}", spec.name))
    assert why in raised.value.problems[0][1]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**34))
def test_the_changelog_date_is_email_utils_rfc_2822_date(epoch):
    from rocpkg.formats.render import changelog_date

    assert changelog_date(epoch) == format_datetime(datetime.fromtimestamp(epoch, tz=timezone.utc))


def test_a_package_without_maintainer_is_refused(meta, tmp_path):
    meta.maintainer = ""
    assert_refused(meta, tmp_path / "out", "Maintainer")


# -- big files ----------------------------------------------------------------------------


@pytest.fixture
def sparse_spec(tmp_path: Path) -> PackageSpec:
    """20 MiB, mostly holes, with data at the start, in the middle and in the last byte:
    several 4 MiB zstd jobs, and holes the writer fills without reading them."""
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.write(b"start" * 1000)
        f.seek(5 * 2**20 + 123)
        f.write(os.urandom(3 * 2**20))
        f.seek(20 * 2**20 - 1)
        f.write(b"!")
    return make_spec("amdrocm-sparse7.1", KIND_FILES, [
        FileEntry(PREFIX, DIR, 0o755),
        FileEntry(f"{PREFIX}/sparse.bin", FILE, 0o644, str(sparse), 20 * 2**20),
    ])


def test_a_sparse_file_comes_out_byte_for_byte(sparse_spec, tmp_path):
    run("dpkg-deb", "-x", str(build(sparse_spec, tmp_path / "out")), str(tmp_path / "x"))
    extracted = tmp_path / "x" / PREFIX.lstrip("/") / "sparse.bin"
    assert extracted.read_bytes() == Path(sparse_spec.files[1].source).read_bytes()


def test_the_number_of_compressor_threads_does_not_change_the_bytes(sparse_spec, tmp_path):
    one = build(sparse_spec, tmp_path / "one", threads=1).read_bytes()
    assert build(sparse_spec, tmp_path / "four", threads=4).read_bytes() == one



def test_a_sparse_9_gib_file_packs_and_dpkg_deb_sees_its_size(tmp_path):
    """Over 8 GiB the GNU tar header stores the size in base-256; dpkg must accept it."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.write(b"head")
    os.truncate(big, 9 * 2**30)
    spec = make_spec("amdrocm-big7.1", KIND_FILES, [
        FileEntry(PREFIX, DIR, 0o755),
        FileEntry(f"{PREFIX}/big.bin", FILE, 0o644, str(big), 9 * 2**30),
    ])
    started = time.monotonic()
    path = build(spec, tmp_path / "out")
    assert time.monotonic() - started < 300         # ~25 s on 2 cores: holes are never read
    assert dpkg_contents(path)["./opt/rocm-7.1.0/big.bin"][2] == 9663676416
