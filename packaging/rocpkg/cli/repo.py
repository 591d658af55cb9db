"""Command-line handlers of a repository's later life: `rocpkg prune`, `rocpkg promote`
and `rocpkg publish` (they print). cli._register_commands calls register().
"""
from __future__ import annotations

import os
import sys

from rocpkg.cli.signing import add_signing_options, signer_of_args
from rocpkg.cli.channels import add_policy_option, prune_policy
from rocpkg.cli.common import Activity, counted, human_bytes, print_json, print_snippets, verbosity
from rocpkg.cli.repo_settings import use_settings
from rocpkg.repo.urls import repository_url


def add_index_options(p) -> None:
    """What re-indexing needs, as `rocpkg repo` takes it."""
    p.add_argument("--suite", default=None, help="APT suite (default: what OUT recorded, else stable)")
    add_signing_options(p, what="the indexes again (default: the keys OUT recorded; required when they are signed)")
    p.add_argument("--base-url", default=None, help="URL the repository is served at, for rocm.list/rocm.repo "
                                                    "(default: the URL OUT recorded)")


def index_signer(args, out_dir: str):
    from rocpkg.store.dates import published_source_date_epoch

    return signer_of_args(args, published_source_date_epoch(out_dir))


def _cmd_prune(args) -> int:
    from rocpkg.repo.lifecycle import prune

    policy = prune_policy(args)     # --policy (rocpkg.cli.channels), or None for --keep
    settings = use_settings(args, args.out)
    repository_url(os.path.abspath(args.out), args.base_url)   # refused before anything is moved
    signer = None if args.dry_run else index_signer(args, args.out)
    result = prune(args.out, keep=args.keep, keep_list=args.keep_release or [], suite=args.suite, signer=signer,
                   base_url=args.base_url, dry_run=args.dry_run, policy=policy, allow_empty=args.allow_empty,
                   settings=settings.used)
    if args.json:
        return lifecycle_json("rocpkg-prune/1", args.out, result, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {counted(len(result.removed), 'release')} ({', '.join(result.removed) or 'none'}), "
          f"{counted(len(result.files), 'package file')}; kept {', '.join(result.kept) or 'none'}")
    if args.dry_run and result.removed and not result.kept and not args.allow_empty:
        print("note: that would leave no release: prune refuses it without --allow-empty", file=sys.stderr)
    if not args.dry_run and result.removed:
        settings.say(args)
    if not args.dry_run and verbosity(args) >= 0:
        print_snippets(result.snippets, signer)
    return 0


def lifecycle_json(schema: str, out: str, result, **fields) -> int:
    """prune's, promote's and rm's --json: what a LifecycleResult says, with the
    command's own fields."""
    print_json({"schema": schema, "out": os.path.abspath(out), **fields, "removed": result.removed,
                "kept": result.kept, "files": result.files, "repositories": sorted(result.snippets.values())})
    return 0


def _cmd_promote(args) -> int:
    from rocpkg.repo.lifecycle import promote
    from rocpkg.store.settings import read_settings

    settings = use_settings(args, args.dst, inherit=read_settings(args.src))
    signer = index_signer(args, args.src)      # a dry run too: it is refused where the promote would be
    repository_url(os.path.abspath(args.dst), args.base_url)   # refused before anything is copied
    result = promote(args.src, args.dst, args.release, suite=args.suite, signer=signer, base_url=args.base_url,
                     dry_run=args.dry_run, settings=settings.used)
    if args.json:
        return lifecycle_json("rocpkg-promote/1", args.dst, result, release=args.release,
                              src=os.path.abspath(args.src), dry_run=args.dry_run)
    if args.dry_run:
        print(f"would promote {args.release}: {counted(len(result.files), 'package file')} to copy into {args.dst}; "
              f"it would hold {', '.join(result.kept)}")
        for rel in result.files if verbosity(args) > 0 else ():
            print(f"  would copy {rel}")
        return 0
    print(f"promoted {args.release}: {counted(len(result.files), 'package file')} copied into {args.dst}; "
          f"it now holds {', '.join(result.kept)}")
    settings.say(args)
    if verbosity(args) >= 0:
        print_snippets(result.snippets, signer)
    return 0


def _cmd_publish(args) -> int:
    from rocpkg.repo.publish import destination, publish

    dest = destination(args.dest, args.endpoint_url, allow_bucket_root=args.allow_bucket_root)
    with Activity(f"publishing {args.out} to {args.dest}", args) as activity:
        sent = [0, 0]

        def progress(what: str, item) -> None:
            if what == "sent":
                sent[0], sent[1] = sent[0] + 1, sent[1] + item.size
                activity.update(f"{counted(sent[0], 'file')} sent ({human_bytes(sent[1])})")

        result = publish(args.out, dest, keep_removed=args.keep_removed, check=not args.no_check, adopt=args.adopt,
                         dry_run=args.dry_run, progress=progress)
    if result.adopted:
        print(f"{'would adopt' if args.dry_run else 'adopted'} {result.dest}: its publish record named "
              f"{result.adopted}; it {'would follow' if args.dry_run else 'now follows'} {args.out}", file=sys.stderr)
    if args.json:
        print_json({"schema": "rocpkg-publish/1", "out": os.path.abspath(args.out), "dest": result.dest,
                    "dry_run": args.dry_run, "sent": result.sent, "bytes_sent": result.bytes_sent,
                    "unchanged": result.unchanged, "removed": result.removed})
        return 0
    if args.dry_run:
        print(f"would publish {args.out} to {result.dest}: {counted(len(result.sent), 'file')} to send "
              f"({human_bytes(result.bytes_sent)}), {result.unchanged} unchanged, "
              f"{counted(len(result.removed), 'file')} to remove")
        for rel in result.sent if verbosity(args) > 0 else ():
            print(f"  would send {rel}")
        for rel in result.removed if verbosity(args) >= 0 else ():
            print(f"  would remove {rel}")
        return 0
    print(f"published {args.out} to {result.dest}: {counted(len(result.sent), 'file')} sent "
          f"({human_bytes(result.bytes_sent)}), {result.unchanged} unchanged, {len(result.removed)} removed")
    return 0


def _cmd_export(args) -> int:
    from rocpkg.repo.export import export_closure

    use_settings(args, args.out, url=False)    # OUT's suite and key; the bundle's URL is DEST
    signer = index_signer(args, args.out)
    with Activity(f"exporting {', '.join(args.names)} into {args.dest}", args):
        result = export_closure(args.out, args.dest, args.names, signer=signer, suite=args.suite)
    if args.json:
        print_json({"schema": "rocpkg-export/1", "out": os.path.abspath(args.out), "dest": result.dest,
                    "packages": result.packages, "tarball": result.tarball, "size": result.size,
                    "sha256": result.sha256, "signed_by": signer.fingerprint if signer else None})
        return 0
    counts = ", ".join(f"{fmt}: {counted(len(names), 'package')}" for fmt, names in result.packages.items())
    print(f"exported {counts} into {result.dest}" + (f", signed by {signer.fingerprint}" if signer else ", unsigned"))
    print(f"bundle: {result.tarball} ({human_bytes(result.size)}), sha256 {result.sha256} in {result.tarball}.sha256")
    return 0


def register(sub) -> None:
    p = sub.add_parser("prune", help="remove old releases from OUT and re-index it, in one step")
    p.add_argument("out", metavar="OUT", help="the repository tree (built by rocpkg build)")
    p.add_argument("--keep", type=int, default=None, help="releases kept per series (MAJOR.MINOR), newest first")
    add_policy_option(p)
    p.add_argument("--keep-release", action="append", metavar="V-R", help="also keep this release (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed; change nothing")
    p.add_argument("--allow-empty", action="store_true", help="let prune remove every release (--keep 0)")
    add_index_options(p)
    p.add_argument("--json", action="store_true", help="what was (or would be) removed and kept, as JSON (schema rocpkg-prune/1)")
    p.set_defaults(func=_cmd_prune)

    p = sub.add_parser("promote", help="copy a tested release's packages into another repository and re-index it")
    p.add_argument("src", metavar="SRC", help="the repository tree the tested release is in")
    p.add_argument("dst", metavar="DST", help="the repository tree of the channel it goes to (created if absent)")
    p.add_argument("--release", required=True, metavar="V-R", help="the release to promote, e.g. 7.1.0-1")
    p.add_argument("--dry-run", action="store_true", help="check, then only say what would be copied; change nothing")
    add_index_options(p)
    p.add_argument("--json", action="store_true", help="what was copied and what DST holds, as JSON (schema rocpkg-promote/1)")
    p.set_defaults(func=_cmd_promote)

    p = sub.add_parser("export", help="write an offline bundle: the named packages' dependency closure as a "
                                      "self-contained repository DEST, and DEST.tar")
    p.add_argument("out", metavar="OUT", help="the repository tree to export from (each name from the newest release holding it)")
    p.add_argument("dest", metavar="DEST", help="a new directory, outside OUT")
    p.add_argument("names", metavar="NAME", nargs="+", help="packages as users name them, e.g. rocm-gfx110x")
    p.add_argument("--suite", default=None, help="APT suite (default: what OUT recorded, else stable)")
    add_signing_options(p, what="the bundle's indexes (default: OUT's recorded keys)")
    p.add_argument("--json", action="store_true", help="the bundle's packages, tarball and digest, as JSON (schema rocpkg-export/1)")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("publish", help="upload OUT's repositories to a directory or s3://bucket/prefix, "
                                       "indexes last, removals after")
    p.add_argument("out", metavar="OUT", help="the repository tree to publish")
    p.add_argument("dest", metavar="DEST", help="a directory, or s3://BUCKET[/PREFIX]")
    p.add_argument("--endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL"),
                   help="S3-compatible server (default $AWS_ENDPOINT_URL, else AWS)")
    p.add_argument("--keep-removed", action="store_true",
                   help="leave files an earlier publish put in DEST and OUT no longer has (publish never removes "
                        "anything else)")
    p.add_argument("--allow-bucket-root", action="store_true",
                   help="allow s3://BUCKET with no prefix (the bucket holds nothing but this repository)")
    p.add_argument("--no-check", action="store_true", help="publish even if OUT fails the integrity check")
    p.add_argument("--dry-run", action="store_true", help="only say what would be sent and removed; change nothing")
    p.add_argument("--adopt", action="store_true", help="publish into a destination whose publish record names "
                                                        "another OUT (its files then follow this OUT)")
    p.add_argument("--json", action="store_true", help="the files sent, unchanged and removed, as JSON (schema rocpkg-publish/1)")
    p.set_defaults(func=_cmd_publish)
