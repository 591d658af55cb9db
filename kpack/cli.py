"""`kpack` command line: inspect, check, unpack and build kpack archives.

  kpack info FILE...            scheme, arches, binaries, kernels, sizes, compression ratio
  kpack ls FILE                 one line per kernel: key, arch, ordinal, size
  kpack verify FILE...          full check; exit 0 when every archive is sound
  kpack extract FILE -o DIR     write DIR/<key>/<arch>.hsaco for every kernel
  kpack pack DIR -o OUT.kpack   archive the code objects found under DIR

Keys in `pack`: a code object named after its own target (`<target>.hsaco`, `.co`, or no
suffix) is stored under its directory's relative path, e.g. `lib/libfoo.so#0/gfx1100.hsaco`
-> key `lib/libfoo.so#0` (with `#0` appended when the directory name has no `#N`). Any
other code object is stored under its own relative path plus `#0`. So `extract` then
`pack` gives back the same keys. A clang offload bundle (uncompressed) gives one code
object per amdgcn entry, filed under the target its entry id names (checked against the
ELF inside), all under the bundle's relative path (plus `#0` unless it ends in `#N`): the
bundles of a fat binary saved as `lib/libfoo.so#0`, `#1`, ... pack under the keys the
runtime looks up. Files are taken in sorted path order, which fixes the ordinals; files
that are not device code are skipped.

Bad input ends with one line `error: <file>: <what>` on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import os
import posixpath
import re
import sys

import zstandard

from kpack.archive import SCHEME_ZSTD, SCHEMES, KpackReader, KpackWriter
from kpack.bundle import bundle_entries
from kpack.check import check_archive
from kpack.detect import KIND_BUNDLE, KIND_CODE_OBJECT, KIND_NONE, detect
from kpack.errors import InvalidTargetError, KpackFormatError
from kpack.extract import ExtractRefused, write_members
from kpack.targets import family_of, parse_target

CODE_OBJECT_SUFFIXES = (".hsaco", ".co", "")


class UsageError(Exception):
    """A bad argument or input that is not a format error: reported like one."""


def shown(text: str) -> str:
    """`text` safe for a terminal: a character that is not printable (control characters,
    escape sequences an archive may carry in its names) is written as a Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _print(*lines: str) -> None:
    for line in lines:
        print(line)


def _open_archive(path) -> KpackReader:
    """KpackReader(path), its OS errors naming path (reading a directory fails with EISDIR
    and no file name)."""
    try:
        return KpackReader(path)
    except OSError as exc:
        exc.filename = exc.filename or os.fspath(path)
        raise


def _cmd_info(args) -> int:
    for index, path in enumerate(args.files):
        with _open_archive(path) as reader:
            entries = list(reader.entries())
            original = sum(entry.original_size for entry in entries)
            stored = reader.stored_bytes()
            ratio = f"{original / stored:.2f}x" if stored else "-"
            if index:
                print()
            _print(f"file:               {path}",
                   f"format version:     {reader.version}",
                   f"group:              {shown(reader.group_name)}",
                   f"family:             {shown(reader.gfx_arch_family)}",
                   f"arches:             {shown(' '.join(reader.gfx_arches))}",
                   f"compression scheme: {reader.scheme}",
                   f"binaries:           {len(reader.binaries)}",
                   f"kernels:            {len(entries)}",
                   f"file size:          {reader.file_size} bytes",
                   f"TOC size:           {reader.toc_size} bytes",
                   f"kernel bytes:       {original} original, {stored} stored",
                   f"compression ratio:  {ratio}")
    return 0


def _cmd_ls(args) -> int:
    with _open_archive(args.file) as reader:
        for entry in reader.entries():
            if args.arch and entry.arch != args.arch:
                continue
            print(f"{shown(entry.key)}\t{shown(entry.arch)}\t{entry.ordinal}\t{entry.original_size}")
    return 0


def _cmd_verify(args) -> int:
    """Every problem of every archive, one `error:` line each (check_archive)."""
    status = 0
    for path in args.files:
        problems = check_archive(path, args.target, require_code_objects=args.strict)
        for problem in problems:
            print(f"error: {shown(' '.join(str(problem).split()))}", file=sys.stderr)
        if problems:
            status = 2
            continue
        with _open_archive(path) as reader:
            print(f"{path}: ok ({reader.kernel_count} kernels, {reader.scheme})")
    return status


def _safe_member(key: str, arch: str, archive: str) -> str:
    """DIR-relative path for a kernel; refuses keys that would escape DIR."""
    relative = posixpath.normpath(posixpath.join(key, f"{arch}.hsaco"))
    if relative.startswith(("/", "../")) or relative == ".." or "\0" in relative:
        raise UsageError(f"{archive}: refusing to extract key {key!r} outside the output directory")
    return relative


def _cmd_extract(args) -> int:
    """Kernels are streamed (bounded memory) into DIR by kpack.extract: never through a
    symlink below DIR, and only when every one decompressed to its declared size (a bad
    archive leaves DIR as it was)."""
    problems = check_archive(args.file, decode_objects=False)
    if problems:
        raise problems[0]
    with _open_archive(args.file) as reader:
        chosen = [entry for entry in reader.entries()
                  if not (args.arch and entry.arch != args.arch) and not (args.key and entry.key != args.key)]
        if (args.key or args.arch) and not chosen:
            raise UsageError(f"{args.file}: no kernel matches"
                             + (f" key {args.key!r}" if args.key else "") + (f" arch {args.arch!r}" if args.arch else ""))
        members = [_safe_member(entry.key, entry.arch, args.file) for entry in chosen]
        write_members(args.output, members, (reader.stream_entry(entry) for entry in chosen))
    print(f"extracted {len(chosen)} kernels to {args.output}")
    return 0


_NUMBERED = re.compile(r"#\d+\Z")


def pack_key(relative_path: str, target: str) -> str:
    """The archive key for a code object at `relative_path` (see the module docstring)."""
    directory, name = posixpath.split(relative_path)
    for suffix in CODE_OBJECT_SUFFIXES:
        if directory and name == target + suffix:
            return directory if _NUMBERED.search(directory) else directory + "#0"
    return relative_path + "#0"


def _pack_items(full: str, relative: str) -> list[tuple[str, str, str, int, int]] | None:
    """(relative path, key, target, offset, size) of each code object in one file; None when
    it is not device code."""
    result = detect(full, scan_embedded=False)
    if result.kind == KIND_NONE:
        return None
    if result.kind == KIND_CODE_OBJECT:
        return [(relative, pack_key(relative, result.targets[0]), result.targets[0], 0, os.path.getsize(full))]
    if result.kind != KIND_BUNDLE:
        raise UsageError(f"{full}: is a {result.kind}; pack takes code objects and uncompressed offload bundles")
    key = relative if _NUMBERED.search(relative) else relative + "#0"
    with open(full, "rb") as handle:
        try:
            entries = bundle_entries(handle)
        except KpackFormatError as exc:
            raise exc.with_path(full)
    return [(relative, key, entry.target, entry.offset, entry.size)
            for entry in entries if entry.target is not None and entry.size]


def _check_pack_args(args) -> None:
    """The level is one zstd has, and the output is not among the inputs."""
    if args.scheme == SCHEME_ZSTD and not 1 <= args.level <= zstandard.MAX_COMPRESSION_LEVEL:
        raise UsageError(f"--level: {args.level} is not a zstd level (1 to {zstandard.MAX_COMPRESSION_LEVEL})")
    root, output = os.path.realpath(args.directory), os.path.realpath(args.output)
    if output == root or output.startswith(root + os.sep):
        raise UsageError(f"-o {args.output}: is inside {args.directory}, the directory being packed "
                         f"(write the archive elsewhere)")


def _cmd_pack(args) -> int:
    root = args.directory
    if not os.path.isdir(root):
        raise UsageError(f"{root}: not a directory")
    _check_pack_args(args)
    found: list[tuple[str, str, str, int, int]] = []  # (relative path, key, target, offset, size)
    skipped = 0
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            full = os.path.join(directory, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            items = _pack_items(full, os.path.relpath(full, root).replace(os.sep, "/"))
            if items is None:
                skipped += 1
            else:
                found.extend(items)
    if not found:
        raise UsageError(f"{root}: no code objects found")
    found.sort()
    arches = list(dict.fromkeys(target for _, _, target, _, _ in found))
    family = args.family or _common_family(arches, root)
    group = args.group or os.path.basename(os.path.abspath(root))
    seen: dict[tuple[str, str], str] = {}
    with KpackWriter(args.output, group, family, scheme=args.scheme, level=args.level) as writer:
        for relative, key, target, offset, size in found:
            if (key, target) in seen:
                raise UsageError(f"{os.path.join(root, relative)}: same key {key!r} and target {target} "
                                 f"as {seen[key, target]}")
            seen[key, target] = relative
            with open(os.path.join(root, relative), "rb") as handle:
                handle.seek(offset)
                writer.add(key, target, handle.read(size))
    print(f"packed {len(found)} code objects for {' '.join(arches)} into {args.output}"
          + (f" ({skipped} other files skipped)" if skipped else ""))
    return 0


def _common_family(arches: list[str], root: str) -> str:
    families = {family_of(parse_target(arch).processor) or parse_target(arch).processor for arch in arches}
    if len(families) != 1:
        raise UsageError(f"{root}: code objects span families {', '.join(sorted(families))}; pass --family")
    return families.pop()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kpack", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="summary of archives")
    info.add_argument("files", nargs="+")
    info.set_defaults(func=_cmd_info)
    ls = sub.add_parser("ls", help="list kernels")
    ls.add_argument("file")
    ls.add_argument("--arch")
    ls.set_defaults(func=_cmd_ls)
    verify = sub.add_parser("verify", help="check archives completely (structure, sizes, code-object targets)")
    verify.add_argument("files", nargs="+")
    verify.add_argument("--target", help="the target the archive is filed under (its name's <target>)")
    verify.add_argument("--strict", action="store_true",
                        help="also refuse kernels that are not ELF files (opaque test payloads)")
    verify.set_defaults(func=_cmd_verify)
    extract = sub.add_parser("extract", help="write kernels as DIR/<key>/<arch>.hsaco")
    extract.add_argument("file")
    extract.add_argument("-o", "--output", required=True)
    extract.add_argument("--arch")
    extract.add_argument("--key")
    extract.set_defaults(func=_cmd_extract)
    pack = sub.add_parser("pack", help="archive the code objects under a directory")
    pack.add_argument("directory")
    pack.add_argument("-o", "--output", required=True)
    pack.add_argument("--group")
    pack.add_argument("--family")
    pack.add_argument("--scheme", choices=SCHEMES, default=SCHEME_ZSTD)
    pack.add_argument("--level", type=int, default=3, help="zstd level (default 3)")
    pack.set_defaults(func=_cmd_pack)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here when the output fits the buffer
        return status
    except BrokenPipeError:  # `kpack ls big.kpack | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except KpackFormatError as exc:
        message = str(exc)
    except (UsageError, InvalidTargetError, ExtractRefused) as exc:
        message = str(exc)
    except KeyError as exc:
        message = f"no such kernel {exc.args[0]!r}"
    except OSError as exc:
        message = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    except MemoryError:
        message = "out of memory"
    print(f"error: {shown(' '.join(message.split()))}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
