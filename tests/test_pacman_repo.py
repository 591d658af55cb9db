"""The pacman repository through the format-neutral repository commands: `rocpkg build
--formats pacman` then `rocpkg repo OUT --sign-key` writes OUT/pacman/x86_64/<suite>.db
(and .files, signed), a detached signature per package and OUT/rocm.pacman.conf, through
the format's Repository (rocpkg.formats.pacman.repository), as rocm.list and rocm.repo are
written for apt and dnf. The judge is the real pacman: with the snippet and SigLevel =
Required it installs the family meta-package rocm-gfx110x, getting the gfx1100 and gfx1101
kernels' packages and none of gfx942's, and refuses a package changed after signing.
verify's integrity check reads the database back and checks its signature; an OUT holding
deb, rpm and pacman together is indexed, verified, published and pruned in one go."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import snapshot
from test_hostile_input import CONFIG
from test_hostile_out import run
from test_pacman import Pacman, needs_pacman

from rocpkg.errors import RocpkgInputError
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts
from rocpkg.repo.publish import publish
from rocpkg.verify.integrity import check_integrity

SDE = {"SOURCE_DATE_EPOCH": "1700000000"}
FAMILY = "rocm-gfx110x"


def sign_args(signer) -> list[str]:
    return ["--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]


@pytest.fixture(scope="module")
def pacman_out(tmp_path_factory, signer) -> Path:
    """The bundled config's release for gfx942, gfx1100 and gfx1101 as pacman packages,
    indexed and signed by `rocpkg repo`: read it only (copy it to change it)."""
    root = tmp_path_factory.mktemp("pacman-repo")
    make_sample_artifacts(root / "artifacts", load_config(None), targets=["gfx942", "gfx1100", "gfx1101"],
                          size_mb=0.05)
    out = root / "out"
    done = run("build", "-a", root / "artifacts", "-o", out, "--formats", "pacman", "-j", "2", env=SDE)
    assert done.returncode == 0, done.stderr
    done = run("repo", out, *sign_args(signer), env=SDE)
    assert done.returncode == 0, done.stderr
    assert f"pacman: {out / 'pacman'} (stable.db; section [stable] in rocm.pacman.conf), signed by " \
           f"{signer.fingerprint}" in done.stdout
    return out


def closure(out: Path, name: str) -> dict[str, dict]:
    """The pacman packages manifest.json says `name` pulls in: name -> its entry."""
    entries = {e["name"]: e for e in json.loads((out / "manifest.json").read_text())["packages"]
               if e["format"] == "pacman"}
    found, todo = {}, [name]
    while todo:
        entry = entries[todo.pop()]
        if entry["name"] not in found:
            found[entry["name"]] = entry
            todo += [d.split("=")[0].split(">")[0].split("<")[0] for d in entry["depends"]]
    return found


def client(tmp: Path, out: Path, signer, copy: Path | None = None) -> Pacman:
    """pacman in a throwaway root, trusting only the repository's key, configured with
    nothing but OUT's own section (rocm.pacman.conf; with copy, naming that copy of OUT)."""
    pacman = Pacman(tmp, out / "pacman" / "x86_64", signer)
    section = (out / "rocm.pacman.conf").read_text()
    if copy is not None:
        section = section.replace(f"file://{out}/", f"file://{copy}/")
    pacman.config.write_text("[options]\nArchitecture = x86_64\nSigLevel = Required\n" + section)
    return pacman


@needs_pacman
def test_repo_writes_the_signed_database_the_signatures_and_the_snippet(pacman_out):
    repo = pacman_out / "pacman" / "x86_64"
    packages = sorted(p.name for p in repo.glob("*.pkg.tar.zst"))
    assert len(packages) > 50
    for name in ("stable.db", "stable.db.tar.zst", "stable.files", "stable.files.tar.zst"):
        assert (repo / name).is_file() and (repo / f"{name}.sig").is_file()
    assert sorted(p.name for p in repo.glob("*.pkg.tar.zst.sig")) == [f"{p}.sig" for p in packages]
    assert (pacman_out / "rocm.pacman.conf").read_text() == \
        f"[stable]\nSigLevel = Required\nServer = file://{pacman_out}/pacman/$arch\n"
    assert not (pacman_out / "rocm.list").exists() and not (pacman_out / "rocm.repo").exists()
    assert check_integrity(pacman_out, keyring=pacman_out / "rocm.gpg") == []


@needs_pacman
def test_pacman_installs_exactly_the_family_from_the_signed_repository(pacman_out, tmp_path, signer):
    pacman = client(tmp_path, pacman_out, signer)
    try:
        done = pacman.run("-Sy", FAMILY)
        assert done.returncode == 0, done.stdout + done.stderr
        installed = pacman.installed()
        wanted = closure(pacman_out, FAMILY)
        assert installed == set(wanted)
        assert {e["target"] for e in wanted.values() if e["target"]} == {"gfx1100", "gfx1101"}
        devices = {n for n in installed if wanted[n]["target"] and wanted[n]["kind"] != "meta"}
        assert devices and {wanted[n]["target"] for n in devices} == {"gfx1100", "gfx1101"}
        kpacks = {p.name for p in pacman.root.rglob("*.kpack")}
        assert any("gfx1100" in k for k in kpacks) and any("gfx1101" in k for k in kpacks)
        assert not [p for p in pacman.root.rglob("*gfx942*")]
    finally:
        pacman.close()


@needs_pacman
def test_pacman_refuses_a_package_changed_after_signing(pacman_out, tmp_path, signer):
    out = tmp_path / "out"
    shutil.copytree(pacman_out, out)
    device = next(n for n, e in closure(out, FAMILY).items() if e["target"] == "gfx1100" and e["kind"] != "meta")
    package = out / closure(out, FAMILY)[device]["file"]
    data = bytearray(package.read_bytes())
    data[-40] ^= 0xFF
    package.write_bytes(bytes(data))
    pacman = client(tmp_path, pacman_out, signer, copy=out)
    try:
        done = pacman.run("-Sy", FAMILY)
        assert done.returncode != 0
        assert device in done.stderr and "invalid or corrupted package" in done.stderr, done.stderr
        assert device not in pacman.installed()
    finally:
        pacman.close()
    problems = {(p.check, p.path) for p in check_integrity(out, keyring=out / "rocm.gpg")}
    assert ("tampered", closure(out, FAMILY)[device]["file"]) in problems
    before = snapshot(out)      # and `rocpkg repo` will not vouch for the changed bytes
    done = run("repo", out, *sign_args(signer), env=SDE)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"error: {package}: its bytes are not the ones rocpkg recorded" in done.stderr, done.stderr
    assert snapshot(out) == before


@needs_pacman
def test_integrity_checks_the_database_signature_and_reads_a_damaged_one_as_bad_input(pacman_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(pacman_out, out)
    db = out / "pacman/x86_64/stable.db"
    (out / "pacman/x86_64/stable.db.sig").write_bytes((out / "pacman/x86_64/stable.files.sig").read_bytes())
    problems = [(p.check, p.path) for p in check_integrity(out, keyring=out / "rocm.gpg")]
    assert problems == [("bad-signature", "pacman/x86_64/stable.db.sig")]
    (out / "pacman/x86_64/stable.db.sig").unlink()
    problems = [(p.check, p.path, p.message) for p in check_integrity(out, keyring=out / "rocm.gpg")]
    assert problems == [("bad-signature", "pacman/x86_64/stable.db.sig", "missing: the index is not signed")]
    db.write_bytes(b"not a database")
    with pytest.raises(RocpkgInputError) as refused:
        check_integrity(out)
    assert refused.value.problems[0][0] == str(db)
    done = run("repo", out, "--unsigned", env=SDE)     # an unsigned re-index writes it anew, and says so
    assert done.returncode == 0, done.stderr
    assert (out / "rocm.pacman.conf").read_text().startswith("[stable]\nSigLevel = Optional TrustAll\n")
    assert not list((out / "pacman/x86_64").glob("*.sig"))
    assert check_integrity(out) == []


def build_small(root: Path, version: str, formats: str = "deb,rpm,pacman") -> None:
    """The small three-package config of tests/test_hostile_input at `version`, built into root/out."""
    config = json.loads(json.dumps(CONFIG))
    config["settings"]["version"] = version
    (root / "package.json").write_text(json.dumps(config))
    if not (root / "artifacts").exists():
        make_sample_artifacts(root / "artifacts", load_config(root / "package.json"), targets=["gfx1100"],
                              size_mb=0.05)
    done = run("build", "-c", root / "package.json", "-a", root / "artifacts", "-o", root / "out",
               "--formats", formats, "-j", "2", env=SDE)
    assert done.returncode == 0, done.stderr


@needs_pacman
def test_deb_rpm_and_pacman_in_one_out_are_indexed_verified_published_and_pruned(tmp_path, signer):
    build_small(tmp_path, "1.0.0")
    out = tmp_path / "out"
    done = run("repo", out, *sign_args(signer), "--base-url", "https://repo.example.org/rocm", env=SDE)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["apt", "dnf", "pacman"]
    assert "setup package (deb)" in done.stdout and "setup package (rpm)" in done.stdout
    assert "setup package (pacman)" not in done.stdout and not list(out.glob("*-repo.pacman"))
    assert (out / "rocm.pacman.conf").read_text() == \
        "[stable]\nSigLevel = Required\nServer = https://repo.example.org/rocm/pacman/$arch\n"
    assert "https://repo.example.org/rocm/deb" in (out / "rocm.list").read_text()
    assert "baseurl=https://repo.example.org/rocm/rpm" in (out / "rocm.repo").read_text()
    assert check_integrity(out, keyring=out / "rocm.gpg") == []
    def published():        # (the digest caches under .rocpkg remember files as they settle)
        return {rel: found for rel, found in snapshot(out).items() if not rel.startswith(".rocpkg")}

    before = published()
    again = run("repo", out, *sign_args(signer), "--base-url", "https://repo.example.org/rocm", env=SDE)
    assert again.returncode == 0 and again.stdout == done.stdout
    assert published() == before        # the same inputs, the same bytes

    # publish: every format's tree, each database after its signature, the snippets last
    sent = publish(out, tmp_path / "dest").sent
    assert sent.index("pacman/x86_64/stable.db.sig") < sent.index("pacman/x86_64/stable.db") < \
        sent.index("rocm.pacman.conf")
    assert max(sent.index(p) for p in sent if p.endswith(".pkg.tar.zst")) < sent.index("pacman/x86_64/stable.db")
    assert (tmp_path / "dest/pacman/x86_64/stable.db").read_bytes() == (out / "pacman/x86_64/stable.db").read_bytes()

    # a second release: the database lists the newest version of each name, and the older
    # packages, in no index, are no stale index; prune takes them and their signatures away
    build_small(tmp_path, "1.0.1")
    done = run("repo", out, *sign_args(signer), "--base-url", "https://repo.example.org/rocm", env=SDE)
    assert done.returncode == 0, done.stderr
    old = sorted(p.name for p in (out / "pacman/x86_64").glob("*-1.0.0-*.pkg.tar.zst"))
    assert old and all((out / "pacman/x86_64" / f"{name}.sig").exists() for name in old)
    assert check_integrity(out, keyring=out / "rocm.gpg") == []
    done = run("prune", out, "--keep", "1", *sign_args(signer), "--base-url", "https://repo.example.org/rocm",
               env=SDE)
    assert done.returncode == 0, done.stderr
    assert not list((out / "pacman/x86_64").glob("*-1.0.0-*"))
    assert check_integrity(out, keyring=out / "rocm.gpg") == []
