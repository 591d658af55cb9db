"""Version order as dpkg and rpm decide it, implemented once for every part of rocpkg that
asks which of two releases is newer (the version-order check, channels, retention).

Each comparison returns an Order: the sign (-1, 0, 1: a below, equal to, above b) and the
rule that decided it at the first place the two differ, in words a maintainer can act on
("`~dev…` > `~2026…`: a letter sorts after a digit run ..."). Neither python-debian's nor
rpm's own comparison says why, which is what an error must tell.

dpkg (deb-version(7), lib/dpkg/version.c): [epoch:]upstream[-revision]; epochs compare as
numbers, then upstream, then revision (absent = "0"), each as alternating runs: a non-digit
run compared character by character, where '~' sorts before everything (even the end),
letters sort before non-letters, and the end of the run (or a digit) sorts after '~' and
before everything else; then a digit run, compared as a number (absent = 0).

rpm (rpmvercmp, rpm >= 4.15): [epoch:]version[-release]; epochs compare as numbers, then
version, then release, each as segments: characters other than letters, digits, '~' and
'^' only separate segments; '~' sorts before everything (even the end); '^' sorts after
the end but before anything else; a numeric segment is newer than an alphabetic one;
numbers compare by value (leading zeros ignored), letters by ASCII; when one runs out,
the one with segments left is newer. A release absent from one side compares as "".

Both implementations are tested against `dpkg --compare-versions` and rpm's
`rpm.vercmp` on thousands of generated pairs (tests/test_versions.py).
"""
from __future__ import annotations

from dataclasses import dataclass

DPKG, RPM = "dpkg", "rpm"


@dataclass(frozen=True)
class Order:
    """How a compares to b: sign -1 (a is older), 0 (same), 1 (a is newer), and the rule
    that decided it ("" when they are the same)."""

    sign: int
    rule: str = ""


def compare(tool: str, a: str, b: str) -> Order:
    """Order of two full versions ("[epoch:]version[-release]") by dpkg's or rpm's rules."""
    return {DPKG: dpkg_compare, RPM: rpm_compare}[tool](a, b)


def evr(version: str, release: str = "", epoch: int = 0) -> str:
    """The full version both tools compare: "epoch:version-release" (epoch 0 left out)."""
    full = f"{version}-{release}" if release else version
    return f"{epoch}:{full}" if epoch else full


def split_evr(full: str) -> tuple[int, str, str]:
    """(epoch, version, release) of "[epoch:]version[-release]": the epoch is the digits
    before the first ':', the release what follows the last '-' (both tools agree)."""
    epoch, _, rest = full.partition(":") if ":" in full else ("0", "", full)
    version, _, release = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch) if epoch and all(map(_isdigit, epoch)) else 0, version, release


# -- dpkg ----------------------------------------------------------------------------------

def dpkg_compare(a: str, b: str) -> Order:
    """dpkg's order of two full versions (dpkg --compare-versions)."""
    return _compare_evr(a, b, ("upstream version", "revision"), _dpkg_part)


def _dpkg_weight(c: str) -> int:
    """dpkg's order of one character of a non-digit run ("" is the end of the string)."""
    if c == "" or _isdigit(c):
        return 0
    if _isalpha(c):
        return ord(c)
    if c == "~":
        return -1
    return ord(c) + 256


def _dpkg_kind(c: str) -> str:
    if c == "~":
        return "'~'"
    if c == "" or _isdigit(c):
        return "a digit run" if c else "the end"
    return f"the letter '{c}'" if _isalpha(c) else f"the non-letter '{c}'"


def _dpkg_part(a: str, b: str) -> Order:
    i = j = 0
    while i < len(a) or j < len(b):
        start_i, start_j = i, j
        while (i < len(a) and not _isdigit(a[i])) or (j < len(b) and not _isdigit(b[j])):
            ca, cb = a[i:i + 1], b[j:j + 1]
            wa, wb = _dpkg_weight(ca), _dpkg_weight(cb)
            if wa != wb:
                return Order(_sign(wa - wb), f"{_tails(a, start_i, b, start_j, wa - wb)}: {_dpkg_why(ca, cb)}")
            i, j = i + 1, j + 1
        start_i, start_j = i, j
        na, i = _digits(a, i)
        nb, j = _digits(b, j)
        if na != nb:
            return Order(_sign(na - nb), f"{_tails(a, start_i, b, start_j, na - nb)}: numbers compare by value "
                                         f"({na} {_rel(na - nb)} {nb}; none counts as 0)")
    return Order(0)


def _dpkg_why(ca: str, cb: str) -> str:
    if "~" in (ca, cb):
        return "'~' sorts before everything, even the end"
    kinds = f"{_dpkg_kind(ca)} against {_dpkg_kind(cb)}"
    letters = sum(_isalpha(c) for c in (ca, cb))
    plain = any(_dpkg_weight(c) == 0 for c in (ca, cb))      # a digit run or the end
    if letters == 2:
        return f"letters compare by ASCII ({kinds})"
    if letters and plain:
        return f"dpkg compares the text before a number first: a letter sorts after a digit run or the end ({kinds})"
    if letters:
        return f"letters sort before non-letters ({kinds})"
    if plain:
        return f"a non-letter sorts after a digit run or the end ({kinds})"
    return f"non-letters compare by ASCII ({kinds})"


# -- rpm -----------------------------------------------------------------------------------

def rpm_compare(a: str, b: str) -> Order:
    """rpm's order of two full versions (rpm.vercmp: epoch, version, release)."""
    return _compare_evr(a, b, ("version", "release"), rpmvercmp)


def _rpm_separator(c: str) -> bool:
    return not (_isalpha(c) or _isdigit(c)) and c not in "~^"


def rpmvercmp(a: str, b: str) -> Order:
    """rpm's rpmvercmp of one version or release string against another."""
    if a == b:
        return Order(0)
    i = j = 0
    while i < len(a) or j < len(b):
        while i < len(a) and _rpm_separator(a[i]):
            i += 1
        while j < len(b) and _rpm_separator(b[j]):
            j += 1
        ca, cb = a[i:i + 1], b[j:j + 1]
        if "~" in (ca, cb):
            if ca != cb:
                sign = 1 if ca != "~" else -1
                return Order(sign, f"{_tails(a, i, b, j, sign)}: '~' sorts before everything, even the end")
            i, j = i + 1, j + 1
            continue
        if "^" in (ca, cb):
            if ca != cb:
                sign = -1 if not ca else 1 if not cb else 1 if ca != "^" else -1
                return Order(sign, f"{_tails(a, i, b, j, sign)}: '^' sorts after the end but before anything else")
            i, j = i + 1, j + 1
            continue
        if not (ca and cb):
            break
        numeric = _isdigit(ca)
        take = _isdigit if numeric else _isalpha
        ei, ej = _run(a, i, take), _run(b, j, take)
        if ej == j:     # b's segment is of the other kind
            sign = 1 if numeric else -1
            return Order(sign, f"{_tails(a, i, b, j, sign)}: a numeric segment is newer than an alphabetic one")
        sa, sb = a[i:ei], b[j:ej]
        if numeric:
            sa, sb = sa.lstrip("0"), sb.lstrip("0")
            key_a, key_b = (len(sa), sa), (len(sb), sb)
            why = f"numbers compare by value ({sa or 0} {{}} {sb or 0})"
        else:
            key_a, key_b = sa, sb
            why = f"letters compare by ASCII ('{sa}' {{}} '{sb}')"
        if key_a != key_b:
            sign = 1 if key_a > key_b else -1
            return Order(sign, f"{_tails(a, i, b, j, sign)}: {why.format(_rel(sign))}")
        i, j = ei, ej
    if i >= len(a) and j >= len(b):
        return Order(0)
    sign = -1 if i >= len(a) else 1
    return Order(sign, f"{_tails(a, i, b, j, sign)}: the one with segments left over is newer")


# -- shared --------------------------------------------------------------------------------

def _compare_evr(a: str, b: str, parts: tuple[str, str], compare_part) -> Order:
    """Epochs as numbers, then the version and the release with the tool's comparison."""
    ea, va, ra = split_evr(a)
    eb, vb, rb = split_evr(b)
    if ea != eb:
        return Order(_sign(ea - eb), f"the epoch decides first ({ea} {_rel(ea - eb)} {eb})")
    for part, x, y in ((parts[0], va, vb), (parts[1], ra, rb)):
        order = compare_part(x, y)
        if order.sign:
            return Order(order.sign, f"in the {part}, {order.rule}")
    return Order(0)


def _isdigit(c: str) -> bool:
    return c != "" and c in "0123456789"


def _isalpha(c: str) -> bool:
    return len(c) == 1 and ("a" <= c <= "z" or "A" <= c <= "Z")


def _digits(s: str, i: int) -> tuple[int, int]:
    end = _run(s, i, _isdigit)
    return (int(s[i:end]) if end > i else 0), end


def _run(s: str, i: int, take) -> int:
    while i < len(s) and take(s[i]):
        i += 1
    return i


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


def _rel(n: int) -> str:
    return ">" if n > 0 else "<" if n < 0 else "="


def _tails(a: str, i: int, b: str, j: int, sign: int) -> str:
    """Where two strings part: "`~dev20…` > `~20260…`" (the end shown as "the end")."""
    def tail(s: str, k: int) -> str:
        rest = s[k:]
        return f"`{rest[:6]}…`" if len(rest) > 6 else f"`{rest}`" if rest else "the end"
    return f"{tail(a, i)} {_rel(sign)} {tail(b, j)}"
