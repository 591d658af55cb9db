"""Work spread over the cores gives the serial answer: verify's report at -j1 and -jN, a
repository signed by one process or by several, and zstd's multi-threaded frame (one large
.deb's data member) for any number of workers."""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import zstandard

from cli_run import rocpkg
from repo_helpers import differing_signatures
from rocpkg.cli.main import main
from rocpkg.formats import compression, parallel
from rocpkg.formats.registry import NAMES

ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
MIB = 1 << 20


def _digests(out: Path) -> dict[str, str]:
    """sha256 of every regular file under OUT but rocpkg's working records (.rocpkg/)."""
    return {path.relative_to(out).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.rglob("*"))
            if path.is_file() and not path.is_symlink() and not path.relative_to(out).as_posix().startswith(".rocpkg/")}


def _payload(size: int, seed: int = 7) -> bytes:
    """Deterministic bytes zstd -3 compresses about 2x: random runs between repeated text."""
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghijklmnop_") for _ in range(rng.randint(2, 9))) for _ in range(512)]
    out = bytearray()
    while len(out) < size:
        out += rng.randbytes(4096)
        out += b" ".join(rng.choice(words) for _ in range(1200)) + b";\n"
    return bytes(out[:size])


@pytest.fixture(scope="module")
def built(small_release, tmp_path_factory) -> Path:
    """The small release built in every format (read only; copy it to change it)."""
    out = tmp_path_factory.mktemp("built") / "out"
    done = rocpkg("build", "-a", small_release, "-o", out, "--formats", ",".join(NAMES), "-j", 2, env=ENV)
    assert done.returncode == 0, done.stderr
    return out


# -- zstd's workers -----------------------------------------------------------------------

def _deb_frame(data: bytes, threads: int, size: int, piece: int) -> bytes:
    sink = io.BytesIO()
    stream = compression.Compressor("zstd", sink, 3, threads, compression.DEB, size)
    view = memoryview(data)
    for at in range(0, len(data), piece):
        stream.write(view[at:at + piece])
    stream.close()
    return sink.getvalue()


def test_zstd_workers_write_the_same_frame_for_any_number_of_workers():
    """The claim the .deb writer relies on, checked against the installed libzstd: from one
    worker up, the frame is the same whatever the workers and however the input is cut."""
    data = _payload(40 * MIB)
    big = compression.DEB_WORKERS_FROM
    frames = {(threads, piece): _deb_frame(data, threads, big, piece)
              for threads in (1, 2, 4) for piece in (256 << 10, 3 * MIB + 17)}
    assert len(set(frames.values())) == 1
    frame = frames[(1, 256 << 10)]
    params = zstandard.get_frame_parameters(frame)
    assert params.has_checksum
    # one frame (dpkg 1.21 reads only the first), whole and checksummed
    reader = zstandard.ZstdDecompressor().decompressobj()
    assert reader.decompress(frame) == data and reader.eof and not reader.unused_data
    # below the threshold: the single-threaded frame .debs have always had, whatever the threads
    sink = io.BytesIO()
    with zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(sink, closefd=False) as single:
        single.write(data[:8 * MIB])
    small = {_deb_frame(data[:8 * MIB], threads, big - 1, piece) for threads in (1, 4) for piece in (MIB, 77777)}
    assert small == {sink.getvalue()} != {_deb_frame(data[:8 * MIB], 4, big, MIB)}


def test_one_large_package_has_the_same_bytes_at_one_job_and_at_sixteen(small_release, tmp_path):
    """A .deb over the threshold (its data member by zstd's workers) and the same files as
    .rpm and pacman packages: byte-identical at -j1 and -j16."""
    artifacts = tmp_path / "artifacts"
    shutil.copytree(small_release, artifacts, symlinks=True)
    big = artifacts / "rccl_dev_generic/rccl/stage/include/rccl/rccl_big.h"
    big.write_bytes(_payload(compression.DEB_WORKERS_FROM + 5 * MIB))
    out, found = tmp_path / "out", {}
    for jobs in (1, 16):
        done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", ",".join(NAMES), "-j", jobs, env=ENV)
        assert done.returncode == 0, done.stderr
        found[jobs] = _digests(out)
        shutil.rmtree(out)
    assert found[1] == found[16]
    debs = [rel for rel in found[1] if rel.endswith(".deb") and "rccl-dev" in rel.replace("_", "-")]
    assert debs, sorted(found[1])


# -- verify -------------------------------------------------------------------------------

def test_verify_reports_the_same_at_one_job_and_at_several(built, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(built, out, symlinks=True)
    # problems too: a package copied under a second name, another's bytes changed
    rpms = sorted((out / "rpm").rglob("*.rpm"))
    shutil.copy(rpms[0], rpms[0].with_name("copied-" + rpms[0].name))
    deb = max((out / "deb").rglob("*.deb"), key=lambda p: p.stat().st_size)
    with open(deb, "r+b") as fh:
        fh.seek(deb.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    runs = {jobs: rocpkg("verify", out, "--json", "-j", jobs) for jobs in (1, 3)}
    assert runs[1].returncode == runs[3].returncode == 2, runs[1].stderr
    assert json.loads(runs[1].stdout) == json.loads(runs[3].stdout)
    assert runs[1].stderr == runs[3].stderr
    assert deb.name in runs[1].stderr and "copied-" in runs[1].stderr


def test_verify_refuses_a_bad_job_count(built):
    done = rocpkg("verify", built, "-j", 0)
    assert done.returncode == 2 and "error: -j:" in done.stderr and "Traceback" not in done.stderr


# -- repo: RPM headers signed on several processes ----------------------------------------

def test_a_repository_signed_on_several_processes_is_the_one_signed_serially(built, tmp_path, signer,
                                                                             monkeypatch):
    out = tmp_path / "out"      # one path: the client snippets name it
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    found = {}
    serial = tmp_path / "serial"    # the one-process tree, kept to say what differs
    for cores in (1, 4):
        shutil.copytree(built, out, symlinks=True)
        monkeypatch.setattr(parallel, "usable_cores", lambda cores=cores: cores)
        assert main(["repo", str(out), "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]) == 0
        found[cores] = _digests(out)
        if cores == 4:
            break
        out.rename(serial)
    assert found[1] == found[4], differing_signatures(serial, out, (found[1], found[4]), signer.gnupg_home)
    # the manifest took the signed packages' new digests, and nothing is left beside them
    manifest = json.loads((out / "manifest.json").read_text())
    rpms = [e for e in manifest["packages"] if e["format"] == "rpm"]
    assert rpms and all(found[4][e["file"]] == e["sha256"] for e in rpms)
    assert not [p for p in out.rglob("*.tmp-*")]
    check = subprocess.run(["rpm", "-K", "--nosignature", *[str(out / e["file"]) for e in rpms[:3]]],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    done = rocpkg("verify", out, "--keyring", out / "rocm.gpg", "-j", 2)
    assert done.returncode == 0, done.stderr


def test_a_signed_copy_is_the_package_signed_in_place_and_its_digest_is_its_bytes(built, tmp_path, signer):
    from rocpkg.formats.rpm.header_signing import sign_copies
    from rocpkg.formats.sign import sign_rpm_header

    paths = []
    for rpm in sorted((built / "rpm").rglob("*.rpm"), key=lambda p: -p.stat().st_size)[:3]:
        paths.append(str(tmp_path / rpm.name))
        shutil.copy2(rpm, paths[-1])
        shutil.copy2(rpm, paths[-1] + ".in-place")
        assert sign_rpm_header(paths[-1] + ".in-place", signer)
    handed = []
    for copy in sign_copies(paths, signer, jobs=2):     # each is the caller's until the next one
        data = Path(copy.copy).read_bytes()
        assert data == Path(copy.path + ".in-place").read_bytes()
        assert (copy.size, copy.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert copy.unsigned_sha256 == ""
        assert os.stat(copy.copy).st_mtime_ns == os.stat(copy.path).st_mtime_ns
        handed.append(copy.path)
    assert sorted(handed) == sorted(paths)
    assert not list(tmp_path.glob("*.tmp-*"))       # none renamed here: every copy removed at the end


def test_rpms_signed_at_build_time_are_indexed_without_a_byte_of_them_read_again(small_release, tmp_path, signer,
                                                                                   monkeypatch):
    """build --sign-key, then repo --sign-key: the headers were signed by the writers and
    their bytes recorded, so repo signs only the indexes, reads no package to hash it, and
    leaves every RPM as the build wrote it; the tree is the one an unsigned build signed by
    repo gives."""
    from rocpkg.formats.rpm import header_signing
    from rocpkg.store.recorded import Recorded

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    signing = ["--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]
    found = {}
    for flow in ("in repo", "at build"):
        out = tmp_path / "out"      # one path: the client snippets name it
        assert main(["-q", "build", "-a", str(small_release), "-o", str(out), "--formats", "deb,rpm", "-j", "2"]
                    + (signing if flow == "at build" else [])) == 0
        rpms = sorted((out / "rpm").rglob("*.rpm"))
        built = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in rpms}
        hashed, signing_runs = [], []
        real_hash, real_sign = Recorded._hash, header_signing.sign_copies
        monkeypatch.setattr(Recorded, "_hash", lambda self, rel: hashed.append(rel) or real_hash(self, rel))
        monkeypatch.setattr("rocpkg.formats.rpm.repodata.sign_copies",
                            lambda paths, *a, **k: signing_runs.append(len(paths)) or real_sign(paths, *a, **k))
        assert main(["-q", "repo", str(out)] + signing) == 0
        monkeypatch.setattr(Recorded, "_hash", real_hash)
        monkeypatch.setattr("rocpkg.formats.rpm.repodata.sign_copies", real_sign)
        if flow == "at build":
            assert rpms and hashed == [] and signing_runs == []
            assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in rpms} == built
        else:
            assert signing_runs == [len(rpms)]
        found[flow] = _digests(out)
        done = rocpkg("verify", out, "--keyring", out / "rocm.gpg", "-j", 2)
        assert done.returncode == 0, done.stderr
        shutil.rmtree(out)
    assert found["at build"] == found["in repo"]
