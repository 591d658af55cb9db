"""The version-order check (VERSION_ORDER, a name `build --allow` takes): within one series
(MAJOR.MINOR, rocpkg.out.releases.release_series) a new release must sort above every release
of that series already recorded in OUT, by dpkg's rules and by rpm's (rocpkg.formats.versions),
or apt or dnf would never upgrade to it, and the two formats must agree. A release of
another series (a maintenance release of an older one) and a rebuild of the same
version-release are not ordered. Build refuses before a byte is written; `rocpkg verify
OUT` checks the releases OUT records, in the order they were built.

The releases OUT records are every release whose packages it records (recorded_releases):
manifest.json's releases list, the shard parts not yet joined, and the versions of package
entries that no listed release holds (a list edited by hand hides no newer release).
"""
from __future__ import annotations

from functools import cmp_to_key
from typing import Iterable

from rocpkg.build.gate import VERSION_ORDER, Refusal
from rocpkg.out.manifest_schema import read_parts
from rocpkg.out.releases import SETUP_KIND, ReleaseRecord, manifest_releases, owned_packages, read_manifest
from rocpkg.plan.naming import build_variant
from rocpkg.verify.view import Problem
from rocpkg.formats.versions import DPKG, RPM, compare, evr

# what each tool's refusal means for a user
_CLIENT = {DPKG: "apt", RPM: "dnf"}
_DPKG_ORDER = cmp_to_key(lambda a, b: compare(DPKG, a, b).sign)


def version_order_refusals(records: Iterable[ReleaseRecord], version: str, release: str,
                           epoch: int = 0, variant: str = "") -> list[Refusal]:
    """The version-order refusal of a new release `version`-`release` (epoch) against the
    releases OUT records (rocpkg.out.releases.manifest_releases): one Refusal naming the
    newest release of its series it does not sort above, by the tools that say so, and
    the rule; [] when it sorts above all of them or OUT already records it (a rebuild).
    A variant build (ASAN) is ordered against the releases of its own variant only."""
    new = ReleaseRecord(version, release, epoch=epoch, variant=variant)
    records = list(records)
    if any(r.id == new.id for r in records):
        return []           # a rebuild of a recorded release: where it sorts was settled when it was first built
    earlier = [r for r in records if r.series == new.series]
    below = [(r, _orders(new, r)) for r in earlier]
    below = [(r, orders) for r, orders in below if any(o.sign <= 0 for o in orders.values())]
    if not below:
        return []
    record, orders = max(below, key=lambda item: _newest_key(item[0]))
    more = f" (and {len(below) - 1} more releases of series {new.series})" if len(below) > 1 else ""
    return [Refusal(VERSION_ORDER, f"release {_full(new)}", _sentence(new, record, orders) + more)]


def recorded_releases(out_dir, variant: str = "") -> list[ReleaseRecord]:
    """Every release whose packages OUT records (module doc). A release known only from its
    package entries carries their version-release, and `variant`: which build it was is
    not recorded, so every build is held to it."""
    doc = read_manifest(out_dir)
    parts = [part for _, part in read_parts(out_dir)]
    owned = owned_packages(doc, parts)
    records: dict[str, ReleaseRecord] = {}
    for record in manifest_releases(doc) + [r for r, _ in owned]:
        records.setdefault(record.id, record)
    held = {entry["file"] for _, entry in owned}
    hidden: dict[tuple[str, str], list[str]] = {}
    for entry in (doc or {}).get("packages", []):
        if entry.get("kind") != SETUP_KIND and entry["file"] not in held:
            hidden.setdefault((entry["version"], entry["release"]), []).append(entry["file"])
    for (version, release), files in sorted(hidden.items()):
        hidden_record = ReleaseRecord(version, release, files=tuple(sorted(files)), variant=variant)
        records.setdefault(hidden_record.id, hidden_record)
    return list(records.values())


def out_version_order_refusals(out_dir, settings: dict) -> list[Refusal]:
    """version_order_refusals of the release a plan's settings describe (version, release,
    epoch) against every release OUT records (recorded_releases). Reads OUT, writes nothing."""
    variant = build_variant(settings)
    return version_order_refusals(recorded_releases(out_dir, variant), settings["version"], settings["release"],
                                  settings.get("epoch", 0), variant)


def out_order_problems(out_dir) -> list[Problem]:
    """order_problems of the releases OUT/manifest.json records (`rocpkg verify OUT`)."""
    return order_problems(manifest_releases(read_manifest(out_dir)))


def order_problems(records: Iterable[ReleaseRecord]) -> list[Problem]:
    """A version-order problem for each release that sorts below (or equal to) a release of
    its series recorded before it (by build date, ReleaseRecord.date), by dpkg's or rpm's
    rules, or that the two tools order differently against one of its series."""
    records = sorted(records, key=lambda r: (r.date, r.id))
    problems = []
    for i, later in enumerate(records):
        for earlier in records[:i]:
            if earlier.series != later.series:
                continue
            orders = _orders(later, earlier)
            signs = {o.sign for o in orders.values()}
            recorded_after = earlier.date and later.date > earlier.date
            if (recorded_after and min(signs) <= 0) or len(signs) > 1:
                allowed = " (built with --allow version-order)" if _allowed_order(later) else ""
                problems.append(Problem(VERSION_ORDER, f"release {_full(later)}", "-", "-",
                                        _sentence(later, earlier, orders) + allowed))
                break
    return problems


def _orders(new: ReleaseRecord, old: ReleaseRecord) -> dict:
    return {tool: compare(tool, _full(new), _full(old)) for tool in (DPKG, RPM)}


def _full(record: ReleaseRecord) -> str:
    return evr(record.version, record.release, record.epoch)


def _newest_key(record: ReleaseRecord):
    return _DPKG_ORDER(_full(record))


def _allowed_order(record: ReleaseRecord) -> bool:
    return any(isinstance(a, dict) and a.get("check") == VERSION_ORDER for a in record.allowed)


def _sentence(new: ReleaseRecord, old: ReleaseRecord, orders: dict) -> str:
    """"A sorts below B in OUT for dpkg (rule) - apt would never upgrade to it", or the
    two tools' disagreement."""
    a, b = _full(new), _full(old)
    wrong = [tool for tool, o in orders.items() if o.sign <= 0]
    parts = []
    for tool in wrong:
        o = orders[tool]
        where = "equal to" if o.sign == 0 else "below"
        rule = f" ({o.rule})" if o.rule else ""
        parts.append(f"{a} sorts {where} {b} in OUT for {tool}{rule}: {_CLIENT[tool]} would never upgrade to it")
    right = [tool for tool in orders if tool not in wrong]
    if right and wrong:
        parts.append(f"for {', '.join(right)} it sorts above ({orders[right[0]].rule}): "
                     f"the formats disagree about which release is newest")
    return "; ".join(parts) if wrong else f"{a} was built after {b} and sorts above it"
