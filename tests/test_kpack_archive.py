"""kpack archives: reading the reference archives, writing both schemes, what the reader
reads, and every kind of damage reported as KpackFormatError with what and where."""
from __future__ import annotations

import glob
import shutil
import struct

import msgpack
import pytest
import zstandard

from kpack.check import verify_reader
from kpack.archive import CountingReader, KpackReader, KpackWriter, read_toc_arches
from kpack.errors import KpackFormatError


@pytest.fixture
def fixture_copy(shared_dir, tmp_path):
    """Copy a reference archive from ../shared into tmp_path."""

    def copy(name: str):
        target = tmp_path / name
        shutil.copyfile(shared_dir / "fixtures" / "kpack" / name, target)
        return target

    return copy


def kernel(name: str, size: int) -> bytes:
    return (name.encode() * (size // len(name) + 1))[:size]


def write_sample(path, scheme: str) -> dict:
    """An archive with two binaries over two arches; returns {(key, arch): bytes}."""
    kernels = {
        ("lib/libfoo.so#0", "gfx1100"): kernel("foo-1100", 3000),
        ("lib/libfoo.so#0", "gfx1101"): kernel("foo-1101", 2000),
        ("bin/tool#0", "gfx1100"): kernel("tool-1100", 500),
        ("lib/libfoo.so#1", "gfx1101"): b"",
    }
    with KpackWriter(path, "foo", "gfx110X", scheme=scheme) as writer:
        for (key, arch), data in kernels.items():
            writer.add(key, arch, data)
    return kernels


def split(data: bytes):
    (toc_offset,) = struct.unpack_from("<Q", data, 8)
    return data[:toc_offset], msgpack.unpackb(data[toc_offset:], raw=False)


def with_toc(data: bytes, mutate) -> bytes:
    """The archive with its TOC decoded, changed by `mutate(toc)` and encoded again."""
    blobs, toc = split(data)
    mutate(toc)
    return blobs + msgpack.packb(toc, use_bin_type=True)


# -- reading the reference archives ---------------------------------------------------------


def test_zstd_reference_archive_lists_arches_binaries_and_kernels(fixture_copy):
    with KpackReader(fixture_copy("test_zstd.kpack")) as reader:
        assert reader.scheme == "zstd-per-kernel"
        assert reader.group_name == "test"
        assert reader.gfx_arch_family == "gfx110X"
        assert reader.gfx_arches == ["gfx1100", "gfx1101"]
        assert reader.binaries == ["lib/libhip.so#0", "bin/hiptest#0"]
        assert [(e.key, e.arch, e.ordinal, e.original_size) for e in reader.entries()] == [
            ("lib/libhip.so#0", "gfx1100", 0, 1019),
            ("lib/libhip.so#0", "gfx1101", 1, 619),
            ("bin/hiptest#0", "gfx1100", 2, 1018),
        ]


def test_zstd_reference_kernels_decompress_to_their_original_size(fixture_copy):
    with KpackReader(fixture_copy("test_zstd.kpack")) as reader:
        data = reader.get("lib/libhip.so#0", "gfx1101")
    assert len(data) == 619
    assert data.startswith(b"HIP_KERNEL_GFX1101_")


def test_noop_reference_kernels_are_read_verbatim(fixture_copy):
    with KpackReader(fixture_copy("test_noop.kpack")) as reader:
        assert reader.scheme == "none"
        assert reader.get("lib/libtest.so#0", "gfx900").startswith(b"KERNEL1_GFX900_DATA")
        assert reader.get("bin/testapp#0", "gfx900").startswith(b"KERNEL3_APP_GFX900")


@pytest.mark.parametrize("name", ["test_noop.kpack", "test_zstd.kpack"])
def test_reference_archives_verify(fixture_copy, name):
    with KpackReader(fixture_copy(name)) as reader:
        verify_reader(reader)


def test_read_toc_arches_reads_the_arch_list(fixture_copy):
    assert read_toc_arches(fixture_copy("test_noop.kpack")) == ["gfx900", "gfx906"]


def rewrite(source, target, scheme=None):
    with KpackReader(source) as reader:
        with KpackWriter(target, reader.group_name, reader.gfx_arch_family, reader.gfx_arches,
                         scheme=scheme or reader.scheme) as writer:
            for entry in sorted(reader.entries(), key=lambda e: e.ordinal):
                writer.add(entry.key, entry.arch, reader.get(entry.key, entry.arch), entry.metadata)


def test_noop_reference_archive_written_back_is_byte_identical(fixture_copy, tmp_path):
    source = fixture_copy("test_noop.kpack")
    rewrite(source, tmp_path / "again.kpack")
    assert (tmp_path / "again.kpack").read_bytes() == source.read_bytes()


def test_zstd_reference_archive_round_trips_to_identical_content(fixture_copy, tmp_path):
    source = fixture_copy("test_zstd.kpack")
    rewrite(source, tmp_path / "again.kpack")
    with KpackReader(source) as before, KpackReader(tmp_path / "again.kpack") as after:
        assert list(after.entries()) == list(before.entries())
        for entry in before.entries():
            assert after.get(entry.key, entry.arch) == before.get(entry.key, entry.arch)


# -- writing --------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["none", "zstd-per-kernel"])
def test_written_archive_reads_back_every_kernel(tmp_path, scheme):
    kernels = write_sample(tmp_path / "a.kpack", scheme)
    with KpackReader(tmp_path / "a.kpack") as reader:
        verify_reader(reader)
        assert reader.scheme == scheme
        assert reader.gfx_arches == ["gfx1100", "gfx1101"]
        assert reader.binaries == ["lib/libfoo.so#0", "bin/tool#0", "lib/libfoo.so#1"]
        for (key, arch), data in reversed(kernels.items()):
            assert reader.get(key, arch) == data


def test_none_scheme_layout_is_header_zeros_blobs_then_toc(tmp_path):
    write_sample(tmp_path / "a.kpack", "none")
    data = (tmp_path / "a.kpack").read_bytes()
    magic, version, toc_offset = struct.unpack_from("<4sIQ", data)
    assert (magic, version) == (b"KPAK", 1)
    assert data[16:64] == bytes(48)
    blobs, toc = split(data)
    assert list(toc) == ["format_version", "group_name", "gfx_arch_family", "gfx_arches", "toc",
                         "compression_scheme", "blobs"]
    assert toc["blobs"] == [{"offset": 64, "size": 3000}, {"offset": 3064, "size": 2000},
                            {"offset": 5064, "size": 500}, {"offset": 5564, "size": 0}]
    assert toc_offset == 5564
    assert toc["toc"]["lib/libfoo.so#0"]["gfx1101"] == {"type": "hsaco", "ordinal": 1, "original_size": 2000}


def test_zstd_scheme_layout_is_count_then_sized_frames(tmp_path):
    kernels = write_sample(tmp_path / "a.kpack", "zstd-per-kernel")
    blobs, toc = split((tmp_path / "a.kpack").read_bytes())
    assert list(toc)[-3:] == ["compression_scheme", "zstd_offset", "zstd_size"]
    assert toc["zstd_offset"] == 64 and 64 + toc["zstd_size"] == len(blobs)
    (count,) = struct.unpack_from("<I", blobs, 64)
    assert count == 4
    position, frames = 68, []
    for _ in range(count):
        (size,) = struct.unpack_from("<I", blobs, position)
        frames.append(zstandard.ZstdDecompressor().decompress(blobs[position + 4:position + 4 + size]))
        position += 4 + size
    assert position == len(blobs)
    assert frames == list(kernels.values())


def test_metadata_is_stored_with_the_kernel(tmp_path):
    with KpackWriter(tmp_path / "m.kpack", "g", "gfx94X") as writer:
        writer.add("lib/x.so#0", "gfx942", b"abc", metadata={"kernels": ["k1"]})
    with KpackReader(tmp_path / "m.kpack") as reader:
        assert [e.metadata for e in reader.entries()] == [{"kernels": ["k1"]}]


def test_writer_keeps_given_arch_list(tmp_path):
    with KpackWriter(tmp_path / "m.kpack", "g", "gfx110X", gfx_arches=["gfx1101", "gfx1100"]) as writer:
        writer.add("a#0", "gfx1100", b"1")
        writer.add("a#0", "gfx1101", b"2")
    assert read_toc_arches(tmp_path / "m.kpack") == ["gfx1101", "gfx1100"]


def test_writer_refuses_the_same_kernel_twice(tmp_path):
    with KpackWriter(tmp_path / "d.kpack", "g", "gfx94X") as writer:
        writer.add("a#0", "gfx942", b"1")
        with pytest.raises(ValueError, match="already"):
            writer.add("a#0", "gfx942", b"2")


def test_writer_refuses_unknown_scheme(tmp_path):
    with pytest.raises(ValueError, match="scheme"):
        KpackWriter(tmp_path / "x.kpack", "g", "f", scheme="lz4")


def test_writer_streams_blobs_to_disk_and_publishes_only_at_close(tmp_path):
    target = tmp_path / "s.kpack"
    writer = KpackWriter(target, "g", "gfx94X")
    writer.add("a#0", "gfx942", b"x" * 100_000)
    (partial,) = glob.glob(f"{target}.tmp-*")
    assert not target.exists()
    import os
    assert os.path.getsize(partial) >= 64 + 100_000
    writer.close()
    assert target.exists() and not glob.glob(f"{target}.tmp-*")


def test_failed_write_leaves_no_archive_behind(tmp_path):
    target = tmp_path / "f.kpack"
    with pytest.raises(RuntimeError):
        with KpackWriter(target, "g", "gfx94X") as writer:
            writer.add("a#0", "gfx942", b"x")
            raise RuntimeError("build failed")
    assert list(tmp_path.iterdir()) == []


def test_same_input_gives_identical_archive_bytes(tmp_path):
    write_sample(tmp_path / "1.kpack", "zstd-per-kernel")
    write_sample(tmp_path / "2.kpack", "zstd-per-kernel")
    assert (tmp_path / "1.kpack").read_bytes() == (tmp_path / "2.kpack").read_bytes()


# -- what the reader reads ------------------------------------------------------------------


def test_missing_kernel_is_a_key_error(tmp_path):
    write_sample(tmp_path / "a.kpack", "none")
    with KpackReader(tmp_path / "a.kpack") as reader:
        with pytest.raises(KeyError):
            reader.get("lib/libfoo.so#0", "gfx942")
        with pytest.raises(KeyError):
            reader.get("lib/nothing.so#0", "gfx1100")


@pytest.mark.parametrize("scheme", ["none", "zstd-per-kernel"])
def test_open_reads_only_the_header_and_the_toc(tmp_path, scheme):
    write_sample(tmp_path / "a.kpack", scheme)
    counting = CountingReader(tmp_path / "a.kpack")
    reader = KpackReader(counting)
    frame_count = 4 if scheme == "zstd-per-kernel" else 0
    assert counting.bytes_read == 16 + reader.toc_size + frame_count
    counting.close()


def test_fetching_a_blob_reads_just_that_blob(tmp_path):
    write_sample(tmp_path / "a.kpack", "none")
    counting = CountingReader(tmp_path / "a.kpack")
    reader = KpackReader(counting)
    before = (counting.bytes_read, counting.reads)
    reader.get("lib/libfoo.so#0", "gfx1101")
    assert (counting.bytes_read - before[0], counting.reads - before[1]) == (2000, 1)
    counting.close()


def test_fetching_a_frame_reads_size_prefixes_once_then_one_frame(tmp_path):
    write_sample(tmp_path / "a.kpack", "zstd-per-kernel")
    counting = CountingReader(tmp_path / "a.kpack")
    reader = KpackReader(counting)
    start = counting.reads
    reader.get("bin/tool#0", "gfx1100")  # ordinal 2: size prefixes of frames 0, 1, 2, then the frame
    assert counting.reads - start == 4
    start = counting.reads
    reader.get("lib/libfoo.so#0", "gfx1101")  # ordinal 1: its place is known now
    assert counting.reads - start == 1
    counting.close()


def test_many_lookups_in_any_order_find_the_right_kernels(tmp_path):
    expected = {}
    with KpackWriter(tmp_path / "many.kpack", "g", "gfx110X", scheme="zstd-per-kernel") as writer:
        for i in range(200):
            for arch in ("gfx1100", "gfx1101"):
                expected[(f"lib/k{i}.so#0", arch)] = kernel(f"{i}{arch}", 40 + i)
                writer.add(f"lib/k{i}.so#0", arch, expected[(f"lib/k{i}.so#0", arch)])
    with KpackReader(tmp_path / "many.kpack") as reader:
        for key, arch in sorted(expected, reverse=True):
            assert reader.get(key, arch) == expected[key, arch]


# -- damage ----------------------------------------------------------------------------------


def _patch(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


def _set_entry(field, value, key="lib/libfoo.so#0", arch="gfx1100"):
    return lambda toc: toc["toc"][key][arch].__setitem__(field, value)


def _huge_string_toc(data: bytes) -> bytes:
    blobs, _ = split(data)
    # A map whose first key declares a 4 GiB string: must fail without allocating it.
    return blobs + b"\x81\xdb\xff\xff\xff\xff" + b"format_version"


def _huge_array_toc(data: bytes) -> bytes:
    blobs, toc = split(data)
    packed = msgpack.packb(toc, use_bin_type=True)
    return blobs + packed.replace(b"\xaagfx_arches\x92", b"\xaagfx_arches\xdd\xff\xff\xff\xff", 1)


def _gap_after_frames(data: bytes) -> bytes:
    blobs, toc = split(data)
    toc["zstd_size"] += 8
    blobs = _patch(blobs, 8, struct.pack("<Q", len(blobs) + 8)) + bytes(8)
    return blobs + msgpack.packb(toc, use_bin_type=True)


# (name, scheme, damage(bytes) -> bytes, expected message fragment, expected where)
CORRUPTIONS = [
    ("truncated header", "none", lambda d: d[:10], "shorter than the 16-byte header", 0),
    ("truncated TOC", "none", lambda d: d[:-5], "TOC ends in the middle", None),
    ("wrong magic", "none", lambda d: _patch(d, 0, b"KPAX"), "bad magic", 0),
    ("wrong version", "none", lambda d: _patch(d, 4, struct.pack("<I", 2)), "unsupported version 2", 4),
    ("TOC offset past the end", "none", lambda d: _patch(d, 8, struct.pack("<Q", 10**9)), "past the end", 8),
    ("TOC offset inside header", "none", lambda d: _patch(d, 8, struct.pack("<Q", 20)), "inside the", 8),
    ("TOC not a map", "none", lambda d: split(d)[0] + msgpack.packb([1, 2, 3]), "TOC is not a map", None),
    ("bytes after the TOC", "none", lambda d: d + b"\0", "follow the TOC", None),
    ("missing group_name", "none", lambda d: with_toc(d, lambda t: t.pop("group_name")),
     "no 'group_name'", "TOC['group_name']"),
    ("missing blobs", "none", lambda d: with_toc(d, lambda t: t.pop("blobs")), "no 'blobs'", "TOC['blobs']"),
    ("missing zstd_size", "zstd-per-kernel", lambda d: with_toc(d, lambda t: t.pop("zstd_size")),
     "no 'zstd_size'", "TOC['zstd_size']"),
    ("unknown scheme", "none", lambda d: with_toc(d, lambda t: t.update(compression_scheme="lz4")),
     "unknown compression scheme", "TOC['compression_scheme']"),
    ("ordinal out of range", "none", lambda d: with_toc(d, _set_entry("ordinal", 7)),
     "out of range", "toc['lib/libfoo.so#0']['gfx1100'].ordinal"),
    ("ordinal used twice", "none", lambda d: with_toc(d, _set_entry("ordinal", 1)),
     "also used by", "toc['lib/libfoo.so#0']['gfx1101'].ordinal"),
    ("blob outside the file", "none",
     lambda d: with_toc(d, lambda t: t["blobs"][2].update(offset=10**6)), "outside the blob area", "blobs[2]"),
    ("blob size differs from original_size", "none", lambda d: with_toc(d, _set_entry("original_size", 2999)),
     "blob is 3000 bytes", "toc['lib/libfoo.so#0']['gfx1100'].original_size"),
    ("gfx_arches differ from the TOC", "none",
     lambda d: with_toc(d, lambda t: t.update(gfx_arches=["gfx1100"])), "gfx_arches", "TOC['gfx_arches']"),
    ("zstd area outside the file", "zstd-per-kernel",
     lambda d: with_toc(d, lambda t: t.update(zstd_size=10**6)), "outside the blob area", "TOC['zstd_offset']"),
    ("frame count too small", "zstd-per-kernel", lambda d: _patch(d, 64, struct.pack("<I", 3)),
     "ordinal 3 is out of range (archive stores 3 kernels)", "toc['lib/libfoo.so#1']['gfx1101'].ordinal"),
    ("frame count too large", "zstd-per-kernel", lambda d: _patch(d, 64, struct.pack("<I", 5)),
     "archive stores 5 kernels but the TOC lists 4", "TOC['toc']"),
    ("bytes after the last frame", "zstd-per-kernel", _gap_after_frames, "wrong frame count", None),
    ("frame declares another size", "zstd-per-kernel", lambda d: with_toc(d, _set_entry("original_size", 3001)),
     "declares 3000 bytes but original_size is 3001", None),
    ("original_size beyond any frame", "zstd-per-kernel",
     lambda d: with_toc(d, _set_entry("original_size", 2**40)), "more than", None),
    ("frame is not zstd", "zstd-per-kernel", lambda d: _patch(d, 72, b"\0\0\0\0"), "not a zstd frame", 72),
    ("huge declared string", "none", _huge_string_toc, "TOC", None),
    ("huge declared array", "none", _huge_array_toc, "TOC", None),
]


def damaged_archive(tmp_path, scheme, damage):
    write_sample(tmp_path / "good.kpack", scheme)
    path = tmp_path / "bad.kpack"
    path.write_bytes(damage((tmp_path / "good.kpack").read_bytes()))
    return path


def open_and_check_everything(path):
    with KpackReader(path) as reader:
        verify_reader(reader)
        for entry in reader.entries():
            reader.get(entry.key, entry.arch)


@pytest.mark.parametrize("name,scheme,damage,message,where", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_damage_is_reported_with_what_and_where(tmp_path, name, scheme, damage, message, where):
    path = damaged_archive(tmp_path, scheme, damage)
    with pytest.raises(KpackFormatError) as caught:
        open_and_check_everything(path)
    error = caught.value
    assert message in error.what
    if where is not None:
        assert error.where == where
    else:
        assert error.where is not None
    assert str(error).startswith(f"{path}: ")


def test_frame_without_content_size_is_checked_after_decompressing(tmp_path):
    path = tmp_path / "nocs.kpack"
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"k" * 100)
    body = bytes(64) + struct.pack("<II", 1, len(frame)) + frame
    toc = {"format_version": 1, "group_name": "g", "gfx_arch_family": "gfx94X", "gfx_arches": ["gfx942"],
           "toc": {"a#0": {"gfx942": {"type": "hsaco", "ordinal": 0, "original_size": 99}}},
           "compression_scheme": "zstd-per-kernel", "zstd_offset": 64, "zstd_size": len(body) - 64}
    path.write_bytes(b"KPAK" + struct.pack("<IQ", 1, len(body)) + body[16:] + msgpack.packb(toc))
    with KpackReader(path) as reader:
        with pytest.raises(KpackFormatError, match="does not decompress|decompresses to"):
            reader.get("a#0", "gfx942")


# -- hostile archives: bounded memory, one line, exit 2 (issue 11) -------------------------

def rle_frame(size: int, byte: int = 0) -> bytes:
    """A real zstd frame of `size` bytes of one value, 4 bytes per 128 KiB: the densest a
    frame can be (a 128 KiB window, not single-segment, as a streaming compressor writes)."""
    block = 1 << 17
    frame = struct.pack("<I", 0xFD2FB528) + bytes([0xC0, 0x38]) + struct.pack("<Q", size)
    full, rest = divmod(size, block)
    sizes = [block] * full + ([rest] if rest else [])
    for index, length in enumerate(sizes):
        header = (index == len(sizes) - 1) | (1 << 1) | (length << 3)
        frame += header.to_bytes(3, "little") + bytes([byte])
    return frame


def hand_written_archive(path, frame: bytes, original_size: int, arch: str = "gfx942"):
    """One zstd frame filed as `a#0` for `arch`, with whatever original_size it is told."""
    body = bytes(48) + struct.pack("<II", 1, len(frame)) + frame
    toc = {"format_version": 1, "group_name": "g", "gfx_arch_family": "gfx94X", "gfx_arches": [arch],
           "toc": {"a#0": {arch: {"type": "hsaco", "ordinal": 0, "original_size": original_size}}},
           "compression_scheme": "zstd-per-kernel", "zstd_offset": 64, "zstd_size": 8 + len(frame)}
    path.write_bytes(b"KPAK" + struct.pack("<IQ", 1, 16 + len(body)) + body + msgpack.packb(toc))
    return path


def kpack_limited(*args, limit_kib: int = 1500000):
    """`python -m kpack.cli ARGS` under `ulimit -v limit_kib` (RLIMIT_AS)."""
    import os
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, limit_kib * 1024))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "kpack.cli", *map(str, args)], capture_output=True, text=True,
                          preexec_fn=limit, env=env, timeout=120)


def assert_one_error_line(result, *needles):
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize("command", ["verify", "extract"])
def test_a_4_gib_kernel_declared_over_a_small_frame_ends_in_one_line_under_a_memory_limit(tmp_path, command):
    frame = zstandard.ZstdCompressor().compress(b"\x7fELF" + bytes(85_000))
    path = hand_written_archive(tmp_path / "big.kpack", frame, 4 << 30)
    extra = ["-o", tmp_path / "out"] if command == "extract" else []
    assert_one_error_line(kpack_limited(command, path, *extra), str(path), "original_size 4294967296")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_real_4_gib_frame_streams_through_verify_in_bounded_memory(tmp_path):
    """The frame truly holds 4 GiB (of zeros): verify decompresses all of it in chunks
    under a 1.5 GB address-space limit and then says what is wrong with it."""
    path = hand_written_archive(tmp_path / "zeros.kpack", rle_frame(4 << 30), 4 << 30)
    assert_one_error_line(kpack_limited("verify", "--strict", path), "not an AMDGPU code object")


def test_a_frame_producing_more_than_its_original_size_is_stopped_at_that_size(tmp_path):
    path = hand_written_archive(tmp_path / "more.kpack", rle_frame(1 << 30), 1 << 20)
    with KpackReader(path) as reader:
        with pytest.raises(KpackFormatError, match="declares 1073741824 bytes but original_size is 1048576"):
            reader.get("a#0", "gfx942")


def _frame_count_ffffffff(data: bytes) -> bytes:
    return _patch(data, 64, struct.pack("<I", 0xFFFFFFFF))


def _corrupt_frame(data: bytes) -> bytes:
    """Flip bytes in the middle of the first frame's compressed blocks."""
    (size,) = struct.unpack_from("<I", data, 68)
    middle = 72 + size // 2
    return data[:middle] + bytes(b ^ 0x5A for b in data[middle:middle + 8]) + data[middle + 8:]


HOSTILE = [
    ("truncated file", "zstd-per-kernel", lambda d: d[: len(d) // 2], "TOC"),
    ("corrupt TOC", "none", lambda d: split(d)[0] + b"\xc1" * 40, "TOC"),
    ("mistyped TOC", "none", lambda d: with_toc(d, lambda t: t.update(gfx_arches="gfx1100")), "gfx_arches"),
    ("TOC offset past EOF", "none", lambda d: _patch(d, 8, struct.pack("<Q", len(d) + 1)), "past the end"),
    ("frame count 0xFFFFFFFF", "zstd-per-kernel", _frame_count_ffffffff, "frame count 4294967295"),
    ("original_size 2^62", "zstd-per-kernel", lambda d: with_toc(d, _set_entry("original_size", 2**62)),
     "original_size 4611686018427387904"),
    ("original_size 2^62 uncompressed", "none", lambda d: with_toc(d, _set_entry("original_size", 2**62)),
     "original_size is 4611686018427387904"),
    ("corrupt zstd frame", "zstd-per-kernel", _corrupt_frame, "zstd"),
]


@pytest.mark.parametrize("name,scheme,damage,needle", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_archives_end_verify_and_extract_with_one_line(tmp_path, name, scheme, damage, needle):
    path = damaged_archive(tmp_path, scheme, damage)
    assert_one_error_line(kpack_limited("verify", path), str(path), needle)
    assert_one_error_line(kpack_limited("extract", path, "-o", tmp_path / "out"), str(path))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# -- the structural check rocpkg's build calls ---------------------------------------------

def elf_archive(path, kernels: dict[tuple[str, str], str], gfx_arches=None, scheme="zstd-per-kernel"):
    """(key, arch) -> the target the code object is really built for."""
    from kpack.elf import build_amdgpu_code_object
    from kpack.targets import parse_target

    with KpackWriter(path, "g", "f", gfx_arches, scheme=scheme) as writer:
        for (key, arch), built_for in kernels.items():
            tid = parse_target(built_for)
            writer.add(key, arch, build_amdgpu_code_object(tid.processor, xnack=tid.features.get("xnack"),
                                                           sramecc=tid.features.get("sramecc"), payload=b"k" * 64))
    return path


def test_an_empty_archive_like_the_reference_writer_makes_is_valid(tmp_path):
    from kpack.check import check_archive

    for scheme in ("none", "zstd-per-kernel"):
        path = elf_archive(tmp_path / f"empty-{scheme}.kpack", {}, gfx_arches=["gfx942"], scheme=scheme)
        assert check_archive(path, "gfx942") == []
        with KpackReader(path) as reader:
            verify_reader(reader)


def test_a_gfx942_code_object_in_a_gfx1100_archive_is_named_with_its_target(tmp_path):
    from kpack.check import check_archive

    path = elf_archive(tmp_path / "x_gfx1100.kpack",
                       {("x#0", "gfx1100"): "gfx1100", ("x#1", "gfx1100"): "gfx942", ("y#0", "gfx1100"): "gfx1100"})
    problems = check_archive(path, "gfx1100")
    assert [str(p) for p in problems] == [
        f"{path}: toc['x#1']['gfx1100']: code object is for gfx942, not gfx1100 (EF_AMDGPU_MACH says gfx942)"]
    from kpack.check import CodeObjectProblem

    assert isinstance(problems[0], CodeObjectProblem)


def test_a_code_object_contradicting_the_feature_its_arch_names_is_a_problem(tmp_path):
    from kpack.check import check_archive

    path = elf_archive(tmp_path / "x.kpack", {("x#0", "gfx90a:xnack+"): "gfx90a:xnack-",
                                              ("x#1", "gfx90a:xnack+"): "gfx90a",
                                              ("x#2", "gfx90a:xnack+"): "gfx90a:xnack+"})
    assert [p.what for p in check_archive(path)] == [
        "code object is for gfx90a:xnack-, not gfx90a:xnack+ (e_flags say xnack-)"]


def test_an_archive_named_for_one_target_holding_another_blames_only_itself(tmp_path):
    from kpack.check import check_archive

    path = elf_archive(tmp_path / "x_gfx1101.kpack", {("x#0", "gfx1100"): "gfx1100"})
    problems = check_archive(path, "gfx1101")
    assert {p.path for p in problems} == {str(path)}
    assert [p.what for p in problems] == ["archive is named for gfx1101 but holds kernels for gfx1100",
                                          "archive is named for gfx1101 but gfx_arches lists gfx1100"]


def test_kernels_the_runtime_can_never_reach_are_reported(tmp_path):
    from kpack.check import check_archive

    path = elf_archive(tmp_path / "x.kpack", {("x#0", "gfx942"): "gfx942"}, gfx_arches=["gfx90a"])
    assert [p.what for p in check_archive(path)] == [
        "TOC files kernels under gfx942 but gfx_arches (gfx90a) does not list it: the runtime never looks there"]


def test_kpack_verify_prints_each_bad_kernel_on_its_own_line(tmp_path):
    path = elf_archive(tmp_path / "x.kpack", {("x#0", "gfx1100"): "gfx942", ("x#1", "gfx1100"): "gfx1201",
                                              ("x#2", "gfx1100"): "gfx1100"})
    result = kpack_limited("verify", path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {path}: toc['x#0']['gfx1100']: code object is for gfx942, not gfx1100 (EF_AMDGPU_MACH says gfx942)",
        f"error: {path}: toc['x#1']['gfx1100']: code object is for gfx1201, not gfx1100 (EF_AMDGPU_MACH says gfx1201)"]


def test_a_toc_offset_that_makes_the_whole_file_a_toc_is_refused_before_reading(tmp_path):
    from kpack.format import MAX_TOC_SIZE

    path = tmp_path / "sparse.kpack"
    with open(path, "wb") as handle:
        handle.write(b"KPAK" + struct.pack("<IQ", 1, 64) + bytes(48))
        handle.truncate(64 + MAX_TOC_SIZE + 1)  # sparse: no disk used
    counting = CountingReader(path)
    with pytest.raises(KpackFormatError, match=f"TOC of {MAX_TOC_SIZE + 1} bytes is larger"):
        KpackReader(counting)
    assert counting.bytes_read == 16
