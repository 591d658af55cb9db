"""The big one: Debian's librocsparse0 (a 1.3 GB host library whose `.hip_fatbin` still holds
111 offload bundles, 777 code objects). The only tests that touch it; they stream it (the
bundles are written one at a time, each code object read on its own), and each stays well
under a minute."""
from __future__ import annotations

import shutil

import pytest
from real_binaries import debian_package_root, library, load_comgr, read_range

from kpack.archive import KpackReader
from kpack.cli import main as kpack_main
from kpack.placement import FAT_BINARY, fat_binary_bundles, host_device_code

TARGETS = ["gfx1030", "gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-", "gfx90a:xnack+", "gfx90a:xnack-"]


@pytest.fixture(scope="module")
def rocsparse():
    return library(debian_package_root("librocsparse0"), "librocsparse.so")


@pytest.fixture(scope="module")
def bundles(rocsparse):
    return fat_binary_bundles(rocsparse)


def test_rocsparse_host_library_with_its_fat_binary_is_reported(rocsparse):
    (finding,) = host_device_code(rocsparse)
    assert (finding.kind, finding.section, finding.count, finding.targets) == (FAT_BINARY, ".hip_fatbin", 111, TARGETS)
    assert finding.size > 10**9


def test_every_rocsparse_code_object_is_named_as_its_bundle_and_comgr_name_it(rocsparse, bundles):
    comgr = load_comgr()
    named = []
    for bundle in bundles:
        for entry in bundle.entries:
            if entry.target:
                data = read_range(rocsparse, bundle.offset + entry.offset, entry.size)
                named.append((entry.target, comgr.target(data)))
    assert len(named) == 777
    assert [pair for pair in named if pair[0] != pair[1]] == []


def test_kpack_pack_of_rocsparse_bundles_files_each_object_under_its_bundle_target(rocsparse, bundles, tmp_path):
    if shutil.disk_usage(tmp_path).free < 4 * 10**9:
        pytest.skip("needs 4 GB free for the bundles and the archive")
    tree = tmp_path / "tree" / "lib"
    tree.mkdir(parents=True)
    with open(rocsparse, "rb") as source:
        for index, bundle in enumerate(bundles):
            source.seek(bundle.offset)
            with open(tree / f"librocsparse.so.0.1#{index}", "wb") as out:
                remaining = bundle.size
                while remaining:
                    chunk = source.read(min(remaining, 1 << 20))
                    out.write(chunk)
                    remaining -= len(chunk)
    assert kpack_main(["pack", str(tmp_path / "tree"), "-o", str(tmp_path / "sparse.kpack"), "--family", "sparse"]) == 0
    shutil.rmtree(tmp_path / "tree")
    with KpackReader(tmp_path / "sparse.kpack") as reader:
        filed = {(entry.key, entry.arch) for entry in reader.entries()}
        assert reader.gfx_arches == TARGETS
    assert filed == {(f"lib/librocsparse.so.0.1#{index}", entry.target)
                     for index, bundle in enumerate(bundles) for entry in bundle.entries if entry.target}
