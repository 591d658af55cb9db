"""GPU target IDs, the families that group them, and the facts the packager needs about
each processor: its ELF machine number, generic target, wavefront size and features.

A target ID is `processor[-strict][:feature±]...`, e.g. `gfx942:sramecc+:xnack-`,
`gfx1250-strict`, `gfx11-generic`; the full ISA name ROCr reports
(`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`) and any feature order are accepted.
Features are kept in LLVM's canonical (alphabetical) order when printed. Family names
(`gfx110X`) follow TheRock's target table (DESIGN §9).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpack.errors import InvalidTargetError

# EF_AMDGPU_MACH values (e_flags & 0xff) from LLVM's ELF.h / AMDGPUUsage "AMDGPU
# EF_AMDGPU_MACH Values" table, for every gfx9+ processor and every generic target.
MACH_BY_PROCESSOR: dict[str, int] = {
    "gfx900": 0x02C, "gfx902": 0x02D, "gfx904": 0x02E, "gfx906": 0x02F,
    "gfx908": 0x030, "gfx909": 0x031, "gfx90c": 0x032, "gfx90a": 0x03F,
    "gfx940": 0x040, "gfx941": 0x04B, "gfx942": 0x04C, "gfx950": 0x04F,
    "gfx1010": 0x033, "gfx1011": 0x034, "gfx1012": 0x035, "gfx1013": 0x042,
    "gfx1030": 0x036, "gfx1031": 0x037, "gfx1032": 0x038, "gfx1033": 0x039,
    "gfx1034": 0x03E, "gfx1035": 0x03D, "gfx1036": 0x045,
    "gfx1100": 0x041, "gfx1101": 0x046, "gfx1102": 0x047, "gfx1103": 0x044,
    "gfx1150": 0x043, "gfx1151": 0x04A, "gfx1152": 0x055, "gfx1153": 0x058,
    "gfx1200": 0x048, "gfx1201": 0x04E,
    "gfx1250": 0x049, "gfx1251": 0x05A,
    "gfx9-generic": 0x051, "gfx9-4-generic": 0x05F, "gfx10-1-generic": 0x052,
    "gfx10-3-generic": 0x053, "gfx11-generic": 0x054, "gfx12-generic": 0x059,
    "gfx12-5-generic": 0x05B,
}
PROCESSOR_BY_MACH: dict[int, str] = {mach: name for name, mach in MACH_BY_PROCESSOR.items()}

# LLVM generic targets and the processors each one runs on (AMDGPUUsage "AMDGPU Generic
# Processors"); gfx908 and gfx90a have none.
GENERIC_TARGETS: dict[str, list[str]] = {
    "gfx9-generic": ["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"],
    "gfx9-4-generic": ["gfx940", "gfx941", "gfx942", "gfx950"],
    "gfx10-1-generic": ["gfx1010", "gfx1011", "gfx1012", "gfx1013"],
    "gfx10-3-generic": ["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035",
                        "gfx1036"],
    "gfx11-generic": ["gfx1100", "gfx1101", "gfx1102", "gfx1103",
                      "gfx1150", "gfx1151", "gfx1152", "gfx1153"],
    "gfx12-generic": ["gfx1200", "gfx1201"],
    "gfx12-5-generic": ["gfx1250", "gfx1251"],
}

# TheRock's family table (DESIGN §9). Callers may pass their own table to every function.
FAMILIES: dict[str, list[str]] = {
    "gfx900": ["gfx900"],
    "gfx906": ["gfx906"],
    "gfx908": ["gfx908"],
    "gfx90a": ["gfx90a"],
    "gfx90c": ["gfx90c"],
    "gfx94X": ["gfx942"],
    "gfx950": ["gfx950"],
    "gfx101X": ["gfx1010", "gfx1011", "gfx1012"],
    "gfx103X": ["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"],
    "gfx110X": ["gfx1100", "gfx1101", "gfx1102", "gfx1103"],
    "gfx115X": ["gfx1150", "gfx1151", "gfx1152", "gfx1153"],
    "gfx120X": ["gfx1200", "gfx1201"],
    "gfx125X": ["gfx1250"],
}

KNOWN_FEATURES = ("sramecc", "xnack")
# The triple prefix of the ISA names ROCr reports (`hsa_isa_get_info_alt` ISA name).
ISA_PREFIX = "amdgcn-amd-amdhsa--"
_XNACK = {"gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90c", "gfx90a",
          "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013",
          "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic"}
_SRAMECC = {"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
            "gfx9-4-generic"}

_PROCESSOR_RE = re.compile(r"gfx(?:[0-9]{1,2}[0-9a-f]{2}|[0-9]{1,2}(?:-[0-9]+)?-generic)")
_FEATURE_RE = re.compile(r"([a-z][a-z0-9_]*)([+-])")


@dataclass(frozen=True)
class TargetID:
    """One parsed target ID. `features` maps a feature name to on (True) / off (False);
    a feature that is absent means "any"."""

    processor: str
    features: dict[str, bool] = field(default_factory=dict)
    strict: bool = False

    def __str__(self) -> str:
        text = self.processor + ("-strict" if self.strict else "")
        for name in sorted(self.features):
            text += f":{name}{'+' if self.features[name] else '-'}"
        return text

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def bare(self) -> str:
        """The processor alone: `gfx942` for `gfx942:xnack-`, `gfx1250` for `gfx1250-strict`."""
        return self.processor


def strip_isa_prefix(text: str) -> str:
    """`amdgcn-amd-amdhsa--gfx942:xnack-` -> `gfx942:xnack-`; other text unchanged (as the
    runtime's strip_target_prefix: only when something follows the prefix)."""
    if len(text) > len(ISA_PREFIX) and text.startswith(ISA_PREFIX):
        return text[len(ISA_PREFIX):]
    return text


def split_target(text: str) -> tuple[str, list[str]]:
    """The runtime's parse_target_id: (processor, features in the order written), empty
    feature fields dropped; the ISA prefix is stripped first. No validation."""
    head, *parts = strip_isa_prefix(text).split(":")
    return head, [part for part in parts if part]


def parse_target(text: str) -> TargetID:
    """Parse `[amdgcn-amd-amdhsa--]processor[-strict][:feature±]...` (features in any
    order); raises InvalidTargetError."""
    if not isinstance(text, str) or not text:
        raise InvalidTargetError(f"not a target ID: {text!r}")
    head, *feature_parts = strip_isa_prefix(text).split(":")
    strict = head.endswith("-strict")
    processor = head[: -len("-strict")] if strict else head
    if not _PROCESSOR_RE.fullmatch(processor):
        raise InvalidTargetError(f"not a target ID: {text!r} (unknown processor syntax {head!r})")
    features: dict[str, bool] = {}
    for part in feature_parts:
        match = _FEATURE_RE.fullmatch(part)
        if not match or match.group(1) not in KNOWN_FEATURES:
            raise InvalidTargetError(f"not a target ID: {text!r} (bad feature {part!r}; "
                                     f"expected sramecc± or xnack±)")
        if match.group(1) in features:
            raise InvalidTargetError(f"not a target ID: {text!r} (feature {match.group(1)} twice)")
        features[match.group(1)] = match.group(2) == "+"
    return TargetID(processor, features, strict)


def is_target(text: str) -> bool:
    try:
        parse_target(text)
    except InvalidTargetError:
        return False
    return True


def feature_subsets(head: str, features: list[str]) -> list[str]:
    """`head` joined with every subset of `features`, in the order rocm-kpack's
    for_each_compatible_target yields them: a bit mask counting down from all features,
    bit n-1-i standing for features[i] (so features drop from the right first and the
    written order is kept: `a:b`, `a`, `b`, bare)."""
    count = len(features)
    return [":".join([head] + [features[i] for i in range(count) if mask & (1 << (count - 1 - i))])
            for mask in range((1 << count) - 1, -1, -1)]


def candidates(target: str | TargetID, *, generic: bool = False) -> list[str]:
    """The target IDs a runtime probes for a device, most specific first, for the
    canonical spelling of the target (features sorted): feature_subsets, down to the bare
    processor. With generic=True, the processor's generic target follows the same way. A
    strict target keeps `-strict` throughout: code for the non-strict processor is not
    valid on it. (kpack.loader.compatible_targets keeps the device's own spelling.)"""
    tid = target if isinstance(target, TargetID) else parse_target(target)
    processors = [tid.processor]
    if generic and (gen := generic_target(tid.processor)):
        processors.append(gen)
    features = [f"{n}{'+' if tid.features[n] else '-'}" for n in sorted(tid.features)]
    result: list[str] = []
    for processor in processors:
        for text in feature_subsets(processor + ("-strict" if tid.strict else ""), features):
            if text not in result:
                result.append(text)
    return result


def _lookup(families: dict[str, list[str]], name: str) -> str | None:
    """Family names are matched case-insensitively (DEB wants gfx110x, RPM gfx110X)."""
    if name in families:
        return name
    lowered = name.lower()
    return next((key for key in families if key.lower() == lowered), None)


def is_family(text: str, families: dict[str, list[str]] | None = None) -> bool:
    return isinstance(text, str) and _lookup(families or FAMILIES, text) is not None


def targets_of(family: str, families: dict[str, list[str]] | None = None) -> list[str]:
    """The processors of a family; raises InvalidTargetError for an unknown family."""
    table = families or FAMILIES
    key = _lookup(table, family)
    if key is None:
        raise InvalidTargetError(f"unknown GPU family {family!r}")
    return list(table[key])


def family_of(processor: str, families: dict[str, list[str]] | None = None) -> str | None:
    """The family holding a processor (features and -strict ignored), or None."""
    try:
        bare = parse_target(processor).processor
    except InvalidTargetError:
        bare = processor
    for name, members in (families or FAMILIES).items():
        if bare in members:
            return name
    return None


def generic_target(processor: str) -> str | None:
    """The LLVM generic target whose code runs on this processor, or None."""
    bare = parse_target(processor).processor
    if bare in GENERIC_TARGETS:
        return None
    return next((gen for gen, members in GENERIC_TARGETS.items() if bare in members), None)


def gfx_major(processor: str) -> int:
    """The GFX major version: 9 for gfx90a and gfx9-4-generic, 11 for gfx1100."""
    bare = parse_target(processor).processor
    digits = bare[3:]
    if digits.endswith("-generic"):
        return int(digits.split("-")[0])
    return int(digits[:-2])


def wavefront_size(processor: str) -> int:
    """Native wavefront size: 32 on gfx10, gfx11 and gfx12 (RDNA), 64 otherwise."""
    return 32 if gfx_major(processor) >= 10 else 64


def supported_features(processor: str) -> set[str]:
    """The target features a processor lets code objects select (xnack, sramecc)."""
    bare = parse_target(processor).processor
    found = set()
    if bare in _XNACK:
        found.add("xnack")
    if bare in _SRAMECC:
        found.add("sramecc")
    return found


_LIST_SEPARATORS = re.compile(r"[,;\s]+")


def _known_names(families: dict[str, list[str]]) -> str:
    processors = [name for name in MACH_BY_PROCESSOR if not name.endswith("-generic")]
    return (f"known families: {', '.join(families)}; known processors: {', '.join(processors)} "
            f"(optionally with :xnack± / :sramecc±, or as ROCr's {ISA_PREFIX}<target>)")


def parse_target_list(text: str, families: dict[str, list[str]] | None = None) -> list[str]:
    """Targets named by a user (`--targets`, package.json): bare processors (`gfx942`),
    feature variants (`gfx90a:xnack+`, kept: a variant is not its bare processor), family
    names (`gfx110X` -> its members, case-insensitive), ROCr's full ISA names
    (`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`), separated by commas, semicolons or
    spaces (TheRock's lists use all three). Returns canonical target IDs in the order
    given, duplicates dropped. Anything else raises InvalidTargetError naming the value and
    listing what is known: a processor is never guessed (`GFX942` is refused with a
    suggestion rather than silently lower-cased)."""
    table = families or FAMILIES
    if not isinstance(text, str):
        raise InvalidTargetError(f"target list must be a string, not {type(text).__name__}")
    names = [name for name in _LIST_SEPARATORS.split(text) if name]
    if not names:
        raise InvalidTargetError(f"no target named in {text!r}; {_known_names(table)}")
    result: list[str] = []
    for name in names:
        for target in _expand_name(name, table):
            if target not in result:
                result.append(target)
    return result


def _expand_name(name: str, families: dict[str, list[str]]) -> list[str]:
    family = _lookup(families, name)
    if family is not None:
        return list(families[family])
    try:
        tid = parse_target(name)
    except InvalidTargetError:
        lowered = name.lower()
        if lowered != name and (is_target(lowered) or _lookup(families, lowered)):
            raise InvalidTargetError(f"unknown target {name!r} (did you mean {lowered!r}?)") from None
        raise InvalidTargetError(f"unknown target {name!r}; {_known_names(families)}") from None
    if tid.processor not in MACH_BY_PROCESSOR:
        raise InvalidTargetError(f"unknown processor {tid.processor!r} in {name!r}; {_known_names(families)}")
    unsupported = sorted(set(tid.features) - supported_features(tid.processor))
    if unsupported:
        raise InvalidTargetError(f"{name!r}: {tid.processor} has no {' or '.join(unsupported)} feature "
                                 f"(it supports {', '.join(sorted(supported_features(tid.processor))) or 'none'})")
    return [str(tid)]
