"""kpack on real code objects: Debian's clang-15 output for every code-object version, and
the ROCm libraries Debian ships (librocrand1's fat binary, libhsa-runtime64-1's blit
kernels), each named as comgr names it. librocsparse0 (1.3 GB) has its own module."""
from __future__ import annotations

import itertools
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from real_binaries import debian_package_root, library, load_comgr, read_range, require_clang

from kpack.check import verify_reader
from kpack.archive import KpackReader
from kpack.cli import main as kpack_main
from kpack.codeobject import code_object_target
from kpack.placement import (
    EMBEDDED_CODE_OBJECT,
    FAT_BINARY,
    code_fits,
    device_code_objects,
    fat_binary_bundles,
    host_device_code,
)
from kpack.targets import supported_features

MATRIX_PROCESSORS = ["gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030"]
KERNEL = "__kernel void add(__global float *a) { a[0] += 1.0f; }\n"


@pytest.fixture(scope="module")
def comgr():
    return load_comgr()


def _feature_settings(processor: str) -> list[str]:
    """Every any/off/on combination of the processor's features, as -mcpu target IDs."""
    names = sorted(supported_features(processor))
    result = []
    for states in itertools.product(["", "+", "-"], repeat=len(names)):
        result.append(processor + "".join(f":{n}{s}" for n, s in zip(names, states) if s))
    return result


def _compile(clang: str, directory, version: int, target: str):
    out = directory / f"v{version}-{target.replace(':', '_')}.co"
    source = directory / "kernel.cl"
    done = subprocess.run([clang, "-x", "cl", "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}",
                           f"-mcode-object-version={version}", "-nogpulib", "-o", str(out), str(source)],
                          capture_output=True, text=True)
    if done.returncode:
        # clang refuses some pairs outright (v2 has no gfx90a, gfx1030, sramecc+ or xnack any on gfx90c)
        assert "does not support" in done.stderr, done.stderr
        return target, None
    return target, out.read_bytes()


@pytest.fixture(scope="module")
def clang_matrix(tmp_path_factory):
    """{(version, -mcpu target): code object bytes} for code objects v2-v5 over the matrix."""
    clang = require_clang()
    directory = tmp_path_factory.mktemp("clang")
    (directory / "kernel.cl").write_text(KERNEL)
    jobs = [(version, target) for version in (2, 3, 4, 5)
            for processor in MATRIX_PROCESSORS for target in _feature_settings(processor)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = list(pool.map(lambda job: (job[0], *_compile(clang, directory, *job)), jobs))
    return {(version, target): data for version, target, data in built if data is not None}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_clang_code_objects_are_named_as_comgr_names_them(clang_matrix, comgr, version):
    objects = {target: data for (v, target), data in clang_matrix.items() if v == version}
    assert len(objects) >= (8 if version == 2 else 32)
    disagreements = {target: (code_object_target(data), comgr.target(data))
                     for target, data in objects.items() if code_object_target(data) != comgr.target(data)}
    assert disagreements == {}


def test_clang_v5_objects_are_named_as_comgr_names_the_same_flags_under_v4(clang_matrix, comgr):
    """Debian's comgr (5.2) predates code object v5, whose e_flags layout is v4's: ask it about
    each object relabelled v4 (EI_ABIVERSION 3 -> 2); the amdhsa.target note, which
    code_object_target cross-checks, must agree too."""
    objects = {target: data for (v, target), data in clang_matrix.items() if v == 5}
    assert len(objects) == 32
    for target, data in objects.items():
        assert data[8] == 3
        relabelled = data[:8] + bytes([2]) + data[9:]
        assert code_object_target(data) == comgr.target(relabelled), target


def test_code_object_v3_with_xnack_off_is_not_named_any(clang_matrix):
    """The v3 bit flags: a cleared bit is "off" (v3 has no "any")."""
    assert code_object_target(clang_matrix[3, "gfx906:xnack-"]) == "gfx906:sramecc+:xnack-"
    assert code_object_target(clang_matrix[3, "gfx90a:sramecc-:xnack-"]) == "gfx90a:sramecc-:xnack-"


def test_code_object_v2_takes_processor_and_xnack_from_its_isa_note(clang_matrix):
    """Bit 0 of a v2 e_flags is part of the processor id (gfx906 is 0x2f), not xnack."""
    assert code_object_target(clang_matrix[2, "gfx906:xnack-"]) == "gfx906:sramecc-:xnack-"
    assert code_object_target(clang_matrix[2, "gfx900:xnack+"]) == "gfx900:xnack+"


@pytest.fixture(scope="module")
def rocrand():
    return library(debian_package_root("librocrand1"), "librocrand.so")


@pytest.fixture(scope="module")
def hsa_runtime():
    return library(debian_package_root("libhsa-runtime64-1"), "libhsa-runtime64.so")


def test_a_host_library_that_still_carries_its_fat_binary_is_reported(rocrand):
    (finding,) = host_device_code(rocrand)
    assert finding.kind == FAT_BINARY and finding.section == ".hip_fatbin" and finding.size > 10**7
    assert finding.targets == ["gfx1030", "gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-",
                               "gfx90a:xnack+", "gfx90a:xnack-"]
    assert "split step did not run" in finding.describe()


def test_every_bundled_rocrand_code_object_is_named_as_its_bundle_and_comgr_name_it(rocrand, comgr):
    compared = 0
    for bundle in fat_binary_bundles(rocrand):
        for entry in bundle.entries:
            if entry.target:
                data = read_range(rocrand, bundle.offset + entry.offset, entry.size)
                assert code_object_target(data) == comgr.target(data) == entry.target
                compared += 1
    assert compared == 7


def test_kpack_pack_of_rocrand_bundles_files_each_object_under_its_bundle_target(rocrand, tmp_path):
    tree = tmp_path / "tree" / "lib"
    tree.mkdir(parents=True)
    bundles = fat_binary_bundles(rocrand)
    for index, bundle in enumerate(bundles):
        (tree / f"librocrand.so.1.1#{index}").write_bytes(read_range(rocrand, bundle.offset, bundle.size))
    assert kpack_main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "rand.kpack"), "--family", "rand"]) == 0
    with KpackReader(tmp_path / "rand.kpack") as reader:
        verify_reader(reader)
        filed = {(entry.key, entry.arch) for entry in reader.entries()}
        expected = {(f"lib/librocrand.so.1.1#{index}", entry.target)
                    for index, bundle in enumerate(bundles) for entry in bundle.entries if entry.target}
        assert filed == expected and any(arch == "gfx803" for _, arch in filed)
        entry = next(e for e in bundles[0].entries if e.target == "gfx803")
        assert reader.get("lib/librocrand.so.1.1#0", "gfx803") == read_range(
            rocrand, bundles[0].offset + entry.offset, entry.size)


def test_rocm_runtime_blit_kernels_in_data_are_reported_and_named_as_comgr_names_them(hsa_runtime, comgr):
    findings = host_device_code(hsa_runtime)
    assert {f.kind for f in findings} == {EMBEDDED_CODE_OBJECT} and {f.section for f in findings} == {".data"}
    assert len(findings) == 29
    refused = []
    for finding in findings:
        data = read_range(hsa_runtime, finding.offset, finding.size)
        named = comgr.target(data)
        if named is None:  # ROCr's own relocatable (ET_REL) v1 trap handlers, which it loads itself
            refused.append(finding.targets[0])
            assert data[16] == 1 and data[8] == 0, finding
        else:
            assert [named] == finding.targets, finding
    assert refused == ["gfx700", "gfx802", "gfx900:xnack-"]
    assert {"gfx700", "gfx803", "gfx1035"} <= {t for f in findings for t in f.targets}


def test_device_code_filed_under_another_target_is_caught(rocrand, tmp_path):
    bundle = fat_binary_bundles(rocrand)[0]
    (tmp_path / "fat.hipfb").write_bytes(read_range(rocrand, bundle.offset, bundle.size))
    found = device_code_objects(tmp_path / "fat.hipfb")
    assert len(found) == 7
    misfiled = [target for _, target in found if not code_fits(target, "gfx90a")]
    assert misfiled == ["gfx1030", "gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-"]
    assert not code_fits("gfx90a:xnack-", "gfx90a:xnack+") and code_fits("gfx90a:xnack-", "gfx90a")


def test_sample_artifacts_for_gfx803_as_debian_builds_it(tmp_path):
    from rocpkg.cli.main import main as rocpkg_main

    assert rocpkg_main(["sample-artifacts", str(tmp_path / "a"), "--targets", "gfx803", "--size-mb", "0.1"]) == 0
    device_dirs = [d for d in (tmp_path / "a").iterdir() if d.name.endswith("_gfx803")]
    assert device_dirs
    archives = [p for d in device_dirs for p in d.rglob("*.kpack") if p.is_file()]
    assert archives and all(t == "gfx803" for p in archives for _, t in device_code_objects(p))


def test_e_flags_that_contradict_the_amdhsa_target_note_are_refused(clang_matrix):
    import struct

    from kpack.errors import KpackFormatError

    data = bytearray(clang_matrix[4, "gfx90a:xnack+"])
    flags, = struct.unpack_from("<I", data, 48)
    struct.pack_into("<I", data, 48, (flags & ~0x300) | 0x200)  # xnack on -> off in the header only
    with pytest.raises(KpackFormatError) as caught:
        code_object_target(bytes(data))
    assert "name gfx90a:xnack- but the amdhsa.target note says gfx90a:xnack+" in caught.value.what


def test_kpack_check_names_archived_objects_of_every_version_as_comgr_does(clang_matrix, tmp_path):
    """kpack.check (what `kpack verify` and rocpkg build run) files no false mismatch for a
    v2 object (named from its notes: the whole object is read) nor for v3-v5, and catches an
    object filed under a feature it was built without."""
    from kpack.archive import KpackWriter
    from kpack.check import CodeObjectProblem, check_archive

    good = tmp_path / "good.kpack"
    chosen = {(v, t): d for (v, t), d in clang_matrix.items() if t.startswith(("gfx906", "gfx900"))}
    arches = sorted({code_object_target(d) for d in chosen.values()})
    with KpackWriter(good, "objects", "gfx9", arches) as writer:
        for n, ((version, target), data) in enumerate(sorted(chosen.items())):
            writer.add(f"lib/libk.so#{n}", code_object_target(data), data)
    assert check_archive(good) == []
    wrong = tmp_path / "wrong.kpack"
    data = clang_matrix[2, "gfx906:xnack-"]
    with KpackWriter(wrong, "objects", "gfx906", ["gfx906:xnack+"]) as writer:
        writer.add("lib/libk.so#0", "gfx906:xnack+", data)
    problems = check_archive(wrong)
    assert len(problems) == 1 and isinstance(problems[0], CodeObjectProblem)
    assert "xnack-" in str(problems[0])
