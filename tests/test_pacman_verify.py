"""`rocpkg verify` reads Arch Linux packages back with the same checks as .deb and .rpm: each
format's Reader (rocpkg.formats.plugin.Reader) lists and reads its packages, and verify's
format-neutral inspector finds every host binary's kernels per target in them. A pacman
device package whose kpack archive is dropped or changed is reported exactly as the same
mistake in a .deb is; a package changed after it was written is named unreadable. The
version-order check orders pacman releases by pacman's vercmp, over the versions as
pacman spells them.

Every scenario starts from the project's sample artifacts for the bundled package.json
(targets gfx942 with its xnack+ build, and gfx1100), built with `rocpkg build --formats`."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import zstandard

from cli_run import refusal_lines, rocpkg
from kpack.archive import KpackReader, KpackWriter
from rocpkg.builder.version_order import out_order_problems
from rocpkg.formats.deb import write_deb
from rocpkg.formats.pacman import write_pacman
from rocpkg.formats.registry import get
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts
from rocpkg.model import BuildOptions
from rocpkg.plan.make import make_plan
from rocpkg.verify.readback import package_files
from rocpkg.verify.run import verify_tree

PREFIX = "/opt/rocm/core-7.1"
DEVICE = "rocm-blas7.1-gfx1100"
ARCHIVE = f"{PREFIX}/.kpack/blas_lib_gfx1100.kpack"
OPTIONS = BuildOptions(source_date_epoch=1700000000)
ALL = ("deb", "rpm", "pacman")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pacman-verify") / "artifacts"
    make_sample_artifacts(root, load_config(None), targets=["gfx942", "gfx1100"], size_mb=0.05)
    return root


def build(artifacts: Path, out: Path, formats: str, *args, env=None):
    done = rocpkg("build", "-a", artifacts, "-o", out, "--formats", formats, "-q", *args, env=env)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def every_format(artifacts, tmp_path_factory) -> Path:
    """OUT built once in all three formats: read it only."""
    return build(artifacts, tmp_path_factory.mktemp("all") / "out", ",".join(ALL))


def plan_specs(artifacts: Path, fmt: str) -> dict:
    config = load_config(None)
    plan = make_plan(config, scan(artifacts, config.settings["families"]), formats=ALL)
    return plan.by_name(fmt)


def rewrite(out: Path, spec) -> None:
    """Replace one built package with one written from an edited spec (same file name)."""
    pool = out / spec.format / get(spec.format).pool(spec)
    writer = {"deb": write_deb, "pacman": write_pacman}[spec.format]
    path = Path(writer(spec, str(pool), OPTIONS).path)
    assert path.name == get(spec.format).file_name(spec)


def problems_of(report, fmt: str) -> set[tuple]:
    return {(p.check, p.package.lower(), p.path, p.target) for p in report.problems if p.format == fmt}


def test_pacman_packages_are_listed_and_read_back_with_the_checks_of_deb_and_rpm(every_format):
    found = package_files(str(every_format))
    assert found["pacman"] and all(p.endswith(".pkg.tar.zst") for p in found["pacman"])
    assert {os.path.dirname(p) for p in found["pacman"]} == {str(every_format / "pacman" / "x86_64")}

    report = verify_tree(every_format)

    assert report.ok, [p.line() for p in report.problems]
    assert report.formats == list(ALL)
    for key in ("packages", "host_binaries", "archives", "lookups", "kernels_checked"):
        assert report.counts["pacman"][key] == report.counts["deb"][key] > 0, key
    assert report.targets["pacman"] == report.targets["deb"]
    aliases = {c.format: c for c in report.closures if c.kind == "alias" and c.family == "gfx110X"}
    assert aliases["pacman"].root == "rocm-gfx110x"
    assert aliases["pacman"].devices == aliases["deb"].devices == {"gfx1100": [
        "rocm-blas7.1-gfx1100", "rocm-fft7.1-gfx1100", "rocm-rand7.1-gfx1100", "rocm-rccl7.1-gfx1100",
        "rocm-sparse7.1-gfx1100"]}


def test_a_pacman_only_tree_verifies_by_itself(artifacts, tmp_path):
    out = build(artifacts, tmp_path / "out", "pacman")
    assert not (out / "deb").exists() and not (out / "rpm").exists()
    report = verify_tree(out)
    assert report.ok and report.formats == ["pacman"]
    assert report.counts["pacman"]["kernels_checked"] > 0
    with pytest.raises(Exception, match="nothing to verify"):
        verify_tree(out, formats=["deb"])


def _without_archive(spec):
    return dataclasses.replace(spec, files=[f for f in spec.files if f.path != ARCHIVE])


def _with_archive_for(spec, archive: Path):
    files = [dataclasses.replace(f, source=str(archive), size=archive.stat().st_size, identity=(0, 0))
             if f.path == ARCHIVE else f for f in spec.files]
    return dataclasses.replace(spec, files=files)


def _relisted_archive(artifacts: Path, tmp_path: Path) -> Path:
    """The gfx1100 archive of rocBLAS, rewritten to list gfx1101 instead."""
    source = artifacts / "blas_lib_gfx1100" / "rocBLAS" / "stage" / ".kpack" / "blas_lib_gfx1100.kpack"
    with KpackReader(source) as reader:
        entries = [(e.key, e.arch, reader.get(e.key, e.arch)) for e in reader.entries()]
        group, family, scheme = reader.group_name, reader.gfx_arch_family, reader.scheme
    changed = tmp_path / "blas_lib_gfx1100.kpack"
    with KpackWriter(changed, group, family, ["gfx1101"], scheme=scheme) as writer:
        for key, arch, data in entries:
            writer.add(key, arch, data)
    return changed


@pytest.mark.parametrize("mistake", ["archive removed", "archive changed"])
def test_a_device_package_that_lost_or_changed_its_archive_is_reported_as_a_deb_would_be(
        artifacts, tmp_path, mistake):
    out = build(artifacts, tmp_path / "out", "deb,pacman")
    changed = _relisted_archive(artifacts, tmp_path) if mistake == "archive changed" else None
    for fmt in ("deb", "pacman"):
        spec = plan_specs(artifacts, fmt)[DEVICE]
        rewrite(out, _without_archive(spec) if changed is None else _with_archive_for(spec, changed))

    report = verify_tree(out)

    pacman, deb = problems_of(report, "pacman"), problems_of(report, "deb")
    assert pacman == deb
    if mistake == "archive changed":
        assert pacman == {("archive-target", DEVICE, ARCHIVE, "gfx1100")}
    else:       # rocSPARSE's binaries need rocBLAS's kernels too
        assert pacman == {("archive-missing", name, ARCHIVE, "gfx1100")
                          for name in (DEVICE, "rocm-sparse7.1-gfx1100")}


def _tampered(package: Path, needle: bytes) -> None:
    """Flip one byte of a member's data inside the package, its .MTREE left as it was."""
    with open(package, "rb") as fh:
        data = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).read()
    at = data.index(needle) + len(needle) + 16
    data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    package.write_bytes(zstandard.ZstdCompressor().compress(data))


def test_a_pacman_package_changed_after_it_was_written_is_unreadable_naming_the_member(artifacts, tmp_path):
    out = build(artifacts, tmp_path / "out", "pacman")
    package = next((out / "pacman" / "x86_64").glob(f"{DEVICE}-*.pkg.tar.zst"))
    _tampered(package, b"KPAK")

    report = verify_tree(out)

    [problem] = report.problems
    assert (problem.check, problem.format, problem.package, problem.path) == ("unreadable", "pacman", DEVICE,
                                                                               str(package))
    assert problem.message == f"payload: {ARCHIVE}: its bytes differ from the .MTREE's size or digests"


def test_a_truncated_pacman_package_is_unreadable_not_a_crash(artifacts, tmp_path):
    """Its metadata shares the zstd stream with its files: cut short, the package is read
    as absent, and what depends on it says so too."""
    out = build(artifacts, tmp_path / "out", "pacman")
    package = next((out / "pacman" / "x86_64").glob("rocm-blas-host7.1-*.pkg.tar.zst"))
    with open(package, "r+b") as fh:
        fh.truncate(package.stat().st_size - 200)
    report = verify_tree(out)
    [unreadable] = [p for p in report.problems if p.check == "unreadable"]
    assert (unreadable.package, unreadable.path) == (package.name, str(package))
    assert "tar stream ends" in unreadable.message
    assert {p.check for p in report.problems} == {"unreadable", "relation", "device-host"}
    assert all("rocm-blas-host7.1" in p.message for p in report.problems if p.check == "relation")


def test_verify_of_a_plan_checks_pacman_too_and_its_default_is_unchanged(artifacts):
    done = rocpkg("verify", "-a", artifacts, "--formats", "deb,rpm,pacman", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["formats"] == ["deb", "pacman", "rpm"] and report["ok"]
    assert report["counts"]["pacman"] == report["counts"]["deb"]
    default = json.loads(rocpkg("verify", "-a", artifacts, "--json").stdout)
    assert default["formats"] == ["deb", "rpm"] and default["ok"]


def test_cli_verify_out_reads_every_format_it_holds(every_format):
    done = rocpkg("verify", every_format)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"verify {every_format}: deb, rpm, pacman")
    assert "== pacman: " in done.stdout


# -- channel versions in pacman's order -------------------------------------------------------

def _at(seconds: int) -> dict:
    return {**os.environ, "SOURCE_DATE_EPOCH": str(seconds)}


def test_a_nightly_then_its_release_are_in_vercmp_order_and_not_the_reverse(artifacts, tmp_path):
    out = build(artifacts, tmp_path / "out", "pacman", "--channel", "nightly", "--date", "2026-03-01",
                env=_at(1772323200))
    build(artifacts, out, "pacman", env=_at(1772409600))            # 7.1.0 after 7.1.0~20260301
    names = sorted(p.name for p in (out / "pacman" / "x86_64").glob("rocm-core7.1-7*"))
    assert names == ["rocm-core7.1-7.1.0-1-any.pkg.tar.zst", "rocm-core7.1-7.1.0pre20260301-1-any.pkg.tar.zst"]
    assert out_order_problems(out) == []
    assert verify_tree(out).ok

    # a nightly of the same series after its release: vercmp, over pacman's spelling
    # (7.1.0pre20260302 < 7.1.0; unmapped, `~` would be a separator and sort it above)
    later = rocpkg("build", "-a", artifacts, "-o", out, "--formats", "pacman", "--channel", "nightly",
                   "--date", "2026-03-02", env=_at(1772496000))
    [line, _] = refusal_lines(later, needles=["7.1.0~20260302-1 sorts below 7.1.0-1 in OUT for vercmp",
                                              "pacman would never upgrade to it"])
    assert "dpkg" not in line and "rpm" not in line


def test_the_order_is_pacmans_own_where_it_differs_from_dpkgs(artifacts, tmp_path):
    """`7.1.0a` sorts above `7.1.0` for dpkg and below it for vercmp (a letter run joined
    without a separator is older): a pacman build refuses it, a .deb build takes it, and
    a pacman OUT built anyway reports it."""
    deb = build(artifacts, tmp_path / "deb", "deb", env=_at(1772323200))
    build(artifacts, deb, "deb", "--version", "7.1.0a", env=_at(1772409600))

    out = build(artifacts, tmp_path / "out", "pacman", env=_at(1772323200))
    refusal_lines(rocpkg("build", "-a", artifacts, "-o", out, "--formats", "pacman", "--version", "7.1.0a",
                         env=_at(1772409600)), needles=["7.1.0a-1 sorts below 7.1.0-1 in OUT for vercmp"])
    build(artifacts, out, "pacman", "--version", "7.1.0a", "--allow", "version-order", env=_at(1772409600))
    [problem] = out_order_problems(out)
    assert problem.package == "release 7.1.0a-1"
    assert "for vercmp" in problem.message and "pacman would never upgrade to it" in problem.message
    assert "(built with --allow version-order)" in problem.message
