"""Which targets a device file is for: code objects, offload bundles (plain and CCOB),
kpack archives and files that embed code objects; everything else is not device code."""
from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

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
