"""Command-line handlers of a repository's later life: `rocpkg prune`, `rocpkg promote`
and `rocpkg publish` (they print). cli._register_commands calls register().
"""
from __future__ import annotations

import os

from rocpkg.cli.signing import add_signing_options, signer_of_args
from rocpkg.cli.channels import add_policy_option, prune_policy
from rocpkg.cli.common import Activity, human_bytes, plural, print_json, print_snippets, verbosity
from rocpkg.repo.urls import repository_url


def add_index_options(p) -> None:
    """What re-indexing needs, as `rocpkg repo` takes it."""
    p.add_argument("--suite", default="stable", help="APT suite (default stable)")
    add_signing_options(p, what="the indexes again (required when they are signed)")
    p.add_argument("--base-url", default=None, help="URL the repository is served at, for rocm.list/rocm.repo")


def index_signer(args, out_dir: str):
    from rocpkg.store.dates import published_source_date_epoch

    return signer_of_args(args, published_source_date_epoch(out_dir))


def _cmd_prune(args) -> int:
    from rocpkg.repo.lifecycle import prune

    policy = prune_policy(args)     # --policy (rocpkg.cli.channels), or None for --keep
    repository_url(os.path.abspath(args.out), args.base_url)   # refused before anything is moved
    signer = None if args.dry_run else index_signer(args, args.out)
    result = prune(args.out, keep=args.keep, keep_list=args.keep_release or [], suite=args.suite, signer=signer,
                   base_url=args.base_url, dry_run=args.dry_run, policy=policy)
    if args.json:
        return lifecycle_json("rocpkg-prune/1", args.out, result, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {plural(len(result.removed), 'release')} ({', '.join(result.removed) or 'none'}), "
          f"{plural(len(result.files), 'package file')}; kept {', '.join(result.kept) or 'none'}")
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

    signer = index_signer(args, args.src)
    repository_url(os.path.abspath(args.dst), args.base_url)   # refused before anything is copied
    result = promote(args.src, args.dst, args.release, suite=args.suite, signer=signer, base_url=args.base_url)
    if args.json:
        return lifecycle_json("rocpkg-promote/1", args.dst, result, release=args.release,
                              src=os.path.abspath(args.src))
    print(f"promoted {args.release}: {plural(len(result.files), 'package file')} copied into {args.dst}; "
          f"it now holds {', '.join(result.kept)}")
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
                activity.update(f"{plural(sent[0], 'file')} sent ({human_bytes(sent[1])})")

        result = publish(args.out, dest, keep_removed=args.keep_removed, check=not args.no_check, progress=progress)
    if args.json:
        print_json({"schema": "rocpkg-publish/1", "out": os.path.abspath(args.out), "dest": result.dest,
                    "sent": result.sent, "bytes_sent": result.bytes_sent, "unchanged": result.unchanged,
                    "removed": result.removed})
        return 0
    print(f"published {args.out} to {result.dest}: {plural(len(result.sent), 'file')} sent "
          f"({human_bytes(result.bytes_sent)}), {result.unchanged} unchanged, {len(result.removed)} removed")
    return 0


def _cmd_export(args) -> int:
    from rocpkg.repo.export import export_closure

    signer = index_signer(args, args.out)
    with Activity(f"exporting {', '.join(args.names)} into {args.dest}", args):
        result = export_closure(args.out, args.dest, args.names, signer=signer, suite=args.suite)
    if args.json:
        print_json({"schema": "rocpkg-export/1", "out": os.path.abspath(args.out), "dest": result.dest,
                    "packages": result.packages, "tarball": result.tarball, "size": result.size,
                    "sha256": result.sha256, "signed_by": signer.fingerprint if signer else None})
        return 0
    counts = ", ".join(f"{fmt}: {len(names)}" for fmt, names in result.packages.items())
    print(f"exported {counts} packages into {result.dest}" + (f", signed by {signer.fingerprint}" if signer else ", unsigned"))
    print(f"bundle: {result.tarball} ({human_bytes(result.size)}), sha256 {result.sha256} in {result.tarball}.sha256")
    return 0


def register(sub) -> None:
    p = sub.add_parser("prune", help="remove old releases from OUT and re-index it, in one step")
    p.add_argument("out", metavar="OUT", help="the repository tree (built by rocpkg build)")
    p.add_argument("--keep", type=int, default=None, help="releases kept per series (MAJOR.MINOR), newest first")
    add_policy_option(p)
    p.add_argument("--keep-release", action="append", metavar="V-R", help="also keep this release (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    add_index_options(p)
    p.add_argument("--json", action="store_true", help="what was (or would be) removed and kept, as JSON (schema rocpkg-prune/1)")
    p.set_defaults(func=_cmd_prune)

    p = sub.add_parser("promote", help="copy a tested release's packages into another repository and re-index it")
    p.add_argument("src", metavar="SRC", help="the repository tree the tested release is in")
    p.add_argument("dst", metavar="DST", help="the repository tree of the channel it goes to (created if absent)")
    p.add_argument("--release", required=True, metavar="V-R", help="the release to promote, e.g. 7.1.0-1")
    add_index_options(p)
    p.add_argument("--json", action="store_true", help="what was copied and what DST holds, as JSON (schema rocpkg-promote/1)")
    p.set_defaults(func=_cmd_promote)

    p = sub.add_parser("export", help="write an offline bundle: the named packages' dependency closure as a "
                                      "self-contained repository DEST, and DEST.tar")
    p.add_argument("out", metavar="OUT", help="the repository tree to export from (each name from the newest release holding it)")
    p.add_argument("dest", metavar="DEST", help="a new directory, outside OUT")
    p.add_argument("names", metavar="NAME", nargs="+", help="packages as users name them, e.g. rocm-gfx110x")
    p.add_argument("--suite", default="stable", help="APT suite (default stable)")
    add_signing_options(p, what="the bundle's indexes")
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
    p.add_argument("--json", action="store_true", help="the files sent, unchanged and removed, as JSON (schema rocpkg-publish/1)")
    p.set_defaults(func=_cmd_publish)
