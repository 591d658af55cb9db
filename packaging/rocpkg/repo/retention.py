"""Retention by channel: which releases `rocpkg prune OUT --policy ...` removes.

A policy names, per channel (rocpkg.inputs.channels), how long its releases stay or how many:

    dev=30d,nightly=120d,prerelease=2y,release=all      ages: d, w (7 d), m (30 d), y (365 d)
    nightly=5                                           the 5 newest nightlies of each series

An age removes the releases of that channel built (ReleaseRecord.date, their
SOURCE_DATE_EPOCH) more than that long before "now": SOURCE_DATE_EPOCH when set, else
the newest release's date, so that the same OUT and policy remove the same releases on any
day (policy_now says which). A count keeps the newest of that channel per series (by
dpkg's order, which the version-order check makes rpm's too). A channel the policy does
not name, a release of no known channel and an undated release are kept. The newest
release of every series is never removed, whatever its channel: a series' users always
have something to install. Pure: prune (rocpkg.repo.lifecycle) does the removing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cmp_to_key
from typing import Iterable

from rocpkg.inputs.channels import CHANNELS, version_channel
from rocpkg.errors import RocpkgInputError
from rocpkg.store.dates import environment_epoch
from rocpkg.store.releases import ReleaseRecord
from rocpkg.formats.versions import DPKG, compare, evr

DAY = 86400
AGE_UNITS = {"d": 1, "w": 7, "m": 30, "y": 365}
MAX_RULE = 100_000      # a count or an age (100000 years is past any date rpm holds)
_RULE_RE = re.compile(r"(?P<channel>[a-z]+)=(?:(?P<all>all)|(?P<age>\d+)(?P<unit>[dwmy])|(?P<count>\d+))")
_DPKG_ORDER = cmp_to_key(lambda a, b: compare(DPKG, a, b).sign)


@dataclass(frozen=True)
class Policy:
    """Per channel: days (remove what is older), count (keep the newest N per series), or
    neither (keep all). now: the time ages count back from (None: the newest release's date)."""

    days: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    now: int | None = None


def parse_policy(text: str, now: int | None = None) -> Policy:
    """A Policy from "channel=AGE|COUNT|all,..."; bad input names the rule."""
    days, counts, seen = {}, {}, set()
    for rule in [r.strip() for r in text.split(",")]:
        match = _RULE_RE.fullmatch(rule)
        if not match or match["channel"] not in CHANNELS:
            raise RocpkgInputError(("--policy", f"{rule!r} is not CHANNEL=AGE, CHANNEL=COUNT or CHANNEL=all "
                                                f"(channels: {', '.join(CHANNELS)}; ages like 30d, 8w, 6m, 2y)"))
        channel = match["channel"]
        if channel in seen:
            raise RocpkgInputError(("--policy", f"{channel} is given twice"))
        seen.add(channel)
        number = match["age"] or match["count"] or "0"
        if len(number) > len(str(MAX_RULE)) or int(number) > MAX_RULE:
            raise RocpkgInputError(("--policy", f"{rule[:60]!r}: a count or age is from 0 to {MAX_RULE}"))
        if match["age"] is not None:
            days[channel] = int(match["age"]) * AGE_UNITS[match["unit"]]
        elif match["count"] is not None:
            counts[channel] = int(match["count"])
    return Policy(days, counts, now)


def policy_now(records: Iterable[ReleaseRecord], environ=None) -> tuple[int | None, str]:
    """(the time a policy's ages count back from, what it is): SOURCE_DATE_EPOCH when the
    environment sets it, else the newest date a release was built with (None if none is dated)."""
    value = environment_epoch(environ)
    if value is not None:
        return value, "SOURCE_DATE_EPOCH"
    newest = max((r.date for r in records), default=0)
    return (newest or None), "the newest release's date"


def channel_of(record: ReleaseRecord) -> str:
    """The channel recorded with the release, else the one its version's form says."""
    return record.channel or version_channel(record.version)


def releases_to_remove(records: Iterable[ReleaseRecord], policy: Policy,
                       keep_list: Iterable[str] = ()) -> list[ReleaseRecord]:
    """The releases the policy removes, oldest first; never one on keep_list (ids), never
    the newest release of a series."""
    records = list(records)
    now = policy.now if policy.now is not None else policy_now(records, environ={})[0]
    pinned = set(keep_list)
    doomed = []
    by_series: dict[str, list[ReleaseRecord]] = {}
    for record in records:
        by_series.setdefault(record.series, []).append(record)
    for members in by_series.values():
        members.sort(key=_order, reverse=True)          # newest first
        for channel, count in policy.counts.items():
            doomed += [r for r in members if channel_of(r) == channel][count:]
        for channel, days in policy.days.items():
            doomed += [r for r in members if channel_of(r) == channel and r.date and now is not None
                       and r.date < now - days * DAY]
        pinned.add(members[0].id)
    chosen = {r.id: r for r in doomed if r.id not in pinned}
    return sorted(chosen.values(), key=_order)


def _order(record: ReleaseRecord):
    return _DPKG_ORDER(evr(record.version, record.release, record.epoch))
