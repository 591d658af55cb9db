"""Benchmark: open a ~1 GiB kpack archive with ~20,000 kernels and fetch one kernel.

Targets: < 5 ms and < 1% of the file read. Builds one archive per scheme in a temporary
directory (removed afterwards), then for the first, middle and last kernel measures
- time to open a fresh reader and fetch that kernel (median of --repeat runs, reading
  through os.pread as the library does for paths; the page cache is warm);
- bytes and read calls, counted by handing the reader a counting file object;
- time of ten more fetches from the same reader (the first lookups walk the TOC, then
  an index is built) and of one fetch after that.
Prints figures only; nothing here asserts a time.

    PYTHONPATH=packaging:. python3 benchmarks/bench_kpack.py [--size-gib 1] [--kernels 20000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from kpack.archive import CountingReader, KpackReader, KpackWriter

ARCHES = ("gfx1100", "gfx1101")


def kernel_keys(count: int) -> list[tuple[str, str]]:
    """(key, arch) in add order: count/2 binaries, each for two arches."""
    return [(f"blas/lib/rocblas/library/Kernels.so-{i // 2:05d}#0", ARCHES[i % 2]) for i in range(count)]


def build(path: str, scheme: str, keys: list[tuple[str, str]], kernel_size: int) -> float:
    """Write the archive from slices of a random pool (incompressible, distinct kernels)."""
    pool = os.urandom(8 << 20)
    started = time.perf_counter()
    with KpackWriter(path, "blas", "gfx110X", scheme=scheme, level=1) as writer:
        for index, (key, arch) in enumerate(keys):
            start = (index * 7919) % (len(pool) - kernel_size)
            writer.add(key, arch, pool[start:start + kernel_size])
    return time.perf_counter() - started


def open_and_fetch(path: str, key: str, arch: str) -> float:
    started = time.perf_counter()
    with KpackReader(path) as reader:
        reader.get(key, arch)
    return time.perf_counter() - started


def measure(path: str, keys: list[tuple[str, str]], repeat: int) -> list[dict]:
    rows = []
    size = os.path.getsize(path)
    for label, index in (("first", 0), ("middle", len(keys) // 2), ("last", len(keys) - 1)):
        key, arch = keys[index]
        times = [open_and_fetch(path, key, arch) for _ in range(repeat)]
        counting = CountingReader(path)
        with KpackReader(counting) as reader:
            open_bytes, open_reads = counting.bytes_read, counting.reads
            reader.get(key, arch)
            total_bytes, total_reads = counting.bytes_read, counting.reads
            started = time.perf_counter()
            for step in range(1, 11):  # the walks, then the index build, then indexed lookups
                reader.get(*keys[(index + step * len(keys) // 11) % len(keys)])
            more = time.perf_counter() - started
            started = time.perf_counter()
            reader.get(key, arch)
            steady = time.perf_counter() - started
            toc_size = reader.toc_size
        counting.close()
        rows.append(dict(kernel=f"{label} (#{index})", ms=statistics.median(times) * 1000,
                         open_bytes=open_bytes, open_reads=open_reads, bytes=total_bytes,
                         reads=total_reads, share=100.0 * total_bytes / size,
                         more_ms=more * 1000, steady_ms=steady * 1000, toc=toc_size))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--kernels", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dir", help="where to build (default: a new temporary directory)")
    args = parser.parse_args()
    keys = kernel_keys(args.kernels)
    kernel_size = int(args.size_gib * (1 << 30)) // args.kernels
    workdir = tempfile.mkdtemp(prefix="bench-kpack-", dir=args.dir)
    try:
        for scheme in ("none", "zstd-per-kernel"):
            path = os.path.join(workdir, f"bench-{scheme}.kpack")
            seconds = build(path, scheme, keys, kernel_size)
            size = os.path.getsize(path)
            print(f"\n== {scheme}: {size / (1 << 30):.2f} GiB, {len(keys)} kernels of {kernel_size} bytes, "
                  f"built in {seconds:.1f} s ({size / seconds / (1 << 20):.0f} MiB/s)")
            rows = measure(path, keys, args.repeat)
            print(f"TOC: {rows[0]['toc']} bytes ({100.0 * rows[0]['toc'] / size:.3f}% of the file); "
                  f"open alone reads {rows[0]['open_bytes']} bytes in {rows[0]['open_reads']} reads")
            print(f"{'kernel':<16}{'open+fetch ms':>14}{'bytes read':>12}{'% of file':>10}{'reads':>8}"
                  f"{'10 more ms':>12}{'steady ms':>11}")
            for row in rows:
                print(f"{row['kernel']:<16}{row['ms']:>14.2f}{row['bytes']:>12}{row['share']:>10.3f}"
                      f"{row['reads']:>8}{row['more_ms']:>12.2f}{row['steady_ms']:>11.3f}")
            os.unlink(path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
