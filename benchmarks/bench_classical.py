"""The classical route for bench_build.py: a staging copy of each package's files, then
`dpkg-deb -Zzstd --build` or `rpmbuild -bb` with a minimal spec, one package at a time,
as TheRock does (run as bench_build.py's child with --classical)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE_DATE_EPOCH = "1700000000"


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


def child(fmt: str, plan_json: str, out: str) -> None:
    plan = json.loads(Path(plan_json).read_text())
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-classical-") as tmp:
        for pkg in plan["packages"]:
            if pkg["format"] == fmt:
                (classical_deb if fmt == "deb" else classical_rpm)(pkg, Path(tmp), out_dir)
