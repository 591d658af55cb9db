"""package.json in both shapes, and every problem reported at once with file and JSON path."""
from __future__ import annotations

import json
import shutil

import pytest

from rocpkg.inputs.config import load_config, namespace, relation_names, relation_problem
from rocpkg.inputs.config_strings import prefix_problem
from rocpkg.errors import RocpkgInputError


def write(tmp_path, data):
    path = tmp_path / "package.json"
    path.write_text(json.dumps(data))
    return path


def test_therock_file_loads_as_it_is(shared_dir, tmp_path):
    cfg = tmp_path / "package.json"
    shutil.copy(shared_dir / "fixtures" / "therock" / "package.json", cfg)
    config = load_config(cfg)
    assert len(config.definitions) == 81
    assert namespace(config) == "amdrocm"
    by = config.by_name()
    assert by["amdrocm-fft"].gfxarch is True and by["amdrocm-core"].metapackage is True
    assert by["amdrocm-ck-devel"].disabled is True and by["amdrocm-core"].postinstall is True
    blas = by["amdrocm-blas"]
    assert [r.gfxarch for r in blas.artifacts if r.artifact == "hipblasltprovider"] == [False]
    assert "libstdc++6|libstdc++8" in by["amdrocm-llvm"].deb_relations["depends"]


def test_bundled_file_is_rocpkg_form():
    config = load_config(None)
    assert config.settings["version"] == "7.1.0"
    assert config.settings["top_metapackage"] == "rocm"
    assert any(d.name == "rocm-migraphx" for d in config.definitions)


def test_all_problems_reported_with_path(tmp_path):
    path = write(tmp_path, {"settings": {"version": "x", "colour": "red"}, "packages": [
        {"Package": "ns-a", "Gfxarch": "perhaps", "DEBDepends": ["ns-missing"], "Unknown": 1},
        {"Package": "ns-b", "DEBDepends": "libc6", "Artifactory": [{"Artifact": "b", "Artifact_Subdir": []}]},
    ]})
    with pytest.raises(RocpkgInputError) as exc:
        load_config(path)
    text = "\n".join(f"{w}: {m}" for w, m in exc.value.problems)
    assert all(w.startswith(str(path)) for w, _ in exc.value.problems)
    assert "settings.version" in text and "settings.colour: unknown key" in text
    assert "packages[0](ns-a).Gfxarch" in text and "packages[0](ns-a).Unknown: unknown key" in text
    assert "'ns-missing' is neither defined nor an external system package" in text
    assert "packages[1](ns-b).DEBDepends: expected a list of strings" in text
    assert "Artifact_Subdir" in text


def test_system_dependencies_are_external(tmp_path):
    path = write(tmp_path, [{"Package": "ns-a", "DEBDepends": ["libc6", "python3 (>= 3.6)", "ns-b"]},
                            {"Package": "ns-b", "DEBDepends": []}])
    assert len(load_config(path).definitions) == 2


def test_invalid_json_names_line(tmp_path):
    path = tmp_path / "package.json"
    path.write_text('[{"Package": "a",}]')
    with pytest.raises(RocpkgInputError) as exc:
        load_config(path)
    assert exc.value.problems[0][0].startswith(f"{path}:1:")


@pytest.mark.parametrize("relation,expected", [
    ("libstdc++6|libstdc++8", ["libstdc++6", "libstdc++8"]),
    ("python3 (>= 3.6.8)", ["python3"]),
    ("python3 >= 3.6.8", ["python3"]),
    ("(gcc or clang)", ["gcc", "clang"]),
])
def test_relation_names(relation, expected):
    assert relation_names(relation) == expected


# -- what the metadata checks accept (no false alarms on real package lists) -------------------

@pytest.mark.parametrize("relation", [
    "libc6", "libc6 (>= 2.34)", "libstdc++6|libstdc++8", "libgcc-s1 | libgcc1", "python3:any (>= 3.6)",
    "foo (= 1:2.0-1~bpo1)", "liba (<< 3) | libb (>> 1.0+dfsg)",
])
def test_debian_relations_policy_allows_are_accepted(relation):
    assert relation_problem("deb", relation) == ""


@pytest.mark.parametrize("relation", [
    "glibc", "glibc >= 2.34", "python3 = 3:3.9.18-1.el9", "(gcc or clang)", "(a >= 1 with a < 2)",
    "(pkg-a if (b and c) else d)", "libc.so.6()(64bit)", "perl(File::Temp)", "/usr/bin/sh", "libstdc++|libstdc++6",
])
def test_rpm_relations_rpmbuild_allows_are_accepted(relation):
    assert relation_problem("rpm", relation) == ""


@pytest.mark.parametrize("prefix", ["/opt/rocm/core-{abi}", "/opt/rocm-{version}", "/usr/local/rocm_7.1+x"])
def test_usual_install_prefixes_are_accepted(prefix):
    assert prefix_problem(prefix, "7.1.0") == ""


@pytest.mark.parametrize("prefix", ["/proc", "/proc/rocm", "/sys/rocm", "/dev/shm/rocm", "/run/rocm", "/tmp/rocm"])
def test_a_prefix_under_a_kernel_or_boot_time_file_system_is_refused(prefix):
    assert "a package cannot install there" in prefix_problem(prefix, "7.1.0")


def test_every_bad_string_of_one_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, {"settings": {"maintainer": "a\nb", "prefix": "/opt/../x"}, "packages": [
        {"Package": "ns-a", "Section": "x\ny", "DEBDepends": ["libfoo >="], "RPMRequires": ["(a or"]}]})
    with pytest.raises(RocpkgInputError) as exc:
        load_config(path)
    where = {w.split(": ", 1)[1] for w, _ in exc.value.problems}
    assert where == {"settings.maintainer", "settings.prefix", "packages[0](ns-a).Section",
                     "packages[0](ns-a).DEBDepends[0]", "packages[0](ns-a).RPMRequires[0]"}
