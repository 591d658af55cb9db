"""rocpkg.formats.versions against the real tools: thousands of generated pairs (with '~', '^',
epochs, letters, digits, separators) compared by `dpkg --compare-versions` and by rpm's
own rpm.vercmp, each tool called once per batch; properties by hypothesis; and the rule an
error names."""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocpkg.formats.versions import DPKG, RPM, compare, dpkg_compare, evr, rpm_compare, rpmvercmp, split_evr

# full versions each tool accepts (dpkg warns about others; rpm refuses '-' in a version)
VALID = {DPKG: re.compile(r"(\d+:)?[0-9][A-Za-z0-9.+~-]*-[A-Za-z0-9.+~]+"),
         RPM: re.compile(r"(\d+:)?[A-Za-z0-9.+~^_]+-[A-Za-z0-9.+~^_]+")}
# dpkg is called per pair (about 4 ms each), rpm.vercmp in one process: more of the latter
PAIRS = int(os.environ.get("ROCPKG_VERSION_PAIRS", "2000"))
TOKENS = ["0", "1", "2", "9", "10", "007", "20260103", "20260102", "a", "b", "rc", "dev", "pre", "Z",
          ".", "+", "~", "~~", "~rc", "~dev", "~2026", "."]


def _random_version(rng: random.Random, extra: list[str]) -> str:
    parts = [rng.choice("0123456789")]
    for _ in range(rng.randrange(0, 6)):
        parts.append(rng.choice(TOKENS + extra))
    return "".join(parts)


def _mutated(rng: random.Random, text: str, extra: list[str]) -> str:
    """text with one token inserted, removed or replaced: pairs that share a prefix, where
    the comparison reaches the interesting rules."""
    k = rng.randrange(1, len(text) + 1)
    token = rng.choice(TOKENS + extra)
    choice = rng.randrange(3)
    if choice == 0:
        return text[:k] + token + text[k:]
    if choice == 1 and k < len(text):
        return text[:k] + text[k + 1:]
    return text[:k] + token + text[k + 1:]


def generated_pairs(tool: str, count: int, seed: int) -> list[tuple[str, str]]:
    """count pairs of full versions valid for the tool: epochs sometimes, releases always
    (both tools' packages have one), '^' and '_' for rpm, '-' inside dpkg's upstream."""
    rng = random.Random(seed)
    extra = ["^", "^1", "_"] if tool == RPM else ["-"]
    pairs = []
    while len(pairs) < count:
        version = _random_version(rng, extra if tool == RPM else [])
        release = _random_version(rng, extra if tool == RPM else [])
        epoch = rng.choice([0, 0, 0, 1, 2])
        a = evr(version, release, epoch)
        if rng.random() < 0.75:
            b = _mutated(rng, a, extra)
        else:
            b = evr(_random_version(rng, []), _random_version(rng, []), rng.choice([0, 0, 1]))
        if VALID[tool].fullmatch(b):
            pairs.append((a, b))
    return pairs


def dpkg_signs(pairs, tmp_path) -> list[int]:
    """dpkg's verdict for each pair: one shell running dpkg --compare-versions per pair."""
    listing = tmp_path / "dpkg-pairs"
    listing.write_text("".join(f"{a} {b}\n" for a, b in pairs))
    script = ('while read a b; do if dpkg --compare-versions "$a" lt "$b"; then echo -1; '
              'elif dpkg --compare-versions "$a" eq "$b"; then echo 0; else echo 1; fi; done < "$1"')
    out = subprocess.run(["sh", "-c", script, "sh", str(listing)], capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()]


def rpm_signs(pairs, tmp_path) -> list[int]:
    """rpm's verdict for each pair: one `rpm --eval` whose lua calls rpm.vercmp per pair."""
    listing = tmp_path / "rpm-pairs"
    listing.write_text("".join(f"{a} {b}\n" for a, b in pairs))
    lua = ("%{lua: for line in io.lines('" + str(listing) + "') do "
           "local a, b = line:match('^(%S+) (%S+)$'); io.write(rpm.vercmp(a, b), '\\n') end}")
    out = subprocess.run(["rpm", "--eval", lua], capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()]


def assert_same_order(tool: str, pairs, expected: list[int]) -> None:
    """rocpkg.formats.versions orders every pair as the tool did; the pairs reach all three answers."""
    assert len(expected) == len(pairs)
    wrong = [(a, b, want, compare(tool, a, b)) for (a, b), want in zip(pairs, expected)
             if compare(tool, a, b).sign != want]
    assert not wrong, wrong[:10]
    assert {-1, 0, 1} <= set(expected)


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
needs_rpm = pytest.mark.skipif(shutil.which("rpm") is None, reason="rpm is not installed")


@needs_dpkg
def test_dpkg_order_matches_dpkg_compare_versions(tmp_path):
    pairs = generated_pairs(DPKG, PAIRS, seed=38)
    assert_same_order(DPKG, pairs, dpkg_signs(pairs, tmp_path))
    assert sum(1 for a, b in pairs if "~" in a + b) > PAIRS // 4


@needs_rpm
def test_rpm_order_matches_rpm_vercmp(tmp_path):
    pairs = generated_pairs(RPM, 3 * PAIRS, seed=38)
    assert_same_order(RPM, pairs, rpm_signs(pairs, tmp_path))
    assert sum(1 for a, b in pairs if "^" in a + b) > len(pairs) // 10


@needs_dpkg
@needs_rpm
def test_therock_forms_that_the_tools_order_apart(tmp_path):
    """TheRock's dev and prerelease forms sort above its nightly for dpkg and below it for
    rpm: the tools themselves say so, and so does rocpkg.formats.versions, with the rule."""
    pairs = [("7.1.0~dev20260102-1", "7.1.0~20260103-1"), ("7.1.0~rc1-1", "7.1.0~20260103-1"),
             ("7.1.0~pre1-1", "7.1.0~20260103-1")]
    assert dpkg_signs(pairs, tmp_path) == [1, 1, 1]
    assert rpm_signs(pairs, tmp_path) == [-1, -1, -1]
    for a, b in pairs:
        assert compare(DPKG, a, b).sign == 1 and compare(RPM, a, b).sign == -1
    rule = dpkg_compare(*pairs[0]).rule
    assert "`~dev20…` > `~20260…`" in rule and "a letter sorts after a digit run" in rule
    assert "a numeric segment is newer than an alphabetic one" in rpm_compare(*pairs[0]).rule


_chunk = st.sampled_from(TOKENS + ["^", "_", "A", "z"])
_version = st.builds(lambda first, rest: first + "".join(rest), st.sampled_from("0123456789"),
                     st.lists(_chunk, max_size=6))


@settings(max_examples=300, deadline=None)
@given(_version, _version, _version)
def test_both_orders_are_total_orders(a, b, c):
    for cmp in (lambda x, y: dpkg_compare(x, y).sign, lambda x, y: rpmvercmp(x, y).sign):
        assert cmp(a, a) == 0
        assert cmp(a, b) == -cmp(b, a)
        if cmp(a, b) <= 0 and cmp(b, c) <= 0:
            assert cmp(a, c) <= 0


@settings(max_examples=300, deadline=None)
@given(_version.filter(lambda v: "^" not in v and "_" not in v),
       _version.filter(lambda v: "^" not in v and "_" not in v))
def test_dpkg_order_agrees_with_python_debian(a, b):
    from debian.debian_support import version_compare

    want = version_compare(a + "-1", b + "-1")
    assert dpkg_compare(a + "-1", b + "-1").sign == (want > 0) - (want < 0)


def test_a_tie_has_no_rule_and_a_difference_names_where():
    assert dpkg_compare("1.0-1", "1.0-01") == rpm_compare("1.0-1", "1.0-01")
    assert dpkg_compare("1.0-1", "1.0-01").sign == 0 and dpkg_compare("1.0-1", "1.0-01").rule == ""
    assert rpm_compare("7.1.0-1", "7.1.0-2").rule.startswith("in the release, `1` < `2`")
    assert dpkg_compare("7.1.0-1", "7.1.0-2").rule.startswith("in the revision, `1` < `2`")
    assert "'~' sorts before everything" in dpkg_compare("7.1.0~rc1-1", "7.1.0-1").rule
    assert "'^' sorts after the end" in rpm_compare("7.1.0^1-1", "7.1.0-1").rule
    assert split_evr("2:7.1.0~rc1-0.1") == (2, "7.1.0~rc1", "0.1")
