"""kpack.loader against rocm-kpack's reference C++ runtime, built from ../shared: for every
host binary with a marker × every ISA a device of the release's targets can report (with
and without ROCr's `amdgcn-amd-amdhsa--` prefix, both feature orders) × co_index 0 and 1,
both load the same bytes from the same archive for the same target, or both fail the same
way. Releases come in the split, recombined and variant layouts, and with seeded mistakes."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kpack.archive import KpackReader
from kpack.marker import Marker, read_marker
from loader_trees import device_isas, host_binaries, install_artifacts, sha256, write_archive, write_host
from reference_runtime import compare_with_loader


def assert_agree(oracle, root: Path, isas: list[str], minimum: int, extra: list[str] = ()) -> None:
    """Every host binary under root (and the `extra` binary paths) agrees on every lookup."""
    binaries = host_binaries(root) + [(path, read_marker(path)) for path in extra]
    assert binaries, f"no host binary with a marker under {root}"
    compared, differ = compare_with_loader(oracle, binaries, isas)
    assert not differ, f"{len(differ)} of {compared} lookups differ:\n" + "\n".join(differ[:20])
    assert compared >= minimum
    print(f"{root.name}: {compared} lookups compared, 0 disagreements")


@pytest.fixture(scope="module")
def sample_config():
    from rocpkg.inputs.config import load_config

    return load_config(None)


@pytest.mark.parametrize("layout", ["split", "recombined"])
def test_a_sample_release_loads_what_the_runtime_loads(reference_loader, sample_config, tmp_path, layout):
    from rocpkg.inputs.sample import make_sample_artifacts

    targets = ["gfx942", "gfx90a", "gfx1100", "gfx1201"]
    make_sample_artifacts(tmp_path / "artifacts", sample_config, targets=targets, layout=layout, size_mb=0.02)
    root = install_artifacts(tmp_path / "artifacts", tmp_path / f"installed-{layout}")
    assert_agree(reference_loader, root, device_isas(targets), minimum=500)


def test_variant_only_release_loads_what_the_runtime_loads(reference_loader, tmp_path):
    """TheRock's ASAN/xnack builds: gfx90a only as :xnack+ and :xnack-, one shared archive
    per variant serving three libraries."""
    root = tmp_path / "variant"
    libs = ["librocblas.so.4", "librocsparse.so.1", "librocsolver.so.0"]
    for lib in libs:
        write_host(root / "lib" / lib, Marker(["../.kpack/blas_lib_@GFXARCH@.kpack"], f"blas/lib/{lib}"))
    for variant in ("gfx90a:xnack+", "gfx90a:xnack-"):
        write_archive(root / ".kpack" / f"blas_lib_{variant}.kpack",
                      {f"blas/lib/{lib}#{n}": [variant] for lib in libs for n in (0, 1)})
    write_archive(root / ".kpack" / "blas_lib_gfx942.kpack",
                  {f"blas/lib/{lib}#{n}": ["gfx942"] for lib in libs for n in (0, 1)})
    assert_agree(reference_loader, root, device_isas(["gfx90a", "gfx942", "gfx1100"]), minimum=200)


def seeded_mistakes(root: Path) -> None:
    """One host binary per mistake, each with its own archives."""
    def case(name: str, paths: list[str], archives: dict[str, dict[str, list[str]]],
             arches: dict[str, list[str]] | None = None, scheme: str = "zstd-per-kernel") -> None:
        write_host(root / name / "lib" / "libx.so", Marker(paths, f"{name}/libx.so"))
        for archive, kernels in archives.items():
            write_archive(root / name / archive, kernels, (arches or {}).get(archive), scheme)

    key = lambda name, n=0: f"{name}/libx.so#{n}"  # noqa: E731
    case("missing-archive", ["../.kpack/x_@GFXARCH@.kpack"], {})
    case("listed-without-kernel", ["../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx942:xnack+.kpack": {key("other"): ["gfx942:xnack+"]},
          ".kpack/x_gfx942.kpack": {key("listed-without-kernel"): ["gfx942"]}})
    case("second-path-more-specific", ["../a/x_@GFXARCH@.kpack", "../b/x_@GFXARCH@.kpack"],
         {"a/x_gfx942.kpack": {key("second-path-more-specific"): ["gfx942"]},
          "b/x_gfx942:xnack+.kpack": {key("second-path-more-specific"): ["gfx942:xnack+"]}})
    case("first-path-wins-a-tie", ["../a/x_@GFXARCH@.kpack", "../b/x_@GFXARCH@.kpack"],
         {"a/x_gfx1100.kpack": {key("other"): ["gfx1100"]},
          "b/x_gfx1100.kpack": {key("first-path-wins-a-tie"): ["gfx1100"]}})
    absolute = root / "absolute" / "store"
    case("absolute", [f"{absolute}/x_@GFXARCH@.kpack"],
         {"store/x_gfx942.kpack": {key("absolute"): ["gfx942"]},
          "store/x_gfx1100.kpack": {key("absolute", 1): ["gfx1100"]}})
    case("direct-path", ["../.kpack/all.kpack"],
         {".kpack/all.kpack": {key("direct-path"): ["gfx942", "gfx90a:xnack-"], key("direct-path", 1): ["gfx1100"]}})
    case("archive-lists-other-arch", ["../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx942.kpack": {key("archive-lists-other-arch"): ["gfx942"]}},
         arches={".kpack/x_gfx942.kpack": ["gfx90a"]})
    case("empty-archive", ["../.kpack/x_@GFXARCH@.kpack"], {".kpack/x_gfx942.kpack": {}},
         arches={".kpack/x_gfx942.kpack": ["gfx942"]})
    case("non-canonical-archive-name", ["../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx942:xnack-:sramecc+.kpack": {key("non-canonical-archive-name"): ["gfx942:xnack-:sramecc+"]},
          ".kpack/x_gfx942:sramecc+.kpack": {key("non-canonical-archive-name"): ["gfx942:sramecc+"]}})
    case("dotdot-and-placeholder-twice", ["./../deep/../.kpack/@GFXARCH@/x_@GFXARCH@.kpack"],
         {".kpack/gfx942/x_@GFXARCH@.kpack": {key("dotdot-and-placeholder-twice"): ["gfx942"]}})
    case("uncompressed", ["../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx1100.kpack": {key("uncompressed"): ["gfx1100"], key("uncompressed", 1): ["gfx1100"]}},
         scheme="none")
    # a corrupt archive in the first path is skipped; the second one serves
    case("corrupt-first", ["../a/x_@GFXARCH@.kpack", "../b/x_@GFXARCH@.kpack"],
         {"b/x_gfx942.kpack": {key("corrupt-first"): ["gfx942"]}})
    good = write_archive(root / "corrupt-first" / "a" / "x_gfx942.kpack", {key("corrupt-first"): ["gfx942"]})
    good.write_bytes(good.read_bytes()[:-7])
    # the same archive reached through a symlinked directory and directly: one archive
    case("symlinked-twice", ["../via/x_@GFXARCH@.kpack", "../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx90a.kpack": {key("symlinked-twice"): ["gfx90a"]}})
    os.symlink(".kpack", root / "symlinked-twice" / "via")
    # a directory where an archive should be is not an archive
    case("directory-in-the-way", ["../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx942.kpack": {key("directory-in-the-way"): ["gfx942"]}})
    (root / "directory-in-the-way" / ".kpack" / "x_gfx942:sramecc+.kpack").mkdir()
    # `..` right after the placeholder folds it away: the path is used as a direct one
    case("placeholder-folded-away", ["../@GFXARCH@/../.kpack/x.kpack"],
         {".kpack/x.kpack": {key("placeholder-folded-away"): ["gfx942", "gfx1100"]}})
    # the binary's directory is a symlink into another tree: `..` is taken from its target
    case("binary-dir-symlinked", ["../.kpack/x_@GFXARCH@.kpack"],
         {".kpack/x_gfx942.kpack": {key("binary-dir-symlinked"): ["gfx942"]},
          "real/.kpack/x_gfx942.kpack": {key("binary-dir-symlinked", 1): ["gfx942"]}})
    (root / "binary-dir-symlinked" / "real" / "lib").mkdir(parents=True)
    os.replace(root / "binary-dir-symlinked" / "lib" / "libx.so", root / "binary-dir-symlinked" / "real" / "lib" / "libx.so")
    (root / "binary-dir-symlinked" / "lib").rmdir()
    os.symlink("real/lib", root / "binary-dir-symlinked" / "lib")


def test_seeded_mistakes_fail_exactly_as_the_runtime_fails(reference_loader, tmp_path):
    root = tmp_path / "mistakes"
    seeded_mistakes(root)
    through_symlink = str(root / "binary-dir-symlinked" / "lib" / "libx.so")
    assert_agree(reference_loader, root, device_isas(["gfx942", "gfx90a", "gfx1100"]), minimum=500,
                 extra=[through_symlink])


def test_the_oracle_loads_a_kernel_and_names_its_archive(reference_loader, tmp_path):
    """The oracle itself is trustworthy: a known archive, a known kernel, its exact bytes."""
    archive = write_archive(tmp_path / ".kpack" / "x_gfx1100.kpack", {"x/libx.so#0": ["gfx1100"]})
    binary = write_host(tmp_path / "lib" / "libx.so", Marker(["../.kpack/x_@GFXARCH@.kpack"], "x/libx.so"))
    with KpackReader(archive) as reader:
        expected = sha256(reader.get("x/libx.so#0", "gfx1100"))
    result = reference_loader(str(binary), "amdgcn-amd-amdhsa--gfx1100", 0)
    assert (result.name, result.sha256, result.archive, result.target) == \
        ("SUCCESS", expected, str(archive.resolve()), "gfx1100")
    assert reference_loader(str(binary), "gfx1100", 1).name == "KERNEL_NOT_FOUND"
    assert reference_loader(str(binary), "gfx942", 0).name == "ARCHIVE_NOT_FOUND"


def overlay_release(root: Path) -> None:
    """TheRock's xnack split: the bare archive holds every kernel and variant archives are
    small overlays over it. One host binary per shape of overlay."""
    def case(name: str, archives: dict[str, dict[str, list[str]]], arches: dict[str, list[str]] | None = None) -> None:
        write_host(root / name / "lib" / "libx.so", Marker(["../.kpack/x_@GFXARCH@.kpack"], f"{name}/libx.so"))
        for archive, kernels in archives.items():
            write_archive(root / name / ".kpack" / archive, kernels, (arches or {}).get(archive))

    every = lambda name, arch: {f"{name}/libx.so#{n}": [arch] for n in (0, 1, 2)}  # noqa: E731
    case("partial-overlay", {"x_gfx90a.kpack": every("partial-overlay", "gfx90a"),
                             "x_gfx90a:xnack-.kpack": {"partial-overlay/libx.so#1": ["gfx90a:xnack-"]}})
    case("empty-overlay", {"x_gfx90a.kpack": every("empty-overlay", "gfx90a"), "x_gfx90a:xnack+.kpack": {}},
         arches={"x_gfx90a:xnack+.kpack": ["gfx90a:xnack+"]})
    case("both-overlays", {"x_gfx90a.kpack": every("both-overlays", "gfx90a"),
                           "x_gfx90a:xnack+.kpack": {"both-overlays/libx.so#0": ["gfx90a:xnack+"]},
                           "x_gfx90a:xnack-.kpack": {"both-overlays/libx.so#2": ["gfx90a:xnack-"]}})
    case("only-in-overlay", {"x_gfx90a.kpack": {"only-in-overlay/libx.so#0": ["gfx90a"]},
                             "x_gfx90a:xnack-.kpack": {"only-in-overlay/libx.so#1": ["gfx90a:xnack-"]}})
    case("in-no-archive", {"x_gfx90a.kpack": {"in-no-archive/libx.so#0": ["gfx90a"]},
                           "x_gfx90a:xnack+.kpack": {"in-no-archive/libx.so#2": ["gfx90a:xnack+"]}})
    case("sramecc-and-xnack", {"x_gfx942.kpack": every("sramecc-and-xnack", "gfx942"),
                               "x_gfx942:sramecc+.kpack": {"sramecc-and-xnack/libx.so#1": ["gfx942:sramecc+"]},
                               "x_gfx942:sramecc+:xnack-.kpack": {"sramecc-and-xnack/libx.so#0":
                                                                  ["gfx942:sramecc+:xnack-"]}})


def test_overlays_fall_through_exactly_as_the_runtime_does(reference_loader, tmp_path):
    root = tmp_path / "overlays"
    overlay_release(root)
    binaries = host_binaries(root)
    isas = device_isas(["gfx90a", "gfx942"])
    compared, differ = compare_with_loader(reference_loader, binaries, isas, co_indexes=(0, 1, 2))
    assert not differ, f"{len(differ)} of {compared} lookups differ:\n" + "\n".join(differ[:20])
    results = reference_loader.lookup([(path, isa, n) for path, _ in binaries for isa in isas for n in (0, 1, 2)])
    fell_through = [r for r in results if r.code == 0 and len(r.tried) > 1]
    not_found = [r for r in results if r.name == "KERNEL_NOT_FOUND" and len(r.tried) > 1]
    assert fell_through and not_found, "the tree exercises both the fall-through and a kernel in no candidate"
    print(f"overlays: {compared} lookups compared, 0 disagreements; {len(fell_through)} fell through")
