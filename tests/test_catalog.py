"""The artifact catalog: both layouts, routing, and every malformed tree refused by name."""
from __future__ import annotations

import os
import shutil

import pytest

from kpack.elf import build_amdgpu_code_object, build_host_elf
from rocpkg.inputs.catalog import dropped_mode_bits, scan
from rocpkg.inputs.config import load_config
from rocpkg.errors import RocpkgInputError
from rocpkg.inputs.sample import make_sample_artifacts


@pytest.fixture(scope="module")
def recombined(tmp_path_factory):
    root = tmp_path_factory.mktemp("cat") / "artifacts"
    make_sample_artifacts(root, load_config(None), targets=["gfx942", "gfx1100", "gfx1101"], layout="recombined")
    return root


def problems(root):
    with pytest.raises(RocpkgInputError) as exc:
        scan(root)
    return exc.value.problems


def make_artifact(root, name, lines=("x/stage",), files=("lib/a.txt",)):
    d = root / name
    d.mkdir(parents=True)
    (d / "artifact_manifest.txt").write_text("".join(line + "\n" for line in lines))
    for line in lines:
        for f in files:
            p = d / line / f
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("x")
    return d


def test_family_dir_routes_every_file_to_one_target(recombined):
    catalog = scan(recombined)
    assert catalog.targets == ["gfx942", "gfx1100", "gfx1101"]
    fam = next(d for d in catalog.artifact_dirs("blas", "lib") if d.suffix == "gfx110X")
    routed = {(e.rel.rsplit("/", 1)[-1], e.target) for s in fam.stages for e in s.entries if e.type == "file"}
    assert ("blas_lib_gfx1100.kpack", "gfx1100") in routed
    assert ("TensileLibrary_lazy_gfx1101.dat", "gfx1101") in routed
    assert all(t in ("gfx1100", "gfx1101") for _, t in routed)


def test_xnack_archive_routes_to_bare_target(recombined):
    fam = next(d for d in scan(recombined).artifact_dirs("blas", "lib") if d.suffix == "gfx94X")
    variants = {e.variant for s in fam.stages for e in s.entries if e.type == "file" and e.rel.endswith(".kpack")}
    assert variants == {"gfx942", "gfx942:xnack+"}


def test_code_object_without_target_in_name_is_routed_by_header(tmp_path):
    d = make_artifact(tmp_path, "x_lib_gfx110X", files=())
    obj = d / "x/stage/lib/kernels.bin"
    obj.parent.mkdir(parents=True)
    obj.write_bytes(build_amdgpu_code_object("gfx1101"))
    (entry,) = [e for s in scan(tmp_path).artifact_dirs("x", "lib")[0].stages for e in s.entries if e.type == "file"]
    assert entry.target == "gfx1101"


def test_unroutable_file_is_named(tmp_path):
    make_artifact(tmp_path, "x_lib_gfx110X", files=("share/readme.txt",))
    (where, what), = problems(tmp_path)
    assert where.endswith("share/readme.txt") and "cannot be routed" in what


def test_file_routed_outside_its_family_is_refused(tmp_path):
    make_artifact(tmp_path, "x_lib_gfx110X", files=("lib/db_gfx942.dat",))
    (where, what), = problems(tmp_path)
    assert "not in family gfx110X" in what


def test_missing_and_empty_manifest(tmp_path):
    (tmp_path / "a_lib_generic").mkdir()
    (tmp_path / "b_lib_generic").mkdir()
    (tmp_path / "b_lib_generic" / "artifact_manifest.txt").write_text("\n")
    found = dict(problems(tmp_path))
    assert any(w.endswith("a_lib_generic/artifact_manifest.txt") and m == "missing manifest" for w, m in found.items())
    assert any("empty manifest" in m for m in found.values())


def test_manifest_line_without_stage_dir(tmp_path):
    d = make_artifact(tmp_path, "a_lib_generic")
    with open(d / "artifact_manifest.txt", "a") as fh:
        fh.write("y/stage\n")
    (where, what), = problems(tmp_path)
    assert where.endswith("artifact_manifest.txt:2") and "'y/stage' does not exist" in what


def test_bad_directory_name(tmp_path):
    (tmp_path / "nounderscore").mkdir()
    make_artifact(tmp_path, "a_lib_gfx9999")
    found = problems(tmp_path)
    assert any("<name>_<component>_<suffix>" in m for _, m in found)
    assert any("gfx9999" in m for _, m in found)


def test_symlink_escaping_stage_is_refused(tmp_path):
    d = make_artifact(tmp_path, "a_lib_generic")
    os.symlink("../../../../etc/passwd", d / "x/stage/lib/evil")
    os.symlink("/etc/passwd", d / "x/stage/lib/evil2")
    found = problems(tmp_path)
    assert len(found) == 2 and all("escapes its stage dir" in m for _, m in found)


def test_manifest_line_escaping_artifact_is_refused(tmp_path):
    d = make_artifact(tmp_path, "a_lib_generic")
    (d / "artifact_manifest.txt").write_text("../../etc\n")
    (where, what), = problems(tmp_path)
    assert "escapes the artifact dir" in what


# -- facts read once ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def split(tmp_path_factory):
    root = tmp_path_factory.mktemp("split") / "artifacts"
    make_sample_artifacts(root, load_config(None), targets=["gfx942", "gfx1100"], size_mb=0.1)
    return root


def test_the_catalog_records_each_files_facts(split):
    catalog = scan(split)
    host = next(f for s, f in catalog.facts.items() if s.endswith("blas_lib_generic/rocBLAS/stage/lib/librocblas.so.1.0"))
    assert host.elf == "host" and "libc.so.6" in host.needed
    assert host.marker.kpack_search_paths == ["../.kpack/blas_lib_@GFXARCH@.kpack"]
    archive = next(f for s, f in catalog.facts.items() if s.endswith("blas_lib_gfx942.kpack"))
    assert archive.archive.arches == ("gfx942",) and archive.targets == ("gfx942",)
    assert all(arches == {"gfx942"} for arches in archive.archive.kernels.values())
    assert any(key.startswith(host.marker.kernel_name + "#") for key in archive.archive.kernels)


def test_plan_and_verify_use_the_facts_without_reopening_an_artifact(split, tmp_path):
    from rocpkg.plan.make import make_plan
    from rocpkg.plan.dump import plan_to_dict
    from rocpkg.verify.run import verify_plan

    config = load_config(None)
    copy = tmp_path / "artifacts"
    shutil.copytree(split, copy, symlinks=True)
    catalog = scan(copy)
    expected_plan = plan_to_dict(make_plan(config, scan(copy)))
    expected_report = verify_plan(make_plan(config, scan(copy)), config).to_dict()
    for source in catalog.facts:  # what a stage reopening the files would now read
        with open(source, "r+b") as fh:
            fh.write(b"\0" * os.fstat(fh.fileno()).st_size)
    plan = make_plan(config, catalog)
    assert plan_to_dict(plan) == expected_plan
    assert verify_plan(plan, config).to_dict() == expected_report


def test_a_malformed_marker_or_archive_is_a_recorded_fact_not_an_exception(tmp_path):
    d = make_artifact(tmp_path, "a_lib_generic", files=())
    lib = d / "x/stage/lib"
    lib.mkdir(parents=True)
    (lib / "liba.so.1").write_bytes(build_host_elf({".rocm_kpack_ref": b"\xc1"}, soname="liba.so.1"))
    (lib / "a.kpack").write_bytes(b"KPAK\x01\0\0\0" + b"\xff" * 8)
    facts = scan(tmp_path).facts
    assert "not valid MessagePack" in facts[str(lib / "liba.so.1")].marker_error
    assert "TOC offset" in facts[str(lib / "a.kpack")].archive_error


def test_a_symlinked_directory_in_a_stage_is_an_entry_never_walked(tmp_path):
    d = make_artifact(tmp_path, "a_lib_generic", files=("share/doc/readme",))
    os.symlink("share", d / "x/stage/linked")
    entries = {(e.rel, e.type) for s in scan(tmp_path).artifact_dirs("a", "lib")[0].stages for e in s.entries}
    assert ("linked", "symlink") in entries
    assert not any(rel.startswith("linked/") for rel, _ in entries)


def test_risky_mode_bits_are_named():
    assert dropped_mode_bits(0o4755, "file") == "setuid bit"
    assert dropped_mode_bits(0o2777, "dir") == "setgid/world-writable bits"
    assert dropped_mode_bits(0o755, "file") == dropped_mode_bits(0o777, "symlink") == ""


