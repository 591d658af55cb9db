"""Command-line options of release channels (`rocpkg build --channel/--date/--number`) and
of retention (`rocpkg prune --policy`): part of the CLI, kept apart so that the commands'
modules only register them and make one call (rocpkg.inputs.channels and rocpkg.repo.retention hold
what they mean)."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from rocpkg.errors import RocpkgInputError


def add_channel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--channel", default=None, metavar="dev|nightly|prerelease|release",
                   help="derive the version from the base version (--version or settings.version) for this "
                        "channel, e.g. nightly: X.Y.Z~YYYYMMDD; recorded in manifest.json (overrides "
                        "settings.channel; README 'Release channels')")
    p.add_argument("--date", default=None, metavar="YYYY-MM-DD",
                   help="with --channel: the build's date, in the version and as the release's date that "
                        "prune --policy ages count from (default: SOURCE_DATE_EPOCH's, UTC)")
    p.add_argument("--number", type=int, default=None, metavar="N",
                   help="with --channel prerelease: the N of rcN (required); with dev: an optional devN")


def apply_channel(args, config) -> None:
    """--channel (or settings.channel) of a command that registered the channel options
    (plan, build, verify -a): derive the version from the base version and record the
    channel in config.settings and args, before the artifacts are read. Nothing for other
    commands."""
    if not hasattr(args, "channel"):
        return
    from rocpkg.inputs.channels import channel_version

    channel = args.channel or config.settings.get("channel", "")
    if not channel and (args.date is not None or args.number is not None):
        raise RocpkgInputError(("--date" if args.date is not None else "--number",
                                "only applies with --channel (or settings.channel)"))
    if channel:
        base = args.pkg_version or config.settings["version"]
        version = channel_version(base, channel, args.date or _date_of_environment(), args.number)
        config.settings.update(channel=channel, version=version)
        args.pkg_version = version


def release_of_args(args, config, formats=()) -> None:
    """Before the artifacts are read (the channel's version already applied by
    apply_channel): refuse a release that would not sort above OUT's releases of its
    series in the version order of each of `formats` it is built in (version-order,
    unless allowed): the build checks it again before publishing and records it when
    allowed."""
    from rocpkg.builder import gate
    from rocpkg.builder.version_order import out_version_order_refusals
    from rocpkg.plan.make import release_settings
    from rocpkg.store.releases import read_recorded

    settings = release_settings(config, args.pkg_version, args.release)
    if not getattr(args, "shard", None):
        gate.enforce(out_version_order_refusals(read_recorded(args.output), settings, formats),
                     gate.check_allow(args.allow or ()))


def date_of_args(args) -> int | None:
    """The release's date a build's --date gives (its first second, UTC): the default
    SOURCE_DATE_EPOCH of a channel build, so that retention (`prune --policy`) counts
    its age from the date it is named by; None without --date."""
    from rocpkg.inputs.channels import epoch_of_date

    return epoch_of_date(args.date) if getattr(args, "date", None) is not None else None


def _date_of_environment() -> str | None:
    from rocpkg.inputs.channels import date_of_epoch
    from rocpkg.store.dates import environment_epoch

    value = environment_epoch()
    return None if value is None else date_of_epoch(value)


def add_policy_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default=None, metavar="CHANNEL=AGE|COUNT,...",
                   help="remove releases by channel: dev=30d,nightly=120d,prerelease=2y,release=all "
                        "(ages in d, w, m, y before the newest release's date or SOURCE_DATE_EPOCH; a bare "
                        "number keeps that many per series; the newest release of a series always stays)")


def prune_policy(args):
    """The rocpkg.repo.retention.Policy of `prune --policy` (None with --keep: exactly one is
    given); says on stderr what its ages count back from."""
    from rocpkg.inputs.channels import date_of_epoch
    from rocpkg.store.releases import manifest_releases, read_manifest
    from rocpkg.repo.retention import parse_policy, policy_now

    if (args.policy is None) == (args.keep is None):
        raise RocpkgInputError(("prune", "give --keep N (releases per series) or --policy CHANNEL=AGE|COUNT,..."))
    if args.policy is None:
        return None
    policy = parse_policy(args.policy)
    if not policy.days:
        return policy
    now, source = policy_now(manifest_releases(read_manifest(args.out)))
    if now is not None:
        print(f"policy: ages count back from {date_of_epoch(now)} ({source})", file=sys.stderr)
    return dataclasses.replace(policy, now=now)
