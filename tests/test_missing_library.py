"""missing-library over TheRock's real package list: a host library that links another
definition's library (its DT_NEEDED names that SONAME) while its package depends on none of
the packages shipping it is refused by build and reported by verify of the plan for the
.deb, whose relations are package.json's (an .rpm requires the soname itself, as rpmbuild's
elfdeps writes it, so rpm resolves it); the release as TheRock lays it out passes."""
from __future__ import annotations

import json
import shutil

import pytest

import cli_run
from kpack.elf import build_host_elf
from rocpkg.inputs.catalog import scan
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts
from rocpkg.plan.graphs import closures, dependency_edges, provided_names
from rocpkg.plan.make import make_plan


@pytest.fixture(scope="module")
def release(tmp_path_factory, shared_dir):
    root = tmp_path_factory.mktemp("therock")
    config = root / "package.json"
    shutil.copy(shared_dir / "fixtures" / "therock" / "package.json", config)
    artifacts = root / "artifacts"
    make_sample_artifacts(artifacts, load_config(config), targets=["gfx942", "gfx1100"], size_mb=0.05)
    return config, artifacts


def seed_mistake(config, artifacts) -> tuple[str, str, str]:
    """Make one host library link a library its package's closure does not ship; returns
    (the package, the needed soname, the package that ships it)."""
    loaded = load_config(config)
    plan = make_plan(loaded, scan(artifacts, loaded.settings["families"]))
    specs = plan.by_name("deb")
    reach = closures(dependency_edges(specs, provided_names(specs)))
    sonames = {}        # soname -> (package, source)
    for spec in specs.values():
        for fe in spec.files:
            facts = plan.facts.get(fe.source)
            if fe.type == "file" and facts is not None and facts.soname and facts.marker is None:
                sonames.setdefault(facts.soname, (spec.name, fe.source, facts.soname))
    for soname, (owner, source, own) in sonames.items():
        for other, (shipper, _, _) in sonames.items():
            if shipper != owner and shipper not in reach[owner][0]:
                with open(source, "wb") as fh:
                    fh.write(build_host_elf({".text": b"\xc3"}, soname=own, runpath="$ORIGIN", needed=(other,)))
                return owner, other, shipper
    raise AssertionError("no two unrelated libraries in the release")


def test_the_release_as_therock_lays_it_out_has_no_missing_library(release, tmp_path):
    config, artifacts = release
    done = cli_run.rocpkg("verify", "-c", config, "-a", artifacts, "--json")
    assert "missing-library" not in {p["check"] for p in json.loads(done.stdout)["problems"]}
    assert cli_run.rocpkg("build", "-c", config, "-a", artifacts, "-o", tmp_path / "out").returncode == 0
    tree = json.loads(cli_run.rocpkg("verify", tmp_path / "out", "--json").stdout)
    assert "missing-library" not in {p["check"] for p in tree["problems"]}


def test_a_library_its_package_does_not_pull_in_is_refused_and_reported(release, tmp_path):
    config, artifacts = release
    seeded = tmp_path / "artifacts"
    shutil.copytree(artifacts, seeded, symlinks=True)
    package, soname, shipper = seed_mistake(config, seeded)
    built = cli_run.rocpkg("build", "-c", config, "-a", seeded, "-o", tmp_path / "out")
    assert built.returncode == 2 and "Traceback" not in built.stderr
    assert "missing-library" in built.stderr and soname in built.stderr and shipper in built.stderr
    assert not (tmp_path / "out").exists()
    report = json.loads(cli_run.rocpkg("verify", "-c", config, "-a", seeded, "--json").stdout)
    found = [p for p in report["problems"] if p["check"] == "missing-library"]
    # a .deb's relations are package.json's: the mistake is there; an .rpm requires the soname
    # itself (what rpmbuild's elfdeps writes), which the shipping package provides
    assert {p["format"] for p in found} == {"deb"}
    assert any(soname in p["message"] for p in found)
    loaded = load_config(config)
    rpm = make_plan(loaded, scan(seeded, loaded.settings["families"])).by_name("rpm")
    assert any(r.startswith(soname + "()") for r in rpm[package].depends)
    assert any(p.startswith(soname + "()") for p in rpm[shipper].provides)
    allowed = cli_run.rocpkg("build", "-c", config, "-a", seeded, "-o", tmp_path / "out", "--allow", "missing-library")
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    # shipped anyway: verify of the built tree reads DT_NEEDED back from the packages and says so
    tree = json.loads(cli_run.rocpkg("verify", tmp_path / "out", "--json").stdout)
    found = [p for p in tree["problems"] if p["check"] == "missing-library"]
    assert {p["format"] for p in found} == {"deb"} and any(soname in p["message"] for p in found)
