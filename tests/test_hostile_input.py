"""Hostile input at the boundary: artifacts and package.json are untrusted.

Each case takes a small release that builds (a per-target library with a kpack archive,
a plain library, a meta-package), breaks one thing the way a hostile or careless user
would, and runs `rocpkg build` as a user does. Every case must end in exit 2 with `error:`
lines that name the file or the JSON field, no traceback, each problem once, and an OUT
directory byte-identical to what it was before. The last section holds what is accepted
and how it is written: folded descriptions, escaped `%`, dropped mode bits (with a
warning), symlinks that stay inside through other links.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from cli_run import refusal_lines, snapshot

from kpack.archive import KpackReader, KpackWriter
from kpack.elf import build_amdgpu_code_object, build_host_elf
from rocpkg.inputs.config import load_config
from rocpkg.inputs.sample import make_sample_artifacts

REPO = Path(__file__).resolve().parent.parent
CONFIG = {
    "settings": {"version": "1.0.0", "prefix": "/opt/ns/core-{abi}", "maintainer": "Tester <t@example.org>"},
    "packages": [
        {"Package": "ns-base", "Description_Short": "Base library",
         "Artifactory": [{"Artifact": "base", "Artifact_Subdir": [{"Name": "base", "Components": ["lib"]}]}],
         "DEBDepends": ["libc6"], "RPMRequires": ["glibc"]},
        {"Package": "ns-blas", "Description_Short": "BLAS", "Gfxarch": True,
         "Artifactory": [{"Artifact": "blas", "Artifact_Subdir": [{"Name": "rocBLAS", "Components": ["lib"]}]}],
         "DEBDepends": ["ns-base"], "RPMRequires": ["ns-base"]},
        {"Package": "ns", "Description_Short": "Everything", "Gfxarch": True, "Metapackage": True,
         "DEBDepends": ["ns-blas"], "RPMRequires": ["ns-blas"]},
    ],
}
BASE_STAGE = "base_lib_generic/base/stage"
BLAS_STAGE = "blas_lib_generic/rocBLAS/stage"
ARCHIVE = "blas_lib_gfx1100/rocBLAS/stage/.kpack/blas_lib_gfx1100.kpack"
HOST_LIB = f"{BLAS_STAGE}/lib/librocblas.so.1.0"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """package.json and the sample artifacts it describes, for gfx1100 only, tiny."""
    root = tmp_path_factory.mktemp("pristine")
    (root / "package.json").write_text(json.dumps(CONFIG))
    make_sample_artifacts(root / "artifacts", load_config(root / "package.json"), targets=["gfx1100"], size_mb=0.05)
    return root


class Release:
    """One case's copy of the release inputs and its OUT, which already holds a build."""

    def __init__(self, root: Path):
        self.root = root
        self.config = root / "package.json"
        self.artifacts = root / "artifacts"
        self.out = root / "out"
        (self.out / "deb/pool/main").mkdir(parents=True)
        (self.out / "deb/pool/main/old_1.0_all.deb").write_bytes(b"!<arch>\nan earlier release")
        (self.out / "manifest.json").write_text('{"packages": []}\n')

    def edit(self, change) -> None:
        """Apply change(config_dict) to package.json; a returned value replaces it."""
        data = json.loads(self.config.read_text())
        replaced = change(data)
        self.config.write_text(json.dumps(data if replaced is None else replaced))

    def path(self, rel: str) -> Path:
        return self.artifacts / rel

    def build(self, *extra: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO),
                                                            os.environ.get("PYTHONPATH", "")]))
        cmd = [*prefix, sys.executable, "-m", "rocpkg.cli", "build", "-c", str(self.config), "-a",
               str(self.artifacts), "-o", str(self.out), "--formats", "deb", "-j", "1", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, errors="backslashreplace")

    def refused(self, *needles: str, extra: tuple[str, ...] = (), prefix: tuple[str, ...] = ()) -> list[str]:
        """Run the build and check the refusal; returns the error lines."""
        before = snapshot(self.out)
        errors = refusal_lines(self.build(*extra, prefix=prefix), needles)
        assert snapshot(self.out) == before, "OUT changed"
        return errors


@pytest.fixture
def release(pristine, tmp_path) -> Release:
    shutil.copytree(pristine, tmp_path / "in", symlinks=True)
    return Release(tmp_path / "in")


def test_the_untouched_release_builds(release):
    """The baseline every case breaks: it builds, so each refusal below is the case's doing."""
    result = release.build()
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr


# -- package.json: metadata injection --------------------------------------------------------

def definition(index: int, key: str, value):
    def change(data):
        data["packages"][index][key] = value
    return change


def setting(key: str, value):
    def change(data):
        data["settings"][key] = value
    return change


INJECTION = "devel\nEssential: yes\nPre-Depends: evil"
CONFIG_CASES = [
    *[(f"{key}-newline", definition(0, key, INJECTION), [f"packages[0](ns-base).{key}", "newline in a one-line field"])
      for key in ("Section", "Priority", "Homepage", "Maintainer", "Vendor", "License", "Description_Short", "Group")],
    ("Architecture-newline", definition(0, "Architecture", "amd64\nEssential: yes"),
     ["packages[0](ns-base).Architecture", "newline"]),
    ("BuildArch-newline", definition(0, "BuildArch", "x86_64\nEpoch: 9"), ["packages[0](ns-base).BuildArch", "newline"]),
    ("Version-newline", definition(0, "Version", "1.0\nEssential: yes"), ["packages[0](ns-base).Version", "newline"]),
    ("Release-carriage-return", definition(0, "Release", "1\rEssential: yes"), ["packages[0](ns-base).Release"]),
    ("Description_Long-escape-sequence", definition(0, "Description_Long", "fine\x1b[2Jhidden"),
     ["packages[0](ns-base).Description_Long", "control character U+001B"]),
    ("Section-not-a-section", definition(0, "Section", "Dev Tools"), ["packages[0](ns-base).Section"]),
    ("Priority-unknown", definition(0, "Priority", "urgent"), ["packages[0](ns-base).Priority"]),
    *[(f"settings-{key}-newline", setting(key, INJECTION), [f"settings.{key}", "newline in a one-line field"])
      for key in ("maintainer", "vendor", "homepage", "license")],
    ("settings-suite-traversal", setting("suite", "../../../escaped"), ["settings.suite"]),
    ("settings-deb_arch-newline", setting("deb_arch", "amd64\nEssential: yes"), ["settings.deb_arch"]),
    ("settings-rpm_arch-space", setting("rpm_arch", "x86_64 evil"), ["settings.rpm_arch"]),
    ("naming-attribute-access", setting("naming", {"versioned": "{name.__class__}"}),
     ["settings.naming.versioned", "placeholder"]),
    ("naming-unknown-placeholder", setting("naming", {"alias": "rocm-{target}"}), ["settings.naming.alias"]),
    ("naming-newline", setting("naming", {"host": "{name}-host{abi}\nEssential: yes"}), ["settings.naming.host"]),
    ("naming-bad-name", setting("naming", {"device": "{name}_{target}"}),
     ["settings.naming.device", "not a valid package name"]),
    ("prefix-relative", setting("prefix", "opt/ns"), ["settings.prefix", "absolute"]),
    ("prefix-dotdot", setting("prefix", "/opt/../etc/rocm"), ["settings.prefix", "'..'"]),
    ("prefix-double-slash", setting("prefix", "/opt//ns"), ["settings.prefix", "'//'"]),
    ("prefix-trailing-dot", setting("prefix", "/opt/ns/."), ["settings.prefix", "normalised"]),
    ("prefix-root", setting("prefix", "/"), ["settings.prefix"]),
    ("prefix-system-dir", setting("prefix", "/usr/lib"), ["settings.prefix", "system directory"]),
    ("prefix-space", setting("prefix", "/opt/n s"), ["settings.prefix", "characters"]),
    ("prefix-rpm-macro", setting("prefix", "/opt/%{_bindir}"), ["settings.prefix"]),
    ("prefix-newline", setting("prefix", "/opt/ns\n/etc"), ["settings.prefix", "newline"]),
    ("prefix-unknown-placeholder", setting("prefix", "/opt/{release}"), ["settings.prefix", "placeholder"]),
    ("top_metapackage-bad-name", setting("top_metapackage", "Bad Name"), ["settings.top_metapackage"]),
    ("external-newline", setting("external", ["libok", "bad\nname"]), ["settings.external[1]"]),
    ("families-bad-target", setting("families", {"gfx110X": ["gfx1100", "gfx99999"]}), ["settings.families.gfx110X"]),
    ("targets-bad-target", setting("targets", ["gfx1100", "../gfx"]), ["settings.targets[1]"]),
    ("version-hyphen", setting("version", "1.0-1"), ["settings.version"]),
    ("release-hyphen", setting("release", "1-1"), ["settings.release"]),
    ("epoch-negative", setting("epoch", -1), ["settings.epoch"]),
    ("epoch-past-int32", setting("epoch", 2**40), ["settings.epoch", "32-bit"]),
    ("maintainer-empty", setting("maintainer", ""), ["settings.maintainer", "empty"]),
    ("Maintainer-blank", definition(0, "Maintainer", "   "), ["packages[0](ns-base).Maintainer", "blank"]),
    ("compression-level-out-of-range", setting("compression_level", 100), ["settings.compression_level"]),
]
DEB_RELATIONS = [
    ("no-version", "libfoo >="), ("empty-version", "libfoo (>= )"), ("obsolete-operator", "libfoo (> 1)"),
    ("upper-case", "LibFoo"), ("comma-inside", "libfoo, evil"), ("arch-restriction", "libfoo [amd64]"),
    ("newline", "libfoo\nEssential: yes"), ("bad-version", "libfoo (>= 1.0 beta)"),
]
RPM_RELATIONS = [
    ("no-version", "libfoo >="), ("macro", "libfoo >= %{version}"), ("unbalanced", "(libfoo or libbar"),
    ("dangling-or", "(libfoo or)"), ("newline", "libfoo\nProvides: evil"), ("hyphen-in-version", "libfoo >= 1-2-3"),
]
CONFIG_CASES += [(f"DEBDepends-{name}", definition(1, "DEBDepends", ["ns-base", rel]),
                  ["packages[1](ns-blas).DEBDepends[1]"]) for name, rel in DEB_RELATIONS]
CONFIG_CASES += [(f"RPMRequires-{name}", definition(1, "RPMRequires", ["ns-base", rel]),
                  ["packages[1](ns-blas).RPMRequires[1]"]) for name, rel in RPM_RELATIONS]
CONFIG_CASES += [
    ("package-name-upper-case", definition(2, "Package", "NS"), ["packages[2](NS).Package"]),
    ("package-name-newline", definition(2, "Package", "ns\nEssential: yes"), ["Package"]),
    ("empty-list", lambda data: data["packages"].clear(), ["packages", "no package to build"]),
    ("empty-therock-list", lambda data: [], ["no package to build"]),
    ("every-definition-disabled",
     lambda data: [d.update(DisablePackaging="True") for d in data["packages"]] and None, ["no package to build"]),
]


@pytest.mark.parametrize("change,needles", [pytest.param(c, n, id=i) for i, c, n in CONFIG_CASES])
def test_config_strings_are_refused_by_json_path(release, change, needles):
    release.edit(change)
    errors = release.refused(*needles)
    assert all(line.startswith(f"error: {release.config}") for line in errors)


def test_json_nested_too_deeply_is_refused(release):
    release.config.write_text("[" * 100_000 + "]" * 100_000)
    release.refused(str(release.config), "nested too deeply")


def test_a_package_file_name_too_long_for_out_is_refused(release):
    release.edit(lambda data: data["packages"].append({"Package": "ns-" + "x" * 240, "Metapackage": True}))
    release.refused("file name", "longer than 243")


def test_two_packages_given_one_name_are_refused(release):
    release.edit(setting("naming", {"versioned": "ns-same"}))   # every versioned package, one name
    release.refused("two packages of the plan have this name")


@pytest.mark.parametrize("option,value", [("--version", "1.0 evil"), ("--release", "1\nEssential: yes"),
                                          ("--version", "1.0-1")])
def test_command_line_versions_are_refused(release, option, value):
    release.refused(option, extra=(option, value))


# -- the artifacts tree: symlinks and traversal ----------------------------------------------

def add_manifest_line(release: Release, artifact: str, line: str) -> None:
    with open(release.path(f"{artifact}/artifact_manifest.txt"), "a") as fh:
        fh.write(line + "\n")


def test_a_stage_dir_reached_through_a_symlink_is_refused(release, tmp_path):
    outside = tmp_path / "outside"
    (outside / "stage/lib").mkdir(parents=True)
    (outside / "stage/lib/secret").write_text("not yours")
    os.symlink(outside, release.path("blas_lib_generic/rocBLAS/evil"))
    add_manifest_line(release, "blas_lib_generic", "rocBLAS/evil/stage")
    release.refused("artifact_manifest.txt:2", "runs through the symlink rocBLAS/evil")


def test_an_artifact_dir_that_is_a_symlink_is_refused(release, tmp_path):
    real = tmp_path / "elsewhere"
    release.path("base_lib_generic").rename(real)
    os.symlink(real, release.path("base_lib_generic"))
    release.refused("base_lib_generic", "is a symlink")


def test_a_manifest_that_is_not_utf8_is_refused(release):
    release.path("base_lib_generic/artifact_manifest.txt").write_bytes(b"base/stage\n\xff\xfe/stage\n")
    release.refused("base_lib_generic/artifact_manifest.txt", "cannot read")


def test_directories_nested_past_any_install_are_refused(release):
    fd = os.open(release.path(f"{BASE_STAGE}/lib"), os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(130):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    release.refused("nested deeper than 128 levels")


def test_a_manifest_that_is_a_symlink_is_refused(release, tmp_path):
    (tmp_path / "list.txt").write_text("base/stage\n")
    release.path("base_lib_generic/artifact_manifest.txt").unlink()
    os.symlink(tmp_path / "list.txt", release.path("base_lib_generic/artifact_manifest.txt"))
    release.refused("base_lib_generic/artifact_manifest.txt", "symlink")


@pytest.mark.parametrize("line", ["/etc", "../../etc", "base/../../../etc"])
def test_a_manifest_line_leaving_the_artifact_dir_is_refused(release, line):
    add_manifest_line(release, "base_lib_generic", line)
    release.refused("artifact_manifest.txt:2", "escapes the artifact dir")


@pytest.mark.parametrize("target", ["/etc/shadow", "../../../../../etc/shadow"])
def test_a_symlink_leaving_its_stage_is_refused(release, target):
    os.symlink(target, release.path(f"{BASE_STAGE}/lib/evil"))
    release.refused(f"{BASE_STAGE}/lib/evil", "escapes its stage dir")


def test_a_symlink_chain_leaving_the_install_tree_is_refused(release):
    """Lexically inside (`up/../..` cancels), resolved through the other link it is /etc/shadow."""
    deep = release.path(f"{BASE_STAGE}/share/" + "/".join(f"a{i}" for i in range(1, 13)))
    deep.mkdir(parents=True)
    os.symlink("../../..", deep / "up")
    chain = "share/" + "/".join(f"a{i}" for i in range(1, 13)) + "/up/" + "../" * 13 + "etc/shadow"
    os.symlink(chain, release.path(f"{BASE_STAGE}/evil"))
    release.refused("/opt/ns/core-1.0/evil", "leaves the install tree /opt/ns/core-1.0")


def test_a_symlink_loop_is_refused(release):
    os.symlink("loop2", release.path(f"{BASE_STAGE}/lib/loop1"))
    os.symlink("loop1", release.path(f"{BASE_STAGE}/lib/loop2"))
    release.refused("/opt/ns/core-1.0/lib/loop1", "a loop")


def test_a_file_installed_through_another_packages_symlink_is_refused(release):
    os.symlink("lib", release.path(f"{BASE_STAGE}/docs"))
    (release.path(f"{BLAS_STAGE}/docs")).mkdir()
    (release.path(f"{BLAS_STAGE}/docs/readme")).write_text("written through the link")
    release.refused("/opt/ns/core-1.0/docs", "installed through it")


def test_a_symlink_target_with_a_newline_is_refused(release):
    os.symlink("libbase.so.1.0\nEssential: yes", release.path(f"{BASE_STAGE}/lib/evil"))
    release.refused("/opt/ns/core-1.0/lib/evil", "symlink target")


# -- the artifacts tree: file types and readability ------------------------------------------

def test_a_fifo_is_refused(release):
    os.mkfifo(release.path(f"{BASE_STAGE}/lib/pipe"))
    release.refused(f"{BASE_STAGE}/lib/pipe", "is a FIFO")


def test_a_socket_is_refused(release):
    lib = release.path(f"{BASE_STAGE}/lib")
    cwd = os.getcwd()
    os.chdir(lib)  # AF_UNIX paths are short: bind a relative name
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("sock")
    finally:
        os.chdir(cwd)
    release.refused(f"{BASE_STAGE}/lib/sock", "is a socket")


def test_a_device_node_is_refused(release):
    try:
        os.mknod(release.path(f"{BASE_STAGE}/lib/null"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    release.refused(f"{BASE_STAGE}/lib/null", "is a character device")


def without_dac_override() -> tuple[str, ...]:
    """Root reads mode-000 files through CAP_DAC_OVERRIDE; run rocpkg without it, as a
    build in a hardened container does."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop CAP_DAC_OVERRIDE as root")
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")


def test_an_unreadable_file_is_refused_also_as_root(release):
    release.path(f"{BASE_STAGE}/lib/libbase.so.1.0").chmod(0)
    release.refused(f"{BASE_STAGE}/lib/libbase.so.1.0", "permission denied", prefix=without_dac_override())


def test_an_unreadable_directory_is_refused_also_as_root(release):
    (release.path(f"{BASE_STAGE}/private")).mkdir()
    (release.path(f"{BASE_STAGE}/private/key")).write_text("x")
    release.path(f"{BASE_STAGE}/private").chmod(0)
    release.refused(f"{BASE_STAGE}/private", "permission denied", prefix=without_dac_override())


def test_setuid_and_world_writable_bits_are_dropped_with_a_warning(release):
    release.path(f"{BASE_STAGE}/lib/libbase.so.1.0").chmod(0o4757)
    result = release.build()
    assert result.returncode == 0, result.stderr
    warning = next(line for line in result.stderr.splitlines() if "libbase.so.1.0" in line)
    assert warning.startswith("warning: ") and "setuid/world-writable bits dropped" in warning
    deb = next((release.out / "deb/pool/main").glob("ns-base1.0_*.deb"))
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    assert next(line for line in listing.splitlines() if line.endswith("/libbase.so.1.0")).startswith("-rw-r--r-- ")


# -- the artifacts tree: names dpkg and rpm cannot install ------------------------------------

def make_file(directory: Path, name: bytes) -> None:
    fd = os.open(bytes(directory) + b"/" + name, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"data")
    os.close(fd)


@pytest.mark.parametrize("name,needle", [
    (b"evil\nname", "newline or NUL"),
    (b"evil\x1b[2J", "control character U+001B"),
    (b"evil\x7f", "control character U+007F"),
    (b"evil\xff\xfe", "not valid UTF-8"),
    (b"a" * 246, "longer than 245"),
], ids=["newline", "escape", "delete", "non-utf8", "246-bytes"])
def test_an_uninstallable_file_name_is_refused(release, name, needle):
    make_file(release.path(f"{BASE_STAGE}/lib"), name)
    errors = release.refused(needle)
    assert all("\n" not in line and "\x1b" not in line for line in errors)


def test_a_path_longer_than_dpkg_can_unpack_is_refused(release):
    fd = os.open(release.path(f"{BASE_STAGE}/lib"), os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(18):  # 18 x 241 bytes: past PATH_MAX, each component within NAME_MAX
        os.mkdir("d" * 240, dir_fd=fd)
        sub = os.open("d" * 240, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    release.refused("longer than 4085")


# -- kpack archives and markers in the split layout ------------------------------------------

def rewrite_toc(path: Path, change) -> None:
    data = path.read_bytes()
    (toc_offset,) = struct.unpack_from("<Q", data, 8)
    toc = msgpack.unpackb(data[toc_offset:], raw=False)
    change(toc)
    path.write_bytes(data[:toc_offset] + msgpack.packb(toc, use_bin_type=True))


def zstd_area(path: Path) -> int:
    with KpackReader(path) as reader:
        return reader.zstd_offset


def set_original_size(toc, size):
    key = next(iter(toc["toc"]))
    toc["toc"][key]["gfx1100"]["original_size"] = size


def wrong_target(path: Path) -> None:
    """The same keys, each a gfx942 code object, in the gfx1100 archive."""
    with KpackReader(path) as reader:
        keys = [(e.key, e.arch) for e in reader.entries()]
    path.unlink()
    with KpackWriter(path, "blas_lib", "gfx110X", ["gfx1100"], scheme="zstd-per-kernel") as writer:
        for key, arch in keys:
            writer.add(key, arch, build_amdgpu_code_object("gfx942"))


def corrupt_first_frame(path: Path) -> None:
    data = bytearray(path.read_bytes())
    first = zstd_area(path) + 8          # count, first frame's size, then the frame
    data[first + 8:first + 24] = b"\xa5" * 16
    path.write_bytes(bytes(data))


KPACK_CASES = [
    ("truncated", lambda p: p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2]), "past the end of the file"),
    ("corrupt-toc", lambda p: rewrite_bytes(p, toc_start(p), b"\xc1"), "TOC is not a map"),
    ("toc-offset-past-eof", lambda p: rewrite_bytes(p, 8, struct.pack("<Q", p.stat().st_size + 100)), "past the end"),
    ("frame-count-0xffffffff", lambda p: rewrite_bytes(p, zstd_area(p), b"\xff\xff\xff\xff"), "frame count 4294967295"),
    ("original-size-2-62", lambda p: rewrite_toc(p, lambda toc: set_original_size(toc, 2**62)), "original_size"),
    ("gfx-arches-mistyped", lambda p: rewrite_toc(p, lambda toc: toc.update(gfx_arches="gfx1100")), "gfx_arches"),
]


def rewrite_bytes(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def toc_start(path: Path) -> int:
    return struct.unpack_from("<Q", path.read_bytes(), 8)[0]


@pytest.mark.parametrize("change,needle", [
    *[pytest.param(c, n, id=i) for i, c, n in KPACK_CASES],
    pytest.param(corrupt_first_frame, "zstd", id="corrupt-zstd-frame"),
])
def test_a_corrupt_kpack_archive_is_refused(release, change, needle):
    change(release.path(ARCHIVE))
    release.refused(ARCHIVE.rsplit("/", 1)[-1], needle, "[kpack-archive]")


def test_a_code_object_for_another_target_in_an_archive_is_refused(release):
    wrong_target(release.path(ARCHIVE))
    release.refused(ARCHIVE.rsplit("/", 1)[-1], "gfx942", "[code-object-target]")


def test_a_malformed_marker_is_refused(release):
    release.path(HOST_LIB).write_bytes(build_host_elf({".rocm_kpack_ref": b"\xc1 not msgpack"},
                                                      soname="librocblas.so.1"))
    release.refused(HOST_LIB, ".rocm_kpack_ref", "[unreadable]")


# -- what is accepted, and how it is written -------------------------------------------------

def test_a_multi_line_description_is_folded_not_injected(release):
    release.edit(definition(0, "Description_Long", "First paragraph.\n\nEssential: yes\nPre-Depends: evil"))
    result = release.build()
    assert result.returncode == 0, result.stderr
    deb = next((release.out / "deb/pool/main").glob("ns-base1.0_*.deb"))
    fields = subprocess.run(["dpkg-deb", "-f", deb], capture_output=True, text=True, check=True).stdout
    assert "\nEssential:" not in fields and "\nPre-Depends:" not in fields
    assert " .\n Essential: yes Pre-Depends: evil" in fields


def test_a_percent_sign_is_not_an_rpm_macro(release):
    release.edit(definition(0, "Description_Short", "100% fast %{_bindir}"))
    result = release.build("--formats", "rpm")
    assert result.returncode == 0, result.stderr
    assert "Summary: 100%% fast %%{_bindir}" in (release.out / "control/ns-base1.0.spec").read_text()


def test_a_percent_sign_reaches_the_rpm_header_as_written(release):
    release.edit(definition(0, "Description_Short", "100% fast %{_bindir}"))
    assert release.build("--formats", "rpm").returncode == 0
    rpm = next((release.out / "rpm").rglob("ns-base1.0-*.rpm"))
    query = subprocess.run(["rpm", "-qp", "--qf", "%{SUMMARY}", rpm], capture_output=True, text=True, check=True)
    assert query.stdout == "100% fast %{_bindir}"


def test_symlinks_that_resolve_inside_through_other_links_are_accepted(release):
    from rocpkg.inputs.catalog import scan
    from rocpkg.plan.make import make_plan

    stage = release.path(BASE_STAGE)
    os.symlink("lib", stage / "lib64")
    (stage / "bin").mkdir()
    os.symlink("../lib64/libbase.so.1", stage / "bin/libbase")     # through lib64 -> lib, then libbase.so.1
    os.symlink("../bin/../lib64/../lib", stage / "lib/again")       # up and down, never out
    plan = make_plan(load_config(release.config), scan(release.artifacts), formats=("deb",))
    links = {f.path: f.link_target for p in plan.packages["deb"] for f in p.files if f.type == "symlink"}
    assert links["/opt/ns/core-1.0/bin/libbase"] == "../lib64/libbase.so.1"
