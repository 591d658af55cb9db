"""Pack a ~2 GiB payload with rocpkg's .deb writer and with `dpkg-deb -Zzstd --build`.

The payload (generated into a temporary directory) mixes incompressible random files with
sparse files (mostly holes, a little data), the two extremes of a ROCm release: device
code compresses poorly, and a writer must not choke on big files. Each packer runs in its
own child process, and os.wait4 gives that child's own CPU time and peak RSS.

    PYTHONPATH=packaging:. python3 benchmarks/bench_deb.py [--size-gib 2] [--compression zstd]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
PREFIX = "/opt/rocm-bench-7.1.0"
RSS_LIMIT_MB = 200


def generate_payload(root: Path, size_gib: float) -> list[tuple[str, str, int]]:
    """Half random files of 64 MiB, half sparse files of 256 MiB (1 MiB of random data
    every 32 MiB). Returns (install path, source path, size)."""
    total = int(size_gib * 1024 * MIB)
    files = []
    random_budget = total // 2
    index = 0
    while random_budget > 0:
        size = min(64 * MIB, random_budget)
        source = root / f"lib/librandom{index:03d}.so"
        source.parent.mkdir(parents=True, exist_ok=True)
        with open(source, "wb") as f:
            for _ in range(size // (8 * MIB)):
                f.write(os.urandom(8 * MIB))
            f.write(os.urandom(size % (8 * MIB)))
        files.append((f"{PREFIX}/lib/{source.name}", str(source), size))
        random_budget -= size
        index += 1
    sparse_budget = total - total // 2
    index = 0
    while sparse_budget > 0:
        size = min(256 * MIB, sparse_budget)
        source = root / f"share/sparse{index:03d}.dat"
        source.parent.mkdir(parents=True, exist_ok=True)
        with open(source, "wb") as f:
            for offset in range(0, size - MIB + 1, 32 * MIB):
                f.seek(offset)
                f.write(os.urandom(MIB))
        os.truncate(source, size)
        files.append((f"{PREFIX}/share/{source.name}", str(source), size))
        sparse_budget -= size
        index += 1
    return files


def child_pack(job: dict) -> None:
    """In the child: build the .deb with rocpkg (nothing else imported before)."""
    from rocpkg.formats.deb import write_deb
    from rocpkg.model import DIR, FILE, KIND_FILES, BuildOptions, FileEntry, PackageSpec

    entries = {PREFIX: FileEntry(PREFIX, DIR, 0o755)}
    for path, source, size in job["files"]:
        entries.setdefault(os.path.dirname(path), FileEntry(os.path.dirname(path), DIR, 0o755))
        entries[path] = FileEntry(path, FILE, 0o644, source, size)
    spec = PackageSpec(format="deb", name="rocm-bench7.1", version="7.1.0", release="1",
                       arch="amd64", kind=KIND_FILES, summary="rocpkg benchmark payload",
                       description="Random and sparse files.", maintainer="bench <bench@example.org>",
                       license="MIT", files=[entries[p] for p in sorted(entries)])
    built = write_deb(spec, job["out"], BuildOptions(source_date_epoch=1700000000,
                                                     compression=job["compression"]))
    print(json.dumps({"path": built.path, "size": built.size}))


def measure(cmd: list[str], env: dict | None = None) -> dict:
    """Run cmd as a child; its wall time, CPU time (user+sys) and peak RSS."""
    started = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{cmd[0]} failed with status {process.returncode}")
    return {"wall": time.monotonic() - started, "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "stdout": output.decode()}


def stage_for_dpkg_deb(files: list[tuple[str, str, int]], stage: Path) -> None:
    """What TheRock does before dpkg-deb: a full copy of the payload plus DEBIAN/control."""
    for path, source, _ in files:
        target = stage / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "--sparse=always", source, str(target)], check=True)
    (stage / "DEBIAN").mkdir()
    (stage / "DEBIAN/control").write_text(
        "Package: rocm-bench7.1\nVersion: 7.1.0-1\nArchitecture: amd64\n"
        "Maintainer: bench <bench@example.org>\nDescription: rocpkg benchmark payload\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--compression", default="zstd", choices=["zstd", "xz", "gzip"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_pack(json.loads(Path(args.child).read_text()))
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench-deb-"))
    try:
        started = time.monotonic()
        files = generate_payload(work / "payload", args.size_gib)
        os.sync()       # the payload's dirty pages must not be flushed during the runs
        payload = sum(size for _, _, size in files)
        print(f"payload: {len(files)} files, {payload / MIB:.0f} MiB "
              f"(generated in {time.monotonic() - started:.1f} s)")

        job = work / "job.json"
        job.write_text(json.dumps({"files": files, "out": str(work / "rocpkg"),
                                   "compression": args.compression}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1] / "packaging"), os.environ.get("PYTHONPATH", "")])}
        ours = measure([sys.executable, __file__, "--child", str(job)], env)
        ours_size = json.loads(ours["stdout"])["size"]

        started = time.monotonic()
        stage_for_dpkg_deb(files, work / "stage")
        os.sync()
        staging = time.monotonic() - started
        reference_path = work / "dpkg-deb.deb"
        theirs = measure(["dpkg-deb", "--root-owner-group", f"-Z{args.compression}", "--build",
                          str(work / "stage"), str(reference_path)])
        theirs_size = reference_path.stat().st_size

        print(f"{'':28}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}{'.deb MiB':>10}")
        print(f"{'rocpkg write_deb':28}{ours['wall']:9.1f}{ours['cpu']:9.1f}{ours['rss_mb']:13.0f}"
              f"{ours_size / MIB:10.1f}")
        print(f"{'staging copy (cp)':28}{staging:9.1f}")
        print(f"{'dpkg-deb -Z' + args.compression + ' --build':28}{theirs['wall']:9.1f}{theirs['cpu']:9.1f}"
              f"{theirs['rss_mb']:13.0f}{theirs_size / MIB:10.1f}")
        print(f"wall ratio (staging + dpkg-deb) / rocpkg: {(staging + theirs['wall']) / ours['wall']:.2f}; "
              f"dpkg-deb alone / rocpkg: {theirs['wall'] / ours['wall']:.2f}")
        if ours["rss_mb"] >= RSS_LIMIT_MB:
            print(f"FAIL: rocpkg peak RSS {ours['rss_mb']:.0f} MB >= {RSS_LIMIT_MB} MB")
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
