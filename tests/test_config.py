"""package.json in both shapes, and every problem reported at once with file and JSON path."""
from __future__ import annotations

import json
import shutil

import pytest

from rocpkg.config import load_config, namespace, relation_names
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
