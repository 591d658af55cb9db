"""Release channels and the order of releases in one OUT.

A release pipeline names a channel and a date (and a number), never a version string: the
version is derived from the base version (channel_version), in forms that dpkg and rpm
order alike, so that one series upgrades dev -> nightly -> prerelease -> release with apt
and dnf:

    release     X.Y.Z
    prerelease  X.Y.Z~YYYYMMDD.rcN
    nightly     X.Y.Z~YYYYMMDD
    dev         X.Y.Z~YYYYMMDD~dev[N]

After the '~' that puts them below X.Y.Z, every form starts with its date: dpkg sorts a
letter there above a digit run (it compares the text before a number first) while rpm
sorts a numeric segment above an alphabetic one, so a form starting with letters
(`~devYYYYMMDD`, `~rcN`, `~preN`) sorts above the nightlies for one tool and below them
for the other. Starting with the date, builds of one series sort by date in both; on one
date dev ('~' sorts before the end) < nightly < prerelease ('.rcN' is more than the end).

rocpkg.builder.version_order checks that a new release sorts above those OUT holds.
"""
from __future__ import annotations

import datetime
import re

from rocpkg.errors import RocpkgInputError
from rocpkg.store.manifest_schema import MAX_DATE

DEV, NIGHTLY, PRERELEASE, RELEASE = "dev", "nightly", "prerelease", "release"
CHANNELS = (DEV, NIGHTLY, PRERELEASE, RELEASE)
_BASE_RE = re.compile(r"[0-9]+(\.[0-9]+)+")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")


# -- versions of a channel ---------------------------------------------------------------------

def channel_version(base: str, channel: str, date: str | None, number: int | None) -> str:
    """The version of a release of `channel` built from base version `base` (X.Y[.Z]) on
    `date` (YYYY-MM-DD; not needed for a release), with `number` (the N of a prerelease's
    rcN, required there; an optional N of a dev build's devN)."""
    if channel not in CHANNELS:
        raise RocpkgInputError(("--channel", f"unknown channel {channel!r}; channels: {', '.join(CHANNELS)}"))
    if not _BASE_RE.fullmatch(base):
        raise RocpkgInputError(("--version", f"{base!r} is not a base version X.Y.Z: with a channel, the version "
                                             f"is derived from it (README: Release channels)"))
    if number is not None and (number < 0 or channel in (NIGHTLY, RELEASE)):
        raise RocpkgInputError(("--number", f"{number} is not a number of a {channel} release "
                                            "(a prerelease's rcN, a dev build's devN; N >= 0)"))
    if channel == RELEASE:
        return base
    if date is None:
        raise RocpkgInputError(("--date", f"a {channel} version carries its date: give --date YYYY-MM-DD "
                                          "or set SOURCE_DATE_EPOCH"))
    stamp = _checked_date(date).strftime("%Y%m%d")
    if channel == NIGHTLY:
        return f"{base}~{stamp}"
    if channel == DEV:
        return f"{base}~{stamp}~dev{'' if number is None else number}"
    if number is None:
        raise RocpkgInputError(("--number", "a prerelease needs its number: --number N gives ~YYYYMMDD.rcN"))
    return f"{base}~{stamp}.rc{number}"


def date_of_epoch(seconds: int) -> str:
    """YYYY-MM-DD (UTC) of a SOURCE_DATE_EPOCH."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d")


def epoch_of_date(text: str) -> int:
    """The SOURCE_DATE_EPOCH of a --date YYYY-MM-DD: its first second (UTC), within what
    rpm's 32-bit dates hold."""
    day = _checked_date(text)
    seconds = int(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc).timestamp())
    if not 0 <= seconds <= MAX_DATE:
        raise RocpkgInputError(("--date", f"{text} is outside 1970-01-01 to {date_of_epoch(MAX_DATE)}, "
                                          f"what rpm's 32-bit dates hold"))
    return seconds


def _checked_date(text: str) -> datetime.date:
    try:
        if not _DATE_RE.fullmatch(text):
            raise ValueError("not YYYY-MM-DD")
        return datetime.date.fromisoformat(text)
    except ValueError as exc:
        raise RocpkgInputError(("--date", f"{text!r} is not a date YYYY-MM-DD ({exc})")) from None


_FORMS = [  # (channel, how a version of it ends), rocpkg's forms first, then TheRock's
    (DEV, re.compile(r"~\d{8}~dev\d*")), (PRERELEASE, re.compile(r"~\d{8}\.rc\d+")), (NIGHTLY, re.compile(r"~\d{8}")),
    (DEV, re.compile(r"~dev\d{8}|~\d{8}g[0-9a-f]+")), (PRERELEASE, re.compile(r"~(rc|pre)\d+")),
]


def version_channel(version: str) -> str:
    """The channel a version's form says (for releases recorded without one): a plain
    X.Y.Z is a release; rocpkg's forms above and TheRock's (~devYYYYMMDD, ~YYYYMMDDg<hash>,
    ~rcN, ~preN); "" for any other form."""
    base, tilde, rest = version.partition("~")
    if not tilde:
        return RELEASE if _BASE_RE.fullmatch(base.split(":")[-1]) else ""
    for channel, form in _FORMS:
        if form.fullmatch("~" + rest):
            return channel
    return ""
