"""GPU target IDs, the runtime's candidate list, families, generic targets, wavefront size."""
from __future__ import annotations

import pytest

from kpack.errors import InvalidTargetError
from kpack.targets import (
    FAMILIES,
    GENERIC_TARGETS,
    MACH_BY_PROCESSOR,
    PROCESSOR_BY_MACH,
    THEROCK_FAMILIES,
    TargetID,
    candidates,
    family_of,
    generic_target,
    is_family,
    is_target,
    is_processor,
    parse_target,
    release_target_problem,
    supported_features,
    targets_of,
    wavefront_size,
)


def test_target_with_features_parses_into_processor_and_feature_states():
    target = parse_target("gfx942:sramecc+:xnack-")
    assert target == TargetID("gfx942", {"sramecc": True, "xnack": False})
    assert target.bare == "gfx942"


def test_features_print_in_canonical_order_whatever_the_input_order():
    assert str(parse_target("gfx90a:xnack+:sramecc-")) == "gfx90a:sramecc-:xnack+"


def test_strict_target_keeps_its_suffix_but_its_bare_processor_drops_it():
    target = parse_target("gfx1250-strict")
    assert target.strict and target.bare == "gfx1250"
    assert str(target) == "gfx1250-strict"


def test_generic_targets_parse():
    assert parse_target("gfx9-4-generic:xnack+").processor == "gfx9-4-generic"
    assert str(parse_target("gfx11-generic")) == "gfx11-generic"


@pytest.mark.parametrize("text", ["", "gfx", "gfx110X", "sm_90", "gfx942:xnack", "gfx942:xnack*",
                                  "gfx942:foo+", "gfx942:xnack+:xnack-", "GFX942"])
def test_malformed_target_ids_are_rejected(text):
    with pytest.raises(InvalidTargetError):
        parse_target(text)
    assert not is_target(text)


def test_candidates_run_from_most_specific_to_the_bare_processor():
    assert candidates("gfx942:sramecc+:xnack-") == [
        "gfx942:sramecc+:xnack-", "gfx942:sramecc+", "gfx942:xnack-", "gfx942"]


def test_bare_processor_is_its_only_candidate():
    assert candidates("gfx1100") == ["gfx1100"]


def test_strict_target_never_falls_back_to_the_non_strict_processor():
    assert candidates("gfx1250-strict") == ["gfx1250-strict"]


def test_generic_target_can_be_appended_to_the_candidates():
    assert candidates("gfx90c:xnack+", generic=True) == [
        "gfx90c:xnack+", "gfx90c", "gfx9-generic:xnack+", "gfx9-generic"]


def test_family_table_matches_therocks_targets():
    assert targets_of("gfx110X") == ["gfx1100", "gfx1101", "gfx1102", "gfx1103"]
    assert targets_of("gfx94X") == ["gfx942"]
    assert targets_of("gfx103X") == [f"gfx103{i}" for i in range(7)]
    assert targets_of("gfx125X") == ["gfx1250"]
    assert [name for name in THEROCK_FAMILIES if THEROCK_FAMILIES[name] == [name]] == [
        "gfx900", "gfx906", "gfx908", "gfx90a", "gfx90c", "gfx950"]
    assert all(FAMILIES[name] == members for name, members in THEROCK_FAMILIES.items())


def test_every_hsa_processor_therock_leaves_out_is_its_own_family():
    assert targets_of("gfx803") == ["gfx803"]
    assert family_of("gfx700") == "gfx700" and family_of("gfx810") == "gfx810"
    assert family_of("gfx1013") == "gfx1013" and family_of("gfx1151") == "gfx115X"
    assert family_of("gfx600") is None and family_of("gfx9-generic") is None


def test_family_of_a_target_ignores_its_features():
    assert family_of("gfx1151") == "gfx115X"
    assert family_of("gfx942:sramecc+:xnack-") == "gfx94X"
    assert family_of("gfx1250-strict") == "gfx125X"
    assert family_of("gfx11-generic") is None


def test_family_names_match_case_insensitively():
    assert is_family("gfx110x") and is_family("GFX110X")
    assert targets_of("gfx120x") == ["gfx1200", "gfx1201"]
    assert not is_family("gfx1100")


def test_unknown_family_is_rejected():
    with pytest.raises(InvalidTargetError):
        targets_of("gfx999X")


def test_family_table_can_be_overridden():
    table = {"lab": ["gfx1100", "gfx942"]}
    assert family_of("gfx942", table) == "lab"
    assert targets_of("lab", table) == ["gfx1100", "gfx942"]
    assert not is_family("gfx110X", table)


@pytest.mark.parametrize("processor,generic", [
    ("gfx906", "gfx9-generic"), ("gfx942", "gfx9-4-generic"), ("gfx950", "gfx9-4-generic"),
    ("gfx1012", "gfx10-1-generic"), ("gfx1036", "gfx10-3-generic"), ("gfx1103", "gfx11-generic"),
    ("gfx1153", "gfx11-generic"), ("gfx1201", "gfx12-generic"), ("gfx1250", "gfx12-5-generic"),
    ("gfx908", None), ("gfx90a", None), ("gfx11-generic", None)])
def test_generic_target_of_each_processor(processor, generic):
    assert generic_target(processor) == generic


@pytest.mark.parametrize("processor,size", [
    ("gfx900", 64), ("gfx90a", 64), ("gfx942", 64), ("gfx950", 64), ("gfx9-4-generic", 64),
    ("gfx1010", 32), ("gfx1030", 32), ("gfx1100", 32), ("gfx1151", 32), ("gfx1201", 32),
    ("gfx1250", 32), ("gfx10-3-generic", 32)])
def test_wavefront_size_is_32_on_rdna_and_64_otherwise(processor, size):
    assert wavefront_size(processor) == size


@pytest.mark.parametrize("processor,features", [
    ("gfx900", {"xnack"}), ("gfx906", {"xnack", "sramecc"}), ("gfx908", {"xnack", "sramecc"}),
    ("gfx90a", {"xnack", "sramecc"}), ("gfx942", {"xnack", "sramecc"}), ("gfx950", {"xnack", "sramecc"}),
    ("gfx90c", {"xnack"}), ("gfx1010", {"xnack"}), ("gfx1030", set()), ("gfx1100", set()),
    ("gfx1201", set())])
def test_supported_features_per_processor(processor, features):
    assert supported_features(processor) == features


def test_every_family_member_and_generic_target_has_an_elf_machine_value():
    members = {p for group in FAMILIES.values() for p in group} | set(GENERIC_TARGETS)
    assert members <= set(MACH_BY_PROCESSOR)
    assert len(set(MACH_BY_PROCESSOR.values())) == len(MACH_BY_PROCESSOR)


@pytest.mark.parametrize("processor,mach", [
    ("gfx900", 0x2C), ("gfx906", 0x2F), ("gfx908", 0x30), ("gfx90a", 0x3F), ("gfx90c", 0x32),
    ("gfx942", 0x4C), ("gfx950", 0x4F), ("gfx1010", 0x33), ("gfx1030", 0x36), ("gfx1100", 0x41),
    ("gfx1101", 0x46), ("gfx1102", 0x47), ("gfx1103", 0x44), ("gfx1150", 0x43), ("gfx1151", 0x4A),
    ("gfx1152", 0x55), ("gfx1153", 0x58), ("gfx1200", 0x48), ("gfx1201", 0x4E), ("gfx1250", 0x49),
    ("gfx9-generic", 0x51), ("gfx9-4-generic", 0x5F), ("gfx10-1-generic", 0x52),
    ("gfx10-3-generic", 0x53), ("gfx11-generic", 0x54), ("gfx12-generic", 0x59)])
def test_elf_machine_values_follow_llvm(processor, mach):
    assert MACH_BY_PROCESSOR[processor] == mach


@pytest.mark.parametrize("processor,mach", [
    ("gfx600", 0x20), ("gfx602", 0x3A), ("gfx700", 0x22), ("gfx705", 0x3B), ("gfx801", 0x28),
    ("gfx803", 0x2A), ("gfx805", 0x3C), ("gfx810", 0x2B), ("gfx906", 0x2F), ("gfx90a", 0x3F),
    ("gfx941", 0x4B), ("gfx1013", 0x42), ("gfx1153", 0x58), ("gfx1172", 0x5C), ("gfx1251", 0x5A),
    ("gfx1310", 0x50), ("gfx9-4-generic", 0x5F), ("gfx12-5-generic", 0x5B)])
def test_llvm_ef_amdgpu_mach_table_is_whole(processor, mach):
    assert MACH_BY_PROCESSOR[processor] == mach and PROCESSOR_BY_MACH[mach] == processor


def test_machine_numbers_are_unique_and_in_the_amdgcn_range():
    assert len(PROCESSOR_BY_MACH) == len(MACH_BY_PROCESSOR)
    assert all(0x20 <= mach <= 0xFF for mach in PROCESSOR_BY_MACH)


@pytest.mark.parametrize("processor,features", [
    ("gfx700", set()), ("gfx801", {"xnack"}), ("gfx803", set()), ("gfx810", {"xnack"}),
    ("gfx906", {"xnack", "sramecc"}), ("gfx909", {"xnack"}), ("gfx1013", {"xnack"}),
    ("gfx1030", set()), ("gfx950", {"xnack", "sramecc"}), ("gfx9-4-generic", {"xnack", "sramecc"})])
def test_feature_support_follows_llvm(processor, features):
    assert supported_features(processor) == features


def test_a_processor_outside_the_release_and_a_name_that_is_no_processor_are_different_mistakes():
    assert release_target_problem("gfx942") is None
    assert "not a target of this release" in release_target_problem("gfx600")
    assert "not a target of this release" in release_target_problem("gfx803", THEROCK_FAMILIES)
    assert "not an AMDGPU processor" in release_target_problem("gfx999")
    assert is_processor("gfx803:xnack-") and not is_processor("gfx999") and not is_processor("sm_90")
