"""The package set: names, pins and closures from TheRock's real package.json and ours."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rocpkg.inputs.catalog import scan
from rocpkg.cli.main import main
from rocpkg.inputs.config import load_config
from rocpkg.errors import RocpkgInputError
from rocpkg.plan.graphs import closure
from rocpkg.plan.make import make_plan
from rocpkg.inputs.sample import make_sample_artifacts

TARGETS = ["gfx942", "gfx1100", "gfx1101"]


@pytest.fixture(scope="module")
def therock(tmp_path_factory, shared_dir):
    root = tmp_path_factory.mktemp("therock")
    cfg = root / "package.json"
    shutil.copy(shared_dir / "fixtures" / "therock" / "package.json", cfg)
    config = load_config(cfg)
    make_sample_artifacts(root / "artifacts", config, targets=TARGETS)
    plan = make_plan(config, scan(root / "artifacts"), version="7.1.0")
    return cfg, root / "artifacts", plan


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundled")
    config = load_config(None)
    make_sample_artifacts(root / "artifacts", config, targets=TARGETS)
    return config, root / "artifacts", make_plan(config, scan(root / "artifacts"))


def names(plan, fmt="deb"):
    return set(plan.by_name(fmt))


def test_therock_fft_yields_host_device_and_meta_packages(therock):
    _, _, plan = therock
    fft = {n for n in names(plan) if n.startswith("amdrocm-fft") and "-dev" not in n and "-test" not in n}
    assert fft == {"amdrocm-fft-host7.1", "amdrocm-fft7.1-gfx942", "amdrocm-fft7.1-gfx1100",
                   "amdrocm-fft7.1-gfx1101", "amdrocm-fft7.1", "amdrocm-fft"}


@pytest.mark.parametrize("fmt,pin", [("deb", "amdrocm-fft-host7.1 (= 7.1.0-1)"), ("rpm", "amdrocm-fft-host7.1 = 7.1.0-1")])
def test_therock_device_packages_pin_their_host_exactly(therock, fmt, pin):
    _, _, plan = therock
    specs = plan.by_name(fmt)
    for t in TARGETS:
        dev = specs[f"amdrocm-fft7.1-{t}"]
        assert dev.kind == "device" and dev.target == t
        assert pin in dev.depends
        assert any(f.path.endswith(f"fft_lib_{t}.kpack") for f in dev.files)


def test_therock_deb_devel_keeps_its_runtime(therock):
    _, _, plan = therock
    specs = plan.by_name("deb")
    assert "amdrocm-fft-devel7.1" not in specs
    assert "amdrocm-fft-host7.1 (= 7.1.0-1)" in specs["amdrocm-fft-dev7.1"].depends
    assert "amdrocm-fft-host7.1 = 7.1.0-1" in plan.by_name("rpm")["amdrocm-fft-devel7.1"].depends


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_therock_family_alias_closure_holds_only_its_targets(therock, fmt):
    _, _, plan = therock
    specs = plan.by_name(fmt)
    pulled, _ = closure(specs, "rocm-gfx110x")
    device = {n for n in pulled if specs[n].kind == "device"}
    assert "amdrocm-fft7.1-gfx1100" in device and "amdrocm-fft7.1-gfx1101" in device
    assert {specs[n].target for n in device} == {"gfx1100", "gfx1101"}
    assert not any("gfx942" in n for n in pulled)


def test_rpm_family_alias_provides_mixed_case_name(therock):
    _, _, plan = therock
    alias = plan.by_name("rpm")["rocm-gfx110x"]
    assert "rocm-gfx110X = 7.1.0-1" in alias.provides


def test_shared_artifact_device_package_depends_on_the_archive_owner(therock):
    _, _, plan = therock
    sparse = plan.by_name("deb")["amdrocm-sparse7.1-gfx942"]
    assert not any(f.path.endswith(".kpack") for f in sparse.files)
    assert "amdrocm-blas7.1-gfx942 (= 7.1.0-1)" in sparse.depends


def test_xnack_variant_ships_in_the_bare_target_package(therock):
    _, _, plan = therock
    blas = plan.by_name("deb")["amdrocm-blas7.1-gfx942"]
    archives = sorted(f.path.rsplit("/", 1)[1] for f in blas.files if f.type == "file" and f.path.endswith(".kpack"))
    assert archives == ["blas_lib_gfx942.kpack", "blas_lib_gfx942:xnack+.kpack"]


def test_therock_cycles_are_information_not_errors(therock):
    _, _, plan = therock
    assert any("amdrocm-blas" in line and "amdrocm-solver" in line for line in plan.info)


def test_no_package_ships_a_path_twice_and_files_are_sorted(therock):
    _, _, plan = therock
    for fmt in ("deb", "rpm"):
        owner = {}
        for spec in plan.packages[fmt]:
            paths = [f.path for f in spec.files]
            assert paths == sorted(paths)
            for f in spec.files:
                if f.type != "dir":
                    assert f.path not in owner, (f.path, owner.get(f.path), spec.name)
                    owner[f.path] = spec.name


def test_removing_a_needed_per_target_artifact_fails_naming_artifact_and_package(therock, tmp_path, capsys):
    cfg, artifacts, _ = therock
    copy = tmp_path / "artifacts"
    shutil.copytree(artifacts, copy, symlinks=True)
    shutil.rmtree(copy / "fft_lib_gfx1101")
    rc = main(["plan", "-c", str(cfg), "-a", str(copy), "--version", "7.1.0"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "fft_lib_gfx1101" in err and "amdrocm-fft7.1-gfx1101" in err
    assert "Traceback" not in err


def test_bundled_plan_in_both_layouts_ships_the_same_paths(bundled, tmp_path):
    config, _, split_plan = bundled
    make_sample_artifacts(tmp_path / "recombined", config, targets=TARGETS, layout="recombined")
    recombined = make_plan(config, scan(tmp_path / "recombined"))
    for fmt in ("deb", "rpm"):
        a = {(p.name, f.path, f.type) for p in split_plan.packages[fmt] for f in p.files}
        b = {(p.name, f.path, f.type) for p in recombined.packages[fmt] for f in p.files}
        assert a == b


def test_bundled_plan_has_family_metas_and_aliases(bundled):
    _, _, plan = bundled
    specs = plan.by_name("deb")
    assert specs["rocm-gfx110x"].depends == ["rocm7.1-gfx110x (= 7.1.0-1)"]
    assert specs["rocm7.1-gfx110x"].depends == ["rocm7.1-gfx1100 (= 7.1.0-1)", "rocm7.1-gfx1101 (= 7.1.0-1)"]
    assert specs["rocm"].depends == ["rocm7.1 (= 7.1.0-1)"]
    assert specs["rocm7.1-gfx110x"].arch == "all" and plan.by_name("rpm")["rocm7.1-gfx110x"].arch == "noarch"


def test_rpm_relations_use_rpm_syntax(bundled):
    _, _, plan = bundled
    llvm = plan.by_name("rpm")["rocm-llvm7.1"]
    assert llvm.depends == ["glibc", "libc.so.6()(64bit)"]  # then what its ELF files need (plan.shlibs)
    deb_llvm = plan.by_name("deb")["rocm-llvm7.1"]
    assert "libgcc-s1 | libgcc1" in deb_llvm.depends


def test_targets_option_restricts_the_release(bundled):
    config, artifacts, _ = bundled
    plan = make_plan(config, scan(artifacts), targets=["gfx942"])
    assert plan.targets == ["gfx942"]
    assert not any("gfx110" in n for n in plan.by_name("deb"))


def test_unknown_target_option_is_an_input_error(bundled):
    config, artifacts, _ = bundled
    with pytest.raises(RocpkgInputError) as exc:
        make_plan(config, scan(artifacts), targets=["gfx1201"])
    assert "gfx1201" in str(exc.value)


def test_plan_json_is_stable_and_documented(bundled, capsys):
    _, artifacts, _ = bundled
    assert main(["plan", "-a", str(artifacts), "--json", "--no-files"]) == 0
    first = capsys.readouterr().out
    assert main(["plan", "-a", str(artifacts), "--json", "--no-files"]) == 0
    assert capsys.readouterr().out == first
    data = json.loads(first)
    assert data["schema"] == "rocpkg-plan/1"
    assert data["targets"] == TARGETS
    pkg = next(p for p in data["packages"] if p["name"] == "rocm-fft7.1-gfx942" and p["format"] == "deb")
    assert pkg["kind"] == "device" and pkg["target"] == "gfx942" and pkg["files"] >= 1
    assert set(pkg) >= {"format", "name", "kind", "version", "release", "arch", "depends", "files", "bytes", "filename"}


def test_plan_dot_draws_every_package(bundled, capsys):
    _, artifacts, plan = bundled
    assert main(["plan", "-a", str(artifacts), "--dot", "--formats", "deb"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "rocpkg-deb"')
    assert '"rocm-gfx110x" -> "rocm7.1-gfx110x";' in out
    assert out.count("shape=") == len(plan.packages["deb"])


def test_plan_table_lists_packages(bundled, capsys):
    _, artifacts, _ = bundled
    assert main(["plan", "-a", str(artifacts), "--formats", "rpm"]) == 0
    out = capsys.readouterr().out
    assert "rocm-fft7.1-gfx942" in out and "device" in out and "family gfx110X: gfx1100, gfx1101" in out


def test_plan_bad_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "package.json"
    bad.write_text('[{"Package": "x-a", "Gfxarch": "maybe", "Bogus": 1}]')
    proc = subprocess.run([sys.executable, "-m", "rocpkg.cli", "plan", "-c", str(bad), "-a", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "Gfxarch" in proc.stderr and "Bogus: unknown key" in proc.stderr


