"""`rocpkg export OUT DEST NAME...`: an offline bundle holds the named packages' closure and
nothing else, installs with apt and dnf from itself alone, and is refused for names the
release has not and for a DEST inside OUT."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from repo_helpers import AptClient, DnfClient, planned_installs, stand_in_repository
from rocpkg.cli.main import main
from rocpkg.formats.rpm import package_from_header, read_rpm
from rocpkg.repo.export import export_closure

FAMILY = "rocm-gfx110x"


@pytest.fixture(scope="module")
def out(small_release, tmp_path_factory, signer) -> Path:
    """A built, signed two-target release (gfx942, gfx1100)."""
    out = tmp_path_factory.mktemp("export") / "out"
    assert main(["build", "-a", str(small_release), "-o", str(out), "-q", "-j", "2", "--repo",
                 "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]) == 0
    return out


@pytest.fixture(scope="module")
def bundle(out, tmp_path_factory, signer):
    dest = tmp_path_factory.mktemp("bundle") / "gfx110x"
    return export_closure(str(out), str(dest), [FAMILY], signer=signer)


def test_the_bundle_holds_the_closure_and_no_other_target(bundle):
    dest = Path(bundle.dest)
    files = [p.name for p in dest.rglob("*") if p.suffix in (".deb", ".rpm")]
    assert files and not [f for f in files if "gfx942" in f]
    assert FAMILY in bundle.packages["deb"] and FAMILY in bundle.packages["rpm"]
    assert len(files) == len(bundle.packages["deb"]) + len(bundle.packages["rpm"])
    tarball = Path(bundle.tarball)
    assert bundle.size == tarball.stat().st_size
    assert Path(f"{tarball}.sha256").read_text() == f"{hashlib.sha256(tarball.read_bytes()).hexdigest()}  {tarball.name}\n"


def test_apt_installs_from_the_bundle_alone(bundle, tmp_path):
    dest = Path(bundle.dest)
    apt = AptClient(tmp_path / "apt", (dest / "rocm.list").read_text())
    shutil.copy("/var/lib/dpkg/status", apt.root / "var/lib/dpkg/status")    # the system libraries
    update = apt.run("update")
    assert update.returncode == 0 and "NO_PUBKEY" not in update.stderr, update.stdout + update.stderr
    install = apt.run("install", "-s", FAMILY)
    assert install.returncode == 0, install.stdout + install.stderr
    assert planned_installs(install.stdout) == set(bundle.packages["deb"])


def _system_stand_in(root: Path, rpms: list[Path]) -> Path:
    """A stand-in for the installing system: one package providing what the bundle's RPMs
    require and none of them provides (glibc's sonames...)."""
    records = [package_from_header(read_rpm(str(p))) for p in rpms]
    provided = {n for r in records for n, _, _ in r.dependencies["provides"]} | {r.name for r in records}
    needed = sorted({n for r in records for n, _, _ in r.dependencies["requires"]
                     if n not in provided and not n.startswith(("rpmlib(", "/"))})
    return stand_in_repository(root, [("system-stand-in", "1", needed)], repo_id="system")


def test_dnf_installs_from_the_bundle_alone(bundle, tmp_path):
    dest = Path(bundle.dest)
    dnf = DnfClient(tmp_path / "dnf", dest / "rocm.repo", dest / "rocm.asc")
    shutil.copy(_system_stand_in(tmp_path / "system", list(dest.rglob("*.rpm"))), dnf.reposdir / "system.repo")
    install = dnf.run("install", "rocm-gfx110X")
    assert install.returncode == 0, install.stdout + install.stderr
    assert dnf.installed() - {"system-stand-in"} == set(bundle.packages["rpm"])


def test_an_export_is_reproducible(out, tmp_path, signer):
    """The same export at the same path (its snippets name it) gives the same bytes."""
    first = export_closure(str(out), str(tmp_path / "gfx110x"), [FAMILY], signer=signer)
    kept = Path(first.tarball).read_bytes()
    shutil.rmtree(first.dest)
    for name in (first.tarball, f"{first.tarball}.sha256"):
        Path(name).unlink()
    again = export_closure(str(out), str(tmp_path / "gfx110x"), [FAMILY], signer=signer)
    assert Path(again.tarball).read_bytes() == kept


def test_a_name_the_release_has_not_is_refused_with_the_closest(out, tmp_path, capsys):
    assert main(["export", str(out), str(tmp_path / "b"), "rocm-gfx110"]) == 2
    assert "rocm-gfx110: no package of that name in any release of OUT; closest: rocm-gfx110x" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["out", "out/bundle"])
def test_a_dest_inside_out_or_out_itself_is_refused(out, capsys, where):
    dest = out.parent / where
    before = sorted(p.name for p in out.iterdir())
    assert main(["export", str(out), str(dest), FAMILY]) == 2
    assert "export into a directory of its own" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before


def test_an_existing_dest_is_refused(out, tmp_path, capsys):
    (tmp_path / "b").mkdir()
    assert main(["export", str(out), str(tmp_path / "b"), FAMILY]) == 2
    assert "exists" in capsys.readouterr().err


def test_an_export_of_nothing_is_refused(out, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main(["export", str(out), str(tmp_path / "b")])
    assert exited.value.code == 2 and not (tmp_path / "b").exists()


def test_a_key_that_cannot_sign_leaves_nothing(out, tmp_path, signer, capsys):
    dest = tmp_path / "b"
    code = main(["export", str(out), str(dest), FAMILY, "--gpg-home", signer.gnupg_home, "--sign-key", "nobody@example.org"])
    assert code == 2 and "--sign-key" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _unversioned(bundle, fmt: str) -> set[str]:
    return {n for n in bundle.packages[fmt] if not any(c.isdigit() for c in n)}


def test_a_definition_name_means_its_unversioned_package_in_each_format(out, tmp_path):
    """package.json's `rocm-core-devel` is the deb's `rocm-core-dev` and the rpm's
    `rocm-core-devel`: both formats get the closure, and apt installs it from the bundle."""
    bundle = export_closure(str(out), str(tmp_path / "devel"), ["rocm-core-devel"])
    assert "rocm-core-dev" in bundle.packages["deb"] and "rocm-core-devel" not in bundle.packages["deb"]
    assert "rocm-core-devel" in bundle.packages["rpm"]
    assert len(bundle.packages["deb"]) == len(bundle.packages["rpm"]) > 1
    apt = AptClient(tmp_path / "apt", (Path(bundle.dest) / "rocm.list").read_text())
    shutil.copy("/var/lib/dpkg/status", apt.root / "var/lib/dpkg/status")
    assert apt.run("update").returncode == 0
    install = apt.run("install", "-s", "rocm-core-dev")
    assert install.returncode == 0, install.stdout + install.stderr
    assert planned_installs(install.stdout) == set(bundle.packages["deb"])


def test_a_debian_dev_name_means_the_rpm_devel_package_too(out, tmp_path):
    typed = export_closure(str(out), str(tmp_path / "dev"), ["rocm-core-dev"])
    definition = export_closure(str(out), str(tmp_path / "devel"), ["rocm-core-devel"])
    assert typed.packages == definition.packages


def test_a_per_target_definition_name_brings_its_host_and_every_target(out, tmp_path):
    bundle = export_closure(str(out), str(tmp_path / "fft"), ["rocm-fft"])
    for fmt in ("deb", "rpm"):
        assert {"rocm-fft", "rocm-fft7.1", "rocm-fft-host7.1", "rocm-fft7.1-gfx942",
                "rocm-fft7.1-gfx1100"} <= set(bundle.packages[fmt]), bundle.packages[fmt]
        assert _unversioned(bundle, fmt) == {"rocm-fft"}


def test_a_family_name_is_the_same_in_either_case(out, tmp_path):
    lower = export_closure(str(out), str(tmp_path / "lower"), ["rocm-gfx110x"])
    upper = export_closure(str(out), str(tmp_path / "upper"), ["rocm-gfx110X"])
    assert lower.packages == upper.packages and FAMILY in upper.packages["rpm"]


def test_a_misspelled_definition_name_is_refused_with_both_spellings(out, tmp_path, capsys):
    assert main(["export", str(out), str(tmp_path / "b"), "rocm-core-devl"]) == 2
    err = capsys.readouterr().err
    assert "rocm-core-devl: no package of that name in any release of OUT; closest: rocm-core-devel, rocm-core-dev" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []
