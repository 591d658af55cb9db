"""The version-order check (VERSION_ORDER, a name `build --allow` takes): within one series
(MAJOR.MINOR, rocpkg.store.releases.release_series) a new release must sort above every release
of that series already recorded in OUT, by the version order of each format either release
is built in (Format.compare over Format.full_version: dpkg's for .deb, rpm's for .rpm,
pacman's vercmp for pacman), or that format's client would never upgrade to it, and the
formats must agree. A release that records no formats is taken as built in the default
ones (rocpkg.formats.registry.DEFAULT). A release of another series (a maintenance
release of an older one) and a rebuild of the same version-release are not ordered.
Build refuses before a byte is written; `rocpkg verify OUT` checks the releases OUT
records, in the order they were built.

The releases OUT records are every release whose packages it records (recorded_releases):
manifest.json's releases list, the shard parts not yet joined, and the versions of package
entries that no listed release holds (a list edited by hand hides no newer release).
"""
from __future__ import annotations

from functools import cmp_to_key
from typing import Iterable

from rocpkg.builder.gate import VERSION_ORDER, Refusal
from rocpkg.errors import RocpkgInputError
from rocpkg.formats import registry
from rocpkg.formats.plugin import Format
from rocpkg.store.releases import SETUP_KIND, Recorded, ReleaseRecord, manifest_releases, read_manifest
from rocpkg.plan.naming import build_variant
from rocpkg.verify.view import Problem
from rocpkg.formats.versions import evr


def version_order_refusals(records: Iterable[ReleaseRecord], version: str, release: str,
                           epoch: int = 0, variant: str = "", formats: Iterable[str] = ()) -> list[Refusal]:
    """The version-order refusal of a new release `version`-`release` (epoch), to be built
    in `formats` (none: the default ones), against the releases OUT records
    (rocpkg.store.releases.manifest_releases): one Refusal naming the newest release of its
    series it does not sort above, by the tools that say so, and the rule; [] when it
    sorts above all of them or OUT already records it (a rebuild). A variant build (ASAN)
    is ordered against the releases of its own variant only."""
    new = ReleaseRecord(version, release, epoch=epoch, variant=variant, formats=tuple(formats))
    records = list(records)
    if any(r.id == new.id for r in records):
        return []           # a rebuild of a recorded release: where it sorts was settled when it was first built
    earlier = [r for r in records if r.series == new.series]
    below = [(r, _orders(new, r)) for r in earlier]
    below = [(r, orders) for r, orders in below if any(o.sign <= 0 for o in orders.values())]
    if not below:
        return []
    newest = _newest_key(_formats(new, new)[0])
    record, orders = max(below, key=lambda item: newest(item[0]))
    more = f" (and {len(below) - 1} more releases of series {new.series})" if len(below) > 1 else ""
    return [Refusal(VERSION_ORDER, f"release {_full(new)}", _sentence(new, record, orders) + more)]


def recorded_releases(recorded: Recorded, variant: str = "") -> list[ReleaseRecord]:
    """Every release whose packages OUT records (module doc; recorded: OUT's records, read
    once). A release known only from its package entries carries their version-release, and
    `variant`: which build it was is not recorded, so every build is held to it."""
    doc, owned = recorded.manifest, recorded.owned
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


def out_version_order_refusals(recorded: Recorded, settings: dict, formats: Iterable[str] = ()) -> list[Refusal]:
    """version_order_refusals of the release a plan's settings describe (version, release,
    epoch), built in `formats`, against every release OUT records (recorded_releases;
    recorded: rocpkg.store.releases.read_recorded of OUT)."""
    variant = build_variant(settings)
    return version_order_refusals(recorded_releases(recorded, variant), settings["version"], settings["release"],
                                  settings.get("epoch", 0), variant, formats)


def out_order_problems(out_dir) -> list[Problem]:
    """order_problems of the releases OUT/manifest.json records (`rocpkg verify OUT`)."""
    return order_problems(manifest_releases(read_manifest(out_dir)))


def order_problems(records: Iterable[ReleaseRecord]) -> list[Problem]:
    """A version-order problem for each release that sorts below (or equal to) a release of
    its series recorded before it (by build date, ReleaseRecord.date), by the version order
    of a format either is built in, or that those orders differ against one of its series."""
    records = sorted(records, key=lambda r: (r.date, r.id))
    problems = []
    for i, later in enumerate(records):
        for earlier in records[:i]:
            if earlier.series != later.series:
                continue
            orders = _orders(later, earlier)
            signs = {o.sign for o in orders.values()} or {1}
            recorded_after = earlier.date and later.date > earlier.date
            if (recorded_after and min(signs) <= 0) or len(signs) > 1:
                allowed = " (built with --allow version-order)" if _allowed_order(later) else ""
                problems.append(Problem(VERSION_ORDER, f"release {_full(later)}", "-", "-",
                                        _sentence(later, earlier, orders) + allowed))
                break
    return problems


def _formats(new: ReleaseRecord, old: ReleaseRecord) -> list[Format]:
    """The formats either release is built in (a record of none: the default ones), in
    the registry's order."""
    names = set(new.formats or registry.DEFAULT) | set(old.formats or registry.DEFAULT)
    return [form for name, form in registry.REGISTERED.items() if name in names and form.compare]


def _orders(new: ReleaseRecord, old: ReleaseRecord) -> dict[Format, object]:
    """Format -> the Order of new against old in its version order; a format that cannot
    spell one of the two versions is left out (its build refuses that version)."""
    orders = {}
    for form in _formats(new, old):
        try:
            orders[form] = form.compare(form.full_version(new.version, new.release, new.epoch),
                                        form.full_version(old.version, old.release, old.epoch))
        except RocpkgInputError:
            continue
    return orders


def _full(record: ReleaseRecord) -> str:
    return evr(record.version, record.release, record.epoch)


def _newest_key(form: Format):
    """Records -> a key that sorts them in the format's version order (one it cannot
    spell sorts lowest)."""
    def spelled(record: ReleaseRecord) -> str | None:
        try:
            return form.full_version(record.version, record.release, record.epoch)
        except RocpkgInputError:
            return None

    def order(a: ReleaseRecord, b: ReleaseRecord) -> int:
        x, y = spelled(a), spelled(b)
        return (x is not None) - (y is not None) if x is None or y is None else form.compare(x, y).sign
    return cmp_to_key(order)


def _allowed_order(record: ReleaseRecord) -> bool:
    return any(isinstance(a, dict) and a.get("check") == VERSION_ORDER for a in record.allowed)


def _sentence(new: ReleaseRecord, old: ReleaseRecord, orders: dict) -> str:
    """"A sorts below B in OUT for dpkg (rule) - apt would never upgrade to it", or the
    two tools' disagreement."""
    a, b = _full(new), _full(old)
    wrong = [form for form, o in orders.items() if o.sign <= 0]
    parts = []
    for form in wrong:
        o = orders[form]
        where = "equal to" if o.sign == 0 else "below"
        rule = f" ({o.rule})" if o.rule else ""
        parts.append(f"{a} sorts {where} {b} in OUT for {form.order_tool}{rule}: "
                     f"{form.client} would never upgrade to it")
    right = [form for form in orders if form not in wrong]
    if right and wrong:
        rule = f" ({orders[right[0]].rule})" if orders[right[0]].rule else ""
        parts.append(f"for {', '.join(form.order_tool for form in right)} it sorts above{rule}: "
                     f"the formats disagree about which release is newest")
    return "; ".join(parts) if wrong else f"{a} was built after {b} and sorts above it"
