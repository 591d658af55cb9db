"""Command-line handlers that look inside OUT and remove one release: `rocpkg ls`, `show`,
`diff` and `rm` (they print). rocpkg.repo.contents reads what they show;
rocpkg.repo.lifecycle.remove_release removes. cli.main._register_commands calls register().

Each takes --json: one document on stdout whose "schema" names it (rocpkg-ls/1,
rocpkg-show/1, rocpkg-diff/1, rocpkg-rm/1; README lists their fields).
"""
from __future__ import annotations

import os

from rocpkg.cli.common import counted, human_bytes, print_json, print_snippets, shortened, verbosity
from rocpkg.cli.repo import add_index_options, index_signer, lifecycle_json
from rocpkg.cli.repo_settings import use_settings
from rocpkg.formats import registry


def _table(rows: list[tuple], right: set[int] = frozenset()) -> list[str]:
    """Rows of cells as aligned lines (columns in `right` right-aligned)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _cmd_ls(args) -> int:
    from rocpkg.repo.contents import read_releases, release_rows, setup_entries

    doc, records = read_releases(args.out)
    rows = release_rows(doc, records)
    setup = setup_entries(doc)
    if args.json:
        print_json({"schema": "rocpkg-ls/1", "out": os.path.abspath(args.out),
                    "releases": [r.to_dict() for r in rows],
                    "setup": [{k: e[k] for k in ("format", "name", "version", "release", "file", "size")}
                              for e in setup]})
        return 0
    if verbosity(args) < 0:             # -q: the ids, one a line, oldest first
        for row in rows:
            print(row.id)
        return 0
    formats = [f for f in registry.NAMES if any(f in r.packages for r in rows)]
    total = sum(r.size for r in rows)
    files = sum(sum(r.packages.values()) for r in rows)
    print(f"{args.out}: {counted(len(rows), 'release')}, {counted(files, 'package file')}, {human_bytes(total)}")
    if rows:
        table = [("release", "channel", "date", "size", *formats, "targets")]
        for r in rows:
            targets = shortened(r.targets, verbosity(args), shown=4)
            table.append((r.id + (" *" if r.newest else ""), r.channel or "-", r.date or "-", human_bytes(r.size),
                          *(str(r.packages.get(f, "-")) for f in formats), targets or "-"))
        for line in _table(table, right={3, *range(4, 4 + len(formats))}):
            print(line)
        print("* the newest release of its series (rm needs --allow-newest)")
    if setup:
        names = sorted({f"{e['name']} {e['version']}" for e in setup})
        print(f"setup packages: {', '.join(names)} ({', '.join(sorted({e['format'] for e in setup}))})")
    return 0


def _cmd_show(args) -> int:
    from rocpkg.repo.contents import SHOWN_RELATIONS, find_package, package_metadata, read_releases

    doc, records = read_releases(args.out)
    found = find_package(doc, records, args.name)
    shown = [package_metadata(os.path.abspath(args.out), f, with_files=args.files) for f in found]
    if args.json:
        print_json({"schema": "rocpkg-show/1", "out": os.path.abspath(args.out), "query": args.name,
                    "packages": shown})
        return 0
    for i, meta in enumerate(shown):
        if i:
            print()
        epoch = f"{meta['epoch']}:" if meta["epoch"] else ""
        release = f", release {meta['release_id']}" if meta["release_id"] else ", setup package (in no release)"
        print(f"== {meta['format']}: {meta['name']} {epoch}{meta['version']}-{meta['release']} ({meta['arch']}){release}")
        if verbosity(args) < 0:
            continue
        kind = meta["kind"] + (f", target {meta['target']}" if meta["target"] else "")
        if kind:
            print(f"  kind: {kind}")
        print(f"  file: {meta['file']} ({human_bytes(meta['size'])})")
        print(f"  sha256: {meta['sha256']}")
        for key in SHOWN_RELATIONS:
            if key in meta:
                print(f"  {key.replace('_', '-')}: {', '.join(meta[key])}")
        if "files" in meta:
            print(f"  files ({len(meta['files'])}):")
            for entry in meta["files"]:
                size = f"  {human_bytes(entry['size'])}" if entry["type"] == "file" else ""
                print(f"    {entry['path']}{'/' if entry['type'] == 'dir' else ''}{size}")
    return 0


def _signed(size: int) -> str:
    return ("+" if size >= 0 else "-") + human_bytes(abs(size))


def _cmd_diff(args) -> int:
    from rocpkg.repo.contents import read_releases, release_diff

    doc, records = read_releases(args.out)
    result = release_diff(doc, records, args.a, args.b)
    if args.json:
        print_json({"schema": "rocpkg-diff/1", "out": os.path.abspath(args.out), **result})
        return 0
    print(f"{result['a']} -> {result['b']}")
    for fmt, d in result["formats"].items():
        print(f"== {fmt}: {len(d['added'])} added, {len(d['removed'])} removed, {len(d['changed'])} changed, "
              f"{d['unchanged']} unchanged; {human_bytes(d['size_a'])} -> {human_bytes(d['size_b'])} "
              f"({_signed(d['size_b'] - d['size_a'])})")
        if verbosity(args) < 0:
            continue
        for p in d["added"]:
            print(f"  + {p['name']} {p['version']}-{p['release']} ({human_bytes(p['size'])})")
        for p in d["removed"]:
            print(f"  - {p['name']} {p['version']}-{p['release']} ({human_bytes(p['size'])})")
        for c in d["changed"]:
            a, b = c["from"], c["to"]
            print(f"  ~ {c['name']} {a['version']}-{a['release']} -> {b['version']}-{b['release']}, "
                  f"{human_bytes(a['size'])} -> {human_bytes(b['size'])} ({_signed(c['size_change'])})")
    return 0


def _cmd_rm(args) -> int:
    from rocpkg.repo.lifecycle import remove_release
    from rocpkg.repo.urls import repository_url

    settings = use_settings(args, args.out)     # what OUT recorded, unless given
    repository_url(os.path.abspath(args.out), args.base_url)     # refused before anything is moved
    signer = None if args.dry_run else index_signer(args, args.out)
    result = remove_release(args.out, args.release, suite=args.suite, signer=signer, base_url=args.base_url,
                            dry_run=args.dry_run, allow_newest=args.allow_newest, settings=settings.used)
    if args.json:
        return lifecycle_json("rocpkg-rm/1", args.out, result, release=args.release, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} release {args.release}: {counted(len(result.files), 'package file')}; "
          f"OUT {'would hold' if args.dry_run else 'holds'} {', '.join(result.kept) or 'no release'}")
    if verbosity(args) > 0:
        for rel in result.files:
            print(f"  {rel}")
    if not args.dry_run:
        settings.say(args)
    if not args.dry_run and verbosity(args) >= 0:
        print_snippets(result.snippets, signer)
    return 0


def register(sub) -> None:
    p = sub.add_parser("ls", help="list OUT's releases: channel, date, size, packages per format")
    p.add_argument("out", metavar="OUT", help="a repository tree written by rocpkg")
    p.add_argument("--json", action="store_true", help="machine-readable list (schema rocpkg-ls/1)")
    p.set_defaults(func=_cmd_ls)

    p = sub.add_parser("show", help="one package's metadata in every format OUT holds it in")
    p.add_argument("out", metavar="OUT", help="a repository tree written by rocpkg")
    p.add_argument("name", metavar="NAME[=VERSION]",
                   help="package name (any case); VERSION: a release id (7.1.0-1), version-release or version "
                        "(default: the newest release holding it)")
    p.add_argument("--files", action="store_true", help="also list the package's files")
    p.add_argument("--json", action="store_true", help="machine-readable metadata (schema rocpkg-show/1)")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("diff", help="two releases' added, removed and changed packages, with sizes")
    p.add_argument("out", metavar="OUT", help="a repository tree written by rocpkg")
    p.add_argument("a", metavar="A", help="the older release id, e.g. 7.1.0-1")
    p.add_argument("b", metavar="B", help="the newer release id, e.g. 7.1.0-2")
    p.add_argument("--json", action="store_true", help="machine-readable difference (schema rocpkg-diff/1)")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("rm", help="remove one release from OUT by its id and re-index, in one step")
    p.add_argument("out", metavar="OUT", help="the repository tree")
    p.add_argument("release", metavar="RELEASE", help="the release id, as `rocpkg ls` lists it")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed; OUT is not touched")
    p.add_argument("--allow-newest", action="store_true",
                   help="also remove the newest release of its series (its users would get an older one)")
    p.add_argument("--json", action="store_true", help="what was removed, as JSON (schema rocpkg-rm/1)")
    add_index_options(p)
    p.set_defaults(func=_cmd_rm)
