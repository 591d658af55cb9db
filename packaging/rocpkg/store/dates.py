"""The dates of a release: SOURCE_DATE_EPOCH from the environment, else the inputs' date,
else a default derived from the version; and the date re-indexing an OUT uses, so that a
re-index gives the same bytes. Every date must fit rpm's 32-bit time tags."""
from __future__ import annotations

import os
import re

from rocpkg.errors import RocpkgInputError
from rocpkg.store.files import read_json
from rocpkg.store.manifest_schema import MAX_DATE, check_manifest
from rocpkg.store.outdir import MANIFEST_PARTS

# Default SOURCE_DATE_EPOCH: 2024-01-01T00:00:00Z plus one minute per version step.
EPOCH_BASE = 1704067200


def default_source_date_epoch(settings: dict) -> int:
    """The SOURCE_DATE_EPOCH used when the environment sets none: 2024-01-01 UTC plus one
    minute per version step (major*10000 + minor*100 + patch, then the release's leading
    number), so a release always gets the same dates and later versions later ones."""
    nums = [int(x) if x.isdigit() else 0 for x in (settings["version"].split(".") + ["0", "0"])[:3]]
    steps = nums[0] * 10000 + nums[1] * 100 + nums[2]
    release = re.match(r"\d*", str(settings.get("release", ""))).group()
    return EPOCH_BASE + 60 * steps + int(release[:6] or 0)


def published_source_date_epoch(out_dir: str, environ=None) -> int | None:
    """SOURCE_DATE_EPOCH for indexing OUT: the environment's, else the build's default for
    the release its manifest names, so that re-indexing gives the same bytes; None when
    neither is known."""
    settings, dated = None, None
    parts = os.path.join(out_dir, MANIFEST_PARTS)
    candidates = [os.path.join(out_dir, "manifest.json")] + \
        (sorted(os.path.join(parts, n) for n in os.listdir(parts)) if os.path.isdir(parts) else [])
    for path in candidates:  # the whole release's manifest, or any shard's part of it
        try:
            doc = check_manifest(read_json(out_dir, os.path.relpath(path, out_dir).replace(os.sep, "/")), path)
            settings = {"version": str(doc["version"]), "release": str(doc["release"])}
            # the newest date a recorded release was built with (rocpkg.store.releases)
            dated = max((int(r.get("date") or 0) for r in doc.get("releases", [])), default=0) or None
            break
        except (OSError, ValueError, KeyError, TypeError, RocpkgInputError):
            continue            # the commands that read it whole refuse it, naming the field
    value = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if value or settings:
        return source_date_epoch(settings or {"version": "0"}, environ, default=dated)
    return None


def environment_epoch(environ=None) -> int | None:
    """SOURCE_DATE_EPOCH as the environment sets it (None when unset or empty): a number
    of seconds from 0 to MAX_DATE, bad input naming it and that range otherwise."""
    value = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 10 or int(value) > MAX_DATE:
        raise RocpkgInputError(("SOURCE_DATE_EPOCH", f"must be a number of seconds from 0 to {MAX_DATE} "
                                                     f"(what rpm's 32-bit dates hold), got {value[:40]!r}"))
    return int(value)


def source_date_epoch(settings: dict, environ=None, default: int | None = None) -> int:
    """SOURCE_DATE_EPOCH from the environment, else `default` (the inputs' date,
    releases.inputs_date), else default_source_date_epoch()."""
    value = environment_epoch(environ)
    if value is not None:
        return value
    if default is not None and not 0 <= default <= MAX_DATE:
        raise RocpkgInputError(("SOURCE_DATE_EPOCH", f"unset, and the inputs' date ({default}, the newest time of "
                                f"the package list and the artifact manifests) is outside 0 to {MAX_DATE}, what "
                                f"rpm's 32-bit dates hold: set SOURCE_DATE_EPOCH"))
    return default if default is not None else default_source_date_epoch(settings)
