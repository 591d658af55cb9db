"""TheRock's xnack release, as its real package lists build it: targets gfx942, gfx1100,
gfx1101, gfx1200, gfx1201 and gfx90a only as feature builds (gfx90a:xnack+ and
gfx90a:xnack-, no bare gfx90a), in the split layout. It plans, builds, verifies and
installs; installed, every host binary finds its kernels on every GPU of the release the
way rocm-kpack's runtime does, and the reference runtime agrees with kpack.loader."""
from __future__ import annotations

import subprocess

import pytest

import cli_run

from loader_trees import device_isas, host_binaries, therock_release
from reference_runtime import compare_with_loader
from rocpkg.inputs.config import load_config
from test_deb import throwaway_root
from test_release import external_names

TARGETS = ["gfx942", "gfx1100", "gfx1101", "gfx1200", "gfx1201", "gfx90a:xnack+", "gfx90a:xnack-"]
def rocpkg(*args) -> subprocess.CompletedProcess:
    done = cli_run.rocpkg(*args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def release(tmp_path_factory, shared_dir):
    """(config path, artifacts, OUT) of the built release, both formats."""
    return therock_release(tmp_path_factory.mktemp("variant"), shared_dir, TARGETS, 0.5, rocpkg)


@pytest.fixture(scope="module")
def plan(release):
    from rocpkg.inputs.catalog import scan
    from rocpkg.plan.make import make_plan

    config, artifacts, _ = release
    loaded = load_config(config)
    return make_plan(loaded, scan(artifacts, loaded.settings["families"]))


def test_artifacts_have_no_bare_gfx90a_build(release):
    _, artifacts, _ = release
    names = {p.name for p in artifacts.iterdir()}
    assert "blas_lib_gfx90a:xnack+" in names and "blas_lib_gfx90a:xnack-" in names
    assert "blas_lib_gfx90a" not in names


def test_every_gfx90a_device_package_with_archives_carries_both_variants(plan):
    for fmt, specs in plan.packages.items():
        shipping = [s for s in specs if s.kind == "device" and s.target == "gfx90a"
                    and any(f.type == "file" and f.path.endswith(".kpack") for f in s.files)]
        assert shipping, fmt
        for spec in shipping:
            archives = {f.path.rsplit("_", 1)[1] for f in spec.files if f.type == "file" and f.path.endswith(".kpack")}
            assert archives == {"gfx90a:xnack+.kpack", "gfx90a:xnack-.kpack"}, (fmt, spec.name)


def test_sparse_and_solver_for_gfx90a_depend_on_blas_for_gfx90a(plan):
    pins = {"deb": "amdrocm-blas7.1-gfx90a (= 7.1.0-1)", "rpm": "amdrocm-blas7.1-gfx90a = 7.1.0-1"}
    for fmt in ("deb", "rpm"):
        specs = plan.by_name(fmt)
        for name in ("amdrocm-sparse7.1-gfx90a", "amdrocm-solver7.1-gfx90a"):
            assert pins[fmt] in specs[name].depends, (fmt, name, specs[name].depends)


def test_the_built_release_verifies_clean(release):
    _, _, out = release
    done = rocpkg("verify", out)
    assert "OK" in done.stdout


def test_installed_every_binary_loads_its_kernels_as_the_reference_runtime_does(release, plan, reference_loader,
                                                                                tmp_path):
    _, _, out = release
    debs = sorted((out / "deb" / "pool" / "main").glob("*.deb"))
    root = throwaway_root(tmp_path / "root", external_names(plan, "deb"), version="9999")
    subprocess.run(["dpkg", "--root", root, "--force-script-chrootless", "-i", *debs], check=True,
                   capture_output=True)
    binaries = host_binaries(root / "opt")
    assert len(binaries) >= 10
    isas = device_isas(TARGETS)
    compared, differ = compare_with_loader(reference_loader, binaries, isas, co_indexes=(0, 1))
    assert differ == [], "\n".join(differ[:20])
    assert compared == len(binaries) * len(isas) * 2
    # and every GPU of the release finds kernel #0 of every binary (the device packages are whole)
    from kpack.loader import filesystem_opener, find_kernel

    opener = filesystem_opener()
    failing = [find_kernel(marker, path, isa, 0, opener).explain() for path, marker in binaries for isa in isas
               if not find_kernel(marker, path, isa, 0, opener).found and _runs_on(isa)]
    assert failing == [], "\n".join(failing[:20])
    print(f"{compared} lookups over {len(binaries)} installed binaries and {len(isas)} ISA names: 0 disagreements")


def _runs_on(isa: str) -> bool:
    """A GPU reports each feature it has as on or off: names with a feature left out are
    what a user may type, not what a device reports, and need not find a build."""
    from kpack import targets as kt

    tid = kt.parse_target(kt.strip_isa_prefix(isa))
    return set(tid.features) == kt.supported_features(tid.processor)
