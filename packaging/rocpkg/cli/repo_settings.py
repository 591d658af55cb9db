"""The repository settings an OUT remembers (rocpkg.store.settings), as the commands that
index OUT take them: each option a command is given wins, else what OUT recorded, and a
recorded value that changes is said in one line on stderr. The signing options are read
from the parsed arguments here only (SIGNER_OPTIONS), so a new signing option is one name
more in that tuple."""
from __future__ import annotations

import os
import sys

from rocpkg.cli.common import verbosity
from rocpkg.store.settings import RepoSettings, changes, merged, read_settings

# the parsed arguments that make up a signer (rocpkg.cli.build.signer_of_args reads them)
SIGNER_OPTIONS = ("sign_key", "gpg_home")


def signer_options(args) -> dict:
    """The signing options given on this command line: option name -> value."""
    found = {}
    for name in SIGNER_OPTIONS:
        value = getattr(args, name, None)
        if value not in (None, [], ()):
            found[name] = tuple(value) if isinstance(value, list) else value
    return found


def use_settings(args, out_dir: str, *, url: bool = True, default_suite: str | None = "stable",
                 inherit: RepoSettings | None = None, quiet_changes: bool = False) -> RepoSettings:
    """The settings this command runs with, set on args (base_url when url, suite, the
    signing options): given, else OUT's recorded ones, else (inherit: a new channel's
    source repository) its suite and signer, never its URL. Says each recorded value
    that changes; with url, says once that OUT will be named by a file:// URL when no URL
    is given or recorded. Returns what OUT is to record (the suite the command uses)."""
    recorded = read_settings(out_dir)
    base = recorded
    if inherit is not None and recorded == RepoSettings():
        base = RepoSettings(suite=inherit.suite, signer=dict(inherit.signer))
    used = merged(base, base_url=getattr(args, "base_url", None) if url else None,
                  suite=getattr(args, "suite", None), signer=signer_options(args))
    if used.suite is None and default_suite is not None:
        used = RepoSettings(used.base_url, default_suite, used.signer)
    if url:
        args.base_url = used.base_url
    args.suite = used.suite
    for name in SIGNER_OPTIONS:
        value = used.signer.get(name)
        setattr(args, name, list(value) if isinstance(value, tuple) else value)
    if not quiet_changes:
        for what, was, now in changes(recorded, used):
            print(f"{what} for {channel_label(out_dir)}: {was} -> {now}", file=sys.stderr)
        if url and used.base_url is None and verbosity(args) >= 0:
            print(f"note: {out_dir}: no --base-url given and none recorded: its source lines name "
                  f"file://{os.path.abspath(out_dir)} (this machine only); give --base-url URL once, "
                  f"OUT remembers it", file=sys.stderr)
    return used


def channel_label(out_dir: str) -> str:
    """How a change names OUT: `channel nightly` when its releases are of one channel,
    else its path."""
    from rocpkg.repo.lifecycle import channel_name

    name = channel_name(out_dir)
    return f"channel {name}" if name else os.fspath(out_dir)
