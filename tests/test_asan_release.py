"""TheRock's ASAN releases (`--build-variant asan`): a release and its ASAN build from TheRock's
real package list go into one OUT and one repository; the ASAN one has TheRock's names
(`amdrocm-core-asan7.1`, `amdrocm-fft-host-asan7.1`, `amdrocm-fft-asan7.1-gfx942`,
`amdrocm-fft-asan`) and prefix (/opt/rocm/core-asan-7.1) in both formats, verifies, and
installs beside the normal release with dpkg and with rpm without a file conflict and
without taking /opt/rocm/core, /opt/rocm/bin or /usr/bin/hipcc from it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import cli_run
from rocpkg.formats.rpm import write_rpm
from rocpkg.model import BuildOptions
from rocpkg.plan.naming import alias_name, variant_prefix
from test_deb import dpkg, throwaway_root
from test_rpm import base_system_spec, empty_rpm_root
from test_rpm import run as rpm_run

TARGETS = ["gfx942", "gfx1100"]
NORMAL, ASAN = "7.1.0-1", "7.1.0-1+asan"


def rocpkg(*args) -> str:
    done = cli_run.rocpkg(*args, env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def out(tmp_path_factory, shared_dir):
    """OUT holding TheRock's release and its ASAN build, indexed as one repository."""
    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    root = tmp_path_factory.mktemp("asan")
    config = root / "package.json"
    config.write_bytes((shared_dir / "fixtures" / "therock" / "package.json").read_bytes())
    make_sample_artifacts(root / "artifacts", load_config(config), targets=TARGETS, size_mb=0.05)
    out = root / "out"
    rocpkg("build", "-q", "-c", config, "-a", root / "artifacts", "-o", out)
    rocpkg("build", "-q", "-c", config, "-a", root / "artifacts", "-o", out, "--build-variant", "asan")
    return out


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def release_entries(out: Path, release_id: str, fmt: str) -> dict[str, dict]:
    doc = manifest(out)
    files = next(set(r["files"]) for r in doc["releases"] if r["id"] == release_id)
    return {e["name"]: e for e in doc["packages"] if e["file"] in files and e["format"] == fmt}


def closure(out: Path, release_id: str, fmt: str, roots: list[str]) -> list[Path]:
    """The package files of the release that `roots` need, by the manifest's relations."""
    entries = release_entries(out, release_id, fmt)
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in entries:
            continue
        seen.add(name)
        for relation in entries[name].get("depends", []):
            todo.append(relation.replace("(", " ").split()[0])
    return [out / entries[n]["file"] for n in sorted(seen)]


def test_the_manifest_records_two_releases(out):
    assert [r["id"] for r in manifest(out)["releases"]] == [NORMAL, ASAN]
    assert next(r for r in manifest(out)["releases"] if r["id"] == ASAN)["variant"] == "asan"


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_asan_packages_have_therocks_names(out, fmt):
    names = set(release_entries(out, ASAN, fmt))
    dev = "dev" if fmt == "deb" else "devel"
    assert {"amdrocm-core-asan7.1", "amdrocm-fft-host-asan7.1", "amdrocm-fft-asan7.1-gfx942", "amdrocm-fft-asan",
            "amdrocm-asan7.1-gfx1100", "amdrocm-core-sdk-asan7.1-gfx1100", f"amdrocm-core-{dev}-asan7.1",
            "amdrocm-asan", "rocm-asan-gfx110x", "amdrocm-core-asan7.1-links"} <= names
    assert all("asan" in n for n in names), sorted(n for n in names if "asan" not in n)
    assert not names & set(release_entries(out, NORMAL, fmt))


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_asan_files_are_under_its_own_prefix(out, fmt):
    plan = json.loads(rocpkg("plan", "-c", out.parent / "package.json", "-a", out.parent / "artifacts",
                             "--formats", fmt, "--build-variant", "asan", "--json"))
    assert plan["build_variant"] == "asan"
    paths = {f["path"] for p in plan["packages"] for f in p["file_list"]}
    assert paths and all(p.startswith("/opt/rocm/core-asan-7.1") or p == "/opt/rocm" for p in paths), \
        sorted(p for p in paths if not p.startswith("/opt/rocm/core-asan-7.1"))[:5]


def test_verify_passes_on_the_shared_out_and_on_each_release(out):
    rocpkg("repo", out)
    rocpkg("verify", out)
    rocpkg("verify", out, "--release", ASAN)
    rocpkg("verify", out, "--release", NORMAL)


def links(root: Path) -> dict[str, str]:
    alternatives = root / "etc/alternatives"
    return {p.name: os.readlink(p) for p in alternatives.iterdir()} if alternatives.exists() else {}


def test_deb_releases_install_side_by_side_and_asan_takes_no_shared_link(out, tmp_path):
    from rocpkg.inputs.config import relation_names

    normal = closure(out, NORMAL, "deb", ["rocm-gfx110x"])
    asan = closure(out, ASAN, "deb", ["rocm-asan-gfx110x"])
    entries = {**release_entries(out, NORMAL, "deb"), **release_entries(out, ASAN, "deb")}
    external = sorted({relation_names(r)[0] for e in entries.values() for r in e.get("depends", [])} - set(entries))
    root = throwaway_root(tmp_path / "root", external, version="9999")
    dpkg(root, "-i", *map(str, normal))
    dpkg(root, "-i", *map(str, asan))                  # no file of one is a file of the other
    found = links(root)
    assert found["core"] == "/opt/rocm/core-7.1" and found["core-7"] == "/opt/rocm/core-7.1"
    assert found["core-asan"] == "/opt/rocm/core-asan-7.1" and found["core-asan-7"] == "/opt/rocm/core-asan-7.1"
    assert found["rocm-lib"] == "/opt/rocm/core-7.1/lib"
    assert "core-asan-7.1" not in (root / "var/lib/dpkg/alternatives/core").read_text()
    assert (root / "opt/rocm/core-asan-7.1").is_dir() and (root / "opt/rocm/core-7.1").is_dir()
    dpkg(root, "--purge", *[p.name.split("_")[0] for p in normal])
    found = links(root)
    assert "core" not in found and "rocm-lib" not in found       # the normal links go with it ...
    assert found["core-asan"] == "/opt/rocm/core-asan-7.1"        # ... and never fall to ASAN
    dpkg(root, "--purge", *[p.name.split("_")[0] for p in asan])
    assert list((root / "opt").iterdir()) == [] and links(root) == {}


def test_rpm_releases_install_side_by_side_and_asan_takes_no_shared_link(out, tmp_path):
    root = Path(empty_rpm_root(tmp_path / "root"))
    base = write_rpm(base_system_spec(str(tmp_path)), str(tmp_path), BuildOptions(source_date_epoch=1700000000)).path
    rpm = ["rpm", "--root", str(root)]
    rpm_run(*rpm, "-i", "--nodeps", base, *map(str, closure(out, ASAN, "rpm", ["rocm-asan-gfx110x"])))
    rpm_run(*rpm, "-i", "--nodeps", *map(str, closure(out, NORMAL, "rpm", ["rocm-gfx110x"])))
    found = links(root)
    assert found["core"] == "/opt/rocm/core-7.1" and found["core-asan"] == "/opt/rocm/core-asan-7.1"
    assert found["rocm-bin"] == "/opt/rocm/core-7.1/bin"
    check = rpm_run(*rpm, "-Va", "--nodeps", "--nomtime", check=False)
    assert "missing" not in check.stdout, check.stdout[-2000:]


def test_an_unknown_variant_is_refused_with_the_known_list(out, tmp_path):
    before = cli_run.snapshot(out)
    done = cli_run.rocpkg("build", "-c", out.parent / "package.json", "-a", out.parent / "artifacts", "-o", out,
                          "--build-variant", "tsan")
    assert cli_run.refusal_lines(done, ["--build-variant", "tsan", "release, asan"])
    assert cli_run.snapshot(out) == before
    config = tmp_path / "package.json"
    config.write_text(json.dumps({"settings": {"build_variant": "ubsan"}, "packages": []}))
    done = cli_run.rocpkg("plan", "-c", config, "-a", out.parent / "artifacts")
    assert cli_run.refusal_lines(done, ["settings.build_variant", "ubsan", "release, asan"])


def test_the_variant_goes_before_the_version_in_any_prefix_and_alias_pattern():
    assert variant_prefix("/opt/rocm/core-{abi}", "asan") == "/opt/rocm/core-asan-{abi}"
    assert variant_prefix("/opt/rocm-{version}", "asan") == "/opt/rocm-asan-{version}"
    assert variant_prefix("/opt/rocm/{abi}", "asan") == "/opt/rocm/asan-{abi}"
    assert variant_prefix("/opt/rocm", "asan") == "/opt/rocm-asan"
    assert variant_prefix("/opt/rocm/core-{abi}", "") == "/opt/rocm/core-{abi}"
    assert alias_name("rocm-{family}", "gfx110X", "7.1", "asan") == "rocm-asan-gfx110X"
    assert alias_name("rocm{abi}-{family}", "gfx110X", "7.1", "asan") == "rocm-asan7.1-gfx110X"
    assert alias_name("rocm-{family}", "gfx110X", "7.1") == "rocm-gfx110X"


def test_prune_and_version_order_keep_a_release_and_its_asan_build_apart():
    from rocpkg.builder.version_order import version_order_refusals
    from rocpkg.store.releases import ReleaseRecord
    from rocpkg.repo.lifecycle import releases_to_prune

    records = [ReleaseRecord("7.1.0", "1"), ReleaseRecord("7.1.0", "2"),
               ReleaseRecord("7.1.0", "1", variant="asan"), ReleaseRecord("7.1.0", "2", variant="asan")]
    assert [r.id for r in releases_to_prune(records, keep=1)] == ["7.1.0-1", "7.1.0-1+asan"]
    # the ASAN build of a release sorts above no normal release, and need not
    assert version_order_refusals(records[:2], "7.1.0", "2", variant="asan") == []
    assert version_order_refusals(records, "7.1.0", "1", variant="asan") == []     # a rebuild
    refused = version_order_refusals(records[2:], "7.1.0", "1", epoch=0, variant="")
    assert refused == []                                                             # no normal release yet
    assert version_order_refusals(records, "7.0.9", "1", variant="asan") == []      # another series
    assert version_order_refusals(records, "7.1.0", "0", variant="asan")            # below 7.1.0-2+asan


def test_an_export_of_either_build_holds_only_that_builds_packages(out, tmp_path):
    for alias, asan in (("rocm-asan-gfx110x", True), ("rocm-gfx110x", False)):
        dest = tmp_path / alias
        rocpkg("export", out, dest, alias)
        debs = [p.name for p in (dest / "deb").rglob("*.deb")]
        assert debs and not [n for n in debs if "gfx942" in n or ("asan" in n) != asan], debs
