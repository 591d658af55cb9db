"""What runs where: which packages each of N CI runners builds (shards, from the plan
alone) and how many zstd workers each package gets on one machine (where the work is).
Plain functions of package sizes; build.py applies them."""
from __future__ import annotations

import re
from typing import Iterable

from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.store.manifest_schema import MAX_SHARDS

# A package costs something to write even without payload (rendering, headers, fsync):
# the shard balancer and the thread split count each as this many payload bytes more.
PACKAGE_OVERHEAD = 256 << 10


def parse_shard(text: str) -> tuple[int, int]:
    """"I/N" (1-based) -> (I, N)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match or max(map(len, match.groups())) > 6 \
            or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_SHARDS:
        raise RocpkgInputError(("--shard", f"expected I/N with 1 <= I <= N <= {MAX_SHARDS}, got {text[:40]!r}"))
    return int(match.group(1)), int(match.group(2))


def shard_weight(spec: m.PackageSpec) -> int:
    return spec.payload_size + PACKAGE_OVERHEAD


def assign_shards(specs: Iterable[m.PackageSpec], n: int) -> list[list[m.PackageSpec]]:
    """Split packages into n parts of nearly equal weight: greedy, heaviest first (ties
    by format and name), each into the lightest part so far (ties: the lowest index).
    Depends on the package list alone, so every runner computes the same split."""
    parts: list[list[m.PackageSpec]] = [[] for _ in range(n)]
    loads = [0] * n
    for spec in sorted(specs, key=lambda s: (-shard_weight(s), s.format, s.name)):
        lightest = min(range(n), key=lambda i: (loads[i], i))
        parts[lightest].append(spec)
        loads[lightest] += shard_weight(spec)
    return parts


def start_order(sizes: list[int], first: int) -> list[int]:
    """The order a build starts its packages in, as indexes into `sizes` (payload bytes,
    largest first): the `first` largest, then the packages of at most PACKAGE_OVERHEAD
    payload, then the others, largest first.

    The largest start first: one .deb is one zstd thread (rocpkg.formats.compression), so the
    biggest package's own time is the least the build can take after it starts. The
    small ones go next, not last: each costs its worker little and the build's parent,
    which moves and records every package one at a time, about as much. Left to the end,
    the hundreds a release has would queue at the parent while the workers stand idle;
    started early, they are recorded while the big ones are still being written."""
    indexes = list(range(len(sizes)))
    head, tail = indexes[:first], indexes[first:]
    return head + [i for i in tail if sizes[i] <= PACKAGE_OVERHEAD] + [i for i in tail if sizes[i] > PACKAGE_OVERHEAD]


def zstd_threads(sizes: list[int], cores: int, jobs: int, cap: int) -> list[int]:
    """zstd workers for each package, largest first (the order the big ones start in:
    start_order moves only those of PACKAGE_OVERHEAD or less ahead): at least its fair
    part of the cores (cores / jobs, all of them once fewer packages than jobs are left),
    and at least its share of the work left when it starts: a package holding half of
    what is left would otherwise run on alone while the other jobs drain, its cores idle.
    The workers share the cores with the other jobs' (the kernel time-slices them), then
    have them to themselves. Never more than `cap` (the writer's memory bound)."""
    left = sum(sizes) + PACKAGE_OVERHEAD * len(sizes)
    threads = []
    for index, size in enumerate(sizes):
        fair = max(1, cores // max(1, min(jobs, len(sizes) - index)))
        share = -(-cores * (size + PACKAGE_OVERHEAD) // left) if left else 1
        threads.append(max(1, min(max(fair, share), cap)))
        left -= size + PACKAGE_OVERHEAD
    return threads
