"""The repository settings an OUT remembers (rocpkg.store.settings), as the commands that
index OUT take them: each option a command is given wins, else what OUT recorded, and a
recorded value that changes is said in one line on stderr. The signing options are read
from the parsed arguments here only (SIGNER_OPTIONS), so a new signing option is one name
more in that tuple."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from rocpkg.cli.common import verbosity
from rocpkg.errors import RocpkgInputError
from rocpkg.store.settings import RepoSettings, changes, describe_signer, merged, read_settings

# the parsed arguments that make up a signer (rocpkg.cli.signing.signer_of_args reads them)
SIGNER_OPTIONS = ("sign_key", "gpg_home", "gpg_program", "signing_server", "public_key", "valid_until")


def signer_options(args) -> dict:
    """The signing options given on this command line: option name -> value."""
    found = {}
    for name in SIGNER_OPTIONS:
        value = getattr(args, name, None)
        if value not in (None, [], ()):
            found[name] = tuple(value) if isinstance(value, list) else value
    return found


@dataclass(frozen=True)
class Applied:
    """The settings a command runs with (used: what OUT is to record) and those OUT had."""

    out_dir: str
    recorded: RepoSettings
    used: RepoSettings
    url: bool

    def say(self, args) -> None:
        """Once the command has recorded them: each recorded value it changed, one line on
        stderr; with url and no URL given or recorded, once, that OUT's source lines name
        it by a file:// URL."""
        for what, was, now in changes(self.recorded, self.used):
            print(f"{what} for {channel_label(self.out_dir)}: {was} -> {now}", file=sys.stderr)
        if self.url and self.used.base_url is None and verbosity(args) >= 0:
            print(f"note: {self.out_dir}: no --base-url given and none recorded: its source lines name "
                  f"file://{os.path.abspath(self.out_dir)} (this machine only); give --base-url URL once, "
                  f"OUT remembers it", file=sys.stderr)


def use_settings(args, out_dir: str, *, url: bool = True, default_suite: str | None = "stable",
                 inherit: RepoSettings | None = None) -> Applied:
    """The settings this command runs with, set on args (base_url when url, suite, the
    signing options): given, else OUT's recorded ones, else (inherit: a new channel's
    source repository) its suite and signer, never its URL; --unsigned (args.unsigned)
    drops the signing options. Returns them with those OUT had (Applied.say, once the
    command is done, says what changed)."""
    recorded = read_settings(out_dir)
    base = recorded
    if inherit is not None and recorded == RepoSettings():
        base = RepoSettings(suite=inherit.suite, signer=dict(inherit.signer))
    signer = signer_options(args) or None
    if getattr(args, "unsigned", False):
        if signer:
            raise RocpkgInputError(("--unsigned", f"given with {describe_signer(signer)}: choose one"))
        signer = {}
    used = merged(base, base_url=getattr(args, "base_url", None) if url else None,
                  suite=getattr(args, "suite", None), signer=signer)
    if used.suite is None and default_suite is not None:
        used = RepoSettings(used.base_url, default_suite, used.signer)
    if url:
        args.base_url = used.base_url
    args.suite = used.suite
    for name in SIGNER_OPTIONS:
        value = used.signer.get(name)
        setattr(args, name, list(value) if isinstance(value, tuple) else value)
    return Applied(out_dir, recorded, used, url)


def channel_label(out_dir: str) -> str:
    """How a change names OUT: `channel nightly` when its releases are of one channel,
    else its path."""
    from rocpkg.repo.lifecycle import channel_name

    name = channel_name(out_dir)
    return f"channel {name}" if name else os.fspath(out_dir)
