"""TheRock's xnack split as the runtime ROCm ships reads it: gfx90a and gfx942 built bare
(every kernel) and as feature builds whose archives are small overlays (one kernel per
binary). It builds and verifies with no --allow; installed with dpkg and with rpm, every
host binary finds every kernel on every ISA of its targets, and the reference runtime
agrees with kpack.loader lookup by lookup. The same release is refused where the runtime
predates the fall-through (`kpack_lookup: strict`), and a kernel no archive holds is
refused either way."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import cli_run
from kpack.archive import KpackReader, KpackWriter
from kpack.loader import filesystem_opener, find_kernel
from loader_trees import device_isas, host_binaries, therock_release
from reference_runtime import compare_with_loader
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import KERNELS_PER_BINARY, make_sample_artifacts
from test_deb import throwaway_root
from test_release import external_names, run
from test_rpm import base_system_spec

TARGETS = ["gfx942", "gfx90a", "gfx90a:xnack-", "gfx1100"]
SDE = "1700000000"


def rocpkg(*args, code: int = 0) -> subprocess.CompletedProcess:
    done = cli_run.rocpkg(*args, env={"SOURCE_DATE_EPOCH": SDE, "PATH": "/usr/bin:/bin"})
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def release(tmp_path_factory, shared_dir):
    """(config, artifacts, OUT) of TheRock's package list with xnack overlays, built."""
    return therock_release(tmp_path_factory.mktemp("overlays"), shared_dir, TARGETS, 0.3, rocpkg, overlays=True)


def archives(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in root.glob(pattern) if p.is_file())


def kernels_of(path: Path) -> set[str]:
    with KpackReader(path) as reader:
        return {entry.key for entry in reader.entries()}


def test_the_feature_builds_are_overlays_over_the_bare_archive(release):
    _, artifacts, _ = release
    overlays = archives(artifacts, "*_gfx90a:xnack-/**/*.kpack")
    assert overlays
    for overlay in overlays:
        bare = archives(artifacts, f"*/**/{overlay.name.replace(':xnack-', '')}")[0]
        assert 0 < len(kernels_of(overlay)) < len(kernels_of(bare))
        assert kernels_of(overlay) < kernels_of(bare)


def test_the_release_builds_and_verifies_with_no_allow(release):
    _, _, out = release
    done = rocpkg("verify", out)
    assert "OK" in done.stdout


def _every_kernel_loads(root: Path) -> tuple[int, list[str]]:
    """Every kernel the bare archives hold, for every binary, on every ISA a GPU of the
    release's targets reports: what fails to load."""
    binaries = host_binaries(root)
    opener = filesystem_opener()
    failing, checked = [], 0
    for path, marker in binaries:
        for isa in device_isas(TARGETS):
            if not _reported(isa):
                continue
            for index in range(KERNELS_PER_BINARY):
                checked += 1
                result = find_kernel(marker, path, isa, index, opener)
                if not result.found:
                    failing.append(result.explain())
    return checked, failing


def _reported(isa: str) -> bool:
    from kpack import targets as kt

    tid = kt.parse_target(kt.strip_isa_prefix(isa))
    return set(tid.features) == kt.supported_features(tid.processor)


def _check_installed(root: Path, reference_loader) -> None:
    binaries = host_binaries(root / "opt")
    assert len(binaries) >= 10
    indexes = tuple(range(KERNELS_PER_BINARY + 1))  # one past the last: KERNEL_NOT_FOUND after every candidate
    compared, differ = compare_with_loader(reference_loader, binaries, device_isas(TARGETS), co_indexes=indexes)
    assert differ == [], "\n".join(differ[:20])
    checked, failing = _every_kernel_loads(root / "opt")
    assert failing == [], "\n".join(failing[:20])
    found = reference_loader.lookup([(p, isa, n) for p, _ in binaries for isa in device_isas(TARGETS)
                                     if _reported(isa) for n in range(KERNELS_PER_BINARY)])
    assert all(r.name == "SUCCESS" for r in found)
    assert any(len(r.tried) > 1 for r in found), "some kernel falls through from an overlay"
    print(f"{compared} lookups compared, 0 disagreements; {checked} kernels load on every reported ISA")


def test_installed_with_dpkg_every_kernel_loads_as_the_reference_runtime_does(release, reference_loader, tmp_path):
    config, artifacts, out = release
    from rocpkg.inputs.catalog import scan
    from rocpkg.plan.make import make_plan

    plan = make_plan(load_config(config), scan(artifacts))
    root = throwaway_root(tmp_path / "root", external_names(plan, "deb"), version="9999")
    debs = sorted((out / "deb" / "pool" / "main").glob("*.deb"))
    run("dpkg", "--root", root, "--force-script-chrootless", "-i", *debs)
    _check_installed(root, reference_loader)


def test_installed_with_rpm_every_kernel_loads_as_the_reference_runtime_does(release, reference_loader, tmp_path):
    config, artifacts, out = release
    from rocpkg.inputs.catalog import scan
    from rocpkg.model import BuildOptions
    from rocpkg.plan.make import make_plan
    from rocpkg.formats.rpm import write_rpm

    plan = make_plan(load_config(config), scan(artifacts))
    root = tmp_path / "root"
    run("rpm", "--root", root, "--initdb")
    base = base_system_spec(str(tmp_path))
    base.provides = base.provides + [n for n in external_names(plan, "rpm") if n != "glibc"] + ["python3 = 3.11"]
    run("rpm", "--root", root, "-i", write_rpm(base, str(tmp_path / "base"), BuildOptions(source_date_epoch=1)).path)
    run("rpm", "--root", root, "-i", *sorted((out / "rpm").glob("*/*.rpm")))  # dependencies checked
    _check_installed(root, reference_loader)


def test_only_the_variant_device_package_still_loads_every_kernel(release, reference_loader, tmp_path):
    """One library's gfx90a device package with what it depends on, nothing else of the
    release: the overlay and the bare archive it falls through to come together."""
    config, artifacts, out = release
    from rocpkg.inputs.catalog import scan
    from rocpkg.plan.make import make_plan

    plan = make_plan(load_config(config), scan(artifacts))
    specs = plan.by_name("deb")
    device = next(s for s in plan.packages["deb"] if s.kind == "device" and s.target == "gfx90a"
                  and any(f.path.endswith("gfx90a:xnack-.kpack") for f in s.files))
    from rocpkg.plan.graphs import closures, dependency_edges, provided_names

    names, _ = closures(dependency_edges(specs, provided_names(specs)))[device.name]
    debs = [next((out / "deb" / "pool" / "main").glob(f"{n}_*.deb")) for n in sorted(names)]
    root = throwaway_root(tmp_path / "root", external_names(plan, "deb"), version="9999")
    run("dpkg", "--root", root, "--force-script-chrootless", "-i", *debs)
    binaries = [(p, mk) for p, mk in host_binaries(root / "opt")]
    assert binaries
    opener = filesystem_opener()
    isas = [i for i in device_isas(["gfx90a"]) if _reported(i)]
    lookups = [(mk, p, isa, n) for p, mk in binaries for isa in isas for n in range(KERNELS_PER_BINARY)]
    failing = [find_kernel(mk, p, isa, n, opener).explain() for mk, p, isa, n in lookups
               if not find_kernel(mk, p, isa, n, opener).found]
    assert failing == [], "\n".join(failing[:10])


def _strict_config(tmp_path: Path) -> Path:
    from rocpkg.inputs.config import default_config_path

    doc = json.loads(Path(default_config_path()).read_text())
    doc["settings"]["kpack_lookup"] = "strict"
    path = tmp_path / "package.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_runtime_before_the_fall_through_refuses_the_overlays(tmp_path):
    config = _strict_config(tmp_path)
    artifacts = tmp_path / "artifacts"
    make_sample_artifacts(artifacts, load_config(config), targets=["gfx90a", "gfx90a:xnack-"], size_mb=0.05,
                          overlays=True)
    out = tmp_path / "out"
    done = rocpkg("build", "-c", config, "-a", artifacts, "-o", out, code=2)
    assert "kernel-missing" in done.stderr and "KERNEL_NOT_FOUND" in done.stderr
    assert not out.exists()
    # shipped anyway, the record says which runtime the release was checked for; verify reads it back
    rocpkg("build", "-c", config, "-a", artifacts, "-o", out, "--allow", "kernel-missing")
    assert json.loads((out / "manifest.json").read_text())["releases"][0]["kpack_lookup"] == "strict"
    report = json.loads(rocpkg("verify", out, "--json", code=2).stdout)
    assert {p["check"] for p in report["problems"]} == {"kernel-missing"}
    rocpkg("verify", out, "--kpack-lookup", "fallthrough")
    # the same artifacts under the default runtime: no --allow needed, nothing recorded
    rocpkg("build", "-c", config, "-a", artifacts, "-o", tmp_path / "current", "--kpack-lookup", "fallthrough")
    assert "kpack_lookup" not in (tmp_path / "current" / "manifest.json").read_text()


def _drop_kernel(archive: Path, key: str) -> None:
    """Rewrite `archive` without `key` (every arch)."""
    with KpackReader(archive) as reader:
        header = (reader.group_name, reader.gfx_arch_family, list(reader.gfx_arches))
        kept = [(e.key, e.arch, reader.get(e.key, e.arch)) for e in reader.entries() if e.key != key]
    with KpackWriter(archive, *header) as writer:
        for k, arch, data in kept:
            writer.add(k, arch, data)


def test_a_kernel_in_no_archive_of_a_target_is_still_refused(tmp_path):
    config = load_config(None)
    artifacts = tmp_path / "artifacts"
    make_sample_artifacts(artifacts, config, targets=["gfx90a", "gfx90a:xnack-", "gfx1100"], size_mb=0.05,
                          overlays=True)
    bare = archives(artifacts, "*_gfx90a/**/*_gfx90a.kpack")[0]
    overlay = archives(artifacts, f"*/**/{bare.name.replace('gfx90a', 'gfx90a:xnack-')}")[0]
    missing = sorted(kernels_of(bare) - kernels_of(overlay))[0]
    _drop_kernel(bare, missing)
    done = rocpkg("build", "-a", artifacts, "-o", tmp_path / "out", code=2)
    lines = [line for line in done.stderr.splitlines() if "kernel-missing" in line]
    assert lines, done.stderr
    assert any(missing in line and f"{overlay.name} (for gfx90a:xnack-), then {bare.name} (for gfx90a)" in line
               for line in lines), "\n".join(lines)
    assert not (tmp_path / "out").exists()
