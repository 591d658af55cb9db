"""A subset of a plan to build (TheRock's `--pkg-names`): the packages a maintainer names,
with or without everything they depend on inside the release.

A name is a package.json definition (`amdrocm-blas`: every package made from it, host,
device and meta-packages alike) or one output package (`amdrocm-blas7.1-gfx942`, in either
format's spelling). The whole plan is still checked before a build (its relations must
hold for the release the subset belongs to); only the chosen packages are written.
"""
from __future__ import annotations

import dataclasses

from rocpkg.inputs.config import did_you_mean, relation_names
from rocpkg.errors import RocpkgInputError


def select(plan, names: list[str], closure: bool = False) -> set[tuple[str, str]]:
    """The (format, package name) pairs that `names` pick, plus with closure their
    in-release dependencies (Depends and Pre-Depends, every alternative that is planned),
    transitively. An unknown name is an error naming it (with the closest known name)."""
    known = {n for specs in plan.packages.values() for s in specs for n in (s.definition, s.name)}
    folded = {n.lower() for n in known}
    problems = [("--pkg-names", f"{name!r} is neither a package.json definition nor a planned package"
                 + did_you_mean(name, sorted(known)))
                for name in names if name.lower() not in folded]
    if problems:
        raise RocpkgInputError(*problems)
    wanted = {n.lower() for n in names}  # a format's names may be the lower-case spelling of the plan's
    chosen: set[tuple[str, str]] = set()
    for fmt, specs in plan.packages.items():
        by_name = {s.name: s for s in specs}
        todo = [s.name for s in specs if s.name.lower() in wanted or s.definition.lower() in wanted]
        while todo:
            name = todo.pop()
            if (fmt, name) in chosen:
                continue
            chosen.add((fmt, name))
            if closure:
                spec = by_name[name]
                todo += [dep for relation in spec.depends + spec.pre_depends
                         for dep in relation_names(relation) if dep in by_name]
    return chosen


def restrict(plan, chosen: set[tuple[str, str]]):
    """A copy of plan holding only the chosen packages (for showing them; a build checks
    the whole plan and writes the chosen ones)."""
    packages = {fmt: [s for s in specs if (fmt, s.name) in chosen] for fmt, specs in plan.packages.items()}
    return dataclasses.replace(plan, packages=packages)
