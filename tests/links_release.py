"""The small release of TheRock's package list that the tests of a release on a user's
machine share (tests/test_links_per_component.py, test_built_for.py, test_client_lifecycle.py):
gfx1100 only, small sample files plus the files TheRock's install test looks for, built
once per session per `Build` into the session's temporary directory and reused by every
module (a module that needs to change OUT copies it)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import cli_run
from fresh_roots import THEROCK_CONFIG, add_key_files

TARGETS = ("gfx1100",)
SDE = "1700000000"


@dataclass(frozen=True)
class Build:
    """One `rocpkg build` of the shared artifacts into an OUT: `args` are its options
    (--version, --release, --build-variant); several go into one OUT (built_release), so that
    one repository serves several releases."""
    id: str
    args: tuple[str, ...] = ()


RELEASE = Build("7.1.0-1")
PATCH = Build("7.1.1-1", ("--version", "7.1.1"))
RESPIN = Build("7.1.0-2", ("--release", "2"))
ASAN = Build("7.1.0-1+asan", ("--build-variant", "asan"))


def rocpkg(*args) -> str:
    done = cli_run.rocpkg(*args, env={**os.environ, "SOURCE_DATE_EPOCH": SDE})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _artifacts(base: Path, shared_dir: Path) -> tuple[Path, Path]:
    """(package.json, artifacts) under base, made on first use."""
    config, artifacts = base / "package.json", base / "artifacts"
    if not config.exists():
        base.mkdir(parents=True, exist_ok=True)
        shutil.copy(shared_dir / THEROCK_CONFIG, config)
        rocpkg("sample-artifacts", artifacts, "-c", config, "--targets", ",".join(TARGETS), "--size-mb", "0.05")
        add_key_files(artifacts)
    return config, artifacts


def built_release(tmp_path_factory, shared_dir: Path, *builds: Build) -> Path:
    """OUT holding these builds of the shared artifacts (built in this order), indexed as
    one unsigned repository: made once per session per sequence of builds, read only; a
    sequence that extends one made before starts from a copy of that one's OUT."""
    base = tmp_path_factory.getbasetemp() / "links-release"
    config, artifacts = _artifacts(base, shared_dir)
    out = base / "+".join(b.id for b in builds)
    if not (out / "manifest.json").exists():
        work = out.with_name(out.name + ".partial")
        shutil.rmtree(work, ignore_errors=True)
        done = 0                      # the longest sequence of these builds made before: a copy of it
        for n in range(len(builds) - 1, 0, -1):
            if (base / "+".join(b.id for b in builds[:n]) / "manifest.json").exists():
                shutil.copytree(base / "+".join(b.id for b in builds[:n]), work, symlinks=True)
                done = n
                break
        for build in builds[done:]:
            rocpkg("build", "-q", "-c", config, "-a", artifacts, "-o", work, "-j", "2", *build.args)
        rocpkg("repo", work)
        work.rename(out)
    return out


def installed_links(root: Path) -> dict[str, str]:
    """name -> target of the links update-alternatives made in root (/etc/alternatives)."""
    alternatives = root / "etc/alternatives"
    return {p.name: os.readlink(p) for p in alternatives.iterdir() if p.is_symlink()} if alternatives.exists() else {}
