"""Debug packages from TheRock's dbg artifacts: a gcc-built library split with objcopy as a
build system does (`--only-keep-debug`, then `--strip-debug --add-gnu-debuglink`), its
debug file laid out as `<artifact>_dbg_generic/<stage>/.build-id/NN/REST.debug`; rocpkg
builds `-dbgsym` and `-debuginfo` packages that dpkg and rpm install, in which gdb finds the
source line of a function, and that lintian and rpmlint accept. Broken and hostile debug
files are refused with a named check or exit 2, nothing written."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import rocpkg, snapshot
from test_deb import throwaway_root

REPO = Path(__file__).resolve().parent.parent
SOURCE = "int foo_function(int x)\n{\n    return x * 2 + 1;\n}\n"
CONFIG = {
    "settings": {"version": "7.1.0", "release": "1", "prefix": "/opt/rocm/core-{abi}",
                 "maintainer": "rocpkg maintainers <rocpkg@example.org>", "homepage": "https://example.org/rocpkg",
                 "license": "MIT", "compression": "xz"},
    "packages": [{"Package": "rocm-foo", "Description_Short": "The foo library",
                  "Description_Long": "A small library with one function, built with debug information.",
                  "Artifactory": [{"Artifact": "foo", "Artifact_Subdir": [{"Name": "foo", "Components": ["lib"]}]}],
                  "DEBDepends": ["libc6"], "RPMRequires": ["glibc"], "Gfxarch": False}],
}
LIBRARY = "opt/rocm/core-7.1/lib/libfoo.so.1"

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("gcc", "objcopy", "gdb")),
                                reason="needs gcc, objcopy and gdb")


def run(*args, check=True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if check and done.returncode != 0:
        raise AssertionError(f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def split_library(work: Path, name: str = "foo", source: str = SOURCE) -> tuple[Path, Path, str]:
    """(stripped library, its debug file, its build-id), split as a build system does."""
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{name}.c").write_text(source)
    library, debug = work / f"lib{name}.so.1", work / f"lib{name}.so.1.debug"
    run("gcc", "-g", "-O0", "-shared", "-fPIC", "-Wl,--build-id", "-Wl,-soname,libfoo.so.1",
        "-o", library, f"{name}.c", cwd=work)
    run("objcopy", "--only-keep-debug", library, debug)
    run("objcopy", "--strip-debug", f"--add-gnu-debuglink={debug.name}", library, cwd=work)
    notes = run("readelf", "-n", library).stdout
    build_id = notes.split("Build ID:")[1].split()[0]
    return library, debug, build_id


def lay_out(root: Path, library: Path, debug: Path | None, build_id: str) -> Path:
    """TheRock's layout: foo_lib_generic with the library, foo_dbg_generic with its debug file."""
    artifacts = root / "artifacts"
    lib_stage = artifacts / "foo_lib_generic" / "foo" / "stage" / "lib"
    lib_stage.mkdir(parents=True)
    shutil.copy(library, lib_stage / "libfoo.so.1")
    (artifacts / "foo_lib_generic" / "artifact_manifest.txt").write_text("foo/stage\n")
    if debug is not None:
        ids = artifacts / "foo_dbg_generic" / "foo" / "stage" / ".build-id" / build_id[:2]
        ids.mkdir(parents=True)
        shutil.copy(debug, ids / f"{build_id[2:]}.debug")
        (artifacts / "foo_dbg_generic" / "artifact_manifest.txt").write_text("foo/stage\n")
    (root / "package.json").write_text(json.dumps(CONFIG))
    return artifacts


def debug_path(artifacts: Path, build_id: str) -> Path:
    return artifacts / "foo_dbg_generic" / "foo" / "stage" / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    return split_library(tmp_path_factory.mktemp("gcc"))


@pytest.fixture(scope="module")
def built(split, tmp_path_factory):
    """The release built from the split library: (OUT, build-id)."""
    root = tmp_path_factory.mktemp("release")
    artifacts = lay_out(root, *split)
    out = root / "out"
    done = rocpkg("build", "-c", root / "package.json", "-a", artifacts, "-o", out, "-q")
    assert done.returncode == 0, done.stderr
    return out, split[2]


def packages(out: Path, suffix: str) -> dict[str, Path]:
    return {p.name.split("_")[0] if suffix == ".deb" else p.name.rsplit("-", 2)[0]: p
            for p in out.rglob(f"*{suffix}")}


def gdb_line(root: Path) -> str:
    """What gdb says of foo_function, with only the installed debug directory to look in."""
    return run("gdb", "-nx", "-batch", "-ex", f"set debug-file-directory {root}/usr/lib/debug",
               "-ex", f"file {root}/{LIBRARY}", "-ex", "info line foo_function").stdout


def test_the_deb_dbgsym_has_debians_fields_and_gdb_finds_the_source_line(built, tmp_path):
    out, build_id = built
    debs = packages(out, ".deb")
    assert "rocm-foo7.1-dbgsym" in debs
    info = run("dpkg-deb", "-f", debs["rocm-foo7.1-dbgsym"]).stdout
    assert "Section: debug" in info and "Priority: optional" in info and "Architecture: amd64" in info
    assert "Depends: rocm-foo7.1 (= 7.1.0-1)" in info and "Auto-Built-Package: debug-symbols" in info
    assert f"Build-Ids: {build_id}" in info
    contents = run("dpkg-deb", "-c", debs["rocm-foo7.1-dbgsym"]).stdout
    assert f"./usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug" in contents
    root = throwaway_root(tmp_path / "root")
    run("dpkg", "--root", root, "--force-script-chrootless", "-i", debs["rocm-foo7.1"], debs["rocm-foo7.1-dbgsym"])
    assert 'Line 3 of "foo.c"' in gdb_line(root) or 'Line 2 of "foo.c"' in gdb_line(root), gdb_line(root)


def test_without_the_debug_package_gdb_finds_no_line(built, tmp_path):
    out, _ = built
    root = throwaway_root(tmp_path / "root")
    run("dpkg", "--root", root, "--force-script-chrootless", "-i", packages(out, ".deb")["rocm-foo7.1"])
    assert "foo.c" not in gdb_line(root)


def test_no_meta_package_pulls_a_debug_package(built):
    out, _ = built
    for name, path in packages(out, ".deb").items():
        if not name.endswith("-dbgsym"):
            assert "dbgsym" not in run("dpkg-deb", "-f", path, "Depends").stdout
    for name, path in packages(out, ".rpm").items():
        if not name.endswith("-debuginfo"):
            assert "debuginfo" not in run("rpm", "-qp", "--requires", path).stdout


def test_the_rpm_debuginfo_provides_its_build_ids_and_gdb_finds_the_source_line(built, tmp_path):
    from rocpkg.formats.rpm.write import write_rpm
    from rocpkg.model import BuildOptions, PackageSpec

    out, build_id = built
    rpms = packages(out, ".rpm")
    provides = run("rpm", "-qp", "--provides", rpms["rocm-foo7.1-debuginfo"]).stdout
    assert f"debuginfo(build-id) = {build_id}" in provides
    assert "rocm-foo7.1 = 7.1.0-1" in run("rpm", "-qp", "--requires", rpms["rocm-foo7.1-debuginfo"]).stdout
    root = tmp_path / "root"
    run("rpm", "--root", root, "--initdb")
    base = PackageSpec("rpm", "base-system", "1", "1", "noarch", "meta", summary="base", description="base",
                       license="MIT", provides=["glibc", "libc.so.6()(64bit)"])
    run("rpm", "--root", root, "-i", write_rpm(base, str(tmp_path / "base"), BuildOptions(source_date_epoch=1)).path)
    run("rpm", "--root", root, "-i", rpms["rocm-foo7.1"], rpms["rocm-foo7.1-debuginfo"])
    assert 'of "foo.c"' in gdb_line(root), gdb_line(root)


def test_lintian_and_rpmlint_accept_the_debug_packages(built):
    out, _ = built
    deb = packages(out, ".deb")["rocm-foo7.1-dbgsym"]
    lint = run("lintian", "--fail-on", "error", "--suppress-tags-from-file", REPO / "lintian-overrides.txt", deb,
               check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rpm = packages(out, ".rpm")["rocm-foo7.1-debuginfo"]
    lint = run("rpmlint", "--ignore-unused-rpmlintrc", "-r", REPO / "rpmlint" / "rocpkg.rpmlintrc", rpm, check=False)
    assert " 0 errors" in lint.stdout, lint.stdout


def test_no_debug_packages_option_and_setting_turn_them_off(split, tmp_path):
    artifacts = lay_out(tmp_path, *split)
    done = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", tmp_path / "o1", "-q",
                  "--no-debug-packages")
    assert done.returncode == 0, done.stderr
    assert not [p for p in (tmp_path / "o1").rglob("*") if "dbgsym" in p.name or "debuginfo" in p.name]
    config = json.loads((tmp_path / "package.json").read_text())
    config["settings"]["debug_packages"] = False
    (tmp_path / "package.json").write_text(json.dumps(config))
    done = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", tmp_path / "o2", "-q")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "o2").rglob("*.deb")) == sorted(
        p.name for p in (tmp_path / "o1").rglob("*.deb"))


def refused(root: Path, artifacts: Path, *extra) -> str:
    """Build that must exit 2 and write nothing: its stderr."""
    out = root / "out"
    done = rocpkg("build", "-c", root / "package.json", "-a", artifacts, "-o", out, "-q", *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(out) is None or not [p for p in out.rglob("*") if p.suffix in (".deb", ".rpm")]
    return done.stderr


def test_a_debug_file_that_is_a_symlink_out_of_the_tree_is_refused(split, tmp_path):
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    path = debug_path(artifacts, build_id)
    path.unlink()
    path.symlink_to(debug)
    assert "escapes its stage dir" in refused(tmp_path, artifacts)


def test_a_debug_file_symlink_inside_the_tree_is_refused(split, tmp_path):
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    path = debug_path(artifacts, build_id)
    shutil.move(path, path.parent / "real")
    path.symlink_to("real")
    assert "a debug file must be a regular file" in refused(tmp_path, artifacts)


@pytest.mark.parametrize("content", ["text", "sparse", "stripped-elf"])
def test_a_debug_file_without_debug_sections_is_refused_until_allowed(content, split, tmp_path):
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    path = debug_path(artifacts, build_id)
    if content == "text":
        path.write_text("not an ELF\n")
    elif content == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(4 << 30)  # 4 GiB of holes: never read whole
    else:
        shutil.copy(library, path)
    assert "[debug-not-elf]" in refused(tmp_path, artifacts)
    if content == "text":
        done = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", tmp_path / "o", "-q",
                      "--allow", "debug-not-elf", "--allow", "debuglink-missing", "--formats", "deb")
        assert done.returncode == 0, done.stderr
        assert not list((tmp_path / "o").rglob("*dbgsym*"))


def test_a_build_id_path_that_is_not_the_files_id_is_refused(split, tmp_path):
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    path = debug_path(artifacts, build_id)
    wrong = path.parent / ("0" * (len(build_id) - 2) + ".debug")
    path.rename(wrong)
    assert "its .build-id path names" in refused(tmp_path, artifacts)


def test_an_orphan_and_a_conflicting_debug_file_are_named_checks(split, tmp_path):
    library, debug, build_id = split
    other_library, other_debug, other_id = split_library(tmp_path / "other", "bar",
                                                         "int bar_function(void) { return 7; }\n")
    artifacts = lay_out(tmp_path, library, debug, build_id)
    orphan = debug_path(artifacts, other_id)
    orphan.parent.mkdir(exist_ok=True)
    shutil.copy(other_debug, orphan)
    assert "[debug-orphan]" in refused(tmp_path, artifacts)
    orphan.unlink()
    second = tmp_path / "artifacts" / "foo_dbg_gfx942"
    shutil.copytree(tmp_path / "artifacts" / "foo_dbg_generic", second)
    clash = second / "foo" / "stage" / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    data = clash.read_bytes()       # other bytes in a debug section, the ELF still whole
    clash.write_bytes(data.replace(b"foo_function", b"goo_function", 1))
    assert clash.read_bytes() != data
    assert "[debug-conflict]" in refused(tmp_path, artifacts)


def test_a_debuglink_without_its_debug_file_is_a_check_or_a_warning(split, tmp_path):
    library, debug, build_id = split
    _, other_debug, other_id = split_library(tmp_path / "other", "bar", "int bar_function(void) { return 7; }\n")
    artifacts = lay_out(tmp_path / "with", library, other_debug, other_id)
    (debug_path(artifacts, other_id)).unlink()
    stderr = refused(tmp_path / "with", artifacts)
    assert "[debuglink-missing]" in stderr and "libfoo.so.1.debug" in stderr
    artifacts = lay_out(tmp_path / "without", library, None, build_id)
    done = rocpkg("build", "-c", tmp_path / "without" / "package.json", "-a", artifacts, "-o", tmp_path / "o",
                  "--formats", "deb", "-q")
    assert done.returncode == 0, done.stderr
    assert "warning:" in done.stderr and "debuglink-missing" in done.stderr


def test_debug_packages_are_indexed_verified_and_leave_the_other_packages_as_they_were(split, tmp_path):
    artifacts = lay_out(tmp_path, *split)
    plain, indexed = tmp_path / "plain", tmp_path / "indexed"
    done = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", plain, "-q", "--no-debug-packages")
    assert done.returncode == 0, done.stderr
    done = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", indexed, "-q", "--repo")
    assert done.returncode == 0, done.stderr
    with_debug = {p.name: p.read_bytes() for p in indexed.rglob("*") if p.suffix in (".deb", ".rpm")}
    without = {p.name: p.read_bytes() for p in plain.rglob("*") if p.suffix in (".deb", ".rpm")}
    assert {n: b for n, b in with_debug.items() if n in without} == without
    assert sorted(set(with_debug) - set(without)) == ["rocm-foo7.1-dbgsym_7.1.0-1_amd64.deb",
                                                      "rocm-foo7.1-debuginfo-7.1.0-1.x86_64.rpm"]
    apt = "".join(p.read_text() for p in indexed.rglob("Packages"))
    assert "Package: rocm-foo7.1-dbgsym\n" in apt
    primary = next(indexed.rglob("*primary.xml.gz"))
    assert b"<name>rocm-foo7.1-debuginfo</name>" in gzip.decompress(primary.read_bytes())
    done = rocpkg("verify", indexed)
    assert done.returncode == 0 and "OK: no problem found" in done.stdout, done.stdout + done.stderr


def test_the_section_reader_finds_what_pyelftools_finds(split):
    """kpack.elfread's build-id, debug link and DWARF presence, judged by pyelftools."""
    from elftools.elf.elffile import ELFFile
    from rocpkg.inputs.facts import read_facts

    for path in split[:2]:
        with open(path, "rb") as fh:
            facts = read_facts(fh, path.name)
            elf = ELFFile(fh)
            note = next(n for n in elf.get_section_by_name(".note.gnu.build-id").iter_notes())
            link = elf.get_section_by_name(".gnu_debuglink")
            dwarf = any(s.name.startswith(".debug_") and s["sh_type"] != "SHT_NOBITS" and s["sh_size"]
                        for s in elf.iter_sections())
            assert facts.build_id == note["n_desc"] == split[2]
            assert facts.debuglink == (link.data().split(b"\0")[0].decode() if link is not None else "")
            assert facts.debug_sections == dwarf == path.name.endswith(".debug")


_MEASURED = ("import resource, subprocess, sys, time\n"
             "started = time.monotonic()\n"
             "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stderr.write(done.stderr)\n"
             "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
             "time.monotonic() - started)\n")


def measured(*args) -> tuple[int, int, float, str]:
    """(exit status, peak RSS in KiB of the command and every process it waited for, wall
    seconds, stderr) of `rocpkg ARGS`, run under a fresh interpreter so that the peak is
    this command's alone."""
    from cli_run import ROCPKG

    done = subprocess.run([sys.executable, "-c", _MEASURED, *ROCPKG, *map(str, args)], capture_output=True, text=True)
    code, rss, wall = done.stdout.split()
    return int(code), int(rss), float(wall), done.stderr


def test_a_4gib_sparse_debug_file_is_a_named_check_read_in_bounded_memory(split, tmp_path):
    """A `_dbg_` component's .debug that is 4 GiB of holes (no real bytes on disk): build
    refuses it as debug-not-elf with OUT as it was, allowed it leaves it out, and neither
    reads it: the peak RSS and the time are those of a tiny release, not of 4 GiB."""
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    out = tmp_path / "out"
    good = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", out, "-q", "--formats", "deb")
    assert good.returncode == 0, good.stderr
    before = snapshot(out)
    path = debug_path(artifacts, build_id)
    path.write_bytes(b"")
    os.truncate(path, 4 << 30)
    assert path.stat().st_size == 4 << 30 and path.stat().st_blocks == 0
    code, rss, wall, stderr = measured("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", out, "-q",
                                       "--release", "2")
    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"{path}: not an ELF file with .debug_* sections [debug-not-elf]" in stderr
    assert snapshot(out) == before
    assert rss < 256 << 10 and wall < 60, (rss, wall)
    print(f"refused: peak RSS {rss} KiB, {wall:.2f} s")
    code, rss, wall, stderr = measured("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", out, "-q",
                                       "--release", "2", "--allow", "debug-not-elf", "--allow", "debuglink-missing")
    assert code == 0, stderr
    assert [p.name for p in out.rglob("*.deb") if "dbgsym" in p.name] == ["rocm-foo7.1-dbgsym_7.1.0-1_amd64.deb"]
    assert rss < 256 << 10 and wall < 60, (rss, wall)
    print(f"allowed: peak RSS {rss} KiB, {wall:.2f} s")


def test_a_real_debug_file_padded_to_4gib_is_refused_before_a_byte_is_packed(split, tmp_path):
    """The debug file objcopy split off, padded with 4 GiB of holes: an ELF whose sections
    end 4 KiB in. Packed, it would install 4 GiB of zeros; build refuses it as debug-not-elf
    (bytes no section holds) from its header alone, OUT as it was."""
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    out = tmp_path / "out"
    path = debug_path(artifacts, build_id)
    size = path.stat().st_size
    os.truncate(path, 4 << 30)
    code, rss, wall, stderr = measured("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", out, "-q")
    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"{path}: {(4 << 30) - size} bytes past the end of its ELF (which ends at byte {size}): " \
           "no section holds them [debug-not-elf]" in stderr
    assert not out.exists()
    assert rss < 256 << 10 and wall < 60, (rss, wall)


def test_verify_of_the_plan_reports_the_debug_checks_build_refuses_on(split, tmp_path):
    """`rocpkg verify -c -a` names each debug problem with the check `--allow` takes, as
    build's refusal does (one line each, exit 2); the plan of good artifacts passes."""
    library, debug, build_id = split
    artifacts = lay_out(tmp_path, library, debug, build_id)
    done = rocpkg("verify", "-c", tmp_path / "package.json", "-a", artifacts)
    assert done.returncode == 0 and "OK: no problem found" in done.stdout, done.stdout + done.stderr
    debug_path(artifacts, build_id).write_text("not an ELF\n")
    build = refused(tmp_path, artifacts)
    checks = {line.rsplit("[", 1)[1].rstrip("]") for line in build.splitlines()
              if line.startswith("error:") and line.endswith("]")}
    assert checks == {"debug-not-elf", "debuglink-missing"}, build
    done = rocpkg("verify", "-c", tmp_path / "package.json", "-a", artifacts)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    path = debug_path(artifacts, build_id)
    assert f"error: -: {path}: -: not an ELF file with .debug_* sections [debug-not-elf]" in lines, done.stderr
    assert "error: rocm-foo7.1: /opt/rocm/core-7.1/lib/libfoo.so.1: -: its .gnu_debuglink names libfoo.so.1.debug, " \
           "and no dbg component holds its debug file [debuglink-missing]" in lines, done.stderr
    assert len(lines) == 2 and "FAILED: 2 problems" in done.stdout, done.stdout + done.stderr
    report = json.loads(rocpkg("verify", "-c", tmp_path / "package.json", "-a", artifacts, "--json").stdout)
    assert sorted(p["check"] for p in report["problems"]) == ["debug-not-elf", "debuglink-missing"]
    allowed = rocpkg("build", "-c", tmp_path / "package.json", "-a", artifacts, "-o", tmp_path / "o", "-q",
                     "--allow", "debug-not-elf", "--allow", "debuglink-missing")
    assert allowed.returncode == 0, allowed.stderr


def test_the_elf_end_is_a_files_size_and_not_that_of_a_padded_debug_file(split, tmp_path):
    """FileFacts.elf_end, the end of what an ELF's headers describe, is the size of a
    linked library and of the debug file objcopy splits off, and only the ELF's part of a
    debug file padded out with 4 GiB of holes (read from its header alone)."""
    from rocpkg.inputs.facts import read_facts

    library, debug, _ = split
    padded = tmp_path / "padded.debug"
    shutil.copy(debug, padded)
    os.truncate(padded, 4 << 30)
    for path, end in ((library, library.stat().st_size), (debug, debug.stat().st_size),
                      (padded, debug.stat().st_size)):
        with open(path, "rb") as fh:
            facts = read_facts(fh, path.name)
        assert (facts.elf, facts.elf_end) == ("host", end), path
