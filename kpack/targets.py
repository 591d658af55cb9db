"""GPU target IDs, the families that group them, and the facts the packager needs about
each processor: its ELF machine number, generic target, wavefront size and features.

A target ID is `processor[-strict][:feature±]...`, e.g. `gfx942:sramecc+:xnack-`,
`gfx1250-strict`, `gfx11-generic`; the full ISA name ROCr reports
(`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`) and any feature order are accepted.
Features are kept in LLVM's canonical (alphabetical) order when printed. Family names
(`gfx110X`) follow TheRock's target table (THEROCK_FAMILIES below; FAMILIES adds the rest).
"""
from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, field

from kpack.errors import InvalidTargetError

# LLVM's AMDGPUUsage "AMDGPU EF_AMDGPU_MACH Values" table (llvm/BinaryFormat/ELF.h), every
# amdgcn processor and generic target, with the target features each one lets code select
# (AMDGPUUsage processor table / TargetParser: xnack, sramecc). Values absent here are
# reserved or r600: not an amdgcn processor.
#   name: (EF_AMDGPU_MACH, features)
PROCESSORS: dict[str, tuple[int, frozenset[str]]] = {}
_X, _S, _XS, _NONE = frozenset({"xnack"}), frozenset({"sramecc"}), frozenset({"xnack", "sramecc"}), frozenset()
for _name, _mach, _features in (
    ("gfx600", 0x020, _NONE), ("gfx601", 0x021, _NONE), ("gfx602", 0x03A, _NONE),
    ("gfx700", 0x022, _NONE), ("gfx701", 0x023, _NONE), ("gfx702", 0x024, _NONE),
    ("gfx703", 0x025, _NONE), ("gfx704", 0x026, _NONE), ("gfx705", 0x03B, _NONE),
    ("gfx801", 0x028, _X), ("gfx802", 0x029, _NONE), ("gfx803", 0x02A, _NONE),
    ("gfx805", 0x03C, _NONE), ("gfx810", 0x02B, _X),
    ("gfx900", 0x02C, _X), ("gfx902", 0x02D, _X), ("gfx904", 0x02E, _X), ("gfx906", 0x02F, _XS),
    ("gfx908", 0x030, _XS), ("gfx909", 0x031, _X), ("gfx90a", 0x03F, _XS), ("gfx90c", 0x032, _X),
    ("gfx940", 0x040, _XS), ("gfx941", 0x04B, _XS), ("gfx942", 0x04C, _XS), ("gfx950", 0x04F, _XS),
    ("gfx1010", 0x033, _X), ("gfx1011", 0x034, _X), ("gfx1012", 0x035, _X), ("gfx1013", 0x042, _X),
    ("gfx1030", 0x036, _NONE), ("gfx1031", 0x037, _NONE), ("gfx1032", 0x038, _NONE),
    ("gfx1033", 0x039, _NONE), ("gfx1034", 0x03E, _NONE), ("gfx1035", 0x03D, _NONE),
    ("gfx1036", 0x045, _NONE),
    ("gfx1100", 0x041, _NONE), ("gfx1101", 0x046, _NONE), ("gfx1102", 0x047, _NONE),
    ("gfx1103", 0x044, _NONE), ("gfx1150", 0x043, _NONE), ("gfx1151", 0x04A, _NONE),
    ("gfx1152", 0x055, _NONE), ("gfx1153", 0x058, _NONE),
    ("gfx1170", 0x05D, _NONE), ("gfx1171", 0x05E, _NONE), ("gfx1172", 0x05C, _NONE),
    ("gfx1200", 0x048, _NONE), ("gfx1201", 0x04E, _NONE),
    ("gfx1250", 0x049, _NONE), ("gfx1251", 0x05A, _NONE), ("gfx1310", 0x050, _NONE),
    ("gfx9-generic", 0x051, _X), ("gfx9-4-generic", 0x05F, _XS), ("gfx10-1-generic", 0x052, _X),
    ("gfx10-3-generic", 0x053, _NONE), ("gfx11-generic", 0x054, _NONE),
    ("gfx12-generic", 0x059, _NONE), ("gfx12-5-generic", 0x05B, _NONE),
):
    PROCESSORS[_name] = (_mach, _features)
MACH_BY_PROCESSOR: dict[str, int] = {name: mach for name, (mach, _) in PROCESSORS.items()}
PROCESSOR_BY_MACH: dict[int, str] = {mach: name for name, mach in MACH_BY_PROCESSOR.items()}
# EF_AMDGPU_MACH 0x001-0x01f: the r600 architecture (32-bit, no HSA code objects).
R600_BY_MACH: dict[int, str] = dict(enumerate(
    ("r600", "r630", "rs880", "rv670", "rv710", "rv730", "rv770", "cedar", "cypress", "juniper",
     "redwood", "sumo", "barts", "caicos", "cayman", "turks"), start=1))

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

# TheRock's family table (THEROCK_FAMILIES), then one single-target family for each HSA-capable
# processor of LLVM's table that TheRock leaves out (gfx7, gfx8, gfx902, gfx940, ...: Debian's
# ROCm builds gfx803, its runtime carries gfx700-gfx1035). gfx6 (no HSA runtime) and the
# generic targets are in no family: "not a target of this release".
# Callers may pass their own table to every function.
THEROCK_FAMILIES: dict[str, list[str]] = {
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
FAMILIES: dict[str, list[str]] = dict(THEROCK_FAMILIES)
_IN_THEROCK = {t for members in THEROCK_FAMILIES.values() for t in members}
for _name in PROCESSORS:
    if _name not in _IN_THEROCK and _name not in GENERIC_TARGETS and not _name.startswith("gfx6"):
        FAMILIES[_name] = [_name]


@functools.lru_cache(maxsize=1)
def table_order() -> dict[str, int]:
    """Each target's place in FAMILIES (its last listing): the order targets are listed
    in, everywhere. FAMILIES is complete once this module is loaded, so it is made once."""
    return {t: i for i, t in enumerate(t for members in FAMILIES.values() for t in members)}


KNOWN_FEATURES = ("sramecc", "xnack")
# The triple prefix of the ISA names ROCr reports (`hsa_isa_get_info_alt` ISA name).
ISA_PREFIX = "amdgcn-amd-amdhsa--"

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
    order); raises InvalidTargetError. The result is shared between callers (a plan
    parses the same few dozen targets tens of thousands of times): never change it."""
    if not isinstance(text, str) or not text:
        raise InvalidTargetError(f"not a target ID: {text!r}")
    return _parse_target(text)


def bare_processor(text: str) -> str:
    """The processor of a target ID, lower-case, without features or -strict (`gfx90a` for
    `gfx90a:xnack+`): the name a target's dirs, packages and families are keyed by.
    Raises InvalidTargetError."""
    return parse_target(text).processor.lower()


@functools.lru_cache(maxsize=4096)
def _parse_target(text: str) -> TargetID:
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
    """The target features a processor lets code objects select (xnack, sramecc); empty
    for a name outside LLVM's table."""
    bare = parse_target(processor).processor
    return set(PROCESSORS.get(bare, (0, frozenset()))[1])


def is_processor(name: str) -> bool:
    """Whether LLVM's AMDGPU table knows this processor (features and -strict ignored)."""
    try:
        return parse_target(name).processor in PROCESSORS
    except InvalidTargetError:
        return False


def release_target_problem(target: str, families: dict[str, list[str]] | None = None) -> str | None:
    """Why `target` cannot be a target of a release with these families, or None when it
    can. "not a target of this release" (an AMDGPU processor no family holds) and "not an
    AMDGPU processor" (a name LLVM's table lacks) are different mistakes."""
    bare = parse_target(target).processor
    if bare not in PROCESSORS:
        return f"{target}: not an AMDGPU processor (LLVM's AMDGPU processor table has no {bare})"
    if family_of(bare, families) is None:
        return f"{target}: an AMDGPU processor, but not a target of this release (no family holds {bare})"
    return None


_LIST_SEPARATORS = re.compile(r"[,;\s]+")


def _known_names(families: dict[str, list[str]], name: str = "") -> str:
    """What a refusal of `name` suggests: the closest known family and processor names
    (_closest), else the families; never the whole processor table."""
    processors = [p for p in MACH_BY_PROCESSOR if not p.endswith("-generic")]
    head = split_target(strip_isa_prefix(name))[0] if name else ""
    near = _closest(head, [*dict.fromkeys([*processors, *families])]) if head else []
    said = f"closest: {', '.join(near)}" if near else f"known families: {', '.join(families)}"
    return (f"{said} ({len(processors)} processors and {len(families)} families are known; a target may carry "
            f":xnack± / :sramecc±, or be ROCr's {ISA_PREFIX}<target>)")


def _closest(word: str, names: list[str], count: int = 4) -> list[str]:
    """The `count` names most like `word` (difflib's ratio at least 0.6), nearest first by
    the longest common start, then the ratio, then the distance of their numbers
    (gfx1110 -> gfx1101, gfx1100 before gfx1310); listed in the table's order."""
    import difflib
    import os.path

    def number(text: str) -> int | None:
        digits = text.lower().removeprefix("gfx")
        return int(digits, 16) if digits and all(c in "0123456789abcdef" for c in digits) else None

    def rank(name: str):
        ratio = difflib.SequenceMatcher(None, word.lower(), name.lower()).ratio()
        a, b = number(word), number(name)
        return (-len(os.path.commonprefix([word.lower(), name.lower()])), -ratio,
                abs(a - b) if a is not None and b is not None else 1 << 32)

    near = [n for n in names if difflib.SequenceMatcher(None, word.lower(), n.lower()).ratio() >= 0.6]
    chosen = set(sorted(near, key=rank)[:count])
    return [n for n in names if n in chosen]


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
        raise InvalidTargetError(f"unknown target {name!r}; {_known_names(families, name)}") from None
    if tid.processor not in MACH_BY_PROCESSOR:
        raise InvalidTargetError(f"unknown processor {tid.processor!r} in {name!r}; "
                                 f"{_known_names(families, tid.processor)}")
    unsupported = sorted(set(tid.features) - supported_features(tid.processor))
    if unsupported:
        raise InvalidTargetError(f"{name!r}: {tid.processor} has no {' or '.join(unsupported)} feature "
                                 f"(it supports {', '.join(sorted(supported_features(tid.processor))) or 'none'})")
    return [str(tid)]


def device_isas(target: str) -> list[str]:
    """Every ISA name a GPU of this bare target can report: each feature it supports on
    and off (`gfx90a:sramecc+:xnack-`, ...), in LLVM's feature order; the bare name for a
    processor without features."""
    features = sorted(supported_features(target))
    return [target + "".join(f":{name}{sign}" for name, sign in zip(features, signs))
            for signs in itertools.product("+-", repeat=len(features))]
