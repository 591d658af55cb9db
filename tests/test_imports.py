"""The layout's promises, read from the sources with `ast`: rocpkg's modules import each
other without a circle (one owner per fact: a helper both sides need lives in a third
module), and kpack, the format library, imports nothing of rocpkg."""
from __future__ import annotations

import ast
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
ROOTS = {"rocpkg": REPO / "packaging" / "rocpkg", "kpack": REPO / "kpack"}


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py of a package (subpackages too)."""
    root = ROOTS[package]
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(path: Path, known: set[str]) -> set[str]:
    """The known modules a source file imports, at module level or inside a function
    (`from rocpkg import rpm` names the module rocpkg.formats.rpm, `from rocpkg.x import f` rocpkg.x)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if full in known else node.module)
    return {n for n in names if n in known or n.split(".")[0] in ROOTS}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, as the modules along it, or None."""
    state: dict[str, int] = {}      # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_rocpkg_modules_import_each_other_without_a_circle():
    known = modules("rocpkg")
    graph = {name: {n for n in imported(path, set(known)) if n in known and n != name}
             for name, path in known.items()}
    assert "rocpkg.formats.rpm.write" in known       # the writer is a module of its format's folder
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_the_circle_finder_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_kpack_imports_nothing_of_rocpkg():
    offenders = {name: sorted(n for n in imported(path, set()) if n.split(".")[0] == "rocpkg")
                 for name, path in modules("kpack").items()}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_kpack_modules_import_each_other_without_a_circle():
    known = modules("kpack")
    graph = {name: {n for n in imported(path, set(known)) if n in known and n != name}
             for name, path in known.items()}
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def private_imports(package: str) -> list[str]:
    """`from M import _name` across modules of a package (a private name is its module's own)."""
    found = []
    for name, path in modules(package).items():
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ROOTS:
                found += [f"{name} imports {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_")]
    return found


def test_no_private_name_is_imported_across_modules():
    assert private_imports("rocpkg") + private_imports("kpack") == []


def test_the_writers_are_pure_functions_of_a_spec():
    """The .deb and .rpm writers, and everything they import, know nothing of ROCm: no
    kpack, no host-code search, no catalog, plan or build. A writer is a function of
    (spec, out_dir, options) alone: the host-code search is done before any write."""
    known = modules("rocpkg")
    graph = {name: imported(path, set(known)) for name, path in known.items()}
    reached, todo = set(), ["rocpkg.formats.deb.package", "rocpkg.formats.rpm.write"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(n for n in graph.get(name, ()) if n in known or n.split(".")[0] == "kpack")
    forbidden = {n for n in reached if n.split(".")[0] == "kpack"} | \
        (reached & {"rocpkg.inputs.host_code", "rocpkg.inputs.catalog", "rocpkg.plan.make", "rocpkg.builder.run", "rocpkg.builder.gate"})
    assert forbidden == set()


# The layers of rocpkg, lowest first: a module imports from its own layer and the ones below.
# (top-level: errors, model, the package's resources) < formats < store < inputs < plan < verify
# < builder < repo < cli. So the writers know no artifacts, OUT's records know no plan, the
# repository commands never import the builder, and only the command line prints or exits.
LAYERS = ["", "formats", "store", "inputs", "plan", "verify", "builder", "repo", "cli"]


def layer_of(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else 0


def test_every_import_goes_down_the_layers():
    known = modules("rocpkg")
    upward = [f"{name} imports {dep}" for name, path in known.items()
              for dep in imported(path, set(known)) if dep in known and layer_of(dep) > layer_of(name)]
    assert upward == []
    assert {name.split(".")[1] for name in known if name.count(".") >= 2} <= set(LAYERS)


def test_at_most_twelve_modules_at_the_top():
    top = sorted(p.name for p in ROOTS["rocpkg"].glob("*.py"))
    assert len(top) <= 12, top


def test_no_product_file_over_600_lines_and_no_function_over_80():
    long_files, long_functions = [], []
    for package in ROOTS:
        for name, path in modules(package).items():
            source = path.read_text()
            if source.count("\n") > 600:
                long_files.append(f"{path.relative_to(REPO)}: {source.count(chr(10))} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        node.end_lineno - node.lineno + 1 > 80:
                    long_functions.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long_files == [] and long_functions == []


def test_the_repository_commands_never_import_the_builder():
    known = modules("rocpkg")
    offenders = [f"{name} imports {dep}" for name, path in known.items() if name.startswith("rocpkg.repo.")
                 for dep in imported(path, set(known)) if dep.startswith("rocpkg.builder")]
    assert offenders == []
