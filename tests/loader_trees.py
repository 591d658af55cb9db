"""Installed trees for loader tests: host libraries with markers and kpack archives laid
out as a release installs them, built with kpack's own writer and ELF builder, and the
device ISA names a release's targets report. Shared by the pure loader tests and the
differential tests against the reference runtime."""
from __future__ import annotations

import hashlib
import itertools
import os
import shutil
from pathlib import Path

from kpack.archive import KpackWriter
from kpack.elf import build_amdgpu_code_object, build_host_elf
from kpack.marker import MARKER_SECTION, Marker, encode_marker, read_marker
from kpack.targets import ISA_PREFIX, parse_target, supported_features


def code_object(target: str, tag: str) -> bytes:
    """A real AMDGPU code object for `target` whose bytes also name `tag` (so that two
    kernels never hash alike)."""
    tid = parse_target(target)
    return build_amdgpu_code_object(tid.processor, xnack=tid.features.get("xnack"),
                                    sramecc=tid.features.get("sramecc"), payload=tag.encode() * 8)


def write_archive(path: Path, kernels: dict[str, list[str]], gfx_arches: list[str] | None = None,
                  scheme: str = "zstd-per-kernel") -> Path:
    """An archive holding, for each key, a code object per listed arch; gfx_arches defaults
    to the arches used."""
    path.parent.mkdir(parents=True, exist_ok=True)
    used = list(dict.fromkeys(arch for arches in kernels.values() for arch in arches))
    with KpackWriter(path, "test", "test", gfx_arches if gfx_arches is not None else used, scheme=scheme) as writer:
        for key, arches in kernels.items():
            for arch in arches:
                writer.add(key, arch, code_object(arch, f"{path.name}/{key}/{arch}"))
    return path


def write_host(path: Path, marker: Marker) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(build_host_elf({".text": b"\xc3", MARKER_SECTION: encode_marker(marker)}, soname=path.name))
    return path


def install_artifacts(artifacts: Path, root: Path) -> Path:
    """Merge every stage of an artifacts tree into one install root, as the packages of a
    release land in one prefix (artifact dirs in sorted order; a path already present is
    kept)."""
    for artifact in sorted(p for p in artifacts.iterdir() if p.is_dir()):
        for stage in sorted(artifact.glob("*/stage")) + sorted(artifact.glob("*/*/stage")):
            for source in sorted(stage.rglob("*")):
                target = root / source.relative_to(stage)
                if source.is_dir() and not source.is_symlink():
                    target.mkdir(parents=True, exist_ok=True)
                elif not os.path.lexists(target):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if source.is_symlink():
                        os.symlink(os.readlink(source), target)
                    else:
                        shutil.copy2(source, target)
    return root


def host_binaries(root: Path) -> list[tuple[str, Marker]]:
    """(absolute path, marker) of every regular ELF file under root that has a marker."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.suffix != ".kpack":
            with open(path, "rb") as handle:
                if handle.read(4) != b"\x7fELF":
                    continue
            marker = read_marker(path)
            if marker is not None:
                found.append((str(path), marker))
    return found


def device_isas(targets: list[str]) -> list[str]:
    """The ISA names devices of these processors can report: every on/off/absent state of
    each feature the processor has, both feature orders, with and without ROCr's prefix."""
    names: list[str] = []
    for processor in dict.fromkeys(parse_target(t).processor for t in targets):
        features = sorted(supported_features(processor))
        for states in itertools.product(*[("", "+", "-")] * len(features)):
            chosen = [f"{name}{state}" for name, state in zip(features, states) if state]
            for order in {tuple(chosen), tuple(reversed(chosen))}:
                base = ":".join([processor, *order])
                names += [base, ISA_PREFIX + base]
    return list(dict.fromkeys(names))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def therock_release(root: Path, shared_dir: Path, targets: list[str], size_mb: float, build,
                    **sample) -> tuple[Path, Path, Path]:
    """(config, artifacts, OUT) of TheRock's real package list over sample artifacts for
    `targets` (make_sample_artifacts' other options in `sample`), built by `build(*args)`."""
    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    config = root / "package.json"
    shutil.copy(shared_dir / "fixtures" / "therock" / "package.json", config)
    artifacts = root / "artifacts"
    make_sample_artifacts(artifacts, load_config(config), targets=targets, size_mb=size_mb, **sample)
    out = root / "out"
    build("build", "-c", config, "-a", artifacts, "-o", out)
    return config, artifacts, out
