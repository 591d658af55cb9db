"""One package record from one RPM header (createrepo_c's cr_package_from_header): the
repository dumpers and verify read only this record; nothing else decodes header tags."""
from __future__ import annotations

import stat
from dataclasses import dataclass, field

from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.rpm.read import RpmInfo
from rocpkg.formats.rpm.tags import RPMFILE_GHOST, SigTag, Tag

# createrepo_c's dependency kinds, in primary.xml's order: kind -> (name, flags, version) tags
DEPENDENCY_TAGS = {
    "provides": (Tag.PROVIDENAME, Tag.PROVIDEFLAGS, Tag.PROVIDEVERSION),
    "requires": (Tag.REQUIRENAME, Tag.REQUIREFLAGS, Tag.REQUIREVERSION),
    "conflicts": (Tag.CONFLICTNAME, Tag.CONFLICTFLAGS, Tag.CONFLICTVERSION),
    "obsoletes": (Tag.OBSOLETENAME, Tag.OBSOLETEFLAGS, Tag.OBSOLETEVERSION),
    "suggests": (Tag.SUGGESTNAME, Tag.SUGGESTFLAGS, Tag.SUGGESTVERSION),
    "enhances": (Tag.ENHANCENAME, Tag.ENHANCEFLAGS, Tag.ENHANCEVERSION),
    "recommends": (Tag.RECOMMENDNAME, Tag.RECOMMENDFLAGS, Tag.RECOMMENDVERSION),
    "supplements": (Tag.SUPPLEMENTNAME, Tag.SUPPLEMENTFLAGS, Tag.SUPPLEMENTVERSION),
}


@dataclass(frozen=True)
class RpmFile:
    """One entry of the header's file list."""

    path: str
    mode: int
    size: int
    flags: int
    link: str

    @property
    def kind(self) -> str:
        """createrepo's file type: "dir", "ghost" or "" for anything else."""
        if stat.S_ISDIR(self.mode):
            return "dir"
        return "ghost" if self.flags & RPMFILE_GHOST else ""


@dataclass
class RpmPackageRecord:
    """Everything the repository metadata and verify take from one .rpm."""

    path: str
    name: str
    arch: str
    epoch: int
    version: str
    release: str
    summary: str
    description: str
    packager: str
    url: str
    license: str
    vendor: str
    group: str
    buildhost: str
    sourcerpm: str
    build_time: int
    installed_size: int
    archive_size: int
    header_start: int           # the main header's byte range (rpm:header-range)
    header_end: int
    payload_offset: int
    payload_compressor: str
    header_signed: bool         # carries an RSA or DSA header signature
    files: list[RpmFile] = field(default_factory=list)
    dependencies: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    changelog: list[tuple[int, str, str]] = field(default_factory=list)   # newest first

    @property
    def evr(self) -> str:
        base = f"{self.version}-{self.release}"
        return f"{self.epoch}:{base}" if self.epoch else base

    def file_entries(self) -> list[m.FileEntry]:
        """The file list as plan entries (no sources): what verify compares to a plan."""
        entries = []
        for f in self.files:
            kind = {stat.S_IFDIR: m.DIR, stat.S_IFLNK: m.SYMLINK}.get(stat.S_IFMT(f.mode), m.FILE)
            entries.append(m.FileEntry(f.path, kind, f.mode & 0o7777, "", f.size if kind == m.FILE else 0,
                                       f.link if kind == m.SYMLINK else ""))
        return entries


def package_from_header(info: RpmInfo) -> RpmPackageRecord:
    """The record of one read RPM; a header without NAME, VERSION, RELEASE or ARCH, or
    with a file list whose arrays disagree, raises RocpkgInputError."""
    h = info.header
    for tag in (Tag.NAME, Tag.VERSION, Tag.RELEASE, Tag.ARCH):
        if not h.get(tag):
            raise RocpkgInputError((info.path, f"RPM header has no {tag.name} tag"))
    signature = info.signature
    return RpmPackageRecord(
        path=info.path, name=h[Tag.NAME], arch="src" if h.get(Tag.SOURCEPACKAGE) else h[Tag.ARCH],
        epoch=_int(h.get(Tag.EPOCH)), version=h[Tag.VERSION], release=h[Tag.RELEASE],
        summary=_text(h, Tag.SUMMARY), description=_text(h, Tag.DESCRIPTION),
        packager=_text(h, Tag.PACKAGER), url=_text(h, Tag.URL), license=_text(h, Tag.LICENSE),
        vendor=_text(h, Tag.VENDOR), group=_text(h, Tag.GROUP), buildhost=_text(h, Tag.BUILDHOST),
        sourcerpm=_text(h, Tag.SOURCERPM), build_time=_int(h.get(Tag.BUILDTIME)),
        installed_size=_int(h.get(Tag.LONGSIZE)) or _int(h.get(Tag.SIZE)),
        archive_size=(_int(signature.get(SigTag.LONGARCHIVESIZE)) or _int(signature.get(SigTag.PAYLOADSIZE))
                      or _int(h.get(Tag.ARCHIVESIZE))),
        header_start=info.header_start, header_end=info.header_end, payload_offset=info.payload_offset,
        payload_compressor=_text(h, Tag.PAYLOADCOMPRESSOR) or "gzip",
        header_signed=SigTag.RSA in signature or SigTag.DSA in signature,
        files=_files(info),
        dependencies={kind: _dependencies(h, *tags) for kind, tags in DEPENDENCY_TAGS.items()},
        changelog=list(zip(h.get(Tag.CHANGELOGTIME, []), h.get(Tag.CHANGELOGNAME, []),
                           h.get(Tag.CHANGELOGTEXT, []))))


def _files(info: RpmInfo) -> list[RpmFile]:
    h = info.header
    if Tag.BASENAMES in h:
        dirnames = h.get(Tag.DIRNAMES, [])
        indexes = h.get(Tag.DIRINDEXES, [])
        basenames = h[Tag.BASENAMES]
        if len(indexes) != len(basenames) or any(i >= len(dirnames) for i in indexes):
            raise RocpkgInputError((info.path, "RPM header's DIRINDEXES do not match its BASENAMES and DIRNAMES"))
        paths = [dirnames[i] + base for i, base in zip(indexes, basenames)]
    else:
        paths = list(h.get(Tag.OLDFILENAMES, []))
    modes = h.get(Tag.FILEMODES, [])
    sizes = h.get(Tag.LONGFILESIZES) or h.get(Tag.FILESIZES) or []
    flags = h.get(Tag.FILEFLAGS, [])
    links = h.get(Tag.FILELINKTOS, [])

    def at(values, i, default):
        return values[i] if i < len(values) else default

    return [RpmFile(path, at(modes, i, 0), at(sizes, i, 0), at(flags, i, 0), at(links, i, ""))
            for i, path in enumerate(paths)]


def _dependencies(header: dict, name_tag: int, flags_tag: int, version_tag: int) -> list[tuple[str, int, str]]:
    names = header.get(name_tag, [])
    flags = header.get(flags_tag, [0] * len(names))
    versions = header.get(version_tag, [""] * len(names))
    return list(zip(names, flags, versions))


def _text(header: dict, tag: int) -> str:
    value = header.get(tag, "")
    if isinstance(value, list):   # I18NSTRING: the C locale's text comes first
        value = value[0] if value else ""
    return value


def _int(value) -> int:
    if isinstance(value, list):
        return value[0] if value else 0
    return value or 0
