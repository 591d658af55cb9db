"""write_rpm: a PackageSpec and its rendered spec text -> one .rpm, streamed. The header
takes its metadata from the rendered spec (templates are the single source of metadata
text) and its file list from the plan; file bytes stream from the sources into the
compressed cpio payload once. Knows nothing of ROCm: it packs what a PackageSpec says."""
from __future__ import annotations

import hashlib
import os

from rocpkg.formats.rpm.plugin import FORMAT, file_name
from rocpkg.formats import compression
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.filelist import PackageSources, checked_files
from rocpkg.model import DIR, FILE, SYMLINK, BuildOptions, BuiltPackage, FileEntry, PackageSpec
from rocpkg.formats.render import render_spec
from rocpkg.formats.rpm.cpio import CpioWriter
from rocpkg.formats.rpm.header import encode_header
from rocpkg.formats.rpm.relations import RPMSENSE_EQUAL, RPMSENSE_INTERP, rpmlib
from rocpkg.formats.rpm.signature import LEAD_SIZE, encode_lead, encode_signature, signature_tags
from rocpkg.formats.rpm.spec import RELATION_KEYS, SCRIPT_SENSE, ParsedSpec, parse_spec
from rocpkg.formats.rpm.tags import (LARGE_SIZE, PGPHASHALGO_SHA256, RPMFILE_CONFIG, RPMFILE_NONE,
                             RPMFILE_NOREPLACE, RPMVERIFY_ALL, TYPE_I18NSTRING,
                             TYPE_INT16, TYPE_INT32, TYPE_INT64, TYPE_STRING, TYPE_STRING_ARRAY, Tag)
from rocpkg.formats.streams import AtomicOutput, Tee, digester, hash_open

BUILDHOST = "localhost"
RPMVERSION = "4.18.0"       # the rpm feature level this writer follows
_S_IFDIR, _S_IFREG, _S_IFLNK = 0o040000, 0o100000, 0o120000


def _relation_tags(relations, name_tag, flags_tag, version_tag) -> dict:
    if not relations:
        return {}
    return {name_tag: (TYPE_STRING_ARRAY, [r[0] for r in relations]),
            flags_tag: (TYPE_INT32, [r[1] for r in relations]),
            version_tag: (TYPE_STRING_ARRAY, [r[2] for r in relations])}


def _sorted_unique(relations) -> list[tuple[str, int, str]]:
    """rpm keeps dependency sets sorted and without duplicates."""
    return sorted(set(relations), key=lambda r: (r[0].encode(), r[2], r[1]))


def _entry_size(entry: FileEntry) -> int:
    if entry.type == FILE:
        return entry.size
    if entry.type == SYMLINK:
        return len(entry.link_target.encode("utf-8", "surrogateescape"))
    return 0


def _entry_mode(entry: FileEntry) -> int:
    kind = _S_IFREG if entry.type == FILE else _S_IFDIR if entry.type == DIR else _S_IFLNK
    perms = 0o777 if kind == _S_IFLNK else entry.mode & 0o7777
    return kind | perms


def _file_flags(entry: FileEntry) -> int:
    """A regular file under /etc is %config(noreplace), as the .deb writer makes it a
    conffile: a user's edits survive an upgrade."""
    if entry.type == FILE and entry.path.startswith("/etc/"):
        return RPMFILE_CONFIG | RPMFILE_NOREPLACE
    return RPMFILE_NONE


def file_tags(files: list[FileEntry], digests: dict[str, str], mtime: int, large: bool) -> dict:
    """DIRNAMES/BASENAMES/DIRINDEXES and the per-file arrays rpm, dnf and rpmlint read."""
    if not files:
        return {}
    dirnames: list[str] = []
    dir_index: dict[str, int] = {}
    basenames, dirindexes = [], []
    for entry in files:
        parent, _, base = entry.path.rpartition("/")
        parent += "/"
        if parent not in dir_index:
            dir_index[parent] = len(dirnames)
            dirnames.append(parent)
        basenames.append(base)
        dirindexes.append(dir_index[parent])
    n = len(files)
    classes = ["", "directory"]
    sizes = [_entry_size(e) for e in files]
    tags = {
        Tag.FILEMODES: (TYPE_INT16, [_entry_mode(e) for e in files]),
        Tag.FILERDEVS: (TYPE_INT16, [0] * n),
        Tag.FILEMTIMES: (TYPE_INT32, [mtime] * n),
        Tag.FILEDIGESTS: (TYPE_STRING_ARRAY, [digests.get(e.path, "") if e.type == FILE else ""
                                              for e in files]),
        Tag.FILELINKTOS: (TYPE_STRING_ARRAY, [e.link_target if e.type == SYMLINK else ""
                                              for e in files]),
        Tag.FILEFLAGS: (TYPE_INT32, [_file_flags(e) for e in files]),
        Tag.FILEUSERNAME: (TYPE_STRING_ARRAY, ["root"] * n),
        Tag.FILEGROUPNAME: (TYPE_STRING_ARRAY, ["root"] * n),
        Tag.FILEVERIFYFLAGS: (TYPE_INT32, [RPMVERIFY_ALL] * n),
        Tag.FILEDEVICES: (TYPE_INT32, [1] * n),
        Tag.FILEINODES: (TYPE_INT32, list(range(1, n + 1))),
        Tag.FILELANGS: (TYPE_STRING_ARRAY, [""] * n),
        Tag.FILECOLORS: (TYPE_INT32, [0] * n),
        Tag.FILECLASS: (TYPE_INT32, [1 if e.type == DIR else 0 for e in files]),
        Tag.CLASSDICT: (TYPE_STRING_ARRAY, classes),
        Tag.DIRINDEXES: (TYPE_INT32, dirindexes),
        Tag.BASENAMES: (TYPE_STRING_ARRAY, basenames),
        Tag.DIRNAMES: (TYPE_STRING_ARRAY, dirnames),
        Tag.FILEDIGESTALGO: (TYPE_INT32, [PGPHASHALGO_SHA256]),
    }
    if large:
        tags[Tag.LONGFILESIZES] = (TYPE_INT64, sizes)
    else:
        tags[Tag.FILESIZES] = (TYPE_INT32, sizes)
    return tags


def _i18n(text: str) -> tuple[int, list[str]]:
    return (TYPE_I18NSTRING, [text])


def build_header(spec: PackageSpec, parsed: ParsedSpec, options: BuildOptions,
                 files: list[FileEntry], digests: dict[str, str], payload_digest: str) -> dict:
    """Every main-header tag, from the parsed spec text (metadata) and the plan (files).
    Digests are fixed-length hex, so a placeholder header has the final header's size."""
    pre = parsed.preamble
    for key in ("name", "version", "release", "summary", "license"):
        if not pre.get(key):
            raise RocpkgInputError((spec.name, f"rendered spec has no {key.capitalize()}"))
    name, version, release = pre["name"], pre["version"], pre["release"]
    if not pre.get("epoch", "0").isdigit():
        raise RocpkgInputError((spec.name, f"rendered spec has a bad Epoch: {pre['epoch']!r}"))
    epoch = int(pre.get("epoch", "0"))
    evr = f"{epoch}:{version}-{release}" if epoch else f"{version}-{release}"
    sizes = [_entry_size(e) for e in files]
    large = any(s >= LARGE_SIZE for s in sizes)
    total = sum(sizes)

    provides, requires = _provides_requires(spec, parsed, options, name, evr, large)

    tags = {
        Tag.HEADERI18NTABLE: (TYPE_STRING_ARRAY, ["C"]),
        Tag.NAME: (TYPE_STRING, name),
        Tag.VERSION: (TYPE_STRING, version),
        Tag.RELEASE: (TYPE_STRING, release),
        Tag.SUMMARY: _i18n(pre["summary"]),
        Tag.DESCRIPTION: _i18n(parsed.description or pre["summary"]),
        Tag.BUILDTIME: (TYPE_INT32, [options.source_date_epoch]),
        Tag.BUILDHOST: (TYPE_STRING, BUILDHOST),
        Tag.LICENSE: (TYPE_STRING, pre["license"]),
        Tag.GROUP: _i18n(pre.get("group") or "Unspecified"),
        Tag.OS: (TYPE_STRING, "linux"),
        Tag.ARCH: (TYPE_STRING, spec.arch),
        Tag.SOURCERPM: (TYPE_STRING, f"{name}-{version}-{release}.src.rpm"),
        Tag.RPMVERSION: (TYPE_STRING, RPMVERSION),
        Tag.PAYLOADFORMAT: (TYPE_STRING, "cpio"),
        Tag.PAYLOADCOMPRESSOR: (TYPE_STRING, options.compression),
        Tag.PAYLOADFLAGS: (TYPE_STRING, str(options.compression_level)),
        Tag.PLATFORM: (TYPE_STRING, f"{spec.arch}-pc-linux-gnu"),
        Tag.ENCODING: (TYPE_STRING, "utf-8"),
        Tag.PAYLOADDIGEST: (TYPE_STRING_ARRAY, [payload_digest]),
        Tag.PAYLOADDIGESTALGO: (TYPE_INT32, [PGPHASHALGO_SHA256]),
    }
    if epoch:
        tags[Tag.EPOCH] = (TYPE_INT32, [epoch])
    if total >= LARGE_SIZE:
        tags[Tag.LONGSIZE] = (TYPE_INT64, [total])
    else:
        tags[Tag.SIZE] = (TYPE_INT32, [total])
    for key, tag in (("vendor", Tag.VENDOR), ("url", Tag.URL), ("packager", Tag.PACKAGER)):
        if pre.get(key):
            tags[tag] = (TYPE_STRING, pre[key])
    tags.update(_script_and_changelog_tags(parsed))
    tags.update(_all_relation_tags(parsed, provides, requires))
    tags.update(file_tags(files, digests, options.source_date_epoch, large))
    return tags


def _provides_requires(spec: PackageSpec, parsed: ParsedSpec, options: BuildOptions, name: str, evr: str,
                       large: bool) -> tuple[list, list]:
    """The package's Provides (its own name, and name(x86-64) as rpmbuild adds) and
    Requires (script interpreters and the rpmlib() features the file needs)."""
    provides = list(parsed.relations["provides"]) + [(name, RPMSENSE_EQUAL, evr)]
    if spec.arch == "x86_64":
        provides.append((f"{name}(x86-64)", RPMSENSE_EQUAL, evr))
    requires = list(parsed.relations["requires"])
    for script, (program, _body) in parsed.scripts.items():
        if program.startswith("/"):
            requires.append((program, RPMSENSE_INTERP | SCRIPT_SENSE[script], ""))
    requires += [rpmlib("CompressedFileNames", "3.0.4-1"), rpmlib("FileDigests", "4.6.0-1"),
                 rpmlib("PayloadFilesHavePrefix", "4.0-1")]
    if options.compression == "zstd":
        requires.append(rpmlib("PayloadIsZstd", "5.4.18-1"))
    elif options.compression == "xz":
        requires.append(rpmlib("PayloadIsXz", "5.2-1"))
    all_relations = [r for key in RELATION_KEYS for r in parsed.relations[key]]
    if any(r[0].startswith("(") for r in all_relations):
        requires.append(rpmlib("RichDependencies", "4.12.0-1"))
    if large:
        requires.append(rpmlib("LargeFiles", "4.12.0-1"))
    return provides, requires


def _script_and_changelog_tags(parsed: ParsedSpec) -> dict:
    """Scriptlet bodies and programs, and the changelog."""
    tags = {}
    script_tags = {"pre": (Tag.PREIN, Tag.PREINPROG), "post": (Tag.POSTIN, Tag.POSTINPROG),
                   "preun": (Tag.PREUN, Tag.PREUNPROG), "postun": (Tag.POSTUN, Tag.POSTUNPROG)}
    for script, (program, body) in parsed.scripts.items():
        body_tag, prog_tag = script_tags[script]
        if body:
            tags[body_tag] = (TYPE_STRING, body)
        tags[prog_tag] = (TYPE_STRING, program)
    if parsed.changelog:
        tags[Tag.CHANGELOGTIME] = (TYPE_INT32, [c[0] for c in parsed.changelog])
        tags[Tag.CHANGELOGNAME] = (TYPE_STRING_ARRAY, [c[1] for c in parsed.changelog])
        tags[Tag.CHANGELOGTEXT] = (TYPE_STRING_ARRAY, [c[2] for c in parsed.changelog])
    return tags


def _all_relation_tags(parsed: ParsedSpec, provides: list, requires: list) -> dict:
    """Every relation tag: provides, requires, conflicts, obsoletes, recommends, suggests."""
    tags = {}
    tags.update(_relation_tags(_sorted_unique(provides), Tag.PROVIDENAME, Tag.PROVIDEFLAGS,
                               Tag.PROVIDEVERSION))
    tags.update(_relation_tags(_sorted_unique(requires), Tag.REQUIRENAME, Tag.REQUIREFLAGS,
                               Tag.REQUIREVERSION))
    for key, (n_tag, f_tag, v_tag) in {
        "conflicts": (Tag.CONFLICTNAME, Tag.CONFLICTFLAGS, Tag.CONFLICTVERSION),
        "obsoletes": (Tag.OBSOLETENAME, Tag.OBSOLETEFLAGS, Tag.OBSOLETEVERSION),
        "recommends": (Tag.RECOMMENDNAME, Tag.RECOMMENDFLAGS, Tag.RECOMMENDVERSION),
        "suggests": (Tag.SUGGESTNAME, Tag.SUGGESTFLAGS, Tag.SUGGESTVERSION),
    }.items():
        tags.update(_relation_tags(_sorted_unique(parsed.relations[key]), n_tag, f_tag, v_tag))
    return tags


def _stream_payload(sources: PackageSources, files, payload_sink, large: bool, mtime: int,
                    threads: int) -> dict[str, str]:
    """The cpio archive of every entry, file bytes streamed from the sources; returns the
    SHA-256 of each regular file (the header's FILEDIGESTS), taken on the way
    (streams.digester: beside the writer when the package has cores to spare)."""
    sha256 = digester("sha256", threads)
    cpio = CpioWriter(payload_sink, stripped=large)
    try:
        for index, entry in enumerate(files):
            size = _entry_size(entry)
            cpio.add(index, entry.path, _entry_mode(entry), size, mtime, index + 1)
            if entry.type == SYMLINK:
                cpio.write_data(entry.link_target.encode("utf-8", "surrogateescape"))
            elif entry.type == FILE:
                with sources.open(entry, size) as source:
                    source.copy_to(cpio, (sha256,), entry.path)
        cpio.finish()
    except BaseException:
        sha256.abandon()
        raise
    return sha256.close()


def write_rpm(spec: PackageSpec, out_dir: str, options: BuildOptions) -> BuiltPackage:
    """Write out_dir/<file_name(spec)>, streaming: (1) lead, placeholder signature,
    placeholder header (every digest zeros: digests are fixed-length hex, so the header's
    length does not depend on them), then the compressed cpio while taking each file's
    sha256 and the compressed payload's; (2) rewrite the header with the real digests
    (same length) and the signature in its fixed-size slot; (3) one pass over the
    compressed payload for the whole file's sha256. Each source is read once, checked as
    it is opened (formats.filelist.PackageSources).
    Written through AtomicOutput: a failure leaves no partial file.

    The digest scheme is rpm >= 4.14's: header SHA256 (and SHA1) in the signature, the
    payload's SHA256 in the header (PAYLOADDIGEST), each file's SHA256 (FILEDIGESTS). Not
    written: the v3 MD5 over header + payload (rpmsign(8): "expensive and redundant
    baggage on packages where a separate payload digest exists") and PAYLOADDIGESTALT (the
    uncompressed stream's, optional): each was one more full pass over the payload."""
    if spec.format != FORMAT.name:
        raise RocpkgInputError((spec.name, f"not an rpm spec (format {spec.format!r})"))
    try:
        spec_text = render_spec(spec, options)
        parsed = parse_spec(spec_text)
    except ValueError as exc:
        raise RocpkgInputError((f"{spec.name}: spec", str(exc))) from None
    files = checked_files(spec.name, spec.files)
    sources = PackageSources(spec.name, files)
    large = any(_entry_size(e) >= LARGE_SIZE for e in files)
    threads = compression.writer_threads(options.threads)
    placeholder = "0" * 64
    placeholders = {e.path: placeholder for e in files if e.type == FILE}
    header_tags = build_header(spec, parsed, options, files, placeholders, placeholder)
    header = encode_header(header_tags, Tag.HEADERIMMUTABLE)
    # The largest signature this package can need fixes the size of its slot.
    sig_area = len(encode_signature(signature_tags(header, LARGE_SIZE + 1, LARGE_SIZE + 1), None))
    nevr = f"{parsed.preamble['name']}-{spec.evr}"
    path = os.path.join(out_dir, file_name(spec))
    with AtomicOutput(path, "w+b") as out, sources.checked():
        out.write(encode_lead(nevr))
        out.write(bytes(sig_area))
        header_start = out.tell()
        out.write(header)
        payload_start = out.tell()
        compressed_digest = digester("sha256", threads, whole=True)
        compressed = Tee(out, compressed_digest)
        compressor = compression.compressor(options.compression, compressed, options, compression.RPM)
        uncompressed = Tee(compressor)
        try:
            digests = _stream_payload(sources, files, uncompressed, large, options.source_date_epoch, threads)
            compressor.close()
        except BaseException:
            compressed_digest.abandon()
            raise
        header_tags = build_header(spec, parsed, options, files, digests, compressed_digest.hexdigest())
        final_header = encode_header(header_tags, Tag.HEADERIMMUTABLE)
        if len(final_header) != len(header):
            raise AssertionError("rpm header changed length when digests were filled in")
        out.seek(header_start)
        out.write(final_header)
        sig = encode_signature(signature_tags(final_header, len(final_header) + compressed.count,
                                              uncompressed.count), sig_area)
        if len(sig) != sig_area:
            raise AssertionError("rpm signature changed length")
        out.seek(LEAD_SIZE)
        out.write(sig)
        # The whole file's sha256 (the repository index and the manifest carry it)
        # covers the header, which is final only after the payload (its digests): no
        # order takes it while writing. One pass over the compressed payload, from the
        # page cache, is the least it costs.
        whole = hashlib.sha256(encode_lead(nevr) + sig + final_header)
        size = payload_start + hash_open(out, payload_start, whole)
    return BuiltPackage(spec=spec, path=path, size=size, sha256=whole.hexdigest(),
                        installed_size=sum(_entry_size(e) for e in files), metadata=spec_text,
                        sources=tuple(sources.found))
