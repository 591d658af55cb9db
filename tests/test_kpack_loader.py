"""kpack.loader: the runtime's lookup as a user meets it — which targets a GPU accepts, where
it looks, which archive it takes, and a one-line account of it. (The same model is
compared lookup by lookup with the reference runtime in test_kpack_loader_reference.py.)"""
from __future__ import annotations

import pytest

from kpack.errors import InvalidTargetError
from kpack.loader import (FOUND, KERNEL_NOT_FOUND, NO_ARCHIVE, NO_TARGET, STRICT, ArchiveIndex, compatible_targets,
                          filesystem_opener, find_candidates, find_kernel, load_kernel, search_order)
from kpack.marker import Marker
from loader_trees import write_archive, write_host

BLAS = Marker(["../.kpack/blas_lib_@GFXARCH@.kpack"], "blas/lib/librocblas.so.4")
BINARY = "/opt/rocm/lib/librocblas.so.4"


def package_set(archives: dict[str, tuple[list[str], dict[str, list[str]]]]):
    """An opener answering from plain data, as rocpkg verify answers from a package set."""
    def open_archive(path):
        if path not in archives:
            return None
        arches, kernels = archives[path]
        return ArchiveIndex.from_kernels(arches, kernels)
    return open_archive


def test_a_device_accepts_every_subset_of_its_features_most_specific_first():
    assert compatible_targets("gfx942:sramecc+:xnack-") == [
        "gfx942:sramecc+:xnack-", "gfx942:sramecc+", "gfx942:xnack-", "gfx942"]


def test_rocr_isa_names_lose_their_triple_prefix():
    assert compatible_targets("amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack+") == [
        "gfx90a:sramecc-:xnack+", "gfx90a:sramecc-", "gfx90a:xnack+", "gfx90a"]
    assert compatible_targets("amdgcn-amd-amdhsa--gfx1100") == ["gfx1100"]


def test_the_device_spelling_is_kept_and_its_last_feature_drops_first():
    assert compatible_targets("gfx942:xnack-:sramecc+") == [
        "gfx942:xnack-:sramecc+", "gfx942:xnack-", "gfx942:sramecc+", "gfx942"]


@pytest.mark.parametrize("isa", ["foo", "", "gfx942:xnack", "amdgcn-amd-amdhsa--", "GFX942"])
def test_a_name_that_is_no_target_is_refused(isa):
    with pytest.raises(InvalidTargetError):
        compatible_targets(isa)


def test_search_paths_expand_from_the_binary_directory_path_by_path():
    marker = Marker(["../a/x_@GFXARCH@.kpack", "/srv/x_@GFXARCH@.kpack", "./same.kpack", "../lib/./same.kpack"], "x")
    assert search_order(marker, "/opt/rocm/lib/libx.so", "gfx942:xnack+") == [
        "/opt/rocm/a/x_gfx942:xnack+.kpack", "/opt/rocm/a/x_gfx942.kpack",
        "/srv/x_gfx942:xnack+.kpack", "/srv/x_gfx942.kpack", "/opt/rocm/lib/same.kpack"]


def test_only_the_first_placeholder_is_expanded():
    marker = Marker(["../@GFXARCH@/x_@GFXARCH@.kpack"], "x")
    assert search_order(marker, "/r/lib/libx.so", "gfx1100") == ["/r/gfx1100/x_@GFXARCH@.kpack"]


def test_the_runtime_tries_the_most_specific_target_across_all_search_paths_first():
    marker = Marker(["../a/x_@GFXARCH@.kpack", "../b/x_@GFXARCH@.kpack"], "x/libx.so")
    opener = package_set({"/r/a/x_gfx942.kpack": (["gfx942"], {"x/libx.so#0": ["gfx942"]}),
                          "/r/b/x_gfx942:xnack+.kpack": (["gfx942:xnack+"], {"x/libx.so#0": ["gfx942:xnack+"]})})
    result = find_kernel(marker, "/r/lib/libx.so", "gfx942:xnack+", 0, opener)
    assert (result.status, result.archive, result.target) == (FOUND, "/r/b/x_gfx942:xnack+.kpack", "gfx942:xnack+")
    assert find_kernel(marker, "/r/lib/libx.so", "gfx942:xnack-", 0, opener).archive == "/r/a/x_gfx942.kpack"


OVERLAY = {
    "/opt/rocm/.kpack/blas_lib_gfx90a:xnack+.kpack": (["gfx90a:xnack+"], {"other#0": ["gfx90a:xnack+"]}),
    "/opt/rocm/.kpack/blas_lib_gfx90a.kpack": (["gfx90a"], {"blas/lib/librocblas.so.4#1": ["gfx90a"]})}


def test_a_kernel_the_overlay_lacks_falls_through_to_the_bare_archive():
    result = find_kernel(BLAS, BINARY, "gfx90a:xnack+", 1, package_set(OVERLAY))
    assert (result.status, result.archive, result.target) == (
        FOUND, "/opt/rocm/.kpack/blas_lib_gfx90a.kpack", "gfx90a")
    assert result.tried == [("/opt/rocm/.kpack/blas_lib_gfx90a:xnack+.kpack", "gfx90a:xnack+"),
                            ("/opt/rocm/.kpack/blas_lib_gfx90a.kpack", "gfx90a")]
    assert result.explain() == (
        "on gfx90a:xnack+ the runtime finds no blas/lib/librocblas.so.4#1 in "
        "/opt/rocm/.kpack/blas_lib_gfx90a:xnack+.kpack (for gfx90a:xnack+), then loads it from "
        "/opt/rocm/.kpack/blas_lib_gfx90a.kpack for gfx90a")


def test_strict_mode_is_the_runtime_before_the_fall_through():
    result = find_kernel(BLAS, BINARY, "gfx90a:xnack+", 1, package_set(OVERLAY), mode=STRICT)
    assert result.status == KERNEL_NOT_FOUND and result.runtime_code == 5
    assert result.explain() == ("on gfx90a:xnack+ the runtime opens /opt/rocm/.kpack/blas_lib_gfx90a:xnack+.kpack "
                                "and finds no kernel blas/lib/librocblas.so.4#1 for gfx90a:xnack+")


def test_a_kernel_in_no_candidate_names_every_archive_tried_in_order():
    result = find_kernel(BLAS, BINARY, "gfx90a:xnack+", 2, package_set(OVERLAY))
    assert result.status == KERNEL_NOT_FOUND and result.runtime_code == 5
    assert result.archive == "/opt/rocm/.kpack/blas_lib_gfx90a:xnack+.kpack"
    assert result.explain() == (
        "on gfx90a:xnack+ the runtime tries /opt/rocm/.kpack/blas_lib_gfx90a:xnack+.kpack (for gfx90a:xnack+), "
        "then /opt/rocm/.kpack/blas_lib_gfx90a.kpack (for gfx90a) and none holds blas/lib/librocblas.so.4#2: "
        "KERNEL_NOT_FOUND")


def test_candidates_go_target_first_then_search_path_order():
    marker = Marker(["../a/x_@GFXARCH@.kpack", "../b/x_@GFXARCH@.kpack"], "x/libx.so")
    opener = package_set({"/r/a/x_gfx942.kpack": (["gfx942"], {"x/libx.so#0": ["gfx942"]}),
                          "/r/a/x_gfx942:xnack+.kpack": (["gfx942:xnack+"], {}),
                          "/r/b/x_gfx942.kpack": (["gfx942"], {"x/libx.so#1": ["gfx942"]}),
                          "/r/b/x_gfx942:xnack+.kpack": (["gfx942:xnack+"], {})})
    found = find_candidates(marker, "/r/lib/libx.so", "gfx942:xnack+", opener)
    assert found.ordered == [("/r/a/x_gfx942:xnack+.kpack", "gfx942:xnack+"),
                             ("/r/b/x_gfx942:xnack+.kpack", "gfx942:xnack+"),
                             ("/r/a/x_gfx942.kpack", "gfx942"), ("/r/b/x_gfx942.kpack", "gfx942")]
    assert found.find("x/libx.so#1").archive == "/r/b/x_gfx942.kpack"


def test_the_next_arch_list_entry_is_tried_before_giving_up():
    opener = package_set({"/opt/rocm/.kpack/blas_lib_gfx942.kpack": (["gfx942"], {"other#0": ["gfx942"]}),
                          "/opt/rocm/.kpack/blas_lib_gfx90a.kpack": (["gfx90a"], {"blas/lib/librocblas.so.4#0": ["gfx90a"]})})
    result = find_kernel(BLAS, BINARY, ["gfx942", "gfx90a"], 0, opener)
    assert (result.status, result.target) == (FOUND, "gfx90a")
    assert find_kernel(BLAS, BINARY, ["gfx942", "gfx90a"], 0, opener, mode=STRICT).status == KERNEL_NOT_FOUND
    assert find_kernel(BLAS, BINARY, ["gfx1100", "gfx90a"], 0, opener).status == FOUND


def test_a_variant_only_release_serves_variant_devices_and_no_bare_one():
    opener = package_set({f"/opt/rocm/.kpack/blas_lib_{v}.kpack": ([v], {"blas/lib/librocblas.so.4#0": [v]})
                          for v in ("gfx90a:xnack+", "gfx90a:xnack-")})
    found = find_kernel(BLAS, BINARY, "amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack-", 0, opener)
    assert (found.status, found.target) == (FOUND, "gfx90a:xnack-")
    assert found.explain() == ("on gfx90a:sramecc-:xnack- the runtime opens "
                               "/opt/rocm/.kpack/blas_lib_gfx90a:xnack-.kpack and loads blas/lib/librocblas.so.4#0 "
                               "for gfx90a:xnack-")
    bare = find_kernel(BLAS, BINARY, "gfx90a", 0, opener)
    assert (bare.status, bare.searched, bare.opened) == (NO_ARCHIVE, ["/opt/rocm/.kpack/blas_lib_gfx90a.kpack"], [])


def test_archives_that_exist_but_list_no_compatible_target_say_so():
    marker = Marker(["../.kpack/all.kpack"], "x")
    opener = package_set({"/r/.kpack/all.kpack": (["gfx1100"], {"x#0": ["gfx1100"]})})
    result = find_kernel(marker, "/r/lib/libx.so", "gfx942:xnack+", 0, opener)
    assert result.status == NO_TARGET and result.runtime_code == 14
    assert result.explain() == ("on gfx942:xnack+ the runtime opens /r/.kpack/all.kpack but none lists "
                                "gfx942:xnack+ or gfx942, so x#0 does not load")


def test_no_archive_anywhere_names_every_path_looked_at():
    result = find_kernel(BLAS, BINARY, "gfx1100", 0, package_set({}))
    assert result.status == NO_ARCHIVE and result.runtime_code == 13
    assert result.explain() == ("on gfx1100 the runtime finds no kpack archive for blas/lib/librocblas.so.4#0 "
                                "(looked for /opt/rocm/.kpack/blas_lib_gfx1100.kpack)")


def test_a_corrupt_archive_is_skipped_and_the_next_one_serves(tmp_path):
    marker = Marker(["../a/x_@GFXARCH@.kpack", "../b/x_@GFXARCH@.kpack"], "x/libx.so")
    binary = write_host(tmp_path / "lib" / "libx.so", marker)
    bad = write_archive(tmp_path / "a" / "x_gfx942.kpack", {"x/libx.so#0": ["gfx942"]})
    bad.write_bytes(bad.read_bytes()[:100])
    good = write_archive(tmp_path / "b" / "x_gfx942.kpack", {"x/libx.so#0": ["gfx942"]})
    result = find_kernel(marker, str(binary), "gfx942", 0, filesystem_opener())
    assert (result.status, result.archive) == (FOUND, str(good))
    assert [path for path, _ in result.skipped] == [str(bad)]
    assert load_kernel(result)[:4] == b"\x7fELF"


def test_an_installed_tree_loads_real_bytes_through_the_filesystem_opener(tmp_path):
    binary = write_host(tmp_path / "lib" / "librocblas.so.4", BLAS)
    archive = write_archive(tmp_path / ".kpack" / "blas_lib_gfx1100.kpack",
                            {"blas/lib/librocblas.so.4#0": ["gfx1100"]})
    result = find_kernel(BLAS, str(binary), "gfx1100", 0, filesystem_opener())
    assert (result.status, result.archive) == (FOUND, str(archive))
    from kpack.archive import KpackReader

    with KpackReader(archive) as reader:
        assert load_kernel(result) == reader.get("blas/lib/librocblas.so.4#0", "gfx1100")
