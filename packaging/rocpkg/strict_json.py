"""JSON read strictly, for every document rocpkg reads (package.json, OUT's records, a
publish record): what json.loads accepts silently or cannot convert is refused, naming
where in the document it is.

Refused: a key repeated in one object (json.loads would keep the later value), an integer
of more than MAX_DIGITS digits (no count, size, date or inode rocpkg reads comes near;
Python refuses to convert one of 4300), a number that is not finite (`1e999`), and the
non-JSON constants NaN, Infinity and -Infinity, and nesting deeper than json's parser
recurses (its RecursionError). A refusal is a ValueError whose message starts with the
JSON path (`settings.epoch`, `packages[3].size`, `(document)` for the top); bad syntax
stays json's JSONDecodeError (a ValueError too), with its line and column.
"""
from __future__ import annotations

import json
import math

MAX_DIGITS = 100


class _Refused:
    """A value refused while parsing (what: why), left in its place until its path is known;
    as a key (the class itself: a JSON object's keys are strings), an object's repeated key."""

    def __init__(self, what: str):
        self.what = what


def loads(text: str | bytes):
    """The document in text (module doc), or ValueError naming the path of the first
    refused value (or saying it is nested deeper than json reads)."""
    refused = []

    def refuse(what: str) -> _Refused:
        refused.append(_Refused(what))
        return refused[-1]

    def pairs(items):
        obj = {}
        for key, value in items:
            if key in obj and _Refused not in obj:
                obj[_Refused] = refuse(f"the key {key!r} appears twice in one object")
            obj[key] = value
        return obj

    def integer(digits: str):
        count = len(digits.lstrip("-"))
        if count > MAX_DIGITS:
            return refuse(f"an integer of {count} digits ({digits[:20]}...): rocpkg reads at most {MAX_DIGITS}")
        return int(digits)

    def number(digits: str):
        value = float(digits)
        return value if math.isfinite(value) else refuse(f"the number {digits[:40]} is out of range")

    try:
        doc = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=number,
                         parse_constant=lambda name: refuse(f"{name} is not a JSON number"))
    except RecursionError:
        raise ValueError("(document): nested too deeply") from None
    if refused:
        raise ValueError("%s: %s" % _first_refused(doc, refused[0]))
    return doc


def _first_refused(doc, first: _Refused) -> tuple[str, str]:
    """(JSON path, why) of the first refused value in document order (walked without
    recursion: a document as deep as json accepts); first: the first refused while parsing,
    named at the top when no path reaches a refused value."""
    todo = [("", doc)]
    while todo:
        path, value = todo.pop()
        if isinstance(value, _Refused):
            return path or "(document)", value.what
        if isinstance(value, dict):
            if _Refused in value:
                return path or "(document)", value[_Refused].what
            todo += reversed([(f"{path}.{k}".lstrip(".") if k.isidentifier() else f"{path}[{k!r}]", v)
                              for k, v in value.items()])
        elif isinstance(value, list):
            todo += reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)])
    return "(document)", first.what
