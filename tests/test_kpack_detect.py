"""Which targets a device file is for: code objects, offload bundles (plain and CCOB),
kpack archives and files that embed code objects; everything else is not device code."""
from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpack.archive import KpackWriter
from kpack.detect import (
    KIND_BUNDLE,
    KIND_CODE_OBJECT,
    KIND_COMPRESSED_BUNDLE,
    KIND_EMBEDDED,
    KIND_KPACK,
    KIND_NONE,
    bundle_entry_target,
    detect,
    detect_bytes,
    detect_targets,
)
from kpack.elf import (
    build_amdgpu_code_object,
    build_compressed_bundle,
    build_host_elf,
    build_offload_bundle,
)
from kpack.errors import KpackFormatError
from kpack.bundle import BUNDLE_MAGIC
from kpack.placement import EMBEDDED_CODE_OBJECT, FAT_BINARY, StreamedSearch, code_fits, device_code_objects
from kpack.placement import host_device_code


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def fat_bundle() -> bytes:
    return build_offload_bundle([
        ("host-x86_64-unknown-linux-gnu-", b""),
        ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
         build_amdgpu_code_object("gfx942", sramecc=True, xnack=False)),
        ("hipv4-amdgcn-amd-amdhsa--gfx1100", build_amdgpu_code_object("gfx1100")),
    ])


@pytest.mark.parametrize("version", [4, 5, 6])
def test_code_object_reports_processor_and_feature_settings(tmp_path, version):
    path = write(tmp_path, "k.hsaco", build_amdgpu_code_object("gfx90a", xnack=True, sramecc=False,
                                                               abi_version=version))
    assert detect(path) == (KIND_CODE_OBJECT, ["gfx90a:sramecc-:xnack+"])


def test_code_object_built_for_any_feature_setting_is_the_bare_processor(tmp_path):
    path = write(tmp_path, "k.co", build_amdgpu_code_object("gfx942"))
    assert detect_targets(path) == ["gfx942"]


def test_code_object_for_a_generic_target(tmp_path):
    path = write(tmp_path, "g.co", build_amdgpu_code_object("gfx11-generic", abi_version=6))
    assert detect_targets(path) == ["gfx11-generic"]


def test_code_object_flags_are_what_readelf_reads(tmp_path):
    if not shutil.which("readelf"):
        pytest.skip("readelf not installed")
    path = write(tmp_path, "k.co", build_amdgpu_code_object("gfx942", xnack=False, sramecc=True))
    header = subprocess.run(["readelf", "-h", str(path)], check=True, capture_output=True, text=True).stdout
    assert "AMD GPU" in header
    assert "xnack off" in header and "sramecc on" in header


def test_code_object_v3_reads_a_cleared_feature_bit_as_off(tmp_path):
    data = bytearray(build_amdgpu_code_object("gfx906"))
    data[8] = 1  # EI_ABIVERSION for code object v3: no "any", a cleared bit is off
    struct.pack_into("<I", data, 48, 0x2F | 0x100)  # gfx906, XNACK_V3 set, SRAMECC_V3 clear
    assert detect_bytes(bytes(data)) == ["gfx906:sramecc-:xnack+"]
    struct.pack_into("<I", data, 48, 0x3F)  # gfx90a with both bits clear
    assert detect_bytes(bytes(data)) == ["gfx90a:sramecc-:xnack-"]


def test_64_bytes_of_a_code_object_are_enough(tmp_path):
    assert detect_bytes(build_amdgpu_code_object("gfx1201")[:64]) == ["gfx1201"]


def test_offload_bundle_reports_every_device_entry(tmp_path):
    path = write(tmp_path, "fat.co", fat_bundle())
    assert detect(path) == (KIND_BUNDLE, ["gfx942:sramecc+:xnack-", "gfx1100"])


@pytest.mark.parametrize("version", [2, 3])
def test_compressed_bundle_reports_the_targets_inside(tmp_path, version):
    path = write(tmp_path, "fat.co", build_compressed_bundle(fat_bundle(), version=version))
    assert detect(path) == (KIND_COMPRESSED_BUNDLE, ["gfx942:sramecc+:xnack-", "gfx1100"])


def test_kpack_archive_reports_its_arches(tmp_path):
    with KpackWriter(tmp_path / "a.kpack", "g", "gfx110X") as writer:
        writer.add("lib/a.so#0", "gfx1101", b"x")
        writer.add("lib/a.so#0", "gfx1100", b"y")
    assert detect(tmp_path / "a.kpack") == (KIND_KPACK, ["gfx1101", "gfx1100"])


def test_migraphx_program_embedding_code_objects_is_scanned(tmp_path):
    program = (b"\x93\xa7program" * 5000 + build_amdgpu_code_object("gfx90a", xnack=True)
               + b"\x00" * 70000 + build_amdgpu_code_object("gfx1201") + b"\xc4tail")
    path = write(tmp_path, "model.mxr", program)
    assert detect(path) == (KIND_EMBEDDED, ["gfx90a:xnack+", "gfx1201"])


def test_embedded_code_object_across_a_scan_chunk_boundary_is_found(tmp_path):
    from kpack.detect import SCAN_CHUNK

    program = b"m" * (SCAN_CHUNK - 2) + build_amdgpu_code_object("gfx942")
    assert detect_targets(write(tmp_path, "model.mxr", program)) == ["gfx942"]


def test_other_files_are_not_scanned_for_embedded_code_unless_asked(tmp_path):
    path = write(tmp_path, "blob.bin", b"data" + build_amdgpu_code_object("gfx942"))
    assert detect_targets(path) == []
    assert detect_targets(path, scan_embedded=True) == ["gfx942"]


@pytest.mark.parametrize("name,data", [
    ("libhost.so", build_host_elf({".text": b"\xc3"}, soname="libhost.so")),
    ("README", b"just text\n"),
    ("empty", b""),
    ("TensileLibrary.dat", b"\x82\xa4name\xa3lib"),
])
def test_host_code_and_data_are_not_device_code(tmp_path, name, data):
    assert detect(write(tmp_path, name, data)) == (KIND_NONE, [])


@pytest.mark.parametrize("entry_id,target", [
    ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-"),
    ("hip-amdgcn-amd-amdhsa-gfx906", "gfx906"),
    ("hipv4-amdgcn-amd-amdhsa--gfx9-4-generic:xnack+", "gfx9-4-generic:xnack+"),
    ("hipv4-amdgcn-amd-amdhsa--gfx1250-strict", "gfx1250-strict"),
    ("host-x86_64-unknown-linux-gnu-", None),
])
def test_bundle_entry_ids_name_their_target(entry_id, target):
    assert bundle_entry_target(entry_id) == target


def _bundle_with_entry(offset: int, size: int, id_length: int) -> bytes:
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<QQQQ", 1, offset, size, id_length) + b"hipv4-amdgcn"


@pytest.mark.parametrize("name,data,message", [
    ("truncated bundle", fat_bundle()[:150], "runs past the end"),
    ("too many bundle entries", b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", 2**60), "cannot fit"),
    ("entry past the end", _bundle_with_entry(0, 10**9, 12), "runs past the end"),
    ("entry id past the end", _bundle_with_entry(0, 0, 2**40), "truncated"),
    ("unknown CCOB version", b"CCOB" + struct.pack("<HH", 9, 1) + bytes(40), "version 9"),
    ("CCOB total size past the end", b"CCOB" + struct.pack("<HHQQQ", 3, 1, 10**9, 10, 0), "does not fit"),
    ("CCOB payload not zstd", b"CCOB" + struct.pack("<HHQQQ", 3, 1, 48, 100, 0) + bytes(16), "decompress"),
    ("unknown EF_AMDGPU_MACH", build_amdgpu_code_object("gfx942")[:48] + struct.pack("<I", 0xEE)
     + build_amdgpu_code_object("gfx942")[52:], "unknown EF_AMDGPU_MACH 0xee"),
    ("truncated code object header", build_amdgpu_code_object("gfx942")[:40], "truncated"),
], ids=lambda value: value if isinstance(value, str) and " " in value else "")
def test_broken_device_files_raise_format_errors_naming_the_file(tmp_path, name, data, message):
    path = write(tmp_path, "broken.co", data)
    with pytest.raises(KpackFormatError) as caught:
        detect_targets(path)
    assert message in caught.value.what
    assert caught.value.path == str(path)


def _host_with_fat_binary(bundle: bytes) -> bytes:
    return build_host_elf({".text": b"\xc3", ".hip_fatbin": bundle}, soname="libfat.so")


def _as_nobits(image: bytes, section: str) -> bytes:
    """What RFC0008's split does to `.hip_fatbin`: the same section header, type SHT_NOBITS."""
    data = bytearray(image)
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    names_at = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 24)[0]
    for index in range(shnum):
        name_at = struct.unpack_from("<I", data, shoff + index * 64)[0]
        if data[names_at + name_at:].split(b"\0", 1)[0] == section.encode():
            struct.pack_into("<I", data, shoff + index * 64 + 4, 8)
    return bytes(data)


def test_host_library_still_holding_its_fat_binary_is_reported(tmp_path):
    path = write(tmp_path, "libfat.so", _host_with_fat_binary(fat_bundle()))
    (finding,) = host_device_code(path)
    assert (finding.kind, finding.section, finding.count) == (FAT_BINARY, ".hip_fatbin", 1)
    assert finding.targets == ["gfx942:sramecc+:xnack-", "gfx1100"]
    assert "split step did not run" in finding.describe()


def test_host_library_after_the_split_has_no_device_code(tmp_path):
    path = write(tmp_path, "libsplit.so", _as_nobits(_host_with_fat_binary(fat_bundle()), ".hip_fatbin"))
    assert subprocess.run(["readelf", "-S", str(path)], capture_output=True, text=True).stdout.count("NOBITS") == 1
    assert host_device_code(path) == []


def test_code_object_embedded_in_host_data_is_reported(tmp_path):
    blob = b"\0" * 100 + build_amdgpu_code_object("gfx1030") + b"\0" * 50
    path = write(tmp_path, "libblit.so", build_host_elf({".text": b"\xc3", ".data": blob}))
    (finding,) = host_device_code(path)
    assert (finding.kind, finding.section, finding.targets) == (EMBEDDED_CODE_OBJECT, ".data", ["gfx1030"])
    assert path.read_bytes()[finding.offset:finding.offset + finding.size] == build_amdgpu_code_object("gfx1030")


def test_a_code_object_in_a_host_package_is_device_code_and_plain_files_are_not(tmp_path):
    assert host_device_code(write(tmp_path, "k.co", build_amdgpu_code_object("gfx803")))[0].targets == ["gfx803"]
    assert host_device_code(write(tmp_path, "libclean.so", build_host_elf({".text": b"\xc3"}))) == []
    assert host_device_code(write(tmp_path, "README", b"text")) == []


def test_fat_binary_whose_bundle_lies_about_its_code_object_is_refused(tmp_path):
    lying = build_offload_bundle([("hipv4-amdgcn-amd-amdhsa--gfx90a", build_amdgpu_code_object("gfx803"))])
    path = write(tmp_path, "liblie.so", _host_with_fat_binary(lying))
    with pytest.raises(KpackFormatError) as caught:
        host_device_code(path)
    assert caught.value.path == str(path) and "its code object is for gfx803" in caught.value.what


def test_every_code_object_of_a_device_file_is_listed_with_its_target(tmp_path):
    assert device_code_objects(write(tmp_path, "fat.co", fat_bundle())) == [
        ("bundle entry 1 (hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-)", "gfx942:sramecc+:xnack-"),
        ("bundle entry 2 (hipv4-amdgcn-amd-amdhsa--gfx1100)", "gfx1100")]
    assert device_code_objects(write(tmp_path, "one.co", build_amdgpu_code_object("gfx803"))) == [("", "gfx803")]
    assert device_code_objects(write(tmp_path, "libhost.so", build_host_elf({".text": b"\xc3"}))) == []


@pytest.mark.parametrize("code,filed,fits", [
    ("gfx90a", "gfx90a", True), ("gfx90a:xnack-", "gfx90a", True), ("gfx90a:xnack-", "gfx90a:xnack+", False),
    ("gfx90a", "gfx90a:xnack+", True), ("gfx803", "gfx90a", False), ("gfx1101", "gfx110X", True),
    ("gfx1030", "gfx110X", False), ("gfx11-generic", "gfx1100", True), ("gfx9-generic", "gfx90a", False),
])
def test_code_fits_its_own_target_its_family_and_a_generic_target_that_runs_there(code, filed, fits):
    assert code_fits(code, filed) is fits


# -- the same search over a file someone else reads (StreamedSearch) -----------------------


def _streamed(path, chunk_size: int, embedded_objects: bool):
    """StreamedSearch over path's bytes in chunks of chunk_size, as a package writer reads it."""
    search = StreamedSearch(embedded_objects)
    with open(path, "rb") as handle:
        search.start(handle)
        handle.seek(0)
        data = handle.read()
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    assert b"".join(search.watch(iter(chunks))) == data     # passed on unchanged
    return search


def _host_images() -> dict[str, bytes]:
    text = {".text": b"\xc3"}
    return {
        "clean host": build_host_elf({**text, ".data": bytes(range(256)) * 40, ".rodata": b"strings\0" * 300}),
        "fat binary": _host_with_fat_binary(fat_bundle()),
        "fat binary after the split": _as_nobits(_host_with_fat_binary(fat_bundle()), ".hip_fatbin"),
        "bundle in .data": build_host_elf({**text, ".data": b"\1" * 1000 + fat_bundle() + b"\2" * 77}),
        "code object in .data": build_host_elf({**text, ".data": b"\0" * 333 + build_amdgpu_code_object("gfx1030")}),
        "bundle magic in .text only": build_host_elf({".text": b"\xc3" * 50 + BUNDLE_MAGIC + b"\xc3"}),
        "code object file": build_amdgpu_code_object("gfx90a"),
        "not an ELF": b"#!/bin/sh\necho __CLANG_OFFLOAD_BUNDLE__\n",
    }


@pytest.mark.parametrize("embedded_objects", [False, True])
@pytest.mark.parametrize("name", list(_host_images()))
def test_the_streamed_search_finds_what_the_search_of_the_file_finds(tmp_path, name, embedded_objects):
    path = write(tmp_path, "libx.so", _host_images()[name])
    expected = host_device_code(path, embedded_objects=embedded_objects)
    for chunk_size in (1, 5, 23, 24, 25, 64, 1000, 1 << 18):
        search = _streamed(path, chunk_size, embedded_objects)
        assert search.findings(path) == expected, chunk_size
        if not expected:    # a clean file is not read again
            assert not search.whole, chunk_size


def test_a_clean_host_file_never_needs_a_second_read_and_a_magic_in_its_data_always_does(tmp_path):
    clean = write(tmp_path, "libclean.so", _host_images()["clean host"])
    assert not _streamed(clean, 7, embedded_objects=True).whole
    # the magic alone (not a valid bundle) still sends the file to host_device_code, which says []
    odd = write(tmp_path, "libodd.so", build_host_elf({".text": b"\xc3", ".rodata": b"x" * 9 + BUNDLE_MAGIC + b"y"}))
    search = _streamed(odd, 10, embedded_objects=False)
    assert search.whole and search.findings(odd) == host_device_code(odd, embedded_objects=False) == []


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=3000), st.integers(min_value=1, max_value=700))
def test_a_bundle_anywhere_in_a_data_section_is_found_whatever_the_chunks(tmp_path_factory, offset, chunk_size):
    path = tmp_path_factory.mktemp("s") / "libembed.so"
    path.write_bytes(build_host_elf({".text": b"\xc3", ".data": b"\7" * offset + fat_bundle() + b"\7" * 31}))
    search = _streamed(path, chunk_size, embedded_objects=False)
    assert search.whole
    assert search.findings(path) == host_device_code(path, embedded_objects=False) != []


def test_a_section_table_that_does_not_parse_is_left_to_the_search_of_the_file(tmp_path):
    image = bytearray(_host_images()["clean host"])
    struct.pack_into("<Q", image, 40, len(image) + 4096)     # e_shoff past the end of the file
    path = write(tmp_path, "libbroken.so", bytes(image))
    search = _streamed(path, 100, embedded_objects=False)
    assert search.whole
    with pytest.raises(KpackFormatError):
        search.findings(path)
    with pytest.raises(KpackFormatError):
        host_device_code(path, embedded_objects=False)
