"""OUT's repository settings, OUT/.rocpkg/settings.json (schema rocpkg-settings/1): what
a maintainer gave once and every later command that indexes OUT uses until it is given
again with another value.

    {"schema": "rocpkg-settings/1",
     "base_url": "https://repo.example.org/rocm",   the URL OUT is served at
     "suite": "stable",                              APT suite, pacman database name
     "signer": {"sign_key": ["KEYID"], "gpg_home": "/srv/gnupg"}}   the signing options

A key left out is not recorded. "signer" holds the signing options as the command line
named them (an option name -> a string or a list of strings): given options replace the
recorded ones as a whole, so a new key never inherits an old key's GnuPG home.

Read as hostile as every file of OUT (rocpkg.store.files: no symlink, a regular file,
bounded; strict JSON): a damaged file is bad input naming it and the field, never a
default. Written whole (rocpkg.formats.streams.write_durable) by a command that holds the
OUT lock inside its journaled change (rocpkg.store.journal), so a failed or killed
command leaves the settings as they were.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.preflight import suite_problem
from rocpkg.formats.streams import touching, write_durable
from rocpkg.formats.urls import source_url
from rocpkg.store.files import parse_json, read_file

SETTINGS = ".rocpkg/settings.json"
SCHEMA = "rocpkg-settings/1"
LIMIT = 64 << 10
_OPTION_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
_MAX_VALUES = 64
_MAX_VALUE = 4096


@dataclass(frozen=True)
class RepoSettings:
    """A repository's settings; None (an empty signer) where nothing is recorded."""

    base_url: str | None = None
    suite: str | None = None
    signer: dict = field(default_factory=dict)      # option name -> str or tuple of str

    def to_dict(self) -> dict:
        doc = {"schema": SCHEMA}
        if self.base_url is not None:
            doc["base_url"] = self.base_url
        if self.suite is not None:
            doc["suite"] = self.suite
        if self.signer:
            doc["signer"] = {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(self.signer.items())}
        return doc


def read_settings(out_dir: str) -> RepoSettings:
    """OUT's recorded settings (all None when OUT records none), checked whole."""
    where = os.path.join(out_dir, SETTINGS)
    data = read_file(out_dir, SETTINGS, LIMIT)
    if data is None:
        return RepoSettings()
    doc = parse_json(data, where, "settings file")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RocpkgInputError((where, f"not a {SCHEMA} settings file (remove it and give --base-url, --suite "
                                       f"and the signing options again)"))
    unknown = sorted(set(doc) - {"schema", "base_url", "suite", "signer"})
    if unknown:
        raise RocpkgInputError((f"{where}: {unknown[0]}", "not a key of a settings file"))
    base_url, suite = doc.get("base_url"), doc.get("suite")
    if base_url is not None:
        if not isinstance(base_url, str):
            raise RocpkgInputError((f"{where}: base_url", "wants a URL string"))
        base_url = source_url(base_url, f"{where}: base_url")
    if suite is not None and (not isinstance(suite, str) or suite_problem(suite)):
        raise RocpkgInputError((f"{where}: suite", suite_problem(suite) if isinstance(suite, str) else "wants a string"))
    return RepoSettings(base_url, suite, _signer(doc.get("signer", {}), f"{where}: signer"))


def _signer(doc, where: str) -> dict:
    """The recorded signing options: names like the command line's (sign_key), each a
    string or a list of strings without control characters."""
    if not isinstance(doc, dict):
        raise RocpkgInputError((where, "wants an object of signing options"))
    options = {}
    for name, value in doc.items():
        values = value if isinstance(value, list) else [value]
        if not _OPTION_RE.fullmatch(name):
            raise RocpkgInputError((where, f"{name[:40]!r} is not an option name"))
        if not values or len(values) > _MAX_VALUES or not all(
                isinstance(v, str) and v and len(v) <= _MAX_VALUE and v.isprintable() for v in values):
            raise RocpkgInputError((f"{where}.{name}", "wants a non-empty string or list of strings "
                                                       "without control characters"))
        options[name] = tuple(value) if isinstance(value, list) else value
    return options


def write_settings(out_dir: str, settings: RepoSettings) -> bool:
    """Record settings in OUT (whole and durable); nothing when they are the recorded
    ones. The caller holds the OUT lock, inside its journaled change. Returns whether
    the file was written."""
    data = json.dumps(settings.to_dict(), indent=1, sort_keys=True).encode() + b"\n"
    if read_file(out_dir, SETTINGS, LIMIT) == data:
        return False
    os.makedirs(os.path.join(out_dir, os.path.dirname(SETTINGS)), exist_ok=True)
    touching(os.path.join(out_dir, SETTINGS))      # the change in progress saves the old bytes first
    write_durable(os.path.join(out_dir, SETTINGS), data)
    return True


def merged(recorded: RepoSettings, *, base_url: str | None, suite: str | None,
           signer: dict | None) -> RepoSettings:
    """What a command uses: each value given (not None; signer: the signing options given,
    {} for none at all), else the recorded one. A given URL is stored as the URL rule
    writes it."""
    if base_url is not None:
        base_url = source_url(base_url, "--base-url")
    return replace(recorded, base_url=base_url if base_url is not None else recorded.base_url,
                   suite=suite if suite is not None else recorded.suite,
                   signer=dict(signer) if signer is not None else dict(recorded.signer))


def changes(recorded: RepoSettings, used: RepoSettings) -> list[tuple[str, str, str]]:
    """(what, was, is) for each recorded setting that `used` changes (a first value is
    no change: nothing was recorded to change)."""
    found = []
    if recorded.base_url is not None and used.base_url != recorded.base_url:
        found.append(("base URL", recorded.base_url, used.base_url or "(none)"))
    if recorded.suite is not None and used.suite != recorded.suite:
        found.append(("suite", recorded.suite, used.suite or "(none)"))
    if recorded.signer and used.signer != recorded.signer:
        found.append(("signer", describe_signer(recorded.signer), describe_signer(used.signer) or "(none)"))
    return found


def describe_signer(options: dict) -> str:
    """The signing options as a command line gives them: `--sign-key A --gpg-home /h`."""
    words = []
    for name, value in sorted(options.items(), key=lambda kv: (kv[0] != "sign_key", kv[0])):
        for v in value if isinstance(value, tuple) else (value,):
            words.append(f"--{name.replace('_', '-')} {v}")
    return " ".join(words)
