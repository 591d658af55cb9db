"""The `.rocm_kpack_ref` marker: written into a real host ELF, read back, and resolved the
way the runtime resolves it from the binary's install path."""
from __future__ import annotations

import shutil
import subprocess

import msgpack
import pytest
from elftools.elf.elffile import ELFFile

from kpack.elf import build_host_elf
from kpack.errors import KpackFormatError
from kpack.marker import MARKER_SECTION, Marker, encode_marker, read_marker

BLAS = Marker(["../.kpack/blas_lib_@GFXARCH@.kpack"], "blas/lib/librocblas.so.4")


def host_binary(tmp_path, sections, name="librocblas.so.4"):
    path = tmp_path / name
    path.write_bytes(build_host_elf(sections, soname=name))
    return path


def test_marker_written_into_a_host_library_reads_back(tmp_path):
    path = host_binary(tmp_path, {".text": b"\xc3", MARKER_SECTION: encode_marker(BLAS)})
    assert read_marker(path) == BLAS


def test_host_library_is_valid_for_readelf(tmp_path):
    if not shutil.which("readelf"):
        pytest.skip("readelf not installed")
    path = host_binary(tmp_path, {".text": b"\xc3", MARKER_SECTION: encode_marker(BLAS)})
    result = subprocess.run(["readelf", "-W", "-S", "-d", str(path)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr
    assert MARKER_SECTION in result.stdout
    assert "Library soname: [librocblas.so.4]" in result.stdout


def test_host_library_is_valid_for_pyelftools(tmp_path):
    path = host_binary(tmp_path, {".text": b"\xc3"})
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        assert elf["e_machine"] == "EM_X86_64" and elf["e_type"] == "ET_DYN"
        sonames = [tag.soname for tag in elf.get_section_by_name(".dynamic").iter_tags()
                   if tag.entry.d_tag == "DT_SONAME"]
    assert sonames == ["librocblas.so.4"]


def test_binary_without_marker_has_none(tmp_path):
    assert read_marker(host_binary(tmp_path, {".text": b"\xc3"})) is None


def test_non_elf_file_has_no_marker(tmp_path):
    path = tmp_path / "script.sh"
    path.write_text("#!/bin/sh\n")
    assert read_marker(path) is None


def test_marker_with_section_padding_still_reads(tmp_path):
    path = host_binary(tmp_path, {MARKER_SECTION: encode_marker(BLAS) + bytes(13)})
    assert read_marker(path) == BLAS


@pytest.mark.parametrize("payload,message", [
    (b"\x92\x01\x02", "not a map"),
    (msgpack.packb({"kernel_name": "x"}), "kpack_search_paths"),
    (msgpack.packb({"kpack_search_paths": ["a"], "kernel_name": 3}), "kernel_name"),
    (msgpack.packb({"kpack_search_paths": [], "kernel_name": "x"}), "kpack_search_paths"),
    (b"\xdb\xff\xff\xff\xff", "not valid MessagePack"),
], ids=["array", "no paths", "name not string", "empty paths", "huge string"])
def test_malformed_marker_is_a_format_error_naming_the_section(tmp_path, payload, message):
    path = host_binary(tmp_path, {MARKER_SECTION: payload})
    with pytest.raises(KpackFormatError) as caught:
        read_marker(path)
    assert message in caught.value.what
    assert caught.value.where == MARKER_SECTION
    assert caught.value.path == str(path)


def test_truncated_elf_is_a_format_error(tmp_path):
    data = build_host_elf({MARKER_SECTION: encode_marker(BLAS)})
    path = tmp_path / "cut.so"
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(KpackFormatError):
        read_marker(path)


def test_marker_owns_its_numbered_keys_only():
    assert BLAS.owns("blas/lib/librocblas.so.4#0") and BLAS.owns("blas/lib/librocblas.so.4#12")
    assert not BLAS.owns("blas/lib/librocblas.so.4") and not BLAS.owns("blas/lib/librocsolver.so#0")
