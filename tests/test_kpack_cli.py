"""The `kpack` command: info, ls, verify, extract and pack, and one-line errors (exit 2)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kpack.check import verify_reader
from kpack.archive import KpackReader
from kpack.cli import main, pack_key
from kpack.elf import build_amdgpu_code_object, build_compressed_bundle, build_host_elf, build_offload_bundle
from test_kpack_archive import CORRUPTIONS, damaged_archive

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fixtures(shared_dir, tmp_path):
    for name in ("test_noop.kpack", "test_zstd.kpack"):
        shutil.copyfile(shared_dir / "fixtures" / "kpack" / name, tmp_path / name)
    return tmp_path


def run_kpack(*args: str) -> subprocess.CompletedProcess:
    """The command as a user runs it: a separate process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "packaging"), str(REPO_ROOT)]))
    return subprocess.run([sys.executable, "-m", "kpack.cli", *args], capture_output=True, text=True, env=env)


def test_info_shows_arches_and_kernel_count_of_the_zstd_reference(fixtures):
    result = run_kpack("info", str(fixtures / "test_zstd.kpack"))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert lines["arches"].split() == ["gfx1100", "gfx1101"]
    assert lines["kernels"].strip() == "3"
    assert lines["binaries"].strip() == "2"
    assert lines["compression scheme"].strip() == "zstd-per-kernel"
    assert lines["kernel bytes"].strip() == "2656 original, 134 stored"
    assert lines["compression ratio"].strip() == "19.82x"


def test_ls_lists_one_kernel_per_line(fixtures, capsys):
    assert main(["ls", str(fixtures / "test_noop.kpack")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "lib/libtest.so#0\tgfx900\t0\t119", "lib/libtest.so#0\tgfx906\t1\t219", "bin/testapp#0\tgfx900\t2\t168"]


def test_verify_accepts_both_reference_archives(fixtures):
    result = run_kpack("verify", str(fixtures / "test_noop.kpack"), str(fixtures / "test_zstd.kpack"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == 2


@pytest.mark.parametrize("name,scheme,damage,message,where", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_verify_rejects_each_damaged_archive_with_one_line(tmp_path, capsys, name, scheme, damage, message, where):
    path = damaged_archive(tmp_path, scheme, damage)
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: ") and message in err


def test_verify_of_a_damaged_archive_in_a_real_process_has_no_traceback(tmp_path):
    path = damaged_archive(tmp_path, "zstd-per-kernel", CORRUPTIONS[0][2])
    result = run_kpack("verify", str(path))
    assert result.returncode == 2
    assert result.stderr == f"error: {path}: offset 0: file is 10 bytes, shorter than the 16-byte header\n"


def test_missing_file_is_one_error_line(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nope.kpack")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope.kpack'}: No such file or directory\n"


def code_object_tree(root: Path) -> None:
    """What an unbundler leaves: one directory per host binary, one file per target."""
    for relative, processor, features in [
        ("lib/libfoo.so#0/gfx942:sramecc+:xnack-.hsaco", "gfx942", dict(sramecc=True, xnack=False)),
        ("lib/libfoo.so#0/gfx90a.hsaco", "gfx90a", {}),
        ("lib/libfoo.so#1/gfx942.hsaco", "gfx942", {}),
        ("share/kernels/blit.co", "gfx942", {}),
    ]:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(build_amdgpu_code_object(processor, payload=relative.encode(), **features))
    (root / "lib" / "libfoo.so.txt").write_text("not device code\n")


def test_pack_takes_targets_from_the_code_objects(tmp_path, capsys):
    code_object_tree(tmp_path / "tree")
    out = tmp_path / "foo.kpack"
    assert main(["pack", str(tmp_path / "tree"), "-o", str(out), "--family", "gfx94X"]) == 0
    assert "1 other files skipped" in capsys.readouterr().out
    with KpackReader(out) as reader:
        verify_reader(reader)
        assert reader.group_name == "tree" and reader.gfx_arch_family == "gfx94X"
        assert [(e.key, e.arch, e.ordinal) for e in reader.entries()] == [
            ("lib/libfoo.so#0", "gfx90a", 0),
            ("lib/libfoo.so#0", "gfx942:sramecc+:xnack-", 1),
            ("lib/libfoo.so#1", "gfx942", 2),
            ("share/kernels/blit.co#0", "gfx942", 3),
        ]


def test_pack_without_family_needs_one_family(tmp_path, capsys):
    code_object_tree(tmp_path / "tree")
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "x.kpack")]) == 2
    assert "span families gfx90a, gfx94X; pass --family" in capsys.readouterr().err
    assert not (tmp_path / "x.kpack").exists()


def test_extract_then_pack_gives_back_the_same_kernels(tmp_path):
    code_object_tree(tmp_path / "tree")
    first, second = tmp_path / "first.kpack", tmp_path / "second.kpack"
    assert main(["pack", str(tmp_path / "tree"), "-o", str(first), "--family", "gfx94X", "--scheme", "none"]) == 0
    assert main(["extract", str(first), "-o", str(tmp_path / "out")]) == 0
    assert main(["pack", str(tmp_path / "out"), "-o", str(second), "--family", "gfx94X",
                 "--group", "tree", "--scheme", "none"]) == 0
    assert second.read_bytes() == first.read_bytes()


def test_extract_one_arch(tmp_path):
    code_object_tree(tmp_path / "tree")
    archive = tmp_path / "a.kpack"
    main(["pack", str(tmp_path / "tree"), "-o", str(archive), "--family", "gfx94X"])
    assert main(["extract", str(archive), "-o", str(tmp_path / "out"), "--arch", "gfx90a"]) == 0
    files = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["lib/libfoo.so#0/gfx90a.hsaco"]


def test_extract_refuses_keys_that_leave_the_output_directory(tmp_path, capsys):
    from kpack.archive import KpackWriter

    with KpackWriter(tmp_path / "evil.kpack", "g", "gfx94X") as writer:
        writer.add("../../etc/evil#0", "gfx942", b"x")
    assert main(["extract", str(tmp_path / "evil.kpack"), "-o", str(tmp_path / "out")]) == 2
    assert "outside the output directory" in capsys.readouterr().err
    assert not (tmp_path / "etc").exists()


def test_pack_files_each_bundle_entry_under_the_target_its_id_names(tmp_path):
    (tmp_path / "tree" / "lib").mkdir(parents=True)
    (tmp_path / "tree" / "lib" / "libfoo.so#3").write_bytes(build_offload_bundle([
        ("host-x86_64-unknown-linux", b""),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", build_amdgpu_code_object("gfx90a", xnack=True)),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", build_amdgpu_code_object("gfx90a", xnack=False))]))
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "x.kpack")]) == 0
    with KpackReader(tmp_path / "x.kpack") as reader:
        assert [(e.key, e.arch) for e in reader.entries()] == [
            ("lib/libfoo.so#3", "gfx90a:xnack+"), ("lib/libfoo.so#3", "gfx90a:xnack-")]
        assert reader.get("lib/libfoo.so#3", "gfx90a:xnack-") == build_amdgpu_code_object("gfx90a", xnack=False)


def test_pack_refuses_a_bundle_whose_id_lies_about_its_code_object(tmp_path, capsys):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "fat.co").write_bytes(build_offload_bundle(
        [("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", build_amdgpu_code_object("gfx803"))]))
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "x.kpack")]) == 2
    err = capsys.readouterr().err
    assert "fat.co" in err and "named hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+ but its code object is for gfx803" in err
    assert not (tmp_path / "x.kpack").exists()


def test_pack_refuses_compressed_bundles(tmp_path, capsys):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "fat.co").write_bytes(build_compressed_bundle(build_offload_bundle(
        [("hipv4-amdgcn-amd-amdhsa--gfx1100", build_amdgpu_code_object("gfx1100"))])))
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "x.kpack")]) == 2
    assert "compressed-offload-bundle; pack takes code objects and uncompressed" in capsys.readouterr().err


def _closed_pipe(module: str, *args: str) -> tuple[int, str]:
    """Run a CLI, read one line of its output and close the pipe, as `| head -1` does."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "packaging"), str(REPO_ROOT)]))
    process = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    assert process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    return process.wait(), stderr


def test_ls_into_a_closed_pipe_ends_quietly(tmp_path):
    from kpack.archive import KpackWriter

    with KpackWriter(tmp_path / "big.kpack", "g", "gfx94X") as writer:
        for index in range(4000):  # ~150 kB of listing: more than a pipe holds
            writer.add(f"lib/libbig.so#{index}", "gfx942", b"k")
    assert _closed_pipe("kpack.cli", "ls", str(tmp_path / "big.kpack")) == (0, "")


def test_rocpkg_into_a_closed_pipe_ends_quietly_too(tmp_path):
    from rocpkg.cli.main import main as rocpkg_main

    assert rocpkg_main(["sample-artifacts", str(tmp_path / "a"), "--targets", "gfx942", "--size-mb", "0.1"]) == 0
    assert _closed_pipe("rocpkg.cli", "plan", "-a", str(tmp_path / "a"), "--json") == (0, "")


def test_pack_of_a_directory_without_code_objects_fails(tmp_path, capsys):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "libhost.so").write_bytes(build_host_elf({".text": b"\xc3"}))
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "x.kpack")]) == 2
    assert "no code objects found" in capsys.readouterr().err


@pytest.mark.parametrize("relative,target,key", [
    ("lib/libfoo.so#0/gfx1100.hsaco", "gfx1100", "lib/libfoo.so#0"),
    ("lib/libfoo.so/gfx1100.co", "gfx1100", "lib/libfoo.so#0"),
    ("lib/libfoo.so#3/gfx942:xnack-", "gfx942:xnack-", "lib/libfoo.so#3"),
    ("kernels/blit.hsaco", "gfx1100", "kernels/blit.hsaco#0"),
    ("gfx1100.hsaco", "gfx1100", "gfx1100.hsaco#0"),
])
def test_pack_key_rule(relative, target, key):
    assert pack_key(relative, target) == key


@pytest.mark.parametrize("level", ["0", "23", "-5"])
def test_pack_refuses_a_level_zstd_does_not_have(tmp_path, capsys, level):
    code_object_tree(tmp_path / "tree")
    assert main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "x.kpack"), "--family", "gfx94X",
                 "--level", level]) == 2
    assert f"--level: {level} is not a zstd level" in capsys.readouterr().err
    assert not (tmp_path / "x.kpack").exists()


@pytest.mark.parametrize("output", ["lib/new.kpack", "."])
def test_pack_refuses_an_output_inside_its_input(tmp_path, capsys, output):
    tree = tmp_path / "tree"
    code_object_tree(tree)
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    assert main(["pack", str(tree), "-o", str(tree / output), "--family", "gfx94X"]) == 2
    assert "the directory being packed" in capsys.readouterr().err
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before


def test_ls_and_info_show_an_archives_control_characters_escaped(tmp_path, capsys):
    from kpack.archive import KpackWriter

    path = tmp_path / "x.kpack"
    with KpackWriter(path, "group\x1b]0;owned\x07", "gfx94X", ["gfx942"]) as writer:
        writer.add("lib/\x1b[2Jevil.so#0", "gfx942", b"\x00" * 16)
    assert main(["ls", str(path)]) == 0
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "lib/\\x1b[2Jevil.so#0" in out and "group\\x1b]0;owned\\x07" in out
