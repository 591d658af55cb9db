"""Synthesise an artifacts tree in TheRock's layout for any package.json.

The trees are small but real: host libraries are ELF shared objects carrying a
`.rocm_kpack_ref` marker, device code sits in kpack archives holding AMDGPU ELF code
objects, and per-target databases use Tensile-, MIOpen- and per-arch-dir-style names, so
that the catalog, the writers and `rocpkg verify` meet what a real build produces. Output is
deterministic for a given seed.
"""
from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field

from kpack import targets as kt
from kpack.archive import KpackWriter
from kpack.elf import build_amdgpu_code_object, build_host_elf
from kpack.marker import Marker, encode_marker
from rocpkg.inputs.config import Config
from rocpkg.errors import RocpkgInputError

MANIFEST = "artifact_manifest.txt"
_PATTERN = bytes((i * 7) & 0xFF for i in range(64))
KERNELS_PER_BINARY = 2
DEFAULT_TARGETS = ("gfx942", "gfx1100", "gfx1101")
BLOCK = 8 << 20  # kernels and host padding are generated in blocks of this size


@dataclass
class SampleSummary:
    root: str
    targets: list[str]
    layout: str
    dirs: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0


def _is_device_artifact(config: Config, artifact: str, component: str) -> bool:
    """An artifact carries per-target device code when a per-target, non-devel, non-test
    library uses its `lib` component (TheRock splits exactly those)."""
    if component != "lib":
        return False
    for d in config.enabled:
        if d.metapackage or not d.gfxarch or d.name.endswith(("-devel", "-test")):
            continue
        if any(r.artifact == artifact and r.component == component and r.gfxarch for r in d.artifacts):
            return True
    return False


class _Generator:
    def __init__(self, root: str, config: Config, targets: list[str], layout: str, size_mb: float, seed: int,
                 scheme: str, variants: dict[str, list[str]] | None = None, overlays: bool = False):
        self.root = root
        self.overlays = overlays
        self.config = config
        self.targets = targets
        self.variants = variants or {}
        self.layout = layout
        self.rng = random.Random(seed)
        self.scheme = scheme
        self.summary = SampleSummary(root, targets, layout)
        # (artifact, component) -> ordered subdirs, in first-use order across the config
        self.groups: dict[tuple[str, str], list[str]] = {}
        for d in config.enabled:
            for r in d.artifacts:
                subs = self.groups.setdefault((r.artifact, r.component), [])
                if r.subdir not in subs:
                    subs.append(r.subdir)
        self.device_groups = [k for k in self.groups if _is_device_artifact(config, *k)]
        host_libs = sum(len(self.groups[k]) for k in self.device_groups) or 1
        # TheRock's shape: a few libraries (BLAS, FFT...) hold most of the device code and
        # many hold little. Zipf weights over the device libraries, in config order, mean 1.
        device_libs = [(a, s) for a, c in self.device_groups for s in self.groups[(a, c)]]
        harmonic = sum(1 / (i + 1) for i in range(len(device_libs))) or 1
        self.weights = {lib: len(device_libs) / (harmonic * (i + 1)) for i, lib in enumerate(device_libs)}
        kernels = host_libs * KERNELS_PER_BINARY * max(1, len(targets))
        budget = max(size_mb, 0.01) * (1 << 20)
        # device code is the bulk of a real release: 3/4 to kernels, 1/4 to host libraries
        self.kernel_size = max(256, int(budget * 0.75 / kernels))
        self.host_pad = max(0, int(budget * 0.25 / host_libs))
        self.used_paths: dict[str, tuple[str, str]] = {}

    # ---- bytes -------------------------------------------------------------------
    def _payload(self, size: int) -> bytes:
        """`size` bytes, each block half random, half repetitive: compresses roughly like
        real code objects."""
        blocks = []
        while size > 0:
            step = min(size, BLOCK)
            half = step // 2
            blocks.append(self.rng.randbytes(half) + _PATTERN * ((step - half) // 64 + 1))
            size -= step
        return b"".join(blocks)

    def _write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, mode)
        self.summary.files += 1
        self.summary.bytes += len(data)

    def _symlink(self, target: str, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)

    # ---- names -------------------------------------------------------------------
    def _lib_name(self, artifact: str, subdir: str) -> str:
        """A library file name unique across the release (two artifacts may share a subdir)."""
        base = "".join(ch for ch in subdir.lower() if ch.isalnum() or ch in "-+") or "x"
        name = base
        owner = self.used_paths.get(name)
        if owner is not None and owner != (artifact, subdir):
            name = f"{base}-{artifact}"
        self.used_paths.setdefault(name, (artifact, subdir))
        return name

    def _stage_line(self, artifact: str, subdir: str) -> str:
        return f"{subdir}/stage"

    def _artifact_dir(self, artifact: str, component: str, suffix: str) -> str:
        dirname = f"{artifact}_{component}_{suffix}"
        path = os.path.join(self.root, dirname)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, MANIFEST), "w") as fh:
            fh.write("".join(self._stage_line(artifact, s) + "\n" for s in self.groups[(artifact, component)]))
        for s in self.groups[(artifact, component)]:
            os.makedirs(os.path.join(path, self._stage_line(artifact, s)), exist_ok=True)
        self.summary.dirs.append(dirname)
        return path

    # ---- generic trees -----------------------------------------------------------
    def _generic(self, artifact: str, component: str) -> None:
        path = self._artifact_dir(artifact, component, "generic")
        device = (artifact, component) in self.device_groups
        for subdir in self.groups[(artifact, component)]:
            stage = os.path.join(path, self._stage_line(artifact, subdir))
            lib = self._lib_name(artifact, subdir)
            if component == "lib":
                soname = f"lib{lib}.so.1"
                sections = {".rodata": self._payload(self.host_pad)} if self.host_pad else {}
                if device:
                    marker = Marker([f"../.kpack/{artifact}_{component}_@GFXARCH@.kpack"], self.kernel_name(artifact, subdir))
                    sections[".rocm_kpack_ref"] = encode_marker(marker)
                self._write(os.path.join(stage, "lib", soname + ".0"), build_host_elf(sections, soname=soname, runpath="$ORIGIN"), 0o755)
                self._symlink(soname + ".0", os.path.join(stage, "lib", soname))
            elif component == "run":
                self._write(os.path.join(stage, "bin", f"{lib}-info"),
                            f"#!/bin/sh\necho '{subdir} from {artifact}'\n".encode(), 0o755)
            elif component == "dev":
                guard = lib.upper().replace("-", "_").replace("+", "P")
                self._write(os.path.join(stage, "include", lib, f"{lib}.h"),
                            f"#ifndef {guard}_H\n#define {guard}_H\nint {guard.lower()}_version(void);\n#endif\n".encode())
                self._write(os.path.join(stage, "lib", "cmake", lib, f"{lib}-config.cmake"),
                            f"set({lib}_FOUND TRUE)\n".encode())
                self._symlink(f"lib{lib}.so.1", os.path.join(stage, "lib", f"lib{lib}.so"))
            elif component == "doc":
                self._write(os.path.join(stage, "share", "doc", lib, "README"),
                            f"{subdir}: sample documentation generated by rocpkg.\n".encode())
            else:  # test and anything else
                self._write(os.path.join(stage, "bin", f"{lib}-{component}"),
                            f"#!/bin/sh\necho '{subdir} {component}'\n".encode(), 0o755)
                self._write(os.path.join(stage, "share", lib, component, "cases.txt"), b"case 1\ncase 2\n")

    def kernel_name(self, artifact: str, subdir: str) -> str:
        return f"{artifact}/lib/lib{self._lib_name(artifact, subdir)}.so.1"

    # ---- device trees ------------------------------------------------------------
    def _variants(self, target: str) -> list[str]:
        """The builds asked for (`gfx90a:xnack+,gfx90a:xnack-`: those only, TheRock's xnack/ASAN
        layout with no bare build), else the target itself and, where it has the feature, its
        xnack+ build."""
        if self.variants.get(target):
            return self.variants[target]
        return [target] + ([f"{target}:xnack+"] if "xnack" in kt.supported_features(target) else [])

    def _code_object(self, variant: str, weight: float = 1.0) -> bytes:
        tid = kt.parse_target(variant)
        return build_amdgpu_code_object(tid.processor, xnack=tid.features.get("xnack"),
                                        sramecc=tid.features.get("sramecc"),
                                        payload=self._payload(max(256, int(self.kernel_size * weight))))

    def _overlay(self, variant: str) -> bool:
        """A feature build beside a bare one is an overlay: it holds kernel #0 of each binary
        and the runtime falls through to the bare archive for the others."""
        processor = kt.parse_target(variant).processor
        return self.overlays and variant != processor and processor in self._variants(processor)

    def _archive(self, stage: str, artifact: str, component: str, variant: str) -> None:
        path = os.path.join(stage, ".kpack", f"{artifact}_{component}_{variant}.kpack")
        kernels = 1 if self._overlay(variant) else KERNELS_PER_BINARY
        os.makedirs(os.path.dirname(path), exist_ok=True)
        family = kt.family_of(kt.parse_target(variant).processor) or variant
        with KpackWriter(path, group_name=f"{artifact}_{component}", gfx_arch_family=family,
                         gfx_arches=[variant], scheme=self.scheme) as writer:
            for subdir in self.groups[(artifact, component)]:
                for n in range(kernels):
                    writer.add(f"{self.kernel_name(artifact, subdir)}#{n}", variant,
                               self._code_object(variant, self.weights.get((artifact, subdir), 1.0)))
        self.summary.files += 1
        self.summary.bytes += os.path.getsize(path)

    def _databases(self, stage: str, index: int, subdir: str, target: str) -> None:
        """Per-arch files the way the real libraries name them, one style per subdir."""
        lib = subdir.lower()
        if "migraphx" in lib:
            self._write(os.path.join(stage, "share", lib, "models", f"resnet50_{target}.mxr"),
                        b"MXR\x00" + self._code_object(target))
        elif index == 1:  # Tensile
            self._write(os.path.join(stage, "lib", lib, "library", f"TensileLibrary_lazy_{target}.dat"),
                        self._payload(2048))
            self._write(os.path.join(stage, "lib", lib, "library", f"Kernels.so-000-{target}.co"),
                        self._code_object(target))
        elif index == 2:  # MIOpen-style find database
            self._write(os.path.join(stage, "share", lib, "db", f"{target}_{kt.wavefront_size(target)}.kdb"),
                        self._payload(1024))
        elif index == 3:  # per-arch directory
            self._write(os.path.join(stage, "lib", lib, "library", target, "kernels.dat"), self._payload(1024))

    def _device_tree(self, path: str, artifact: str, component: str, targets: list[str], variants: list[str]) -> None:
        subdirs = self.groups[(artifact, component)]
        first = os.path.join(path, self._stage_line(artifact, subdirs[0]))
        for variant in variants:
            # one archive per target (and variant) under the first stage prefix only
            self._archive(first, artifact, component, variant)
        for index, subdir in enumerate(subdirs):
            stage = os.path.join(path, self._stage_line(artifact, subdir))
            for t in targets:
                self._databases(stage, index, subdir, t)

    def _split(self, artifact: str, component: str) -> None:
        for t in self.targets:
            for index, variant in enumerate(self._variants(t)):
                path = self._artifact_dir(artifact, component, variant)
                if variant == t or (index == 0 and t not in self._variants(t)):
                    # the bare build, or the first feature build when there is no bare one
                    self._device_tree(path, artifact, component, [t], [variant])
                else:  # a feature build holds just its archive
                    subdirs = self.groups[(artifact, component)]
                    self._archive(os.path.join(path, self._stage_line(artifact, subdirs[0])), artifact, component, variant)

    def _recombined(self, artifact: str, component: str) -> None:
        by_family: dict[str, list[str]] = {}
        for t in self.targets:
            by_family.setdefault(kt.family_of(t) or t, []).append(t)
        for family, members in by_family.items():
            path = self._artifact_dir(artifact, component, family)
            variants = [v for t in members for v in self._variants(t)]
            self._device_tree(path, artifact, component, members, variants)

    def run(self) -> SampleSummary:
        for artifact, component in self.groups:
            self._generic(artifact, component)
        for artifact, component in self.device_groups:
            if self.layout == "split":
                self._split(artifact, component)
            else:
                self._recombined(artifact, component)
        self.summary.dirs.sort()
        return self.summary


def make_sample_artifacts(root: str | os.PathLike, config: Config, *, targets: list[str] | None = None,
                          layout: str = "split", size_mb: float = 1.0, seed: int = 0,
                          scheme: str = "zstd-per-kernel", clean: bool = False,
                          overlays: bool = False) -> SampleSummary:
    """Write a sample artifacts tree for `config` into root (which must be empty or absent
    unless clean=True). With overlays=True a feature build of a target that also has a bare
    build holds one kernel per binary (TheRock's xnack split: an overlay over the bare
    archive, which holds them all)."""
    root = os.path.abspath(os.fspath(root))
    problems = []
    if layout not in ("split", "recombined"):
        problems.append(("--layout", f"{layout!r} is not split or recombined"))
    parsed: list[str] = []
    variants: dict[str, list[str]] = {}
    for t in targets or DEFAULT_TARGETS:
        try:
            tid = kt.parse_target(t)
        except ValueError as exc:
            problems.append(("--targets", str(exc)))
            continue
        if problem := kt.release_target_problem(t):
            problems.append(("--targets", problem))
            continue
        if tid.processor not in parsed:
            parsed.append(tid.processor)
        named = variants.setdefault(tid.processor, [])
        if str(tid) not in named:
            named.append(str(tid))
    # a feature build asked for by name: only the named builds of that target (bare one first)
    variants = {p: sorted(ids, key=lambda v: (v != p, v)) for p, ids in variants.items() if ids != [p]}
    if os.path.exists(root) and os.listdir(root):
        if clean:
            shutil.rmtree(root)
        else:
            problems.append((root, "exists and is not empty"))
    if problems:
        raise RocpkgInputError(*problems)
    os.makedirs(root, exist_ok=True)
    return _Generator(root, config, parsed, layout, size_mb, seed, scheme, variants, overlays).run()
