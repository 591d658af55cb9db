"""Add a release's many small files to a sample artifacts tree (`rocpkg sample-artifacts`,
split layout): a header tree in the generic `amd-llvm_dev_generic` artifact (TheRock's
amdrocm-llvm-dev: thousands of headers, one package) and per-target library files in each
`blas_lib_<target>` artifact (rocBLAS's `lib/rocblas/library/`: Tensile `.dat` databases
and AMDGPU `.co` code objects, every name carrying its target), so that the plan makes them
one devel package and one package per target.

Contents are deterministic for a seed. Headers are C-like text from a Zipf-weighted
vocabulary (zstd -3 compresses the tree about 3.5x); `.dat` files are the same text, `.co`
files real AMDGPU code objects (kpack.elf) for their target whose payload is a quarter
random bytes and the rest text (about 2x). File sizes are uniform around the mean.

    from many_files import add_many_files
    add_many_files(ARTIFACTS, ["gfx942", "gfx1100"], headers=40000, libraries=20000)
"""
from __future__ import annotations

import array
import itertools
import os
import random
from dataclasses import dataclass

from kpack.elf import build_amdgpu_code_object

HEADER_ARTIFACT = "amd-llvm_dev_generic"
LIBRARY_ARTIFACT = "blas_lib_{target}"
FILES_PER_DIR = 60          # headers per include directory, about
_SYLLABLES = ("hip roc blas lt mat mul gemm dev ptr size get set attr stream event kernel arg val type "
              "llvm ir pass node inst op cast ctx mgr alloc buf idx dim lds wave sync mem copy init free "
              "desc info ref impl base util list map iter begin end").split()
_SEPARATORS = (" ", " ", " ", "(", ", ", ");\n", ";\n", " = ", "::", "\n  ", " {\n", "}\n", " *", "<", "> ",
               " // ", "\n")
_TYPES = ("int", "unsigned", "const char *", "void", "size_t", "bool", "float", "double", "uint32_t",
          "int64_t", "const T &", "std::string")


@dataclass
class ManyFiles:
    headers: int = 0
    header_bytes: int = 0
    libraries: int = 0
    library_bytes: int = 0
    targets: tuple[str, ...] = ()


class _Text:
    """C-like text: a table of 65,536 short phrases (identifiers Zipf-weighted over a
    vocabulary of 8,000), read in a random order."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        idents = [self._ident() for _ in range(8000)]
        cumulative = list(itertools.accumulate(1 / (i + 1) for i in range(len(idents))))
        self.idents = idents
        pick = lambda: rng.choices(idents, cum_weights=cumulative)[0]  # noqa: E731
        types = list(_TYPES) + [pick() for _ in range(200)]
        table = []
        for _ in range(1 << 16):
            r = rng.random()
            if r < 0.1:
                table.append(f"#define {pick().upper()} {rng.randrange(1 << 16)}\n")
            elif r < 0.25:
                table.append(f"{rng.choice(types)} {pick()}{rng.choice(_SEPARATORS)}")
            else:
                table.append(pick() + rng.choice(_SEPARATORS))
        self.table = table
        self.mean = sum(map(len, table)) / len(table)

    def _ident(self) -> str:
        parts = [self.rng.choice(_SYLLABLES) for _ in range(self.rng.choice((1, 2, 2, 3)))]
        style = self.rng.random()
        if style < 0.4:
            return "_".join(parts)
        if style < 0.8:
            return parts[0] + "".join(p.capitalize() for p in parts[1:])
        return "".join(p.capitalize() for p in parts)

    def text(self, size: int) -> bytes:
        """About `size` bytes (at least `size`, cut to it)."""
        indices = array.array("H", self.rng.randbytes(2 * (int(size / self.mean) + 16)))
        table = self.table
        return "".join([table[i] for i in indices]).encode()[:size]


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _sizes(rng: random.Random, count: int, mean: int) -> list[int]:
    low = max(64, mean // 16)
    return [rng.randint(low, 2 * mean - low) for _ in range(count)]


def _stage(artifact_dir: str) -> str:
    """The first stage dir the artifact's manifest names (where its first subdir's files go)."""
    with open(os.path.join(artifact_dir, "artifact_manifest.txt")) as fh:
        first = fh.readline().strip()
    return os.path.join(artifact_dir, first)


def add_many_files(root: str | os.PathLike, targets: list[str], *, headers: int = 40000,
                   libraries: int = 20000, mean_kib: float = 20, seed: int = 0) -> ManyFiles:
    """Write `headers` header files and `libraries` library files (split round-robin over the
    targets that have a `blas_lib_<target>` dir) into the sample tree at root. Raises
    SystemExit naming the dir when the tree lacks the artifacts they go into."""
    root = os.fspath(root)
    rng = random.Random(seed)
    text = _Text(rng)
    mean = max(256, int(mean_kib * 1024))
    done = ManyFiles()

    header_dir = os.path.join(root, HEADER_ARTIFACT)
    if headers and not os.path.isdir(header_dir):
        raise SystemExit(f"--many-files: {header_dir} is missing (a sample tree of the bundled package.json has it)")
    if headers:
        include = os.path.join(_stage(header_dir), "include", "llvm")
        # FILES_PER_DIR headers a dir, about eight dirs an area: include/llvm/AREA/DIR/NAME.h
        areas = [text.idents[i].capitalize() for i in range(max(1, headers // (FILES_PER_DIR * 8)))]
        for n, size in enumerate(_sizes(rng, headers, mean)):
            group = n // FILES_PER_DIR
            sub = os.path.join(include, areas[group % len(areas)], f"{text.idents[group % len(text.idents)]}{group}")
            if n % FILES_PER_DIR == 0:
                os.makedirs(sub, exist_ok=True)
            name = f"{text.idents[rng.randrange(8000)]}_{n}.h"
            guard = f"LLVM_{name.upper().replace('.', '_')}"
            data = f"#ifndef {guard}\n#define {guard}\n".encode() + text.text(size) + b"\n#endif\n"
            _write(os.path.join(sub, name), data)
            done.headers += 1
            done.header_bytes += len(data)

    bare = list(dict.fromkeys(t.split(":")[0] for t in targets))
    library_dirs = {t: os.path.join(root, LIBRARY_ARTIFACT.format(target=t)) for t in bare}
    library_dirs = {t: d for t, d in library_dirs.items() if os.path.isdir(d)}
    if libraries and not library_dirs:
        raise SystemExit(f"--many-files: no {LIBRARY_ARTIFACT.format(target='<target>')} dir under {root} "
                         f"for targets {', '.join(bare)}")
    if libraries:
        where = {}
        for t, d in library_dirs.items():
            where[t] = os.path.join(_stage(d), "lib", "rocblas", "library")
            os.makedirs(where[t], exist_ok=True)
        order = list(library_dirs)
        for n, size in enumerate(_sizes(rng, libraries, mean)):
            t = order[n % len(order)]
            index = n // len(order)   # the file's number within its target
            kind = ("HH_HA", "SS_SA", "DD_DA", "BB_SH", "HH_SH")[index % 5]
            stem = f"{kind}_Contraction_l_Ailk_Bljk_Cijk_Dijk_{index:05d}_{t}"
            if index % 2:
                random_part = rng.randbytes(size // 4)
                data = build_amdgpu_code_object(t, payload=random_part + text.text(size - len(random_part)))
                name = f"Kernels_{stem}.co"
            else:
                data = text.text(size)
                name = f"TensileLibrary_{stem}.dat"
            _write(os.path.join(where[t], name), data)
            done.libraries += 1
            done.library_bytes += len(data)
    done.targets = tuple(library_dirs)
    return done
