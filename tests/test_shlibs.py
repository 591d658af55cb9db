"""Downstream packagers link against the release's shared libraries: a gcc-built library
with a SONAME and a version script, and a program linked against it, built into packages;
dpkg-shlibdeps turns a downstream link into a dependency on our .deb (its `shlibs`
file), our RPMs provide and require what rpmbuild's elfdeps generates for the same files,
and a downstream RPM built by rpmbuild installs with dnf from our repository. The ELF
reader records a malformed version section as the file's error, never a traceback."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from cli_run import rocpkg
from test_deb import throwaway_root

from kpack import elfread
from rocpkg.inputs.facts import read_facts

LIBRARY_SOURCE = ("#include <string.h>\nint foo(int x) { return x + 1; }\n"
                  "int foo_old(const char *s) { return (int)strlen(s); }\n")
VERSION_SCRIPT = "FOO_1.0 { global: foo_old; local: *; };\nFOO_1.1 { global: foo; } FOO_1.0;\n"
PROGRAM_SOURCE = "int foo(int);\nint main(void) { return foo(-1); }\n"
PREFIX = "/opt/rocm/core-7.1"
CONFIG = {
    "settings": {"version": "7.1.0", "release": "1", "prefix": "/opt/rocm/core-{abi}",
                 "maintainer": "rocpkg maintainers <rocpkg@example.org>", "homepage": "https://example.org/rocpkg",
                 "license": "MIT", "compression": "xz", "debug_packages": False},
    "packages": [{"Package": "rocm-foo", "Description_Short": "The foo library",
                  "Description_Long": "A small library with versioned symbols and a program using it.",
                  "Artifactory": [{"Artifact": "foo", "Artifact_Subdir": [{"Name": "foo", "Components": ["lib"]}]}],
                  "DEBDepends": ["libc6"], "Gfxarch": False},
                 {"Package": "rocm-notes", "Description_Short": "Notes",
                  "Description_Long": "A text file and nothing to link against.",
                  "Artifactory": [{"Artifact": "notes", "Artifact_Subdir": [{"Name": "notes", "Components": ["doc"]}]}],
                  "Gfxarch": False}],
}

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")


def run(*args, check=True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if check and done.returncode != 0:
        raise AssertionError(f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def compile_library(work: Path) -> tuple[Path, Path]:
    """(libfoo.so.1 with SONAME libfoo.so.1 and versions FOO_1.0/FOO_1.1, fooprog linked to it)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "foo.c").write_text(LIBRARY_SOURCE)
    (work / "foo.map").write_text(VERSION_SCRIPT)
    (work / "main.c").write_text(PROGRAM_SOURCE)
    run("gcc", "-s", "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-Wl,--version-script=foo.map",
        "-Wl,--hash-style=both", "-o", "libfoo.so.1", "foo.c", cwd=work)
    run("gcc", "-s", "-o", "fooprog", "main.c", "./libfoo.so.1", cwd=work)
    return work / "libfoo.so.1", work / "fooprog"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, Path]:
    return compile_library(tmp_path_factory.mktemp("gcc"))


@pytest.fixture(scope="module")
def built(compiled, tmp_path_factory) -> Path:
    """OUT of the release built from the library, its program and a text-only package."""
    root = tmp_path_factory.mktemp("release")
    artifacts = root / "artifacts"
    stage = artifacts / "foo_lib_generic" / "foo" / "stage"
    (stage / "lib").mkdir(parents=True)
    (stage / "bin").mkdir()
    shutil.copy(compiled[0], stage / "lib" / "libfoo.so.1")
    shutil.copy(compiled[1], stage / "bin" / "fooprog")
    (artifacts / "foo_lib_generic" / "artifact_manifest.txt").write_text("foo/stage\n")
    notes = artifacts / "notes_doc_generic" / "notes" / "stage" / "share"
    notes.mkdir(parents=True)
    (notes / "notes.txt").write_text("nothing to link against\n")
    (artifacts / "notes_doc_generic" / "artifact_manifest.txt").write_text("notes/stage\n")
    (root / "package.json").write_text(json.dumps(CONFIG))
    out = root / "out"
    done = rocpkg("build", "-c", root / "package.json", "-a", artifacts, "-o", out, "-q")
    assert done.returncode == 0, done.stderr
    return out


def packages(out: Path, suffix: str) -> dict[str, Path]:
    return {p.name.split("_")[0] if suffix == ".deb" else p.name.rsplit("-", 2)[0]: p
            for p in out.rglob(f"*{suffix}")}


def rpm_query(path: Path, what: str) -> set[str]:
    return {line.strip() for line in run("rpm", "-qp", f"--{what}", path).stdout.splitlines()}


# -- deb ------------------------------------------------------------------------------------


def test_the_library_package_has_a_shlibs_file_and_the_text_package_none(built):
    debs = packages(built, ".deb")
    shlibs = run("dpkg-deb", "-I", debs["rocm-foo7.1"], "shlibs").stdout
    assert shlibs == "libfoo 1 rocm-foo7.1 (>= 7.1.0)\n"
    assert run("dpkg-deb", "-I", debs["rocm-notes7.1"], "shlibs", check=False).returncode != 0


@pytest.mark.skipif(not shutil.which("dpkg-shlibdeps") or not shutil.which("unshare"),
                    reason="needs dpkg-shlibdeps and unshare")
def test_dpkg_shlibdeps_turns_a_downstream_link_into_a_dependency_on_our_package(built, tmp_path):
    root = throwaway_root(tmp_path / "root")
    run("dpkg", "--root", root, "--force-script-chrootless", "--force-depends", "-i",
        packages(built, ".deb")["rocm-foo7.1"])
    downstream = tmp_path / "downstream"
    (downstream / "debian").mkdir(parents=True)
    (downstream / "debian" / "control").write_text("Source: app\n\nPackage: app\nArchitecture: any\n")
    (downstream / "app.c").write_text(PROGRAM_SOURCE)
    run("gcc", "-o", "app", "app.c", root / PREFIX.lstrip("/") / "lib" / "libfoo.so.1",
        f"-Wl,-rpath,{PREFIX}/lib", cwd=downstream)
    # The packager's machine has our package installed: its /opt is the throwaway root's (the C
    # library is the host's, which that database does not list: --ignore-missing-info).
    mounted = run("unshare", "-m", "sh", "-c", f'mount --bind "{root}/opt" /opt && dpkg-shlibdeps '
                  f'--admindir="{root}/var/lib/dpkg" --ignore-missing-info -O app', cwd=downstream, check=False)
    if "mount" in mounted.stderr and mounted.returncode != 0:
        pytest.skip(f"cannot mount in a private namespace: {mounted.stderr.strip()}")
    assert mounted.returncode == 0, mounted.stderr
    assert "rocm-foo7.1 (>= 7.1.0)" in mounted.stdout, mounted.stdout


# -- rpm ------------------------------------------------------------------------------------


def test_our_rpm_provides_and_requires_what_rpmbuild_generates_for_the_same_files(built, compiled, tmp_path):
    ours = packages(built, ".rpm")["rocm-foo7.1"]
    assert {"libfoo.so.1()(64bit)", "libfoo.so.1(FOO_1.0)(64bit)", "libfoo.so.1(FOO_1.1)(64bit)"} \
        <= rpm_query(ours, "provides")
    reference = rpmbuild(tmp_path, "reference", {f"{PREFIX}/lib/libfoo.so.1": compiled[0],
                                                 f"{PREFIX}/bin/fooprog": compiled[1]})
    elf = lambda names: {n for n in names if ".so" in n}  # noqa: E731
    assert elf(rpm_query(ours, "provides")) == elf(rpm_query(reference, "provides"))
    assert elf(rpm_query(ours, "requires")) == elf(rpm_query(reference, "requires"))
    assert not elf(rpm_query(packages(built, ".rpm")["rocm-notes7.1"], "provides")
                   | rpm_query(packages(built, ".rpm")["rocm-notes7.1"], "requires"))


def rpmbuild(work: Path, name: str, files: dict[str, Path]) -> Path:
    """An x86_64 RPM of `files` (install path -> source), built by rpmbuild with its
    automatic dependencies on."""
    top = work / f"rpmtop-{name}"
    install = "".join(f"install -D -m 0755 {source} %{{buildroot}}{path}\n" for path, source in files.items())
    spec = top / f"{name}.spec"
    top.mkdir(parents=True)
    spec.write_text(f"Name: {name}\nVersion: 1\nRelease: 1\nSummary: {name}\nLicense: MIT\n"
                    f"\n%description\n{name}.\n\n%install\n{install}\n%files\n"
                    + "".join(f"{path}\n" for path in files))
    run("rpmbuild", "-bb", "--quiet", "--target", "x86_64", "--define", f"_topdir {top}",
        "--define", f"_rpmdir {top / 'out'}", "--define", "__os_install_post %{nil}",
        "--define", "debug_package %{nil}", spec)
    return top / "out" / "x86_64" / f"{name}-1-1.x86_64.rpm"


@pytest.mark.skipif(not all(shutil.which(t) for t in ("rpmbuild", "dnf")), reason="needs rpmbuild and dnf")
def test_a_downstream_rpm_installs_with_dnf_from_our_repository(built, compiled, tmp_path, signer):
    from repo_helpers import DnfClient
    from rocpkg.formats.rpm.write import write_rpm
    from rocpkg.model import BuildOptions, PackageSpec
    from rocpkg.formats.rpm import repodata as repo_dnf

    app = rpmbuild(tmp_path, "app", {"/usr/bin/app": compiled[1]})
    assert "libfoo.so.1()(64bit)" in rpm_query(app, "requires")
    published = tmp_path / "published"
    arch_dir = published / "rpm" / "x86_64"
    arch_dir.mkdir(parents=True)
    ours = packages(built, ".rpm")
    for path in ours.values():
        shutil.copy(path, arch_dir)
    shutil.copy(app, arch_dir)
    # The C library the throwaway root lacks: a stub providing what the two packages need of it.
    system = sorted(r for r in rpm_query(app, "requires") | rpm_query(ours["rocm-foo7.1"], "requires")
                    if not r.startswith(("libfoo", "rpmlib(", "rocm-")))
    stub = PackageSpec("rpm", "glibc-stub", "1", "1", "noarch", "meta", summary="C library stub",
                       description="Provides what the test's packages need of the C library.", provides=system)
    write_rpm(stub, str(arch_dir), BuildOptions(source_date_epoch=1700000000))
    repo_dnf.publish_dnf(published, signer=signer, source_date_epoch=1700000000, sign_packages=True)
    client = DnfClient(tmp_path / "dnf", Path(repo_dnf.write_client_snippet(published)), published / "rocm.asc")
    done = client.run("install", "app")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"app", "rocm-foo7.1"} <= client.installed()


def test_an_rpm_requires_exclude_pattern_leaves_those_requires_out(compiled, tmp_path):
    from rocpkg.formats.rpm.elfdeps import rpm_elf_relations
    from rocpkg.plan.shlibs import requires_excludes

    with open(compiled[1], "rb") as fh:
        facts = read_facts(fh, "fooprog")
    patterns, problems = requires_excludes({"rpm_requires_exclude": [r"^libc\.so\.6\(GLIBC_"]})
    assert not problems
    _, requires = rpm_elf_relations([facts], patterns)
    assert "libc.so.6()(64bit)" in requires and not [r for r in requires if r.startswith("libc.so.6(GLIBC")]
    _, problems = requires_excludes({"rpm_requires_exclude": ["("]})
    assert problems and problems[0][0] == "settings.rpm_requires_exclude[0]"


# -- the reader -----------------------------------------------------------------------------


def test_the_reader_gives_soname_needed_and_symbol_versions_as_readelf_does(compiled):
    with open(compiled[0], "rb") as fh:
        library = read_facts(fh, "libfoo.so.1")
    with open(compiled[1], "rb") as fh:
        program = read_facts(fh, "fooprog")
    assert (library.soname, library.elf_bits, library.version_defs) == ("libfoo.so.1", 64, ("FOO_1.0", "FOO_1.1"))
    assert not library.linkage_error and "libc.so.6" in library.needed
    assert ("libfoo.so.1", "FOO_1.1") in program.version_needs and program.needed[0] == "libfoo.so.1"
    shown = run("readelf", "-VW", compiled[1]).stdout
    assert all(f"Name: {version}" in shown for _, version in program.version_needs)


def version_section(path: Path, kind: int) -> tuple[int, elfread.Section]:
    """(index, section) of the version section of that type."""
    with open(path, "rb") as fh:
        found = elfread.sections(fh, os.fstat(fh.fileno()).st_size)
    return next((index, s) for index, s in enumerate(found) if s.type == kind)


@pytest.mark.parametrize("kind,damage", [
    (elfread.SHT_GNU_VERDEF, "next"), (elfread.SHT_GNU_VERDEF, "aux"), (elfread.SHT_GNU_VERDEF, "size"),
    (elfread.SHT_GNU_VERNEED, "next"), (elfread.SHT_GNU_VERNEED, "aux"), (elfread.SHT_GNU_VERNEED, "name"),
    (elfread.SHT_GNU_VERNEED, "size"), (elfread.SHT_GNU_VERNEED, "strings"),
])
def test_a_malformed_version_section_is_a_recorded_error(compiled, tmp_path, kind, damage):
    """Each version table cut short, pointed outside itself, naming a string past its
    table or linked to no string table: the facts carry linkage_error and no versions."""
    source = compiled[0] if kind == elfread.SHT_GNU_VERDEF else compiled[1]
    index, section = version_section(source, kind)
    image = bytearray(source.read_bytes())
    at, header = section.offset, struct.unpack_from("<Q", image, 40)[0] + index * 64
    if damage == "next":        # vd_next / vn_next past the section
        struct.pack_into("<I", image, at + (16 if kind == elfread.SHT_GNU_VERDEF else 12), section.size * 4)
    elif damage == "aux":       # vd_aux / vn_aux past the section
        struct.pack_into("<I", image, at + (12 if kind == elfread.SHT_GNU_VERDEF else 8), section.size * 4)
    elif damage == "name":      # vn_file past the string table
        struct.pack_into("<I", image, at + 4, 1 << 30)
    elif damage == "size":      # sh_size running past the end of the file
        struct.pack_into("<Q", image, header + 32, len(image))
    else:                       # sh_link naming the section itself, not a string table
        struct.pack_into("<I", image, header + 40, index)
    damaged = tmp_path / "damaged.so"
    damaged.write_bytes(bytes(image))
    with open(damaged, "rb") as fh:
        facts = read_facts(fh, "damaged.so")
    assert facts.linkage_error, facts
    assert facts.version_defs == () and facts.version_needs == ()


@pytest.mark.skipif(not all(shutil.which(t) for t in ("lintian", "rpmlint")), reason="needs lintian and rpmlint")
def test_lintian_and_rpmlint_accept_the_new_metadata(built):
    repo = Path(__file__).resolve().parent.parent
    deb = packages(built, ".deb")["rocm-foo7.1"]
    lint = run("lintian", "--fail-on", "error", "--suppress-tags-from-file", repo / "lintian-overrides.txt", deb,
               check=False)
    assert lint.returncode == 0 and "shlib" not in lint.stdout, lint.stdout + lint.stderr
    rpm = packages(built, ".rpm")["rocm-foo7.1"]
    lint = run("rpmlint", "--ignore-unused-rpmlintrc", "-r", repo / "rpmlint" / "rocpkg.rpmlintrc", rpm, check=False)
    assert " 0 errors" in lint.stdout, lint.stdout
