"""The native RPM writer, checked with the real tools: rpm -K / -q / -i / -V / -e in a
throwaway root, rpmlint, and the rpmfile reader.

The packages are PackageSpec objects built by hand over small files in a temporary
directory. A "base-system" package, written by the same writer, stands for the base
system of the throwaway root: it provides glibc and /bin/sh and ships the host's dash,
libc and the few coreutils the shared maintainer scripts call, so that rpm really runs
the %post/%preun scriptlets inside the root.
"""
from __future__ import annotations

import filecmp
import io
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import rpmfile
import zstandard

from rocpkg.plan.layout import alternatives, priority
from rocpkg.formats import rpm
from rocpkg.formats.rpm import write as rpm_write
from rocpkg.errors import RocpkgInputError
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, FileEntry, PackageSpec
from rocpkg.formats.render import render_spec

SDE = 1_700_000_000
PREFIX = "/opt/rocm-7.1.0"
RPMLINTRC = os.path.join(os.path.dirname(__file__), "..", "rpmlint", "rocpkg.rpmlintrc")
ENV = dict(os.environ, TZ="UTC", LC_ALL="C")


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, env=ENV)


def options(compression: str = "zstd") -> BuildOptions:
    levels = {"zstd": 3, "xz": 2, "gzip": 6}
    return BuildOptions(source_date_epoch=SDE, compression=compression,
                        compression_level=levels[compression])


def source(directory, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def file_entry(path: str, src: str, mode: int = 0o644) -> FileEntry:
    return FileEntry(path, FILE, mode, src, os.path.getsize(src))


def spec(name: str, files=(), **fields) -> PackageSpec:
    defaults = dict(
        format="rpm", name=name, version="7.1.0", release="1", arch="x86_64", kind="files",
        summary=f"{name} test package", description=f"The {name} package, built by rocpkg's tests.",
        maintainer="ROCm Packaging <packaging@example.com>", vendor="Example", license="MIT",
        homepage="https://example.com/rocm", files=list(files),
    )
    defaults.update(fields)
    return PackageSpec(**defaults)


def base_system_spec(src_dir) -> PackageSpec:
    """dash, libc, the dynamic loader and ln/readlink/rm from the host, merged-/usr style."""
    files = [
        FileEntry("/bin", SYMLINK, 0o777, link_target="usr/bin"),
        FileEntry("/lib", SYMLINK, 0o777, link_target="usr/lib"),
        FileEntry("/lib64", SYMLINK, 0o777, link_target="usr/lib64"),
        FileEntry("/usr/bin/sh", SYMLINK, 0o777, link_target="dash"),
        FileEntry("/etc/alternatives", DIR, 0o755),
        FileEntry("/var/lib/dpkg", DIR, 0o755),
    ]
    host = {
        "/usr/bin/dash": shutil.which("dash"),
        "/usr/bin/ln": shutil.which("ln"),
        "/usr/bin/readlink": shutil.which("readlink"),
        "/usr/bin/rm": shutil.which("rm"),
        "/usr/bin/rmdir": shutil.which("rmdir"),
        "/usr/bin/update-alternatives": shutil.which("update-alternatives"),
        "/usr/lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
    }
    for path, host_path in host.items():
        copy = os.path.join(src_dir, os.path.basename(path))
        shutil.copyfile(os.path.realpath(host_path), copy)
        files.append(file_entry(path, copy, 0o755))
    return spec("base-system", sorted(files, key=lambda e: e.path), kind="files",
                summary="Stand-in base system for a throwaway rpm root",
                provides=["/bin/sh", "glibc = 2.36", "libc.so.6()(64bit)"])


@dataclass
class Built:
    base: str
    tool: str
    hooks: str
    meta: str

    def all(self) -> list[str]:
        return [self.base, self.tool, self.hooks, self.meta]


def tool_spec(src_dir) -> PackageSpec:
    """Files (one empty), directories, a symlink, an executable and a shared library (so
    %post and %postun refresh the linker cache)."""
    script = source(src_dir, "rocm-smi", b"#!/bin/sh\necho 'GPU 0: ready'\n")
    lib = source(src_dir, "librocm-core.so.1.0.0", bytes(range(256)) * 64)
    doc = source(src_dir, "README", "Ünïcode docs\n".encode())
    empty = source(src_dir, "empty.conf", b"")
    files = [
        FileEntry(PREFIX, DIR, 0o755),
        FileEntry(f"{PREFIX}/bin", DIR, 0o755),
        file_entry(f"{PREFIX}/bin/rocm-smi", script, 0o755),
        FileEntry(f"{PREFIX}/lib", DIR, 0o755),
        FileEntry(f"{PREFIX}/lib/librocm-core.so.1", SYMLINK, 0o777,
                  link_target="librocm-core.so.1.0.0"),
        file_entry(f"{PREFIX}/lib/librocm-core.so.1.0.0", lib, 0o755),
        FileEntry(f"{PREFIX}/share", DIR, 0o755),
        FileEntry(f"{PREFIX}/share/doc", DIR, 0o755),
        file_entry(f"{PREFIX}/share/doc/README", doc),
        file_entry(f"{PREFIX}/share/empty.conf", empty),
    ]
    return spec("rocm-core7.1", files, depends=["glibc >= 2.28"], provides=["rocm-core-abi = 1"],
                prefix=PREFIX, scripts={"postinst": "postinst.j2", "postrm": "postrm.j2"},
                links=alternatives(PREFIX), link_priority=priority("7.1.0"))


def hooks_spec(src_dir) -> PackageSpec:
    """Maintainer scripts: %post links /opt/rocm to the release, %preun removes it."""
    conf = source(src_dir, "rocm.conf", b"/opt/rocm-7.1.0/lib\n")
    files = [FileEntry(f"{PREFIX}/etc", DIR, 0o755), file_entry(f"{PREFIX}/etc/rocm.conf", conf)]
    return spec("rocm-hooks7.1", files, prefix=PREFIX, depends=["rocm-core7.1 = 7.1.0-1"],
                scripts={"postinst": "postinst.j2", "prerm": "prerm.j2"},
                links=alternatives(PREFIX), link_priority=priority("7.1.0"))


def meta_spec() -> PackageSpec:
    """No files: exact pins and a rich dependency."""
    return spec("rocm7.1", kind="meta",
                depends=["rocm-core7.1 = 7.1.0-1", "rocm-hooks7.1 = 7.1.0-1", "(glibc or musl-libc)"],
                recommends=["rocm-docs"], suggests=["rocm-examples >= 7.1"],
                conflicts=["rocm-legacy < 6.0"], obsoletes=["rocm-old < 7.0"])


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return tmp_path_factory.mktemp("sources")


@pytest.fixture(scope="module")
def built(tmp_path_factory, sources) -> Built:
    out = str(tmp_path_factory.mktemp("rpms"))
    write = lambda s: rpm.write_rpm(s, out, options()).path  # noqa: E731
    return Built(base=write(base_system_spec(sources)), tool=write(tool_spec(sources)),
                 hooks=write(hooks_spec(sources)), meta=write(meta_spec()))


def query(path: str, *args: str) -> str:
    return run("rpm", "-qp", *args, path).stdout


def empty_rpm_root(path) -> str:
    """An empty rpm root at path with an rpmdb and the /dev/null that shell scriptlets use
    (skips the test unless run as root: rpm chroots for scriptlets)."""
    if os.geteuid() != 0:
        pytest.skip("installing into an rpm root needs root (rpm chroots for scriptlets)")
    path = str(path)
    run("rpm", "--root", path, "--initdb")
    os.makedirs(f"{path}/dev")
    os.mknod(f"{path}/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


@pytest.fixture
def root(tmp_path) -> str:
    return empty_rpm_root(tmp_path / "root")


# -- what rpm sees --------------------------------------------------------------------


def test_every_package_passes_rpm_digest_checks(built):
    for path in built.all():
        result = run("rpm", "-K", "--nosignature", path)
        assert result.stdout.strip().endswith("digests OK"), result.stdout
        verbose = run("rpm", "-Kv", "--nosignature", path).stdout
        for check in ("Header SHA256 digest: OK", "Header SHA1 digest: OK", "Payload SHA256 digest: OK"):
            assert check in verbose
        # rpm >= 4.14's scheme: no v3 MD5 over header + payload (rpmsign(8): redundant where
        # a payload digest exists), so no digest pass of its own
        assert "MD5" not in verbose


def test_rpm_shows_the_planned_metadata(built):
    info = query(built.tool, "-i")
    for line in ("Name        : rocm-core7.1", "Version     : 7.1.0", "Release     : 1",
                 "Architecture: x86_64", "License     : MIT", "Vendor      : Example",
                 "URL         : https://example.com/rocm", "Build Host  : localhost",
                 "Source RPM  : rocm-core7.1-7.1.0-1.src.rpm",
                 "Summary     : rocm-core7.1 test package",
                 "Build Date  : Tue Nov 14 22:13:20 2023"):
        assert line in info
    assert "The rocm-core7.1 package, built by rocpkg's tests." in info


def test_rpm_lists_the_planned_files_with_modes_and_links(built, sources):
    listing = query(built.tool, "-lv")
    lines = {line.split()[-1] if "->" not in line else line.split()[-3]: line
             for line in listing.splitlines()}
    assert sorted(lines) == sorted(e.path for e in tool_spec(sources).files)
    assert lines[f"{PREFIX}/bin/rocm-smi"].startswith("-rwxr-xr-x")
    assert lines[f"{PREFIX}/share/doc/README"].startswith("-rw-r--r--")
    assert lines[PREFIX].startswith("drwxr-xr-x")
    assert lines[f"{PREFIX}/lib/librocm-core.so.1"].startswith("lrwxrwxrwx")
    assert lines[f"{PREFIX}/lib/librocm-core.so.1"].endswith("-> librocm-core.so.1.0.0")
    assert " 16384 " in lines[f"{PREFIX}/lib/librocm-core.so.1.0.0"]


def test_package_owns_exactly_its_planned_directories(built):
    owned_dirs = [line.split()[-1] for line in query(built.tool, "-lv").splitlines()
                  if line.startswith("d")]
    assert owned_dirs == [PREFIX, f"{PREFIX}/bin", f"{PREFIX}/lib", f"{PREFIX}/share",
                          f"{PREFIX}/share/doc"]


def test_requires_and_provides_are_as_planned(built):
    requires = query(built.tool, "--requires").splitlines()
    assert "glibc >= 2.28" in requires
    assert "rpmlib(CompressedFileNames) <= 3.0.4-1" in requires
    assert "rpmlib(FileDigests) <= 4.6.0-1" in requires
    assert "rpmlib(PayloadFilesHavePrefix) <= 4.0-1" in requires
    assert "rpmlib(PayloadIsZstd) <= 5.4.18-1" in requires
    assert not any("RichDependencies" in r or "LargeFiles" in r for r in requires)
    provides = query(built.tool, "--provides").splitlines()
    assert provides == ["rocm-core-abi = 1", "rocm-core7.1 = 7.1.0-1",
                        "rocm-core7.1(x86-64) = 7.1.0-1"]


def test_meta_package_pins_members_and_keeps_rich_dependencies(built):
    requires = query(built.meta, "--requires").splitlines()
    assert "rocm-core7.1 = 7.1.0-1" in requires
    assert "rocm-hooks7.1 = 7.1.0-1" in requires
    assert "(glibc or musl-libc)" in requires
    assert "rpmlib(RichDependencies) <= 4.12.0-1" in requires
    assert query(built.meta, "-l").strip() == "(contains no files)"
    assert query(built.meta, "--recommends").split() == ["rocm-docs"]
    assert query(built.meta, "--suggests").strip() == "rocm-examples >= 7.1"
    assert query(built.meta, "--conflicts").strip() == "rocm-legacy < 6.0"
    assert query(built.meta, "--obsoletes").strip() == "rocm-old < 7.0"


def test_scriptlets_come_from_the_shared_script_templates(built):
    scripts = query(built.hooks, "--scripts")
    assert "postinstall scriptlet (using /bin/sh):" in scripts
    assert "--install /opt/rocm rocm /opt/rocm-7.1.0 70100" in scripts
    assert "preuninstall scriptlet (using /bin/sh):" in scripts
    assert 'if [ "$1" = 0 ]; then' in scripts
    requires = query(built.hooks, "--requires").splitlines()
    assert requires.count("/bin/sh") == 2       # Requires(post) and Requires(preun)
    assert query(built.meta, "--scripts").strip() == ""


def test_changelog_is_dated_from_source_date_epoch(built):
    assert query(built.tool, "--changelog").splitlines()[:2] == [
        "* Tue Nov 14 2023 ROCm Packaging <packaging@example.com> - 7.1.0-1",
        "- rocm-core7.1 7.1.0, packaged by rocpkg",
    ]


# -- installing -----------------------------------------------------------------------


def test_packages_install_verify_and_erase_in_a_fresh_root(built, root):
    run("rpm", "--root", root, "-i", *built.all())          # dependencies checked
    installed = run("rpm", "--root", root, "-qa", "--qf", "%{NAME}\n").stdout.split()
    assert sorted(installed) == ["base-system", "rocm-core7.1", "rocm-hooks7.1", "rocm7.1"]
    assert run("rpm", "--root", root, "-Va").stdout == ""
    with open(f"{root}{PREFIX}/bin/rocm-smi", "rb") as f:
        assert f.read() == b"#!/bin/sh\necho 'GPU 0: ready'\n"
    assert os.readlink(f"{root}{PREFIX}/lib/librocm-core.so.1") == "librocm-core.so.1.0.0"
    assert os.stat(f"{root}{PREFIX}/bin/rocm-smi").st_mtime == SDE
    run("rpm", "--root", root, "-e", "rocm7.1", "rocm-hooks7.1", "rocm-core7.1")
    assert not os.path.exists(f"{root}{PREFIX}")
    assert run("rpm", "--root", root, "-qa", "--qf", "%{NAME}\n").stdout.split() == ["base-system"]


def test_scriptlets_run_inside_the_root(built, root):
    run("rpm", "--root", root, "-i", built.base, built.tool, built.hooks)
    assert os.readlink(f"{root}/etc/alternatives/rocm") == "/opt/rocm-7.1.0"  # %post
    run("rpm", "--root", root, "-e", "rocm-hooks7.1")
    assert not os.path.lexists(f"{root}/opt/rocm")                # %preun


def test_dnf_installs_the_packages_into_a_fresh_root(built, root):
    result = run("dnf", "-y", f"--installroot={root}", "--releasever=1", "--disablerepo=*",
                 "--setopt=reposdir=/nonexistent", "--setopt=install_weak_deps=False",
                 "install", *built.all())
    assert "Complete!" in result.stdout
    assert "scriptlet failed" not in result.stdout + result.stderr
    assert os.readlink(f"{root}/etc/alternatives/rocm") == "/opt/rocm-7.1.0"
    assert run("rpm", "--root", root, "-Va").stdout == ""


def test_missing_dependency_is_refused_by_rpm(built, root):
    result = run("rpm", "--root", root, "-i", built.meta, check=False)
    assert result.returncode != 0
    assert "rocm-core7.1 = 7.1.0-1 is needed by rocm7.1-7.1.0-1.x86_64" in result.stderr


@pytest.mark.parametrize("compression", ["zstd", "xz", "gzip"])
def test_each_payload_compression_installs(tmp_path, sources, root, compression):
    base = rpm.write_rpm(base_system_spec(sources), str(tmp_path), options(compression)).path
    tool = rpm.write_rpm(tool_spec(sources), str(tmp_path), options(compression)).path
    assert query(tool, "--qf", "%{PAYLOADCOMPRESSOR}") == compression
    run("rpm", "--root", root, "-i", base, tool)
    assert run("rpm", "--root", root, "-V", "rocm-core7.1").stdout == ""


# -- other readers --------------------------------------------------------------------


def test_rpmlint_reports_no_errors(built):
    # base-system is the test's stand-in made of host binaries, not a rocpkg product.
    result = run("rpmlint", "--ignore-unused-rpmlintrc", "-r", RPMLINTRC,
                 built.tool, built.hooks, built.meta, check=False)
    assert " 0 errors" in result.stdout, result.stdout


def test_rpmfile_reads_every_package(built):
    for path in built.all():
        with rpmfile.open(path) as package:
            assert package.headers["name"].decode() == os.path.basename(path).split("-7.1.0")[0]
            package.getmembers()
    with rpmfile.open(built.tool) as package:
        names = [m.name for m in package.getmembers()]
        assert f".{PREFIX}/bin/rocm-smi" in names
        data = package.extractfile(f".{PREFIX}/bin/rocm-smi").read()
        assert data == b"#!/bin/sh\necho 'GPU 0: ready'\n"


def test_reader_finds_the_header_range_and_payload(built):
    info = rpm.read_rpm(built.tool)
    assert info.name == "rocm-core7.1" and info.evr == "7.1.0-1"
    assert info.header[rpm.Tag.ARCH] == "x86_64"
    assert info.header_start % 8 == 0 and info.header_start > rpm.LEAD_SIZE
    assert info.payload_offset == info.header_end
    assert info.signature[rpm.SigTag.SIZE] == [info.size - info.header_start]
    with open(built.tool, "rb") as f:
        f.seek(info.payload_offset)
        assert f.read(4) == b"\x28\xb5\x2f\xfd"     # zstd frame magic


# -- reproducibility and failures ------------------------------------------------------


def test_same_inputs_and_source_date_epoch_give_identical_bytes(tmp_path, sources):
    first = rpm.write_rpm(tool_spec(sources), str(tmp_path / "a"), options())
    second = rpm.write_rpm(tool_spec(sources), str(tmp_path / "b"),
                           replace(options(), threads=1))
    assert filecmp.cmp(first.path, second.path, shallow=False)
    assert first.sha256 == second.sha256 and first.size == os.path.getsize(first.path)


def test_a_vanished_source_names_package_and_path_and_leaves_no_file(tmp_path):
    victim = source(tmp_path, "victim.bin", b"x" * 100)
    package = spec("rocm-victim7.1", [FileEntry(PREFIX, DIR, 0o755),
                                      file_entry(f"{PREFIX}/victim.bin", victim)])
    os.unlink(victim)
    out = tmp_path / "out"
    with pytest.raises(RocpkgInputError) as error:
        rpm.write_rpm(package, str(out), options())
    assert error.value.problems[0][0] == f"rocm-victim7.1: {PREFIX}/victim.bin"
    assert not out.exists() or os.listdir(out) == []


def test_a_source_that_shrinks_after_it_is_opened_leaves_no_partial_rpm(tmp_path, monkeypatch):
    victim = source(tmp_path, "victim.bin", b"x" * 100_000)
    package = spec("rocm-victim7.1", [file_entry(f"{PREFIX}/victim.bin", victim)])
    from rocpkg.formats.filelist import PackageSources

    opened = PackageSources.open

    def open_then_truncate(*args):
        source = opened(*args)
        os.truncate(victim, 10)             # another process rewrites the artifact
        return source

    monkeypatch.setattr(PackageSources, "open", open_then_truncate)
    out = tmp_path / "out"
    with pytest.raises(RocpkgInputError, match="shrank while being packed") as error:
        rpm.write_rpm(package, str(out), options())
    assert error.value.problems[0][0] == f"rocm-victim7.1: {PREFIX}/victim.bin"
    assert os.listdir(out) == []


def test_a_source_that_changed_size_is_refused(tmp_path):
    grown = source(tmp_path, "grown.bin", b"x" * 100)
    package = spec("rocm-grown7.1", [replace(file_entry(f"{PREFIX}/grown.bin", grown), size=99)])
    with pytest.raises(RocpkgInputError, match="has 100 bytes, planned 99"):
        rpm.write_rpm(package, str(tmp_path), options())


@pytest.mark.parametrize("system_dir", ["/opt", "/usr", "/usr/bin"])
def test_owning_a_system_directory_is_refused(tmp_path, system_dir):
    package = spec("rocm-bad7.1", [FileEntry(system_dir, DIR, 0o755)])
    with pytest.raises(RocpkgInputError, match="system directory"):
        rpm.write_rpm(package, str(tmp_path), options())
    assert os.listdir(tmp_path) == []


def test_a_corrupt_file_is_refused_without_huge_allocations(tmp_path, built):
    with open(built.tool, "rb") as f:
        good = f.read()
    corrupt = tmp_path / "corrupt.rpm"
    # claim 2^28 - 1 data bytes (rpm's limit) in the main header of a 10 kB file
    start = rpm.read_rpm(built.tool).header_start
    corrupt.write_bytes(good[:start + 12] + b"\x0f\xff\xff\xff" + good[start + 16:])
    with pytest.raises(RocpkgInputError, match="runs past end of file"):
        rpm.read_rpm(corrupt)
    (tmp_path / "short.rpm").write_bytes(good[:200])
    with pytest.raises(RocpkgInputError):
        rpm.read_rpm(tmp_path / "short.rpm")
    (tmp_path / "text.rpm").write_bytes(b"hello" * 100)
    with pytest.raises(RocpkgInputError, match="bad lead magic"):
        rpm.read_rpm(tmp_path / "text.rpm")


# -- files of 4 GiB and more ------------------------------------------------------------

LARGE = 4 * 2**30 + 2**29       # 4.5 GiB


def test_a_sparse_4_5_gib_file_installs_and_verifies(tmp_path, sources, root):
    free = shutil.disk_usage(tmp_path).free
    if free < 12 * 2**30:
        pytest.skip(f"needs 12 GiB free in {tmp_path} (rpm writes the file out), has {free >> 30} GiB")
    big = str(tmp_path / "big.bin")
    with open(big, "wb") as f:
        f.write(b"head")
        f.truncate(LARGE - 4)
        f.seek(LARGE - 4)
        f.write(b"tail")
    small = source(tmp_path, "small.txt", b"small\n")
    package = spec("rocm-large7.1", [FileEntry(PREFIX, DIR, 0o755),
                                     file_entry(f"{PREFIX}/big.bin", big),
                                     file_entry(f"{PREFIX}/small.txt", small)])
    path = rpm.write_rpm(package, str(tmp_path / "out"), options()).path
    info = rpm.read_rpm(path)
    assert info.header[rpm.Tag.LONGFILESIZES] == [0, LARGE, 6]
    assert rpm.Tag.FILESIZES not in info.header
    assert info.header[rpm.Tag.LONGSIZE] == [LARGE + 6]
    assert info.signature[rpm.SigTag.LONGARCHIVESIZE][0] > LARGE
    assert "rpmlib(LargeFiles) <= 4.12.0-1" in query(path, "--requires").splitlines()
    with open(path, "rb") as f:         # rpm's stripped cpio: magic + file index only
        f.seek(info.payload_offset)
        first = zstandard.ZstdDecompressor().stream_reader(f).read(16)
    assert first == b"07070X00000000\0\0"
    assert run("rpm", "-K", "--nosignature", path).stdout.strip().endswith("digests OK")
    base = rpm.write_rpm(base_system_spec(sources), str(tmp_path / "out"), options()).path
    run("rpm", "--root", root, "-i", base, path)
    assert os.path.getsize(f"{root}{PREFIX}/big.bin") == LARGE
    assert run("rpm", "--root", root, "-V", "rocm-large7.1").stdout == ""


# -- signing later, in place ------------------------------------------------------------


def test_a_header_signature_fits_in_the_reserved_space(tmp_path, built, root):
    gnupg = tmp_path / "gnupg"
    gnupg.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(gnupg), "--batch", "--pinentry-mode", "loopback",
           "--passphrase", ""]
    run(*gpg, "--quick-gen-key", "rocpkg test <test@example.com>", "rsa2048", "sign", "never")
    (tmp_path / "key.asc").write_text(run(*gpg, "--armor", "--export").stdout)
    signed = str(tmp_path / os.path.basename(built.tool))
    shutil.copyfile(built.tool, signed)
    before = rpm.read_rpm(signed)
    with open(signed, "rb") as f:
        f.seek(before.header_start)
        (tmp_path / "header").write_bytes(f.read(before.header_end - before.header_start))
    run(*gpg, "--digest-algo", "sha256", "--detach-sign", "-o", str(tmp_path / "header.sig"),
        str(tmp_path / "header"))
    rpm.replace_signature(signed, {rpm.SigTag.RSA: (rpm.TYPE_BIN, (tmp_path / "header.sig").read_bytes())})
    after = rpm.read_rpm(signed)
    assert after.size == before.size and after.header_start == before.header_start
    assert len(after.signature[rpm.SigTag.RESERVEDSPACE]) < len(before.signature[rpm.SigTag.RESERVEDSPACE])
    run("rpm", "--root", root, "--import", str(tmp_path / "key.asc"))
    checked = run("rpm", "--root", root, "-Kv", signed).stdout
    assert "Header V4 RSA/SHA256 Signature, key ID" in checked and ": OK" in checked
    assert "BAD" not in checked and "NOKEY" not in checked


# -- the parts, each alone ----------------------------------------------------------------


def test_header_encoder_reproduces_rpmbuild_bytes(tmp_path):
    """Decoding a header rpmbuild wrote and encoding it again gives rpmbuild's bytes:
    same index order, alignment, region trailer, and signature reserved space."""
    spec_file = tmp_path / "hello.spec"
    spec_file.write_text(
        "Name: hello\nVersion: 1.0\nRelease: 1\nSummary: Hello\nLicense: MIT\n"
        "Requires: (a or b)\n%description\nHello.\n%post\necho hi\n"
        "%install\nmkdir -p %{buildroot}/opt/hello\necho hi > %{buildroot}/opt/hello/a\n"
        "ln -s a %{buildroot}/opt/hello/b\n%files\n/opt/hello\n")
    run("rpmbuild", "-bb", "--define", f"_topdir {tmp_path}/top", str(spec_file))
    (built,) = (tmp_path / "top" / "RPMS").glob("*/hello-1.0-1.*.rpm")
    info = rpm.read_rpm(built)
    raw = built.read_bytes()
    header = {tag: (info.header_types[tag], value) for tag, value in info.header.items()}
    assert rpm.encode_header(header, rpm.Tag.HEADERIMMUTABLE) == raw[info.header_start:info.header_end]
    signature = {tag: (info.signature_types[tag], v) for tag, v in info.signature.items()}
    assert rpm.encode_signature(signature, None) == raw[rpm.LEAD_SIZE:info.header_start]


def test_integer_arrays_are_aligned_to_their_size():
    blob = rpm.encode_header({1000: (rpm.TYPE_STRING, "abc"), 1001: (rpm.TYPE_INT64, [1]),
                              1002: (rpm.TYPE_INT16, [2]), 1003: (rpm.TYPE_INT32, [3])}, None)
    offsets = [int.from_bytes(blob[16 + i * 16 + 8:16 + i * 16 + 12], "big") for i in range(4)]
    assert offsets == [0, 8, 16, 20]        # "abc\0" then padding up to 8, 2, 4
    decoded = rpm.decode_header(blob, None)
    assert decoded.values == {1000: "abc", 1001: [1], 1002: [2], 1003: [3]}


def test_signature_area_absorbs_a_switch_to_64_bit_sizes():
    small = {rpm.SigTag.SIZE: (rpm.TYPE_INT32, [1]), rpm.SigTag.MD5: (rpm.TYPE_BIN, bytes(16))}
    area = len(rpm.encode_signature(small, None))
    large = {rpm.SigTag.LONGSIZE: (rpm.TYPE_INT64, [2**33]), rpm.SigTag.MD5: (rpm.TYPE_BIN, bytes(16))}
    blob = rpm.encode_signature(large, area)
    assert len(blob) == area
    assert rpm.decode_header(blob, rpm.SigTag.HEADERSIGNATURES).values[rpm.SigTag.LONGSIZE] == [2**33]


def test_payload_paths_are_dot_prefixed_newc_entries(built):
    listing = subprocess.run(f"rpm2cpio {built.tool} | cpio -it --quiet", shell=True, check=True,
                             capture_output=True, text=True).stdout.split()
    assert listing[:3] == [f".{PREFIX}", f".{PREFIX}/bin", f".{PREFIX}/bin/rocm-smi"]


def test_cpio_newc_entries_extract_with_gnu_cpio(tmp_path):
    archive = io.BytesIO()
    cpio = rpm.CpioWriter(archive, stripped=False)
    cpio.add(0, "/d", 0o40755, 0, SDE, 1)
    cpio.add(1, "/d/f", 0o100644, 5, SDE, 2)
    cpio.write_data(b"hello")
    cpio.add(2, "/d/l", 0o120777, 1, SDE, 3)
    cpio.write_data(b"f")
    cpio.finish()
    assert archive.tell() % 4 == 0
    subprocess.run(["cpio", "-idm", "--quiet"], input=archive.getvalue(), cwd=tmp_path, check=True)
    assert (tmp_path / "d" / "f").read_bytes() == b"hello"
    assert os.readlink(tmp_path / "d" / "l") == "f"
    assert (tmp_path / "d" / "f").stat().st_mtime == SDE


def test_stripped_cpio_entries_hold_only_the_file_index():
    archive = io.BytesIO()
    cpio = rpm.CpioWriter(archive, stripped=True)
    cpio.add(7, "/ignored", 0o100644, 3, SDE, 1)
    cpio.write_data(b"abc")
    cpio.finish()
    data = archive.getvalue()
    assert data[:20] == b"07070X00000007\0\0abc\0"
    assert data[20:26] == b"070701" and data.endswith(b"TRAILER!!!\0\0\0\0")
    assert len(data) % 4 == 0


@pytest.mark.parametrize("text, parsed", [
    ("glibc", ("glibc", 0, "")),
    ("glibc >= 2.28", ("glibc", rpm.RPMSENSE_GREATER | rpm.RPMSENSE_EQUAL, "2.28")),
    ("rocm-core7.1 = 7.1.0-1", ("rocm-core7.1", rpm.RPMSENSE_EQUAL, "7.1.0-1")),
    ("rocm-old < 7.0", ("rocm-old", rpm.RPMSENSE_LESS, "7.0")),
    ("(glibc or musl-libc)", ("(glibc or musl-libc)", 0, "")),
    ("(a if b else (c and d))", ("(a if b else (c and d))", 0, "")),
])
def test_relations_parse_into_name_flags_and_version(text, parsed):
    assert rpm.parse_relation(text) == parsed


def test_the_rendered_spec_is_what_the_header_says(sources):
    package = hooks_spec(sources)
    text = render_spec(package, options())
    parsed = rpm.parse_spec(text)
    assert parsed.preamble["name"] == "rocm-hooks7.1" and parsed.preamble["license"] == "MIT"
    assert parsed.relations["requires"] == [("rocm-core7.1", rpm.RPMSENSE_EQUAL, "7.1.0-1")]
    assert set(parsed.scripts) == {"post", "preun"}
    assert parsed.scripts["post"][0] == "/bin/sh" and "--install /opt/rocm rocm /opt/rocm-7.1.0 70100" in parsed.scripts["post"][1]
    assert parsed.changelog[0][0] == 1_699_963_200          # noon UTC, Tue Nov 14 2023
    assert f"%dir %attr(0755,root,root) {PREFIX}/etc" in text
    assert "Epoch:" not in text
    assert "Epoch: 2\n" in render_spec(replace(package, epoch=2), options())


def test_epoch_and_noarch_reach_the_header(tmp_path, sources):
    doc = source(tmp_path, "notes.txt", b"notes\n")
    package = spec("rocm-notes7.1", [FileEntry(PREFIX, DIR, 0o755),
                                     file_entry(f"{PREFIX}/notes.txt", doc)],
                   arch="noarch", epoch=2)
    path = rpm.write_rpm(package, str(tmp_path / "out"), options()).path
    assert os.path.basename(path) == "rocm-notes7.1-7.1.0-1.noarch.rpm"
    assert query(path, "--qf", "%{NEVRA}") == "rocm-notes7.1-2:7.1.0-1.noarch"
    assert query(path, "--provides").splitlines() == ["rocm-notes7.1 = 2:7.1.0-1"]
    assert run("rpm", "-K", "--nosignature", path).stdout.strip().endswith("digests OK")
    lint = run("rpmlint", "--ignore-unused-rpmlintrc", "-r", RPMLINTRC, path, check=False).stdout
    assert " 0 errors" in lint, lint


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(0, 8000)))
def test_damaged_files_are_refused_cleanly(tmp_path, built, flips, cut):
    """Any damage to lead or headers gives RocpkgInputError or a readable result, never
    another exception."""
    with open(built.tool, "rb") as f:
        data = bytearray(f.read())
    for offset, value in flips:
        if offset < len(data):
            data[offset] = value
    damaged = tmp_path / "damaged.rpm"
    damaged.write_bytes(bytes(data[:cut]))
    try:
        info = rpm.read_rpm(damaged)
    except RocpkgInputError:
        return
    assert info.header_end <= info.size
