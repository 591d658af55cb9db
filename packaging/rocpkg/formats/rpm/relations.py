"""RPM dependencies: sense flags (rpm's rpmds.h; rpmpack's sense.go), the relation text
a spec holds (`name >= 1.0`, rich `(a or b)`) and its (name, flags, version) form, and
the way back to text and to createrepo's attributes."""
from __future__ import annotations

# Dependency sense flags (rpmds.h)
RPMSENSE_ANY = 0
RPMSENSE_LESS = 1 << 1
RPMSENSE_GREATER = 1 << 2
RPMSENSE_EQUAL = 1 << 3
RPMSENSE_POSTTRANS = 1 << 5
RPMSENSE_PREREQ = 1 << 6
RPMSENSE_PRETRANS = 1 << 7
RPMSENSE_INTERP = 1 << 8
RPMSENSE_SCRIPT_PRE = 1 << 9
RPMSENSE_SCRIPT_POST = 1 << 10
RPMSENSE_SCRIPT_PREUN = 1 << 11
RPMSENSE_SCRIPT_POSTUN = 1 << 12
RPMSENSE_RPMLIB = 1 << 24

_OPERATORS = {"<": RPMSENSE_LESS, ">": RPMSENSE_GREATER, "=": RPMSENSE_EQUAL,
              "==": RPMSENSE_EQUAL, "<=": RPMSENSE_LESS | RPMSENSE_EQUAL,
              ">=": RPMSENSE_GREATER | RPMSENSE_EQUAL}
_COMPARISON = RPMSENSE_LESS | RPMSENSE_GREATER | RPMSENSE_EQUAL
_SYMBOLS = {RPMSENSE_EQUAL: "=", RPMSENSE_LESS: "<", RPMSENSE_GREATER: ">",
            RPMSENSE_LESS | RPMSENSE_EQUAL: "<=", RPMSENSE_GREATER | RPMSENSE_EQUAL: ">="}
# createrepo_c's flags attribute (primary.xml)
FLAG_NAMES = {RPMSENSE_LESS: "LT", RPMSENSE_GREATER: "GT", RPMSENSE_EQUAL: "EQ",
              RPMSENSE_LESS | RPMSENSE_EQUAL: "LE", RPMSENSE_GREATER | RPMSENSE_EQUAL: "GE"}
# Requires that must hold before a scriptlet runs: createrepo_c's pre="1".
PRE_FLAGS = (RPMSENSE_POSTTRANS | RPMSENSE_PREREQ | RPMSENSE_PRETRANS | RPMSENSE_SCRIPT_PRE
             | RPMSENSE_SCRIPT_POST)


def parse_relation(text: str) -> tuple[str, int, str]:
    """`name`, `name >= 1.0`, `name = 7.1.0-1`, rich `(a or b)` -> (name, flags, version).
    A rich dependency stays one name string with flags 0, as rpmbuild stores it."""
    text = text.strip()
    if not text:
        raise ValueError("empty relation")
    if text.startswith("("):
        if text.count("(") != text.count(")") or not text.endswith(")"):
            raise ValueError(f"unbalanced rich dependency: {text}")
        return text, RPMSENSE_ANY, ""
    parts = text.split()
    if len(parts) == 1:
        return parts[0], RPMSENSE_ANY, ""
    if len(parts) == 3 and parts[1] in _OPERATORS:
        return parts[0], _OPERATORS[parts[1]], parts[2]
    raise ValueError(f"cannot parse relation: {text}")


def split_relations(value: str) -> list[str]:
    """Split a relation line on commas outside parentheses."""
    items, depth, current = [], 0, ""
    for ch in value:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def rpmlib(feature: str, version: str) -> tuple[str, int, str]:
    """An rpmlib() feature requirement, as rpmbuild adds them."""
    return (f"rpmlib({feature})", RPMSENSE_RPMLIB | RPMSENSE_LESS | RPMSENSE_EQUAL, version)


def is_rpmlib(name: str, flags: int) -> bool:
    return bool(flags & RPMSENSE_RPMLIB) or name.startswith("rpmlib(")


def format_relation(name: str, flags: int, version: str) -> str:
    """(name, flags, version) back to spec text: `name >= 1.0`, or the bare name."""
    op = _SYMBOLS.get(flags & _COMPARISON, "")
    return f"{name} {op} {version}" if op and version else name


def split_evr(evr: str) -> tuple[str | None, str | None, str | None]:
    """A dependency's '[epoch:]version[-release]' -> (epoch or "0", version, release or
    None), as createrepo_c splits it; all None for an empty one."""
    if not evr:
        return None, None, None
    epoch, _, rest = evr.rpartition(":") if ":" in evr else ("0", "", evr)
    version, _, release = rest.partition("-")
    return epoch or "0", version, release or None
