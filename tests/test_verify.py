"""`rocpkg verify`: the silent packaging mistakes that users meet as hipErrorInvalidImage
on their GPU are found before publishing — each one named, and nothing else.

Every scenario starts from the project's own sample artifacts for the bundled package.json
(targets gfx942, which has an xnack+ build, and gfx1100), seeds one mistake, either in the
artifacts (then the plan is verified) or in one built .deb (then the tree is read back),
and checks that verify reports exactly that mistake.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kpack.archive import KpackReader, KpackWriter
from kpack.elf import build_host_elf
from kpack.marker import Marker, encode_marker, read_marker
from rocpkg.builder.run import build_release
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.formats.deb import write_deb
from rocpkg.model import BuildOptions
from rocpkg.plan.make import make_plan
from rocpkg.inputs.sample import make_sample_artifacts
from rocpkg.verify.run import verify_plan, verify_tree

REPO_ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["gfx942", "gfx1100"]
PREFIX = "/opt/rocm/core-7.1"
OPTIONS = BuildOptions(source_date_epoch=1700000000)


def sample(root: Path, config, targets=TARGETS, layout: str = "split") -> Path:
    make_sample_artifacts(root, config, targets=targets, layout=layout, size_mb=0.05)
    return root


def plan_of(config, artifacts: Path):
    return make_plan(config, scan(artifacts, config.settings["families"]))


def build(plan, out: Path, formats=("deb", "rpm")) -> Path:
    build_release(plan, out, formats=formats, options=OPTIONS)
    return out


def deb_spec(plan, name: str):
    return plan.by_name("deb")[name]


def rewrite_deb(out: Path, spec) -> None:
    """Replace one built .deb with one written from an edited spec (same file name)."""
    write_deb(spec, str(out / "deb" / "pool" / "main"), OPTIONS)


def problem_lines(report) -> list[str]:
    return [p.line() for p in report.problems]


@pytest.fixture(scope="module")
def config():
    return load_config(None)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, config):
    """Sample artifacts, their plan, and the tree built from it (both formats), once."""
    root = tmp_path_factory.mktemp("clean")
    artifacts = sample(root / "artifacts", config)
    plan = plan_of(config, artifacts)
    out = build(plan, root / "out")
    return artifacts, plan, out


@pytest.fixture
def built_deb(tmp_path, clean):
    """A private copy of the clean tree's .deb half, to seed one mistake into."""
    _, plan, out = clean
    mine = tmp_path / "out"
    shutil.copytree(out / "deb" / "pool", mine / "deb" / "pool")
    return plan, mine


@pytest.fixture
def artifacts(tmp_path, config):
    return sample(tmp_path / "artifacts", config)


# -- clean releases verify clean ------------------------------------------------------------

def test_bundled_demo_plan_verifies_clean(clean, config):
    _, plan, _ = clean
    report = verify_plan(plan, config)
    assert problem_lines(report) == []
    assert report.counts["deb"]["host_binaries"] > 0 and report.counts["deb"]["kernels_checked"] > 0
    assert report.targets["deb"] == {"gfx942": ["gfx942", "gfx942:xnack+"], "gfx1100": ["gfx1100"]}


def test_recombined_layout_plan_verifies_clean(tmp_path, config):
    artifacts = sample(tmp_path / "artifacts", config, layout="recombined")
    assert problem_lines(verify_plan(plan_of(config, artifacts), config)) == []


def test_bundled_demo_built_tree_verifies_clean_and_reads_what_the_plan_holds(clean, config):
    _, plan, out = clean
    tree = verify_tree(out)
    assert problem_lines(tree) == []
    assert tree.formats == ["deb", "rpm"]
    before = verify_plan(plan, config)
    assert tree.counts == before.counts
    assert tree.targets == before.targets


def test_family_alias_closure_holds_only_its_family_kernels(clean):
    _, _, out = clean
    report = verify_tree(out)
    aliases = {c.root: c for c in report.closures if c.format == "deb" and c.kind == "alias"}
    assert set(aliases) == {"rocm-gfx94x", "rocm-gfx110x"}
    assert list(aliases["rocm-gfx110x"].devices) == ["gfx1100"]
    assert "rocm-blas7.1-gfx1100" in aliases["rocm-gfx110x"].devices["gfx1100"]
    assert "rocm-sparse7.1-gfx942" in aliases["rocm-gfx94x"].devices["gfx942"]
    assert "libc6" in report.externals["deb"]


def test_therock_package_json_verifies_clean_before_and_after_building(tmp_path, shared_dir):
    source = shared_dir / "fixtures" / "therock" / "package.json"
    if not source.is_file():
        pytest.skip("TheRock's package.json is not in the shared fixtures")
    shutil.copy(source, tmp_path / "package.json")
    config = load_config(tmp_path / "package.json")
    plan = plan_of(config, sample(tmp_path / "artifacts", config))
    assert problem_lines(verify_plan(plan, config)) == []
    out = build(plan, tmp_path / "out")
    report = verify_tree(out)
    assert problem_lines(report) == []
    # the shared-artifact case: sparse ships no archive and gets blas's through its closure
    sparse = plan.by_name("deb")["amdrocm-sparse7.1-gfx942"]
    assert not [f for f in sparse.files if f.path.endswith(".kpack")]
    assert "amdrocm-blas7.1-gfx942 (= 7.1.0-1)" in sparse.depends
    assert report.counts["deb"]["host_binaries"] == verify_plan(plan, config).counts["deb"]["host_binaries"]


# -- each seeded mistake is named, and nothing else -------------------------------------------

def test_marker_naming_an_archive_no_package_ships(artifacts, config):
    library = artifacts / "blas_lib_generic" / "rocBLAS" / "stage" / "lib" / "librocblas.so.1.0"
    kernel_name = read_marker(library).kernel_name
    wrong = Marker(["../.kpack/blas_lib_old_@GFXARCH@.kpack"], kernel_name)
    library.write_bytes(build_host_elf({".rocm_kpack_ref": encode_marker(wrong)}, soname="librocblas.so.1"))

    report = verify_plan(plan_of(config, artifacts), config)

    assert report.checks == {"archive-missing"}
    assert {(p.format, p.package, p.path, p.target) for p in report.problems} == {
        (fmt, f"rocm-blas7.1-{t.split(':')[0]}", f"{PREFIX}/.kpack/blas_lib_old_{t}.kpack", t)
        for fmt in ("deb", "rpm") for t in ("gfx942", "gfx942:xnack+", "gfx1100")}
    assert all(f"{PREFIX}/lib/librocblas.so.1.0" in p.message for p in report.problems)


def test_archive_missing_one_kernel_for_one_target(artifacts, config):
    archive = artifacts / "blas_lib_gfx942" / "rocBLAS" / "stage" / ".kpack" / "blas_lib_gfx942.kpack"
    with KpackReader(archive) as reader:
        entries = [(e.key, e.arch, reader.get(e.key, e.arch)) for e in reader.entries()]
        group, family, arches, scheme = reader.group_name, reader.gfx_arch_family, reader.gfx_arches, reader.scheme
    dropped = entries[-1][0]
    archive.unlink()
    with KpackWriter(archive, group, family, arches, scheme=scheme) as writer:
        for key, arch, data in entries:
            if key != dropped:
                writer.add(key, arch, data)

    report = verify_plan(plan_of(config, artifacts), config)

    assert report.checks == {"kernel-missing"}
    assert {(p.format, p.package, p.path, p.target) for p in report.problems} == {
        (fmt, "rocm-blas7.1-gfx942", f"{PREFIX}/.kpack/blas_lib_gfx942.kpack", "gfx942") for fmt in ("deb", "rpm")}
    assert all(dropped in p.message for p in report.problems)


def test_two_packages_owning_one_file(artifacts, config):
    stray = artifacts / "fft_run_generic" / "rocFFT" / "stage" / "bin" / "rocblas-info"
    shutil.copy(artifacts / "blas_run_generic" / "rocBLAS" / "stage" / "bin" / "rocblas-info", stray)

    report = verify_plan(plan_of(config, artifacts), config)

    assert report.checks == {"file-conflict"}
    assert {(p.format, p.package, p.path) for p in report.problems} == {
        (fmt, "rocm-blas-host7.1", f"{PREFIX}/bin/rocblas-info") for fmt in ("deb", "rpm")}
    assert all("rocm-fft-host7.1" in p.message for p in report.problems)


def test_xnack_variant_archive_left_out_of_a_built_device_package(built_deb):
    plan, out = built_deb
    device = deb_spec(plan, "rocm-blas7.1-gfx942")
    variant = f"{PREFIX}/.kpack/blas_lib_gfx942:xnack+.kpack"
    rewrite_deb(out, dataclasses.replace(device, files=[f for f in device.files if f.path != variant]))

    report = verify_tree(out)

    assert report.checks == {"variant-missing"}
    assert {(p.package, p.path, p.target) for p in report.problems} == {
        ("rocm-blas7.1-gfx942", variant, "gfx942:xnack+"), ("rocm-sparse7.1-gfx942", variant, "gfx942:xnack+")}
    assert any("librocsparse.so.1.0" in p.message and "blas_lib_gfx942.kpack" in p.message for p in report.problems)


def test_per_target_dependency_missing_for_one_target(built_deb):
    plan, out = built_deb
    device = deb_spec(plan, "rocm-migraphx7.1-gfx942")
    kept = [d for d in device.depends if not d.startswith("rocm-blas7.1-gfx942 ")]
    assert len(kept) == len(device.depends) - 1
    rewrite_deb(out, dataclasses.replace(device, depends=kept))

    report = verify_tree(out)

    assert report.checks == {"target-depends"}
    assert [(p.package, p.target) for p in report.problems] == [("rocm-migraphx7.1-gfx942", "gfx942")]
    assert "rocm-blas7.1-gfx942" in report.problems[0].message


def test_empty_device_package(built_deb):
    plan, out = built_deb
    rewrite_deb(out, dataclasses.replace(deb_spec(plan, "rocm-rccl7.1-gfx1100"), files=[]))

    report = verify_tree(out)

    assert report.checks == {"empty-device"}
    assert [(p.package, p.path, p.target) for p in report.problems] == [("rocm-rccl7.1-gfx1100", "-", "gfx1100")]


def test_per_target_meta_that_lost_a_device_package(built_deb):
    plan, out = built_deb
    meta = deb_spec(plan, "rocm-core7.1-gfx942")
    rewrite_deb(out, dataclasses.replace(meta, depends=[d for d in meta.depends if not d.startswith("rocm-fft7.1-")]))

    report = verify_tree(out)

    # the -dev closures still hold rocm-fft-host7.1 (through rocm-fft-dev7.1), now without its kernels
    assert report.checks == {"meta-kernels"}
    assert {p.package for p in report.problems} == {"rocm-core-dev7.1-gfx942", "rocm-core-dev7.1-gfx94x",
                                                    "rocm-sdk7.1-gfx942", "rocm-sdk7.1-gfx94x"}
    assert all(p.target == "gfx942" and "rocm-fft7.1-gfx942" in p.message for p in report.problems)


def test_family_alias_pulling_another_familys_kernels(built_deb):
    plan, out = built_deb
    alias = deb_spec(plan, "rocm-gfx94x")
    rewrite_deb(out, dataclasses.replace(alias, depends=alias.depends + ["rocm-rand7.1-gfx1100 (= 7.1.0-1)"]))

    report = verify_tree(out)

    assert report.checks == {"meta-foreign-target"}
    assert [(p.package, p.target) for p in report.problems] == [("rocm-gfx94x", "gfx1100")]


def test_relation_that_resolves_nowhere(built_deb):
    plan, out = built_deb
    host = deb_spec(plan, "rocm-fft-host7.1")
    rewrite_deb(out, dataclasses.replace(host, depends=host.depends + ["rocm-fftw7.1"]))

    report = verify_tree(out)

    assert report.checks == {"relation"}
    assert [p.package for p in report.problems] == ["rocm-fft-host7.1"]
    assert "rocm-fftw7.1" in report.problems[0].message


# -- the command line ---------------------------------------------------------------------------

def rocpkg(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT / 'packaging'}{os.pathsep}{REPO_ROOT}")
    return subprocess.run([sys.executable, "-m", "rocpkg.cli", *args], capture_output=True, text=True, env=env)


def test_cli_verifies_a_plan_and_a_tree_with_exit_0(clean):
    artifacts, _, out = clean
    before = rocpkg("verify", "-a", str(artifacts))
    after = rocpkg("verify", str(out))
    for done in (before, after):
        assert done.returncode == 0, done.stderr
        assert "OK: no problem found" in done.stdout
        assert "gfx110X <- rocm-gfx110x" in done.stdout


def test_cli_names_each_problem_on_one_line_and_exits_2(built_deb):
    plan, out = built_deb
    rewrite_deb(out, dataclasses.replace(deb_spec(plan, "rocm-rccl7.1-gfx1100"), files=[]))

    done = rocpkg("verify", str(out), "--json")

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: rocm-rccl7.1-gfx1100 (deb): -: gfx1100: device package ships no file, and none of its "
        "dependencies ships the kpack archives the markers of rocm-rccl-host7.1's 1 binaries name"]
    report = json.loads(done.stdout)
    assert report["schema"] == "rocpkg-verify/1" and report["ok"] is False
    assert [p["check"] for p in report["problems"]] == ["empty-device"]


def test_cli_refuses_a_tree_and_a_plan_at_once(clean):
    artifacts, _, out = clean
    done = rocpkg("verify", str(out), "-a", str(artifacts))
    assert done.returncode == 2
    assert done.stderr.startswith("error: verify: give either OUT")


def test_library_packaged_as_generic_while_its_kernels_are_per_target(artifacts, config):
    binary = artifacts / "core-hip_lib_generic" / "clr" / "stage" / "lib" / "libclr.so.1.0"
    marker = Marker(["../.kpack/core-hip_lib_@GFXARCH@.kpack"], f"core-hip/lib/{binary.name}")
    binary.write_bytes(build_host_elf({".rocm_kpack_ref": encode_marker(marker)}, soname=binary.name))

    report = verify_plan(plan_of(config, artifacts), config)

    assert report.checks == {"generic-binary"}
    assert {(p.format, p.package, p.target) for p in report.problems} == {
        (fmt, "rocm-hip7.1", t) for fmt in ("deb", "rpm") for t in ("gfx942", "gfx942:xnack+", "gfx1100")}


def test_archive_that_does_not_list_its_target(artifacts, config):
    archive = artifacts / "blas_lib_gfx1100" / "rocBLAS" / "stage" / ".kpack" / "blas_lib_gfx1100.kpack"
    with KpackReader(archive) as reader:
        entries = [(e.key, e.arch, reader.get(e.key, e.arch)) for e in reader.entries()]
        group, family, scheme = reader.group_name, reader.gfx_arch_family, reader.scheme
    archive.unlink()
    with KpackWriter(archive, group, family, ["gfx1101"], scheme=scheme) as writer:
        for key, arch, data in entries:
            writer.add(key, arch, data)

    report = verify_plan(plan_of(config, artifacts), config)

    assert report.checks == {"archive-target"}
    assert {(p.format, p.package, p.path, p.target) for p in report.problems} == {
        (fmt, "rocm-blas7.1-gfx1100", f"{PREFIX}/.kpack/blas_lib_gfx1100.kpack", "gfx1100") for fmt in ("deb", "rpm")}


def test_truncated_package_is_reported_unreadable_not_a_crash(built_deb):
    _, out = built_deb
    package = next((out / "deb" / "pool" / "main").glob("rocm-llvm-dev7.1_*.deb"))
    with open(package, "r+b") as fh:
        fh.truncate(package.stat().st_size - 200)

    report = verify_tree(out)

    assert report.checks == {"unreadable"}
    assert [p.package for p in report.problems] == ["rocm-llvm-dev7.1"]
