"""The shortcuts issue 15 took, each held to what it replaced: a hand-packed tar header is
tarfile's, libc's memmem finds what bytes.find finds, a package written on one core (inline
digests) is byte for byte the one written with threads, a zstd context reused across
packages changes no byte, zstd frames are the same for any thread count, and the kernel check by headers
refuses what it claims to (the whole decode stays with `--deep-check`), every closure
taken at once is the one walked apart, and a target list made once per ISA is the one
made each time.
dpkg, rpm, apt and dnf reading the multi-frame payloads is what every other test that
installs or unpacks a built package checks."""
from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kpack_archive import HOSTILE, damaged_archive, elf_archive, hand_written_archive
from test_one_pass import _files, _options, _spec

from kpack import memsearch
from kpack.check import check_archive
from rocpkg.formats import compression
from rocpkg.formats.registry import get as get_format
from rocpkg.formats.deb import package as deb
from rocpkg.formats.deb import write_deb
from rocpkg.formats.rpm import write_rpm

MIB = 1 << 20


@pytest.fixture
def sources(tmp_path) -> dict[str, bytes]:
    contents = {"/opt/rocm/core-7.1/lib/k.co": os.urandom(3 * MIB + 7),
                "/opt/rocm/core-7.1/lib/libx.so": b"host " * 300_000,
                "/opt/rocm/core-7.1/share/empty": b""}
    for path, data in contents.items():
        (tmp_path / os.path.basename(path)).write_bytes(data)
    return contents


# -- tar headers ------------------------------------------------------------------------------

names = st.text(alphabet="abcé/_-.~ 0", max_size=260).map(lambda s: "./" + s)


@settings(max_examples=400, deadline=None)
@given(name=names, kind=st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]),
       mode=st.integers(0, 0o7777), mtime=st.integers(0, 2**35),
       size=st.one_of(st.integers(0, 2**34), st.sampled_from([8**11 - 1, 8**11])),
       link=st.text(alphabet="ab/é.", max_size=240))
def test_the_hand_packed_header_is_the_one_tarfile_writes(name, kind, mode, mtime, size, link):
    fields = (name, kind, mode, mtime, size if kind == tarfile.REGTYPE else 0, link if kind == tarfile.SYMTYPE else "")
    expected = deb._tarinfo(*fields).tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")
    assert deb._tar_header(fields) == expected


def test_this_python_takes_the_fast_header_path():
    assert deb._FAST_HEADERS  # else every header silently comes from tarfile (correct, slower)


# -- memmem --------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(hay=st.binary(max_size=300), needle=st.binary(min_size=1, max_size=6),
       start=st.integers(0, 320), end=st.one_of(st.none(), st.integers(0, 320)))
def test_memmem_finds_what_bytes_find_finds(hay, needle, start, end):
    hay = hay + needle + hay  # a hit is likely
    assert memsearch.find(hay, needle, start, end) == hay.find(needle, start, len(hay) if end is None else end)


# -- one core or many: the same bytes --------------------------------------------------------------

@pytest.mark.parametrize("writer", [write_deb, write_rpm], ids=["deb", "rpm"])
def test_a_package_written_on_one_core_is_the_one_written_with_threads(writer, tmp_path, sources):
    fmt = "deb" if writer is write_deb else "rpm"
    built = {}
    for threads in (1, 4):
        out = tmp_path / f"t{threads}"
        out.mkdir()
        package = writer(_spec(fmt, _files(tmp_path, sources)), str(out), _options(threads=threads))
        data = open(package.path, "rb").read()
        assert package.sha256 == hashlib.sha256(data).hexdigest()
        built[threads] = data
    assert built[1] == built[4]


@pytest.mark.parametrize("size", [0, 100, compression.ZSTD_FRAME_SIZE, 3 * compression.ZSTD_FRAME_SIZE + 5])
def test_zstd_frames_are_the_same_for_any_thread_count_and_decode_as_one_stream(size):
    data = os.urandom(size // 2) + bytes(size - size // 2)
    outputs = []
    for threads in (1, 3, 16):
        sink = io.BytesIO()
        stream = compression.ZstdFrames(sink, 3, threads, True)
        for at in range(0, len(data), 777_777):   # writes that straddle frame boundaries
            stream.write(memoryview(bytearray(data[at:at + 777_777])))  # a buffer the caller reuses
        stream.close()
        outputs.append(sink.getvalue())
    assert outputs[0] == outputs[1] == outputs[2]
    frames = max(1, -(-size // compression.ZSTD_FRAME_SIZE))
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(outputs[0]), read_across_frames=True).read() == data
    assert outputs[0].count(b"\x28\xb5\x2f\xfd") >= frames


def test_a_multi_frame_payload_is_what_the_zstd_command_reads(tmp_path):
    import shutil
    import subprocess

    if not shutil.which("zstd"):
        pytest.skip("no zstd command")
    data = os.urandom(3 * MIB) + b"x" * (7 * MIB)
    sink = io.BytesIO()
    stream = compression.ZstdFrames(sink, 3, 2, True)
    stream.write(data)
    stream.close()
    (tmp_path / "p.zst").write_bytes(sink.getvalue())
    assert subprocess.run(["zstd", "-dc", tmp_path / "p.zst"], capture_output=True, check=True).stdout == data


# -- the kernel check by headers ---------------------------------------------------------------------

@pytest.mark.parametrize("name,scheme,damage,needle", [h for h in HOSTILE if h[0] != "corrupt zstd frame"],
                         ids=[h[0] for h in HOSTILE if h[0] != "corrupt zstd frame"])
def test_the_header_check_refuses_every_hostile_archive(tmp_path, name, scheme, damage, needle):
    path = damaged_archive(tmp_path, scheme, damage)
    problems = check_archive(path, whole_kernels=False, require_code_objects=False)
    assert problems and any(needle in str(p) for p in problems), problems


def _frame_of(payload: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_checksum=True).compress(payload)


def _code_object(target: str = "gfx942") -> bytes:
    from kpack.elf import build_amdgpu_code_object

    return build_amdgpu_code_object(target, payload=os.urandom(300_000))


@pytest.mark.parametrize("change, message", [
    (lambda frame: frame + b"\0" * 5, "blocks end at"),           # padded inside its frame
    (lambda frame: frame[:-9], "past the end of its frame"),      # cut short
])
def test_a_misframed_kernel_is_refused_without_decoding_it(tmp_path, change, message):
    kernel = _code_object()
    path = hand_written_archive(tmp_path / "k.kpack", change(_frame_of(kernel)), len(kernel))
    problems = check_archive(path, "gfx942", whole_kernels=False)
    assert any(message in str(p) for p in problems), problems


def test_a_kernel_whose_blocks_cannot_hold_its_size_is_refused(tmp_path):
    kernel = _code_object()
    frame = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(kernel)
    path = hand_written_archive(tmp_path / "k.kpack", frame, len(kernel) * 4)
    problems = check_archive(path, "gfx942", whole_kernels=False)
    assert any("blocks hold" in str(p) for p in problems), problems


def test_a_kernel_for_another_target_is_refused_from_its_header(tmp_path):
    path = elf_archive(tmp_path / "blas_lib_gfx1100.kpack", {("lib/x.so#0", "gfx1100"): "gfx942"},
                       gfx_arches=["gfx1100"])
    problems = check_archive(path, "gfx1100", whole_kernels=False)
    assert any("gfx942" in str(p) and "EF_AMDGPU_MACH" in str(p) for p in problems), problems


def _flip_inside_first_block(data: bytes) -> bytes:
    """Damage bytes of the first frame's first compressed block, leaving every header."""
    (size,) = struct.unpack_from("<I", data, 68)
    frame = data[72:72 + size]
    header = zstandard.frame_header_size(frame)
    at = 72 + header + 3 + 40   # past the first block's header, inside its literals
    return data[:at] + bytes(b ^ 0xA5 for b in data[at:at + 16]) + data[at + 16:]


def test_damage_inside_a_compressed_block_is_what_only_the_deep_check_finds(tmp_path):
    """The documented limit of the header check: a flipped byte inside a compressed block
    decodes (or not) only when decoded. `--deep-check` (whole_kernels=True) finds it."""
    kernels = {(f"lib/x.so#{i}", "gfx942"): "gfx942" for i in range(2)}
    good = elf_archive(tmp_path / "good.kpack", kernels, gfx_arches=["gfx942"])
    bad = tmp_path / "bad.kpack"
    bad.write_bytes(_flip_inside_first_block(good.read_bytes()))
    assert check_archive(bad, "gfx942", whole_kernels=True)
    assert check_archive(good, "gfx942", whole_kernels=False) == []


def test_build_deep_check_decodes_every_kernel_and_refuses_a_damaged_one(tmp_path):
    from test_build_refuses import refused

    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    make_sample_artifacts(tmp_path / "artifacts", load_config(None), targets=["gfx942"], size_mb=0.3)
    archive = tmp_path / "artifacts" / "blas_lib_gfx942" / "rocBLAS" / "stage" / ".kpack" / "blas_lib_gfx942.kpack"
    from kpack.archive import KpackReader

    with KpackReader(archive) as reader:  # kernels that compress (the sample's are random: stored blocks)
        kernels = {(e.key, e.arch): "gfx942" for e in reader.entries()}
    archive.unlink()
    elf_archive(archive, kernels, gfx_arches=["gfx942"])
    archive.write_bytes(_flip_inside_first_block(archive.read_bytes()))

    errors = refused(tmp_path / "deep", "-a", tmp_path / "artifacts", "--deep-check")
    assert any(str(archive) in e and "[kpack-archive]" in e and "zstd" in e for e in errors), errors


# ---- the parent's checks: closures all at once, target lists once per ISA -------------------

NODE_NAMES = st.sampled_from([f"p{i}" for i in range(12)])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(NODE_NAMES, st.tuples(st.lists(NODE_NAMES, max_size=4),
                                             st.lists(st.sampled_from(["ext-a", "ext-b (>= 1)", "gone"]),
                                                      max_size=2)), min_size=1))
def test_all_closures_at_once_are_each_closure_walked_apart(raw_edges):
    """graphs.closures (one pass over the dependency graph's components) against
    graphs.closure (one walk per root), cycles, self-loops and shared subgraphs included."""
    from rocpkg.plan.graphs import closure, closures

    edges = {name: ([d for d in inside if d in raw_edges], outside) for name, (inside, outside) in raw_edges.items()}
    table = closures(edges)
    assert set(table) == set(edges)
    for root in edges:
        names, unresolved = table[root]
        assert (sorted(names), sorted(unresolved)) == closure({}, root, edges)


def test_target_lists_made_once_per_isa_are_the_ones_made_each_time():
    """kpack.loader.compatible_targets is cached per ISA: the same lists as the uncached
    expansion for every known processor with each feature setting, a fresh list each call
    (a caller may change it), and a non-target still refused on every call."""
    from kpack import targets as kt
    from kpack.loader import compatible_targets

    isas = sorted(kt.PROCESSORS)
    isas += [f"{p}:{f}{s}" for p in isas for f in sorted(kt.supported_features(p)) for s in "+-"]
    for isa in isas:
        processor, features = kt.split_target(isa)
        expected = kt.feature_subsets(processor, features)
        first = compatible_targets(isa)
        first.append("changed by a caller")
        assert compatible_targets(isa) == expected
    for _ in range(2):
        with pytest.raises(kt.InvalidTargetError):
            compatible_targets("not-a-target")


# -- compiled templates kept between runs: the same text ---------------------------------------------

@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_templates_loaded_from_the_cache_render_what_freshly_compiled_ones_do(fmt, tmp_path, monkeypatch):
    from rocpkg.formats import render

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = _spec(fmt, [])
    rendered = {}
    for run in ("cold", "warm", "no cache"):
        env = render.make_environment()
        if run == "no cache":
            env.bytecode_cache = None
        monkeypatch.setattr(render, "_environment", lambda env=env: env)
        rendered[run] = render.render_deb(spec, _options()) if fmt == "deb" else render.render_spec(spec, _options())
        if run == "cold":   # every template this package renders is now in the cache
            names = get_format(fmt).templates
            assert len(list((tmp_path / "cache" / "rocpkg" / "templates").glob("__jinja2_*.cache"))) == len(names)
    assert rendered["cold"] == rendered["warm"] == rendered["no cache"]


def test_the_template_cache_is_only_a_directory_of_this_user_alone(tmp_path):
    from rocpkg.formats.render import template_cache

    cache = tmp_path / "home"
    assert template_cache({"XDG_CACHE_HOME": str(cache)}).directory == str(cache / "rocpkg" / "templates")
    assert (cache / "rocpkg" / "templates").stat().st_mode & 0o777 == 0o700
    (cache / "rocpkg" / "templates").chmod(0o777)     # others may plant code in it
    assert template_cache({"XDG_CACHE_HOME": str(cache)}) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "linked" / "rocpkg").mkdir(parents=True)
    (tmp_path / "linked" / "rocpkg" / "templates").symlink_to(elsewhere)
    assert template_cache({"XDG_CACHE_HOME": str(tmp_path / "linked")}) is None
    (tmp_path / "file" / "rocpkg").mkdir(parents=True)
    (tmp_path / "file" / "rocpkg" / "templates").write_text("")
    assert template_cache({"XDG_CACHE_HOME": str(tmp_path / "file")}) is None
    relative = template_cache({"XDG_CACHE_HOME": "relative/dir"})     # ignored, as XDG says: ~/.cache
    assert relative is None or relative.directory == os.path.join(os.path.expanduser("~"), ".cache", "rocpkg", "templates")


def test_a_damaged_or_unwritable_template_cache_never_fails_a_build(tmp_path, monkeypatch):
    import shutil

    from rocpkg.formats import render

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec, cache = _spec("deb", []), tmp_path / "cache" / "rocpkg" / "templates"

    def rendered():
        env = render.make_environment()
        monkeypatch.setattr(render, "_environment", lambda: env)
        return render.render_deb(spec, _options())

    fresh = rendered()
    for damage in (lambda data: data[:40], lambda data: b"garbage"):     # cut short, or not a cache entry
        for entry in cache.glob("__jinja2_*.cache"):
            entry.write_bytes(damage(entry.read_bytes()))
        assert rendered() == fresh
    env = render.make_environment()
    shutil.rmtree(cache)                # written to a directory that is gone: skipped
    monkeypatch.setattr(render, "_environment", lambda: env)
    assert render.render_deb(spec, _options()) == fresh
