"""Plain data passed between the stages (config -> catalog -> plan -> render -> write -> index -> verify).

The writers and the indexers (rocpkg.formats) know only these types: nothing of ROCm,
artifacts or kpack. Everything here is immutable-by-convention plain data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

FILE = "file"
DIR = "dir"
SYMLINK = "symlink"

# Package kinds (PackageSpec.kind)
KIND_FILES = "files"      # a non-per-target definition's versioned package N{abi}
KIND_HOST = "host"        # N-host{abi}: generic artifacts of a per-target library
KIND_DEVICE = "device"    # N{abi}-{t}: kpack archives and per-arch databases for one target
KIND_META = "meta"        # no files: N{abi}, N, N{abi}-{t}, N{abi}-{family}
KIND_ALIAS = "alias"      # rocm-{family}
KIND_DEBUG = "debug"      # N + Format.debug_suffix: the detached debug files of N's ELF files


@dataclass(frozen=True)
class FileEntry:
    """One path a package installs.

    path:   absolute install path without trailing slash, e.g. /opt/rocm/core-7.1/lib/librocfft.so.0
    type:   FILE, DIR or SYMLINK
    mode:   permission bits only (0o644, 0o755, 0o4755 where setuid is declared); no type bits
    source: absolute path of the bytes in the artifacts dir (FILE only; "" otherwise)
    size:   planned size in bytes (FILE only); writers fail if the source no longer has it
    link_target: SYMLINK only, written verbatim
    patches: (file offset, bytes) written over the source's bytes as they stream into the
            package (FILE only; rocpkg.inputs.rpath: DT_RUNPATH -> DT_RPATH); same size
    """

    path: str
    type: str
    mode: int
    source: str = ""
    size: int = 0
    link_target: str = ""
    patches: tuple[tuple[int, bytes], ...] = ()
    identity: tuple[int, int] = (0, 0)   # (st_dev, st_ino) the catalog read; the writer opens the same file


@dataclass(frozen=True)
class Alternative:
    """One update-alternatives link group: `link` -> `target`, with slave links that
    follow the master (made only when their target exists)."""

    name: str
    link: str
    target: str
    slaves: tuple[tuple[str, str, str], ...] = ()   # (link, name, target)


# PackageSpec's relation fields, in the order its declaration gives them
RELATION_FIELDS = ("depends", "pre_depends", "recommends", "suggests", "conflicts", "breaks", "replaces", "provides",
                   "obsoletes")


@dataclass
class PackageSpec:
    """One output package of one format, fully resolved: names and relations are already
    in the format's own syntax (rocpkg.formats.<format>: its pin, relation and name rules).

    files are sorted by path; directories listed are the ones the package owns
    (the install prefix and below, never /opt or /usr); a writer adds the missing
    ancestors its format needs itself.
    """

    format: str                 # a registered format's name (rocpkg.formats.registry)
    name: str
    version: str                # upstream version, e.g. "7.1.0"
    release: str                # e.g. "1"
    arch: str                   # in the format's spelling (Format.arch): "amd64", "noarch", "any"...
    kind: str                   # KIND_*
    definition: str = ""        # the package.json `Package` this came from
    target: str = ""            # bare lower-case target for device / per-target metas ("gfx942")
    family: str = ""            # family name for family metas and aliases ("gfx110X")
    epoch: int = 0
    summary: str = ""
    description: str = ""       # long text, plain paragraphs separated by blank lines
    maintainer: str = ""
    vendor: str = ""
    license: str = ""
    homepage: str = ""
    section: str = "devel"
    priority: str = "optional"
    group: str = ""
    depends: list[str] = field(default_factory=list)
    pre_depends: list[str] = field(default_factory=list)
    recommends: list[str] = field(default_factory=list)
    suggests: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)
    replaces: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    obsoletes: list[str] = field(default_factory=list)
    # Maintainer scripts: Debian script name ("postinst", "prerm", "postrm", "preinst") ->
    # template name under templates/scripts/ (e.g. "ldconfig.j2"); render.py turns them
    # into text, and each format's writer maps the names to its own script slots.
    scripts: dict[str, str] = field(default_factory=dict)
    files: list[FileEntry] = field(default_factory=list)
    # Install prefix of the release (/opt/rocm/core-7.1), for maintainer scripts; a package
    # without files (meta) has no other way to know it. "" = longest common dir of files.
    prefix: str = ""
    # The release's build variant ("asan"), "" for the normal build
    variant: str = ""
    # The links this package's scripts manage with update-alternatives (the release's links,
    # rocpkg.plan.layout.alternatives: every package of the release with files, and its links
    # package), at this priority (the newest release wins)
    links: list[Alternative] = field(default_factory=list)
    link_priority: int = 0
    # The GPU targets a device package or a per-target or family meta-package is built for
    # (bare, lower-case: ("gfx1100",)), written where the format's metadata can be
    # queried for them (Format.target_provides, a .deb's X-ROCm-Built-For); () for others.
    built_for: tuple[str, ...] = ()
    # The lines of a `shlibs` control file (`libfoo 1 pkg (>= 7.1.0)`), one per shared library
    # with a SONAME it ships, for a format that has one (Format.library_metadata fills them);
    # [] writes no such file.
    shlibs: list[str] = field(default_factory=list)
    # Further control fields, (name, value) in order, after Description, for a format whose
    # metadata takes them (a dbgsym's Auto-Built-Package and Build-Ids, Format.finish_debug);
    # the others ignore them.
    deb_fields: list[tuple[str, str]] = field(default_factory=list)

    @property
    def evr(self) -> str:
        """[epoch:]version-release: what the format's version field and pins write."""
        base = f"{self.version}-{self.release}"
        return f"{self.epoch}:{base}" if self.epoch else base

    @property
    def payload_size(self) -> int:
        return sum(f.size for f in self.files if f.type == FILE)


@dataclass
class BuildOptions:
    """How writers encode (not what): shared by every format's writer."""

    source_date_epoch: int = 0          # mtimes are clamped to this; changelog dated from it
    compression: str = "zstd"           # "zstd" | "xz" | "gzip"
    compression_level: int = 3          # zstd 1-19; xz 0-9; gzip 1-9
    threads: int = 0                    # compressor threads; 0 = all cores


@dataclass
class BuiltPackage:
    """What a writer returns: enough for manifest.json and the repository indexers."""

    spec: PackageSpec
    path: str                   # final path of the written file
    size: int
    sha256: str
    installed_size: int = 0     # bytes of payload
    metadata: str = ""          # the rendered metadata (Format.metadata_suffix), for OUT/control
    # (source, size, mtime_ns, inode) of each source file, as found before a byte of it was
    # read (formats.filelist.PackageSources): the build's fingerprint records them
    sources: tuple = ()
