"""Pack a 2 GiB payload (half random, half sparse) with rocpkg's native RPM writer and with
rpmbuild, each in a child process, and print wall time, CPU time and peak RSS.

    PYTHONPATH=packaging:. python3 benchmarks/bench_rpm.py [--size-gib 2] [--level 3]

Both use zstd at the same level with all cores. rpmbuild's time includes its %install
copy of the staging tree, which is how a spec-driven build (TheRock's) gets its files.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

CHUNK = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = """
import sys
from rocpkg.formats import rpm
from rocpkg.model import BuildOptions, FileEntry, PackageSpec
staging, out, level = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = [FileEntry("/opt/bench", "dir", 0o755)]
for name in sorted(__import__("os").listdir(staging)):
    path = f"{staging}/{name}"
    files.append(FileEntry(f"/opt/bench/{name}", "file", 0o644, path,
                           __import__("os").path.getsize(path)))
spec = PackageSpec(format="rpm", name="bench", version="1.0", release="1", arch="x86_64",
                   kind="files", summary="Benchmark payload", license="MIT", files=files)
rpm.write_rpm(spec, out, BuildOptions(source_date_epoch=1700000000, compression="zstd",
                                      compression_level=level, threads=0))
"""


def make_payload(staging: str, size: int) -> None:
    """Half random bytes in 256 MiB files, half one sparse file with a little data."""
    random_part = size // 2
    index = 0
    while random_part > 0:
        n = min(random_part, 256 << 20)
        with open(os.path.join(staging, f"random{index}.bin"), "wb") as f:
            for _ in range(n // CHUNK):
                f.write(os.urandom(CHUNK))
        random_part -= n
        index += 1
    with open(os.path.join(staging, "sparse.bin"), "wb") as f:
        f.write(b"start")
        f.truncate(size - size // 2)


def measure(argv: list[str], env: dict | None = None) -> dict:
    """Run argv as a child; wall time, CPU time (user+sys) and peak RSS from wait4."""
    os.sync()       # don't bill one run for the previous one's dirty pages
    start = time.monotonic()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv[0]} failed:\n{child.stderr.read().decode()}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def rpmbuild_spec(staging: str, level: int) -> str:
    return textwrap.dedent(f"""\
        %define _binary_payload w{level}T0.zstdio
        %define __os_install_post %{{nil}}
        %define _build_id_links none
        %define debug_package %{{nil}}
        Name: bench
        Version: 1.0
        Release: 1
        Summary: Benchmark payload
        License: MIT
        %description
        Benchmark payload.
        %install
        mkdir -p %{{buildroot}}/opt/bench
        cp -a {staging}/. %{{buildroot}}/opt/bench/
        %files
        /opt/bench
        """)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--level", type=int, default=3)
    args = parser.parse_args()
    size = int(args.size_gib * 2**30)
    with tempfile.TemporaryDirectory(prefix="bench-rpm-") as tmp:
        staging = os.path.join(tmp, "staging")
        os.makedirs(staging)
        make_payload(staging, size)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(REPO, "packaging"), REPO, os.environ.get("PYTHONPATH", "")]))
        ours = measure([sys.executable, "-c", CHILD, staging, os.path.join(tmp, "rocpkg"),
                        str(args.level)], env)
        ours["size"] = os.path.getsize(os.path.join(tmp, "rocpkg", "bench-1.0-1.x86_64.rpm"))
        spec_path = os.path.join(tmp, "bench.spec")
        with open(spec_path, "w") as f:
            f.write(rpmbuild_spec(staging, args.level))
        theirs = measure(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {tmp}/top",
                          spec_path])
        theirs["size"] = os.path.getsize(os.path.join(tmp, "top", "RPMS", "x86_64",
                                                      "bench-1.0-1.x86_64.rpm"))
    print(f"payload: {size / 2**30:.2f} GiB (half random, half sparse), zstd level {args.level}, "
          f"{os.cpu_count()} cores")
    print(f"{'':10} {'wall s':>8} {'cpu s':>8} {'peak RSS MB':>12} {'rpm MB':>8}")
    for name, r in (("rocpkg", ours), ("rpmbuild", theirs)):
        print(f"{name:10} {r['wall']:8.1f} {r['cpu']:8.1f} {r['rss_mb']:12.0f} {r['size'] / 2**20:8.0f}")
    print(f"rpmbuild / rocpkg wall time: {theirs['wall'] / ours['wall']:.2f}x")
    return 0 if ours["rss_mb"] < 200 else 1


if __name__ == "__main__":
    sys.exit(main())
