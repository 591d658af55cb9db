"""`rocpkg build` refuses what `rocpkg verify` rejects, before a package is published (OUT
as it was), unless the maintainer names the check with --allow; what was allowed is in
manifest.json. Small releases made by the sample generator, one mistake each."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import rocpkg
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

from kpack.elf import build_amdgpu_code_object, build_host_elf, build_offload_bundle
from kpack.marker import MARKER_SECTION, encode_marker, read_marker


@pytest.fixture
def artifacts(small_release_copy):
    return small_release_copy


def refused(out: Path, *args) -> list[str]:
    """Build into an OUT that already holds a file; assert exit 2, no traceback, OUT
    untouched; return the error lines."""
    out.mkdir(exist_ok=True)
    (out / "keep.txt").write_text("published before\n")
    done = rocpkg("build", *args, "-o", out, "--formats", "deb")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def test_a_host_library_that_still_carries_its_fat_binary_is_refused(artifacts, tmp_path):
    library = artifacts / "rand_lib_generic" / "rocRAND" / "stage" / "lib" / "librocrand.so.1.0"
    marker = read_marker(library)
    bundle = build_offload_bundle([("host-x86_64-unknown-linux-gnu-", b""),
                                   ("hipv4-amdgcn-amd-amdhsa--gfx942", build_amdgpu_code_object("gfx942"))])
    library.write_bytes(build_host_elf({MARKER_SECTION: encode_marker(marker), ".hip_fatbin": bundle},
                                       soname="librocrand.so.1"))

    errors = refused(tmp_path / "out", "-a", artifacts)

    lines = [e for e in errors if "[device-code-in-host]" in e]
    assert len(lines) == 1, errors
    assert "rocm-rand-host7.1" in lines[0] and str(library) in lines[0] and "split step did not run" in lines[0]
    assert errors[-1].startswith("error: build: refused") and "--allow device-code-in-host" in errors[-1]


def test_allowing_the_check_builds_and_records_it_in_the_manifest(artifacts, tmp_path):
    library = artifacts / "rand_lib_generic" / "rocRAND" / "stage" / "lib" / "librocrand.so.1.0"
    bundle = build_offload_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", build_amdgpu_code_object("gfx942"))])
    library.write_bytes(build_host_elf({MARKER_SECTION: encode_marker(read_marker(library)), ".hip_fatbin": bundle},
                                       soname="librocrand.so.1"))
    out = tmp_path / "out"

    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "deb", "--allow", "device-code-in-host")

    assert done.returncode == 0, done.stderr
    assert any(line.startswith("allowed: ") and "device-code-in-host" in line for line in done.stderr.splitlines())
    allowed = list(_allowed_records(json.loads((out / "manifest.json").read_text())))
    assert allowed and {a["check"] for a in allowed} == {"device-code-in-host"}
    assert all("librocrand.so.1.0" in a["where"] + a["what"] for a in allowed)


def _allowed_records(node):
    """Every record under an `allowed` key of the manifest, wherever a release keeps it."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "allowed" and isinstance(value, list):
                yield from value
            else:
                yield from _allowed_records(value)
    elif isinstance(node, list):
        for item in node:
            yield from _allowed_records(item)


def test_device_code_for_another_target_in_a_device_artifact_is_refused(artifacts, tmp_path):
    stray = artifacts / "blas_lib_gfx942" / "hipBLAS" / "stage" / "lib" / "hipblas" / "library" / "Kernels.so-001-gfx942.co"
    stray.write_bytes(build_amdgpu_code_object("gfx803"))

    errors = refused(tmp_path / "out", "-a", artifacts)

    assert any("[misfiled-device-code]" in e and "gfx803" in e and str(stray) in e for e in errors), errors


def test_a_corrupt_archive_and_misfiled_kernels_are_refused_blaming_only_their_archive(artifacts, tmp_path):
    from kpack.archive import KpackReader, KpackWriter

    archive = artifacts / "blas_lib_gfx1100" / "rocBLAS" / "stage" / ".kpack" / "blas_lib_gfx1100.kpack"
    with KpackReader(archive) as reader:
        entries = [(e.key, e.arch) for e in reader.entries()]
        group, family = reader.group_name, reader.gfx_arch_family
    archive.unlink()
    with KpackWriter(archive, group, family, ["gfx1100"]) as writer:
        for key, arch in entries:
            writer.add(key, arch, build_amdgpu_code_object("gfx942"))  # e_flags say gfx942

    errors = refused(tmp_path / "out", "-a", artifacts)

    objects = [e for e in errors if "[code-object-target]" in e]
    assert objects and all(str(archive) in e and "gfx942" in e for e in objects)
    assert not any("gfx942.kpack" in e for e in errors)  # healthy archives are not blamed


def test_a_release_whose_meta_package_misses_kernels_is_refused_until_allowed(tmp_path, shared_dir):
    """TheRock's package.json of late 2025 (b29643b54 and after) left amdrocm-rand out of
    amdrocm-core while amdrocm-core-devel pulled amdrocm-rand-devel: the per-target
    core-devel meta-packages held the rand host library without its kernels."""
    entries = json.loads((shared_dir / "fixtures" / "therock" / "package.json").read_text())
    for entry in entries:
        if entry["Package"] == "amdrocm-core":
            entry["DEBDepends"] = [d for d in entry["DEBDepends"] if d != "amdrocm-rand"]
            entry["RPMRequires"] = [d for d in entry["RPMRequires"] if d != "amdrocm-rand"]
    config = tmp_path / "package.json"
    config.write_text(json.dumps(entries))
    artifacts = tmp_path / "artifacts"
    make_sample_artifacts(artifacts, load_config(config), targets=["gfx942"], size_mb=0.2)

    errors = refused(tmp_path / "out", "-c", config, "-a", artifacts)

    meta = [e for e in errors if "[meta-kernels]" in e]
    assert any("amdrocm-core-dev7.1-gfx942" in e and "amdrocm-rand-host7.1" in e for e in meta), errors
    done = rocpkg("build", "-c", config, "-a", artifacts, "-o", tmp_path / "out2", "--formats", "deb",
                  "--allow", "meta-kernels")
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_unknown_allow_name_is_one_error_line_listing_the_checks(artifacts, tmp_path):
    errors = refused(tmp_path / "out", "-a", artifacts, "--allow", "everything")
    assert len(errors) == 1 and "unknown check 'everything'" in errors[0] and "kernel-missing" in errors[0]


def test_a_source_swapped_after_the_catalog_read_it_is_refused_by_the_writer(artifacts, tmp_path):
    """The writers open what the catalog read, never a file (or symlink) put in its place."""
    from rocpkg.inputs.catalog import scan
    from rocpkg.formats.deb import write_deb
    from rocpkg.errors import RocpkgInputError
    from rocpkg.model import BuildOptions
    from rocpkg.plan.make import make_plan

    config = load_config(None)
    plan = make_plan(config, scan(artifacts, config.settings["families"]), formats=("deb",))
    spec = next(s for s in plan.packages["deb"] if s.kind == "host")
    entry = next(f for f in spec.files if f.type == "file")
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * entry.size)
    os.rename(entry.source, tmp_path / "original")  # kept: its inode is not reused
    os.symlink(secret, entry.source)  # same size, through a symlink

    with pytest.raises(RocpkgInputError) as refused_swap:
        write_deb(spec, str(tmp_path / "out"), BuildOptions(source_date_epoch=1700000000))
    assert entry.source in str(refused_swap.value)
    os.unlink(entry.source)
    shutil.copy(secret, entry.source)  # a regular file again, but not the one the plan read
    with pytest.raises(RocpkgInputError, match="replaced"):
        write_deb(spec, str(tmp_path / "out"), BuildOptions(source_date_epoch=1700000000))
