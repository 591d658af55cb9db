"""Graph helpers of the plan: strongly connected components (dependency cycles, legal in
DEB/RPM and reported as information) and install closures (what a package pulls in)."""
from __future__ import annotations

from rocpkg import model as m
from rocpkg.inputs.config import relation_names


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components in deterministic order."""
    return sorted(sorted(component) for component in _components(graph))


def _components(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components in the order Tarjan's algorithm completes them:
    each after every component it reaches (a reverse topological order)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, [])))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                result.append(comp)
    return result


def provided_names(specs: dict[str, m.PackageSpec]) -> dict[str, str]:
    """Each name a package of the set provides -> the first package providing it."""
    provided: dict[str, str] = {}
    for spec in specs.values():
        for prov in spec.provides:
            provided.setdefault(relation_names(prov)[0], spec.name)
    return provided


def dependency_edges(specs: dict[str, m.PackageSpec],
                     provided: dict[str, str]) -> dict[str, tuple[list[str], list[str]]]:
    """Each package's direct dependencies inside the set (the first alternative the set
    has, through provides too) and the relations nothing in it satisfies."""
    edges = {}
    for name, spec in specs.items():
        inside, outside = [], []
        for rel in spec.depends + spec.pre_depends:
            choice = next((n for n in relation_names(rel) if n in specs or n in provided), None)
            if choice is None:
                outside.append(rel)
            else:
                inside.append(choice if choice in specs else provided[choice])
        edges[name] = (inside, outside)
    return edges


def closure(specs: dict[str, m.PackageSpec], root: str,
            edges: dict[str, tuple[list[str], list[str]]] | None = None) -> tuple[list[str], list[str]]:
    """Offline install closure of `root` inside one format's package set: the sorted names
    it pulls in, and the relations nothing in the set satisfies (external or missing).
    Alternatives take the first name the set has, as apt and dnf would here. edges:
    dependency_edges(specs, provided_names(specs)), for a caller that asks for many
    closures of one set."""
    if edges is None:
        edges = dependency_edges(specs, provided_names(specs))
    seen: set[str] = set()
    unresolved: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        inside, outside = edges[name]
        todo.extend(inside)
        unresolved.update(outside)
    return sorted(seen), sorted(unresolved)


def closures(edges: dict[str, tuple[list[str], list[str]]]) -> dict[str, tuple[frozenset, frozenset]]:
    """Every package's closure at once (as `closure` finds each: the names it pulls in and
    the relations nothing in the set satisfies), unsorted: one pass over the components
    of the dependency graph, each taking the sets of those it depends on, which are
    complete by then. A release's checks ask for some 600 closures per format; walking
    each apart visited 100,000 nodes in Python."""
    graph = {name: inside for name, (inside, _) in edges.items()}
    reach: dict[str, tuple[frozenset, frozenset]] = {}
    for component in _components(graph):
        names, unresolved = set(component), set()
        for name in component:
            inside, outside = edges[name]
            unresolved.update(outside)
            for dep in inside:
                if dep not in names:
                    names.update(reach[dep][0])
                    unresolved.update(reach[dep][1])
        done = frozenset(names), frozenset(unresolved)
        for name in component:
            reach[name] = done
    return reach
