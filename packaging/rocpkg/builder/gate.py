"""What `build` refuses (README: What build refuses): the checks `verify` makes of a plan, and a structural
check of every kpack archive the plan packs, run before a byte is written.

verify only advises; a build that packed what verify rejects would publish a release that
fails on a user's GPU (`hipErrorInvalidImage`) or in `dpkg -i` (two packages, one path).
So every problem is a refusal unless the maintainer names its check (`--allow CHECK`); what
was allowed is returned, so that the manifest and the summary can say so.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from kpack.errors import KpackFormatError
from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.builder.workers import starmap_here
from rocpkg.plan.debug import DEBUG_CHECKS

# Checks of the archives themselves (verify's own checks are listed in verify.CHECKS)
KPACK_ARCHIVE = "kpack-archive"           # header, TOC, frame bounds, declared sizes
CODE_OBJECT_TARGET = "code-object-target"  # a code object's e_flags say another target
ARCHIVE_CHECKS = (KPACK_ARCHIVE, CODE_OBJECT_TARGET)
# A check of the release against the releases OUT holds (rocpkg.builder.version_order)
VERSION_ORDER = "version-order"            # apt or dnf would not upgrade to it


@dataclass(frozen=True)
class Refusal:
    """One problem that stops a build: its check (the name `--allow` takes), where, what."""

    check: str
    where: str
    what: str

    def as_problem(self) -> tuple[str, str]:
        return self.where, f"{self.what} [{self.check}]"

    def to_dict(self) -> dict:
        return {"check": self.check, "where": self.where, "what": self.what}


def known_checks() -> list[str]:
    from rocpkg.verify.view import PLAN_CHECKS

    return sorted(set(PLAN_CHECKS) | set(ARCHIVE_CHECKS) | set(DEBUG_CHECKS) | {VERSION_ORDER})


def check_allow(allow) -> list[str]:
    """The `--allow` names, each one a check build can refuse on."""
    known = known_checks()
    bad = [a for a in allow if a not in known]
    if bad:
        raise RocpkgInputError(*[("--allow", f"unknown check {a!r}; known checks: {', '.join(known)}") for a in bad])
    return sorted(set(allow))


def archive_checks(plan, formats, *, whole_kernels: bool = False, starmap_async=None):
    """Start the structural check of every kpack archive the packages of `formats` pack;
    returns the call that waits for their refusals. starmap_async(function, arguments) ->
    a waiter: the build's worker processes, which check the archives on every core (the
    block walk is Python, held by the GIL) while the build runs verify's checks; by
    default they are checked here, now."""
    arguments = [(path, whole_kernels) for path in _packed_archives(plan, formats)]
    waiter = (starmap_async or starmap_here)(_check_one_archive, arguments)
    return lambda: [r for results in waiter() for r in results]


def refusals(plan, formats, *, config=None, whole_kernels: bool = False, starmap_async=None,
             archives=None) -> list[Refusal]:
    """Every problem build refuses on, for the packages of `formats`: verify's plan-level
    checks and each packed kpack archive's structure. One problem, one refusal: a problem
    both formats share (same package, path, target and message) is listed once.

    Each kernel's frame is checked by its headers and its code object by its ELF header
    (kpack.check, whole_kernels=False): decoding every kernel would cost more CPU than
    compressing the release. whole_kernels=True (`build --deep-check`) decodes
    each one, as `kpack verify` does. archives: the waiter of archive_checks() started
    earlier (the build starts them on its workers, then runs verify's checks here, and
    hands out no package before both are in); by default they are started here (see
    archive_checks)."""
    from rocpkg.verify.run import verify_plan

    found: dict[tuple, Refusal] = {}
    if archives is None:
        archives = archive_checks(plan, formats, whole_kernels=whole_kernels, starmap_async=starmap_async)
    report = verify_plan(plan, config)
    archives = archives()
    for refusal in archives:
        found.setdefault((refusal.check, refusal.where, refusal.what), refusal)
    broken = {r.where for r in archives}
    for finding in getattr(plan, "debug_findings", ()):
        found.setdefault((finding.check, finding.where, finding.what),
                         Refusal(finding.check, finding.where, finding.what))
    for p in report.problems:
        if p.format not in formats or p.check in DEBUG_CHECKS:    # the debug findings: above, as they are
            continue
        if p.check == "unreadable" and any(source in p.message for source in broken):
            continue  # the archive check above already names this archive and what is wrong
        where = ": ".join(part for part in (p.package, p.path, p.target) if part and part != "-")
        found.setdefault((p.check, where, p.message), Refusal(p.check, where, p.message))
    return sorted(found.values(), key=lambda r: (r.where, r.check, r.what))


def enforce(found: list[Refusal], allow) -> list[Refusal]:
    """Raise RocpkgInputError for the refusals whose check is not allowed; return the
    allowed ones (for the manifest and the summary)."""
    allowed = set(allow)
    refused = [r for r in found if r.check not in allowed]
    if refused:
        checks = sorted({r.check for r in refused})
        problems = [r.as_problem() for r in refused]
        problems.append(("build", f"refused: {len(refused)} problem{'s' if len(refused) != 1 else ''} "
                                  f"(checks {', '.join(checks)}); fix the input, or ship anyway with "
                                  + " ".join(f"--allow {c}" for c in checks)))
        raise RocpkgInputError(*problems)
    return [r for r in found if r.check in allowed]


def _packed_archives(plan, formats) -> list[str]:
    sources = set()
    for fmt in formats:
        for spec in plan.packages.get(fmt, []):
            for fe in spec.files:
                if fe.type == m.FILE and fe.path.endswith(".kpack"):
                    sources.add(fe.source)
    return sorted(sources)


def _check_one_archive(path: str, whole_kernels: bool) -> list[Refusal]:
    from kpack.check import CodeObjectProblem, check_archive

    out = []
    for problem in check_archive(path, _named_target(path), whole_kernels=whole_kernels):
        check = CODE_OBJECT_TARGET if isinstance(problem, CodeObjectProblem) else KPACK_ARCHIVE
        out.append(Refusal(check, path, _without_path(problem, path)))
    return out


def _named_target(path: str) -> str | None:
    """The target an archive's name says it holds (`<prefix>_<target>.kpack`, docs/kpack.md);
    None for a name that carries no target (a family archive, another naming)."""
    from kpack import targets as kt

    stem = os.path.basename(path)[: -len(".kpack")]
    suffix = stem.rpartition("_")[2]
    return suffix if kt.is_target(suffix) else None


def _without_path(problem: KpackFormatError, path: str) -> str:
    text = str(problem)
    return text[len(path) + 2:] if text.startswith(path + ": ") else text
