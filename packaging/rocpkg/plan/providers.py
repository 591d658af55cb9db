"""Which packages ship the kpack archives a device package's host binaries load from,
asked of the runtime's own lookup (kpack.loader): the relations that keep a device package
that ships no archive of its own from leaving a GPU without kernels."""
from __future__ import annotations

from kpack.loader import STRICT, find_candidates
from kpack.targets import device_isas
from rocpkg import model as m


def archive_index(facts):
    """What the runtime consults of one archive (kpack.loader.ArchiveIndex), from the
    catalog's TOC summary; an archive that does not open is skipped by the runtime, so it
    answers nothing here (preflight and the build checks name it)."""
    from kpack.loader import ArchiveIndex

    if facts.archive is None:
        return None
    return ArchiveIndex.from_kernels(facts.archive.arches, facts.archive.kernels)


def link_archive_providers(plan, facts_of, pin, settings: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """A device package that ships no kpack archive of its own depends on the device
    packages that ship the archives the runtime would load for its host binaries on a
    GPU of its target, in every feature mode (the splitter put a shared artifact's
    archive under its first stage prefix only; a release may build only feature
    variants, `gfx90a:xnack+` and `gfx90a:xnack-`). Markers and archive TOCs are the
    catalog's facts (facts_of: source path -> FileFacts): no artifact is reopened here.
    pin(fmt, name): the relation that pins a package of the release. Returns (warnings,
    problems): a device package left empty is a problem, or a warning with
    settings.allow_unsatisfied."""
    index_cache: dict[str, object] = {}
    strict = settings.get("kpack_lookup") == STRICT
    warnings: list[str] = []
    problems: list[tuple[str, str]] = []

    for fmt, specs in plan.packages.items():
        shipped: dict[str, m.FileEntry] = {}
        owner: dict[str, str] = {}
        for p in specs:
            if p.kind == m.KIND_DEVICE:
                for fe in p.files:
                    if fe.type == m.FILE and fe.path.endswith(".kpack"):
                        shipped[fe.path] = fe
                        owner[fe.path] = p.name

        def open_archive(path: str):
            fe = shipped.get(path)
            if fe is None:
                return None
            if fe.source not in index_cache:
                index_cache[fe.source] = archive_index(facts_of(fe.source))
            return index_cache[fe.source]

        for p in specs:
            if p.kind != m.KIND_DEVICE:
                continue
            if any(fe.path.endswith(".kpack") for fe in p.files if fe.type == m.FILE):
                continue
            host = next((h for h in specs if h.kind == m.KIND_HOST and h.definition == p.definition), None)
            providers: list[str] = []
            for fe in host.files if host else []:
                if fe.type != m.FILE:
                    continue
                marker = facts_of(fe.source).marker  # a malformed one: preflight's
                if marker is None:
                    continue
                for isa in device_isas(p.target):
                    ordered = find_candidates(marker, fe.path, isa, open_archive).ordered
                    for archive, _ in ordered[:1] if strict else ordered:
                        provider = owner.get(archive)
                        if provider and provider != p.name and provider not in providers:
                            providers.append(provider)
            for provider in providers:
                dep = pin(fmt, provider)
                if dep not in p.depends:
                    p.depends.append(dep)
            if not providers and not any(fe.type != m.DIR for fe in p.files):
                what = (f"device package {p.name} would be empty: no file of {p.definition} is for {p.target} "
                        f"and no host binary's marker names an archive another package ships")
                if settings.get("allow_unsatisfied"):
                    warnings.append(what)
                elif fmt == next(iter(plan.packages)):   # said once, in the plan's first format
                    problems.append((p.name, what))
    return warnings, problems
