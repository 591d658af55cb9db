"""`rocpkg repo OUT --base-url URL --sign-key K` writes the setup packages `<top>-repo`
(.deb and .rpm): installed into a throwaway root, they are all apt, dnf and zypper need
to install from the repository with every signature checked. The paths they configure
are absolute (/usr/share/keyrings, /etc/pki/rpm-gpg), so the clients run in a mount
namespace where the root's files lie over the machine's (as in a chroot)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from repo_helpers import META, META_CLOSURE, AptClient, ZypperClient, differing_signatures, planned_installs, write_chain
from rocpkg.cli.main import main
from rocpkg.formats.deb import read_deb_control
from rocpkg.formats.rpm import package_from_header, read_rpm
from rocpkg.repo.index import publish_repositories
from rocpkg.repo.setup import top_metapackage

SDE = 1700000000


def _can_unshare() -> bool:
    return shutil.which("unshare") is not None and \
        subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


needs_namespace = pytest.mark.skipif(not _can_unshare(), reason="needs a mount namespace (unshare -m, root)")


def publish(out: Path, signer, base_url: str) -> dict[str, str]:
    snippets, _ = publish_repositories(str(out), suite="stable", signer=signer, source_date_epoch=SDE,
                                       base_url=base_url)
    return snippets


@pytest.fixture(scope="module")
def out(tmp_path_factory, signer) -> Path:
    """The test chain in both formats, indexed and signed, served at file://OUT."""
    out = tmp_path_factory.mktemp("setup") / "out"
    write_chain(out, "deb")
    write_chain(out, "rpm")
    publish(out, signer, f"file://{out}")
    return out


def _in_namespace(*mounts: tuple[str, str]) -> tuple[str, ...]:
    """A command prefix: a private mount namespace with each (lower, over) overlaid,
    the root's directory on top of the machine's."""
    script = " && ".join(f"mount -t overlay overlay -o lowerdir={lower}:{over} {over}" for lower, over in mounts)
    return ("unshare", "-m", "sh", "-c", f'{script} && exec "$@"', "sh")


def _dpkg_install(root: Path, deb: Path, *options: str) -> subprocess.CompletedProcess:
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"):
        (root / d).mkdir(parents=True, exist_ok=True)
    return subprocess.run(["dpkg", f"--root={root}", "--log=/dev/null", "--force-script-chrootless",
                           "--force-not-root", *options, "-i", str(deb)], capture_output=True, text=True)


def _rpm(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["rpm", "--root", str(root), *args], capture_output=True, text=True)


def test_the_stable_names_are_the_indexed_packages(out):
    assert (out / "rocm-repo.deb").read_bytes() == (out / "deb/pool/main/rocm-repo_1-1_all.deb").read_bytes()
    assert (out / "rocm-repo.rpm").read_bytes() == (out / "rpm/noarch/rocm-repo-1-1.noarch.rpm").read_bytes()
    assert package_from_header(read_rpm(str(out / "rocm-repo.rpm"))).header_signed
    assert "Package: rocm-repo\n" in (out / "deb/dists/stable/main/binary-amd64/Packages").read_text()


def test_the_deb_ships_a_deb822_source_and_its_keyring_as_conffile(out):
    listing = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(out / "rocm-repo.deb")], capture_output=True).stdout
    conffiles = subprocess.run(["tar", "-xO", "./conffiles"], input=listing, capture_output=True).stdout.decode()
    assert conffiles == "/etc/apt/sources.list.d/rocm.sources\n"
    sources = subprocess.run(f"dpkg-deb --fsys-tarfile {out / 'rocm-repo.deb'} | tar -xO ./etc/apt/sources.list.d/rocm.sources",
                             shell=True, capture_output=True, text=True).stdout
    assert sources.splitlines() == ["Types: deb", f"URIs: file://{out}/deb", "Suites: stable", "Components: main",
                                    "Signed-By: /usr/share/keyrings/rocm-archive-keyring.gpg"]
    assert read_deb_control(str(out / "rocm-repo.deb"))["Architecture"] == "all"


def test_the_rpm_ships_dnf_and_zypper_repo_files_as_config_noreplace(out):
    query = subprocess.run(["rpm", "-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", str(out / "rocm-repo.rpm")],
                           capture_output=True, text=True)
    assert query.stdout.splitlines() == ["cn /etc/pki/rpm-gpg/RPM-GPG-KEY-rocm", "cn /etc/yum.repos.d/rocm.repo",
                                         "cn /etc/zypp/repos.d/rocm.repo"]


@needs_namespace
def test_apt_installs_from_what_the_setup_deb_configured(out, tmp_path):
    apt = AptClient(tmp_path / "root", "")        # no source but what the setup package installs
    installed = _dpkg_install(apt.root, out / "rocm-repo.deb")
    assert installed.returncode == 0, installed.stderr
    namespace = _in_namespace((f"{apt.root}/usr/share/keyrings", "/usr/share/keyrings"))
    update = apt.run("update", wrapper=namespace)
    assert update.returncode == 0 and "NO_PUBKEY" not in update.stderr and "W:" not in update.stderr, \
        update.stdout + update.stderr
    install = apt.run("install", "-s", META, wrapper=namespace)
    assert install.returncode == 0, install.stdout + install.stderr
    assert planned_installs(install.stdout) == META_CLOSURE
    unconfigured = apt.run("update")            # the machine's keyrings alone: the repository is refused
    assert unconfigured.returncode != 0 or "NO_PUBKEY" in unconfigured.stdout + unconfigured.stderr


@needs_namespace
def test_dnf_installs_from_what_the_setup_rpm_configured(out, tmp_path):
    root = tmp_path / "root"
    assert _rpm(root, "-i", str(out / "rocm-repo.rpm")).returncode == 0
    config = tmp_path / "dnf.conf"
    config.write_text(f"[main]\ninstall_weak_deps=False\ncachedir={tmp_path / 'cache'}\n")
    install = subprocess.run([*_in_namespace((f"{root}/etc", "/etc")), "dnf", "-y", "--config", str(config),
                              "--installroot", str(root), f"--setopt=reposdir={root}/etc/yum.repos.d",
                              "--releasever=1", "install", META], capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    names = set(_rpm(root, "-qa", "--qf", "%{NAME}\\n").stdout.split()) - {"gpg-pubkey"}
    assert names == META_CLOSURE | {"rocm-repo"}


def test_zypper_installs_from_what_the_setup_rpm_configured_once_its_key_is_trusted(out, tmp_path):
    if shutil.which("zypper") is None:
        pytest.skip("zypper is not installed")
    root = tmp_path / "root"
    assert _rpm(root, "-i", str(out / "rocm-repo.rpm")).returncode == 0
    # the key the setup package installed, trusted as a SLES user does it (rpm --import)
    zypper = ZypperClient(root, [], root / "etc/pki/rpm-gpg/RPM-GPG-KEY-rocm")
    install = zypper.run("install", "rocm-gfx110X")
    assert install.returncode == 0, install.stdout + install.stderr
    assert zypper.installed() == META_CLOSURE | {"rocm-repo"}


def test_a_users_edit_survives_an_upgrade_to_the_next_setup_package(out, tmp_path, signer):
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    root_deb, root_rpm = tmp_path / "deb-root", tmp_path / "rpm-root"
    root_deb.mkdir()
    assert _dpkg_install(root_deb, moved / "rocm-repo.deb").returncode == 0
    assert _rpm(root_rpm, "-i", str(moved / "rocm-repo.rpm")).returncode == 0
    edited = "# kept by the user\n"
    for path in (root_deb / "etc/apt/sources.list.d/rocm.sources", root_rpm / "etc/yum.repos.d/rocm.repo"):
        path.write_text(edited)
    publish(moved, signer, "https://example.org/rocm")        # new URL: the next version
    assert not (moved / "deb/pool/main/rocm-repo_1-1_all.deb").exists()
    assert (moved / "deb/pool/main/rocm-repo_2-1_all.deb").exists()
    assert (moved / "rpm/noarch/rocm-repo-2-1.noarch.rpm").exists()
    upgrade = _dpkg_install(root_deb, moved / "rocm-repo.deb", "--force-confold")
    assert upgrade.returncode == 0, upgrade.stderr
    assert _rpm(root_rpm, "-U", str(moved / "rocm-repo.rpm")).returncode == 0
    assert (root_deb / "etc/apt/sources.list.d/rocm.sources").read_text() == edited
    assert (root_rpm / "etc/yum.repos.d/rocm.repo").read_text() == edited
    assert "https://example.org/rocm/rpm" in (root_rpm / "etc/yum.repos.d/rocm.repo.rpmnew").read_text()
    assert "https://example.org/rocm/rpm" in (root_rpm / "etc/zypp/repos.d/rocm.repo").read_text()


def test_setup_packages_are_reproducible_and_kept_when_nothing_changed(out, tmp_path, signer):
    again = tmp_path / "out"
    write_chain(again, "deb")
    write_chain(again, "rpm")
    publish(again, signer, f"file://{out}")
    for name in ("rocm-repo.deb", "rocm-repo.rpm"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), \
            differing_signatures(out, again, ({name: "first"}, {name: "second"}), signer.gnupg_home)
    before = {p: p.stat().st_mtime_ns for p in again.rglob("rocm-repo*")}
    publish(again, signer, f"file://{out}")
    assert {p: p.stat().st_mtime_ns for p in again.rglob("rocm-repo*") if "pool" in str(p) or "noarch" in str(p)} \
        == {p: t for p, t in before.items() if "pool" in str(p) or "noarch" in str(p)}


def test_an_unsigned_repository_gets_no_setup_package(tmp_path, capsys):
    out = tmp_path / "out"
    write_chain(out, "deb")
    assert main(["repo", str(out), "--base-url", "https://example.org/rocm"]) == 0
    assert "setup packages: none" in capsys.readouterr().out
    assert not list(out.rglob("rocm-repo*"))


@pytest.mark.parametrize("url", ["https://example.org/ro cm", "https://example.org/x\nTypes: deb"])
def test_a_base_url_with_a_space_or_a_newline_is_refused(tmp_path, signer, capsys, url):
    out = tmp_path / "out"
    write_chain(out, "deb")
    code = main(["repo", str(out), "--base-url", url, "--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id])
    assert code == 2 and "--base-url" in capsys.readouterr().err
    assert not list(out.rglob("rocm-repo*")) and not (out / "deb/dists").exists()


def test_the_top_meta_package_is_the_shortest_one_nothing_depends_on(tmp_path):
    def meta(name, depends=(), family=""):
        return {"name": name, "format": "deb", "version": "7.1.0", "release": "1", "kind": "meta", "target": "",
                "family": family, "file": f"deb/pool/main/{name}_7.1.0-1_all.deb", "size": 1, "sha256": "0" * 64,
                "depends": list(depends)}
    doc = {"schema": "rocpkg-manifest/1", "version": "7.1.0", "release": "1", "plan": "p", "releases": [],
           "packages": [meta("amdrocm", ["amdrocm7.1 (= 7.1.0-1)"]), meta("amdrocm7.1"), meta("amdrocm-core-sdk"),
                        meta("rocm-gfx110x", ["amdrocm7.1-gfx110x (= 7.1.0-1)"], family="gfx110X")]}
    (tmp_path / "manifest.json").write_text(__import__("json").dumps(doc))
    assert top_metapackage(str(tmp_path)) == "amdrocm"
    assert top_metapackage(str(tmp_path / "nothing")) == "rocm"


def test_a_built_release_records_its_setup_packages_and_keeps_them_through_prune(small_release, tmp_path, signer):
    out = tmp_path / "out"
    assert main(["build", "-a", str(small_release), "-o", str(out), "-q", "-j", "2"]) == 0
    keys = ["--gpg-home", signer.gnupg_home, "--sign-key", signer.key_id]
    assert main(["repo", str(out), "--base-url", "https://example.org/rocm", *keys]) == 0
    doc = __import__("json").loads((out / "manifest.json").read_text())
    setup = sorted((e["format"], e["file"]) for e in doc["packages"] if e["kind"] == "setup")
    assert setup == [("deb", "deb/pool/main/rocm-repo_1-1_all.deb"), ("rpm", "rpm/noarch/rocm-repo-1-1.noarch.rpm")]
    assert main(["verify", str(out)]) == 0
    assert main(["prune", str(out), "--keep", "1", *keys]) == 0
    assert main(["verify", str(out)]) == 0
    assert (out / "deb/pool/main/rocm-repo_1-1_all.deb").exists() and os.path.exists(out / "rocm-repo.rpm")


def test_a_changed_stable_name_copy_is_tampered_and_not_published(small_release, tmp_path, signer):
    out = tmp_path / "out"
    assert main(["build", "-a", str(small_release), "-o", str(out), "-q", "-j", "2", "--formats", "rpm"]) == 0
    assert main(["repo", str(out), "--base-url", "https://example.org/rocm", "--gpg-home", signer.gnupg_home,
                 "--sign-key", signer.key_id]) == 0
    copy = out / "rocm-repo.rpm"
    copy.write_bytes(copy.read_bytes()[:-1] + b"X")
    assert main(["publish", str(out), str(tmp_path / "www")]) == 2
    assert not (tmp_path / "www").exists()
