"""Property: whatever happens to a valid archive or device file (bytes changed, cut short,
TOC replaced by arbitrary MessagePack), the reader and the detector raise nothing but
KpackFormatError (or KeyError for a kernel that is not there)."""
from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kpack.check import verify_reader
from kpack.archive import KpackReader, KpackWriter
from kpack.detect import detect_bytes
from kpack.elf import build_amdgpu_code_object, build_compressed_bundle, build_offload_bundle
from kpack.errors import KpackFormatError


def _archive_bytes(tmp_path_factory, scheme: str) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / f"{scheme}.kpack"
    with KpackWriter(path, "fuzz", "gfx110X", scheme=scheme) as writer:
        writer.add("lib/a.so#0", "gfx1100", b"A" * 700 + bytes(range(256)))
        writer.add("lib/a.so#0", "gfx1101", b"B" * 300)
        writer.add("bin/b#0", "gfx1100", b"C" * 50, metadata={"n": 1})
    return path.read_bytes()


def _address_space() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))


@pytest.fixture(autouse=True)
def address_space_capped():
    """Each fuzz test runs with 1 GiB more address space than the process holds: a reader
    that allocates a size an archive or bundle declares fails here (MemoryError), at 2 GB
    as at 72 PB. Restored after the test (a soft limit goes back up to the hard one)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        cap = _address_space() + (1 << 30)
    except (OSError, StopIteration):     # no /proc: no cap
        cap = None
    if cap is None or (hard != resource.RLIM_INFINITY and cap > hard):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return [_archive_bytes(tmp_path_factory, "none"), _archive_bytes(tmp_path_factory, "zstd-per-kernel")]


def exercise(data: bytes, tmp_path) -> None:
    """Everything a caller can do with an archive; only KpackFormatError may escape."""
    path = tmp_path / "m.kpack"
    path.write_bytes(data)
    try:
        with KpackReader(path) as reader:
            reader.binaries
            reader.stored_bytes()
            for entry in list(reader.entries()):
                reader.get(entry.key, entry.arch)
            try:
                reader.get("lib/a.so#0", "gfx1100")
            except KeyError:
                pass
            verify_reader(reader)
    except KpackFormatError:
        pass


mutations = st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=8)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(which=st.integers(0, 1), changes=mutations, cut=st.one_of(st.none(), st.integers(min_value=0)))
def test_mutated_or_truncated_archives_raise_only_format_errors(archives, tmp_path, which, changes, cut):
    data = bytearray(archives[which])
    for position, value in changes:
        data[position % len(data)] = value
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    exercise(bytes(data), tmp_path)


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=12) | st.binary(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=14), children, max_size=5),
    max_leaves=20)

toc_keys = st.sampled_from(["format_version", "group_name", "gfx_arch_family", "gfx_arches", "toc",
                            "compression_scheme", "blobs", "zstd_offset", "zstd_size"])


@FUZZ
@given(which=st.integers(0, 1), key=toc_keys, value=msgpack_values)
def test_any_toc_value_of_any_type_raises_only_format_errors(archives, tmp_path, which, key, value):
    data = archives[which]
    (toc_offset,) = struct.unpack_from("<Q", data, 8)
    toc = msgpack.unpackb(data[toc_offset:], raw=False)
    toc[key] = value
    exercise(data[:toc_offset] + msgpack.packb(toc, use_bin_type=True), tmp_path)


@FUZZ
@given(which=st.integers(0, 1), entry=msgpack_values)
def test_any_toc_entry_raises_only_format_errors(archives, tmp_path, which, entry):
    data = archives[which]
    (toc_offset,) = struct.unpack_from("<Q", data, 8)
    toc = msgpack.unpackb(data[toc_offset:], raw=False)
    toc["toc"]["lib/a.so#0"]["gfx1101"] = entry
    exercise(data[:toc_offset] + msgpack.packb(toc, use_bin_type=True), tmp_path)


@FUZZ
@given(which=st.integers(0, 1), tail=st.binary(max_size=64))
def test_random_toc_bytes_raise_only_format_errors(archives, tmp_path, which, tail):
    data = archives[which]
    (toc_offset,) = struct.unpack_from("<Q", data, 8)
    exercise(data[:toc_offset] + tail, tmp_path)


DEVICE_FILES = [
    build_amdgpu_code_object("gfx942", xnack=False, sramecc=True),
    build_offload_bundle([("host-x86_64-unknown-linux-gnu-", b""),
                          ("hipv4-amdgcn-amd-amdhsa--gfx1100", build_amdgpu_code_object("gfx1100"))]),
    build_compressed_bundle(build_offload_bundle([("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
                                                   build_amdgpu_code_object("gfx90a", xnack=True))])),
]


@FUZZ
@given(which=st.integers(0, len(DEVICE_FILES) - 1), changes=mutations,
       cut=st.one_of(st.none(), st.integers(min_value=0)))
# found by this test: a compressed bundle's entry declaring a 72 PB id was read with one
# allocation of that size (MemoryError); it is refused as a format error now
@example(which=2, changes=[(254, 65), (531, 1)], cut=None)
def test_mutated_device_files_raise_only_format_errors(which, changes, cut):
    data = bytearray(DEVICE_FILES[which])
    for position, value in changes:
        data[position % len(data)] = value
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    try:
        targets = detect_bytes(bytes(data), scan_embedded=True)
    except KpackFormatError:
        return
    assert isinstance(targets, list) and all(isinstance(t, str) for t in targets)
