"""The code fingerprint (rocpkg.builder.fingerprint.code_fingerprint): what it covers, held to an
import walk by ast, and that it moves with the writers' code and the templates only."""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import rocpkg
from rocpkg.builder import fingerprint
from rocpkg.formats.registry import REGISTERED

ROCPKG_DIR = Path(fingerprint.__file__).resolve().parents[1]


def _ast_closure(root: Path) -> set[str]:
    """The files (relative to root, posix) of every rocpkg module the writers import,
    transitively, by parsing them: a package counts with its __init__.py."""
    files: set[str] = set()
    todo = [module for f in REGISTERED.values() for module in f.writer_modules]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen or module == "rocpkg":
            continue
        seen.add(module)
        base = root.joinpath(*module.split(".")[1:])
        found = [base / "__init__.py"] if base.is_dir() else [base.with_suffix(".py")]
        for path in (p for p in found if p.is_file()):
            name = path.relative_to(root).as_posix()
            if name in files:
                continue
            files.add(name)
            for node in ast.walk(ast.parse(path.read_bytes())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rocpkg"):
                    todo.append(node.module)
                    todo += [f"{node.module}.{alias.name}" for alias in node.names]
                elif isinstance(node, ast.Import):
                    todo += [alias.name for alias in node.names if alias.name.startswith("rocpkg.")]
    return files


def test_the_writers_sources_are_what_they_import():
    found = fingerprint.writer_sources()
    assert set(found) == _ast_closure(ROCPKG_DIR)
    assert {"formats/deb/package.py", "formats/streams.py", "formats/compression.py", "formats/rpm/write.py",
            "formats/sign.py", "formats/pacman/write.py"} <= set(found)
    assert not [name for name in found if name.startswith(("cli/", "builder/", "plan/", "inputs/"))]


def _copy(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    code = tmp_path / "rocpkg"
    shutil.copytree(ROCPKG_DIR, code, ignore=shutil.ignore_patterns("__pycache__"))
    templates = tmp_path / "templates"
    shutil.copytree(rocpkg.bundled_dir("rocpkg.templates"), templates)
    monkeypatch.setattr(fingerprint, "__file__", os.fspath(code / "build" / "fingerprint.py"))
    monkeypatch.setattr(rocpkg, "bundled_dir", lambda package: os.fspath(templates))
    return code, templates


def test_the_fingerprint_moves_with_the_writers_and_templates_only(tmp_path, monkeypatch):
    code, templates = _copy(tmp_path, monkeypatch)
    first = fingerprint.code_fingerprint()
    assert fingerprint.code_fingerprint() == first

    with open(code / "cli" / "main.py", "a") as fh:      # not imported by a writer
        fh.write("\n# a comment\n")
    assert fingerprint.code_fingerprint() == first

    with open(code / "formats" / "streams.py", "a") as fh:  # imported by the writers
        fh.write("\n# a comment\n")
    second = fingerprint.code_fingerprint()
    assert second != first

    template = next(p for p in sorted(templates.rglob("*.j2")))
    template.write_bytes(template.read_bytes() + b"\n")
    third = fingerprint.code_fingerprint()
    assert third not in (first, second)

    (templates / "notes.txt").write_text("not a template")
    assert fingerprint.code_fingerprint() == third


def test_a_new_module_a_writer_imports_counts(tmp_path, monkeypatch):
    code, _ = _copy(tmp_path, monkeypatch)
    first = fingerprint.code_fingerprint()
    (code / "extra_helper.py").write_text("X = 1\n")
    assert fingerprint.code_fingerprint() == first     # nothing imports it yet
    with open(code / "formats" / "render.py", "a") as fh:
        fh.write("\n\ndef _extra():\n    from rocpkg.extra_helper import X  # a lazy import counts\n    return X\n")
    assert "extra_helper.py" in fingerprint.writer_sources()
    assert fingerprint.code_fingerprint() != first
