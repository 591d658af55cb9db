"""`--targets` as users write it: bare processors, feature variants, family names and the ISA
names ROCr reports, in TheRock's separators; anything else refused with what is known."""
from __future__ import annotations

import pytest

from kpack.errors import InvalidTargetError
from kpack.targets import parse_target, parse_target_list


def test_therock_separators_and_families_expand_in_order_without_repeats():
    assert parse_target_list("gfx942, gfx110X;gfx90a:xnack+ gfx942") == [
        "gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx90a:xnack+"]


def test_a_variant_keeps_its_feature():
    assert parse_target_list("gfx90a:xnack+,gfx90a:xnack-") == ["gfx90a:xnack+", "gfx90a:xnack-"]


def test_rocr_isa_names_are_accepted_and_spelled_canonically():
    assert parse_target_list("amdgcn-amd-amdhsa--gfx942:xnack-:sramecc+") == ["gfx942:sramecc+:xnack-"]
    assert str(parse_target("amdgcn-amd-amdhsa--gfx1100")) == "gfx1100"


def test_family_names_are_case_insensitive():
    assert parse_target_list("gfx110x") == parse_target_list("gfx110X")


def test_an_upper_case_processor_is_refused_with_the_spelling_it_meant():
    with pytest.raises(InvalidTargetError, match=r"unknown target 'GFX942' \(did you mean 'gfx942'\?\)"):
        parse_target_list("GFX942")


@pytest.mark.parametrize("text,message", [
    ("foo", "unknown target 'foo'; known families: gfx900, "),
    ("gfx942,gfx999", "unknown processor 'gfx999' in 'gfx999'"),
    ("gfx1100:xnack+", "'gfx1100:xnack+': gfx1100 has no xnack feature (it supports none)"),
    ("gfx942:xnack", "unknown target 'gfx942:xnack'"),
    (" , ;", "no target named in"),
])
def test_anything_else_is_refused_naming_the_value_and_what_is_known(text, message):
    with pytest.raises(InvalidTargetError) as caught:
        parse_target_list(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_refusal_names_the_closest_targets_not_the_whole_table():
    with pytest.raises(InvalidTargetError) as caught:
        parse_target_list("gfx1110")
    assert "closest: gfx1100, gfx1101, gfx1102, gfx1103 (" in str(caught.value)
    assert "gfx600" not in str(caught.value) and len(str(caught.value)) < 300
