"""RUNPATH -> RPATH as TheRock ships it: a release built from artifacts whose host ELFs
carry DT_RUNPATH installs, with dpkg and with rpm, ELFs that carry DT_RPATH only (TheRock's
install test, verify_no_runpath), files that pass its file-security check, and digests
that dpkg and rpm accept; with the setting off the bytes are the artifacts' own."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from kpack.elf import build_host_elf
from rocpkg.builder.fingerprint import package_fingerprint
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.formats.deb import write_deb
from rocpkg.errors import RocpkgInputError
from rocpkg.model import FILE, BuildOptions
from rocpkg.plan.make import make_plan
from rocpkg.formats.streams import patch_chunks
from rocpkg.formats.rpm import write_rpm
from rocpkg.inputs.sample import make_sample_artifacts
from rocpkg.verify.run import verify_plan
from test_deb import throwaway_root
from test_release import SDE, external_names, run
from test_rpm import base_system_spec

PREFIX = "opt/rocm/core-7.1"
OPTIONS = BuildOptions(source_date_epoch=SDE)


def config_with(tmp: Path, runpath_to_rpath: bool | None):
    """The bundled package.json with the setting set (or left out: None)."""
    raw = json.loads(Path(load_config(None).path).read_text())
    raw["settings"].pop("runpath_to_rpath", None)
    if runpath_to_rpath is not None:
        raw["settings"]["runpath_to_rpath"] = runpath_to_rpath
    path = tmp / "package.json"
    path.write_text(json.dumps(raw))
    return load_config(path)


def build(tmp: Path, config, formats=("deb", "rpm")):
    artifacts = tmp / "artifacts"
    make_sample_artifacts(artifacts, config, targets=["gfx942"])
    plan = make_plan(config, scan(artifacts))
    writers = {"deb": write_deb, "rpm": write_rpm}
    built = {fmt: [Path(writers[fmt](s, str(tmp / fmt), OPTIONS).path) for s in plan.packages[fmt]]
             for fmt in formats}
    return plan, built


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rpath")
    return build(tmp, config_with(tmp, True))


def elf_files(root: Path) -> list[Path]:
    found = []
    for path in sorted((root / PREFIX).rglob("*")):
        if path.is_file() and not path.is_symlink() and path.read_bytes()[:4] == b"\x7fELF":
            found.append(path)
    return found


def dynamic_paths(path: Path) -> tuple[bool, bool]:
    """(has RPATH, has RUNPATH), read as TheRock's verify_no_runpath reads them."""
    out = run("readelf", "-d", path).stdout
    return "(RPATH)" in out, "(RUNPATH)" in out


def assert_rpath_only(root: Path, plan, fmt: str) -> None:
    """TheRock's verify_no_runpath: no installed ELF uses DT_RUNPATH; every one the plan
    rewrote has DT_RPATH (device code objects have neither, which it accepts)."""
    found = {str(p.relative_to(root)): dynamic_paths(p) for p in elf_files(root)}
    rewritten = {f.path.lstrip("/") for s in plan.packages[fmt] for f in s.files if f.patches}
    assert rewritten and rewritten <= set(found)
    assert [p for p, (_, runpath) in found.items() if runpath] == []
    assert {p for p, (rpath, _) in found.items() if rpath} == rewritten


def insecure_paths(root: Path) -> list[str]:
    """TheRock's verify_installed_file_security with stat(1): a path under the prefix not
    root:root, group/other writable, or a setuid/setgid regular file (links: owner only)."""
    listing = run("find", root / PREFIX, "-exec", "stat", "-c", "%u %g %a %F %n", "{}", "+").stdout
    bad = []
    for line in listing.splitlines():
        uid, gid, mode, kind_and_name = line.split(" ", 3)
        mode = int(mode, 8)
        link = kind_and_name.startswith("symbolic link")
        regular = kind_and_name.startswith("regular")
        if (uid, gid) != ("0", "0") or (not link and (mode & 0o022 or (regular and mode & 0o6000))):
            bad.append(line)
    return bad


def test_the_sample_host_libraries_are_linked_with_runpath(release):
    plan, _ = release
    sources = [f.source for s in plan.packages["deb"] for f in s.files if f.patches]
    assert sources
    assert all(dynamic_paths(Path(src)) == (False, True) for src in sources)


def test_a_deb_release_installs_elfs_with_rpath_only_and_passes_therocks_file_security(release, tmp_path):
    plan, built = release
    root = throwaway_root(tmp_path / "root", external_names(plan, "deb"), version="9999")
    run("dpkg", "--root", root, "--force-script-chrootless", "-i", *built["deb"])
    assert_rpath_only(root, plan, "deb")
    assert insecure_paths(root) == []
    verify = run("dpkg", "--root", root, "--verify", check=False)  # md5sums against the rewritten bytes
    assert verify.stdout == "" and verify.returncode == 0, verify.stdout + verify.stderr


def test_an_rpm_release_installs_elfs_with_rpath_only_and_rpm_verifies_them(release, tmp_path):
    plan, built = release
    for path in built["rpm"]:
        assert "digests OK" in run("rpm", "-K", "--nosignature", path).stdout
    root = tmp_path / "root"
    run("rpm", "--root", root, "--initdb")
    base = base_system_spec(str(tmp_path))
    base.provides = base.provides + [n for n in external_names(plan, "rpm") if n != "glibc"] + ["python3 = 3.11"]
    run("rpm", "--root", root, "-i", write_rpm(base, str(tmp_path / "base"), OPTIONS).path)
    run("rpm", "--root", root, "-i", *built["rpm"])
    assert_rpath_only(root, plan, "rpm")
    assert insecure_paths(root) == []
    verify = run("rpm", "--root", root, "-Va", check=False)
    assert verify.stdout == "" and verify.returncode == 0, verify.stdout + verify.stderr


def test_deb_and_rpm_carry_the_same_rewritten_bytes(release, tmp_path):
    plan, built = release
    name = next(s.name for s in plan.packages["deb"] if any(f.patches for f in s.files))
    deb = next(p for p in built["deb"] if p.name.startswith(f"{name}_"))
    rpm = next(p for p in built["rpm"] if p.name.startswith(f"{name}-7.1.0"))
    run("dpkg-deb", "-x", deb, tmp_path / "deb")
    (tmp_path / "rpm").mkdir()
    run("sh", "-c", f"rpm2cpio '{rpm}' | cpio -idm --quiet", cwd=tmp_path / "rpm")
    for path in elf_files(tmp_path / "deb"):
        rel = path.relative_to(tmp_path / "deb")
        assert path.read_bytes() == (tmp_path / "rpm" / rel).read_bytes()


def test_with_the_setting_off_the_packed_bytes_are_the_artifacts_own(tmp_path):
    plan, built = build(tmp_path, config_with(tmp_path, None), formats=("deb",))
    assert not any(f.patches for s in plan.packages["deb"] for f in s.files)
    for spec, deb in zip(plan.packages["deb"], built["deb"]):
        if any(f.type == FILE for f in spec.files):
            run("dpkg-deb", "-x", deb, tmp_path / "x")
    shipped = [f for s in plan.packages["deb"] for f in s.files if f.type == FILE]
    assert all((tmp_path / "x" / f.path.lstrip("/")).read_bytes() == Path(f.source).read_bytes() for f in shipped)
    assert any(dynamic_paths(p) == (False, True) for p in elf_files(tmp_path / "x"))


def test_therocks_list_form_turns_the_rewrite_on_and_a_non_boolean_is_refused(tmp_path):
    packages = json.loads(Path(load_config(None).path).read_text())["packages"]
    (tmp_path / "list.json").write_text(json.dumps(packages))  # TheRock's shape: the list alone
    assert load_config(tmp_path / "list.json").settings["runpath_to_rpath"] is True
    assert config_with(tmp_path, None).settings["runpath_to_rpath"] is False
    raw = {"settings": {"runpath_to_rpath": "yes"}, "packages": []}
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(RocpkgInputError, match="settings.runpath_to_rpath"):
        load_config(tmp_path / "bad.json")


def test_verify_reports_an_elf_the_plan_would_still_write_with_runpath(release):
    plan = copy.deepcopy(release[0])
    assert not [p for p in verify_plan(plan).problems if p.check == "runpath"]
    spec = next(s for s in plan.packages["rpm"] if any(f.patches for f in s.files))
    before = package_fingerprint(spec, OPTIONS, "code")
    spec.files = [dataclasses.replace(f, patches=()) for f in spec.files]
    assert package_fingerprint(spec, OPTIONS, "code") != before  # a rebuild follows the setting
    problems = [p for p in verify_plan(plan).problems if p.check == "runpath"]
    assert problems and all(p.package == spec.name for p in problems)


def test_an_elf_with_both_rpath_and_runpath_is_refused_by_name(tmp_path):
    config = config_with(tmp_path, True)
    artifacts = tmp_path / "artifacts"
    make_sample_artifacts(artifacts, config, targets=["gfx942"])
    victim = next(p for p in sorted(artifacts.rglob("lib*.so.1.0")) if not p.is_symlink())
    victim.write_bytes(build_host_elf({}, soname="libx.so.1", runpath="$ORIGIN", rpath="/usr/lib"))
    with pytest.raises(RocpkgInputError) as refused:
        make_plan(config, scan(artifacts))
    assert victim.name in str(refused.value) and "both DT_RPATH and DT_RUNPATH" in str(refused.value)


def test_a_patch_split_across_chunks_is_written_whole():
    data = bytes(range(256)) * 4
    patches = ((5, b"ABCDEFGH"), (1000, b"xyz"))
    expected = bytearray(data)
    for at, new in patches:
        expected[at:at + len(new)] = new
    for size in (1, 3, 7, 64, 1024):
        chunks = [memoryview(data)[i:i + size] for i in range(0, len(data), size)]
        assert b"".join(bytes(c) for c in patch_chunks(chunks, patches)) == bytes(expected)
