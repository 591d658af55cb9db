"""What the rest of rocpkg asks of a package format: the Format interface.

Each format is a folder under formats/ whose `plugin.py` builds one Format and nothing
else; rocpkg.formats.registry lists them once. Everything outside formats/ that differs by
format reads it from here (a name rule, a relation's syntax, the pool a package lies in,
the module that writes or indexes it), so adding a format adds a folder and a line in the
registry, and no module outside formats/ branches on a format's name.

A Format is light, plain data: its heavy parts (the writer, the indexer) are named as
"module:function" and imported where they are used (`Format.load`), so that a worker
building .rpm files never loads the .deb writer.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Protocol

from rocpkg import model as m
from rocpkg.formats.versions import Order, evr
from rocpkg.formats.indexes import IndexEntry, IndexFile, PackageRef, Signature


@dataclass(frozen=True)
class Format:
    """One package format, as the planner, the builder, OUT's records, verify and the
    repository commands see it.

    name:            the `--formats` choice, PackageSpec.format, manifest.json's "format",
                     and OUT's top directory that holds the format's pool and indexes
    title:           what the format is called in messages ("Debian", "RPM")
    suffix:          a package file's suffix (".deb")
    client:          the package manager users install with ("apt")
    dialect:         which of package.json's relation sets the format's packages take
                     ("deb": DEBDepends and kin, "rpm": RPMRequires and kin)
    metadata_suffix: OUT/control/<package>.<metadata_suffix>, the rendered metadata kept for review
    pin:             (name, evr) -> the relation that pins name at exactly evr
    external:        a package.json system relation -> this format's text of it ("": the
                     format has no name for system packages package.json gives)
    arch:            (arch_independent, definition fields, settings) -> the architecture name
    file_name:       spec -> the package's file name
    pool:            spec -> the directory under OUT/<name>/ that holds the package file
    writer:          "module:function" of the writer, f(spec, out_dir, options) -> BuiltPackage,
                     with the identities of the sources it read (formats.filelist.PackageSources)
    name_rule:       a regular expression a package name must fully match
    arch_rule:       a regular expression an architecture name must fully match
    version_problem: evr -> why the format cannot carry it ("" when it can)
    relation_problem: relation -> why it is not a relation of this format ("" when it is)
    lower_devel:     `-devel` definitions become `-dev` (Debian's spelling)
    meta_section:    the section of packages that only pull in others ("" keeps the definition's)
    plain_shared_objects: shared objects lose their execute bits (Debian policy 10.9)
    case_provides:   a mixed-case family name is also provided (`dnf install rocm-gfx110X`)
    target_provides: GPU target -> what a package built for it provides, so that the
                     client finds a target's packages by it (None: the format's metadata
                     says it otherwise, or not at all)
    needs_maintainer: a package without a maintainer is refused
    libc:            the C library's package a package whose ELF files need libc.so.6
                     depends on ("" adds none)
    debug_suffix:    the debug package's suffix ("-dbgsym")
    debug_summary:   package name -> the debug package's summary
    debug_provides:  build-ids -> what the debug package provides
    library_metadata: (spec, host ELF facts, settings' exclude patterns) -> None; fills in
                     what downstream packaging tools read of the libraries a spec ships
    finish_debug:    (debug spec, its package's spec, build-ids) -> None; the debug package as
                     the format's own tools make it (None: as planned)
    package_root:    the directory under OUT/<name>/ below which every package file lies
                     ("pool"; "": anywhere in it)
    index_dirs:      directories of the tree that hold indexes, never packages ("repodata")
    sign_in_place:   "module:function" f(path, signer) -> whether it changed the file: the
                     signature a package carries inside it ("": none)
    writer_threads:  the most compressor threads one package of the format uses (0: any)
    templates:       the writer's templates (compiled once before the workers fork)
    default_build:   built when `--formats` is not given
    repository:      "module:object" of the format's Repository (below): its indexes, their
                     signatures, the client's source snippet, the setup package's files
    snippet:         the client's source snippet's file name at OUT's top ("rocm.list")
    reader:          "module:object" of the format's Reader (below): verify's read-back
    version:         (upstream version, release) -> the format's spelling of them (pacman's
                     pkgver has no `~`); a pin's evr is given unmapped, as the plan writes it
    order_tool:      whose version order the format's clients follow ("dpkg"), as messages name it
    compare:         (a, b) -> rocpkg.formats.versions.Order of two full versions
                     `[epoch:]version-release` in the format's spelling (full_version)
    install_command: the client's command line that installs one package, `{}` its name
                     ("apt install {}")
    """

    name: str
    title: str
    suffix: str
    client: str
    dialect: str
    metadata_suffix: str
    pin: Callable[[str, str], str]
    external: Callable[[str], str]
    arch: Callable[[bool, dict, dict], str]
    file_name: Callable[[m.PackageSpec], str]
    pool: Callable[[m.PackageSpec], str]
    writer: str
    name_rule: object
    arch_rule: object
    version_problem: Callable[[str], str]
    relation_problem: Callable[[str], str]
    lower_devel: bool = False
    meta_section: str = ""
    plain_shared_objects: bool = False
    case_provides: bool = False
    target_provides: Callable[[str], str] | None = None
    needs_maintainer: bool = False
    libc: str = ""
    debug_suffix: str = "-debug"
    debug_summary: Callable[[str], str] = lambda name: f"debug symbols for {name}"
    debug_provides: Callable[[list[str]], list[str]] = lambda ids: []
    library_metadata: Callable | None = None
    finish_debug: Callable | None = None
    sign_in_place: str = ""
    package_root: str = ""
    index_dirs: tuple[str, ...] = ()
    writer_threads: int = 0
    templates: tuple[str, ...] = field(default=())
    default_build: bool = True
    version: Callable[[str, str], tuple[str, str]] = lambda version, release: (version, release)
    repository: str = ""
    snippet: str = ""
    reader: str = ""
    order_tool: str = ""
    compare: Callable[[str, str], Order] | None = None
    install_command: str = ""

    def load(self, reference: str):
        """The object a "module:function" reference of this format names."""
        module, _, attr = reference.partition(":")
        return getattr(importlib.import_module(module), attr)

    def write(self, spec: m.PackageSpec, out_dir: str, options: m.BuildOptions) -> m.BuiltPackage:
        """Write one package of this format (the format's writer)."""
        return self.load(self.writer)(spec, out_dir, options)

    def full_version(self, version: str, release: str, epoch: int = 0) -> str:
        """A release's `[epoch:]version-release` in the format's spelling (what `compare`
        orders); RocpkgInputError when the format cannot spell it."""
        return evr(*self.version(version, release), epoch)

    def install_name(self, name: str) -> str:
        """The name a user installs a plan's package by: lower case (what the format's
        name rules make of a plan name) unless the format also provides the plan's
        spelling (case_provides)."""
        return name if self.case_provides else name.lower()

    @property
    def repo(self) -> "Repository":
        """The format's Repository (imported on first use)."""
        return self.load(self.repository)

    @property
    def writer_module(self) -> str:
        return self.writer.partition(":")[0]

    @property
    def writer_modules(self) -> list[str]:
        """The modules whose code decides a package's bytes: the writer's, the in-place signer's."""
        return [ref.partition(":")[0] for ref in (self.writer, self.sign_in_place) if ref]


class Repository(Protocol):
    """A format's repository: what `rocpkg repo`, prune, promote, export, publish and
    verify's integrity checks ask of the format, over OUT/<name>/ (the format's tree).
    Everything OUT-specific (the packages' recorded digests, the journal's change, hostile-safe opening
    of OUT's files) is handed in by the caller, so that the format knows nothing of OUT's
    records. Each format's implementation is formats/<name>/repository.py.

    Paths called `rel` are relative to OUT and "/"-separated; `opener` opens one of OUT's
    files for reading as OUT's own (rocpkg.formats.indexes.Opener: no symlink followed, a
    regular file, bounded); what an index read through it says that cannot be parsed is
    bad input naming it (rocpkg.formats.indexes.damaged_index)."""

    clients: str    # who the snippet and the setup package configure, as a sentence names them ("APT")

    def index(self, out_dir: str, *, suite: str, signer, source_date_epoch: int | None, digests,
              change, rewritten: dict | None = None) -> list[str]:
        """Index every package under OUT/<name>/ and, with a signer (rocpkg.formats.sign.Signer),
        sign the indexes and export the public keys to OUT's top (rocm.gpg, rocm.asc); without
        one, remove signatures an earlier run left. suite names the index (an APT suite, a
        pacman database). A package that cannot be read, or that replaces one published with
        other bytes, is bad input (every problem at once) and nothing is renamed into place.
        New files are written beside the old ones, each whole, by rename, the roots that
        name the others last. digests: where the packages' SHA-256 come from (sha256(path,
        key) -> (hex, size); save() when done; rocpkg.store.recorded for OUT: the build's
        records, a package read only where its bytes changed); change: the journaled change
        the re-index runs in (keep(path) before a package is replaced in place by a writer
        that does not go through rocpkg.formats.streams); rewritten: a dict given (size,
        sha256) by OUT-relative path of each package replaced in place (RPM headers signed),
        so that no one reads it again. Returns the paths written."""

    def write_snippet(self, out_dir: str, *, suite: str, url: str, key_url: str | None = None,
                      keyring: str | None = None) -> str:
        """Write the client's source snippet (Format.snippet) at OUT's top: url is the format's
        tree as clients reach it (rocpkg.formats.urls.source_url's rule, or refused), key_url
        the armored key's URL (default OUT's own rocm.asc), keyring the binary keyring's path
        on a client (default /usr/share/keyrings/rocm.gpg). Signature checks are on only when
        true on disk: the indexes signed and the key at OUT's top. Returns its path."""

    def summary(self, out_dir: str, suite: str) -> str:
        """The `repo` command's line for the format: the client, where its indexes are, the snippet."""

    def client_setup(self, out_dir: str, *, suite: str, snippet: str, keyring: str) -> list[str]:
        """The shell lines that make this machine install from OUT's tree of the format (the
        demo prints them): with keyring (OUT's binary key, "" when unsigned) the snippet
        and the key put in place, else a source that trusts the unsigned tree; then the
        client's refresh."""

    def indexed(self, out_dir: str) -> bool:
        """Whether the tree has an index at all (a package no index lists is then stale)."""

    def entries(self, out_dir: str, opener) -> list[IndexEntry]:
        """Every package the tree's indexes publish, with the size and SHA-256 they list."""

    def index_files(self, out_dir: str, opener) -> list[IndexFile]:
        """Every file of the tree its indexes consist of: the roots, their signatures and
        keys (no owner), and the files a root lists, with what it lists of each."""

    def signatures(self, out_dir: str) -> list[Signature]:
        """The signatures a signed repository has over its indexes, present or not (a missing
        one is a problem under verify --keyring); [] when the tree has no index."""

    def named_by_digest(self, rel: str) -> tuple[str, str] | None:
        """(hash algorithm, hex digest) when rel is an older generation of an index that is
        named by the digest of its bytes (APT's by-hash, DNF's <sha256>-primary.xml.gz); else None."""

    def publish_stage(self, rel: str) -> tuple[int, int]:
        """Where a file of the tree goes in publish's upload order: (0) named by its content
        (packages, by-hash copies), (1) other indexes, (2) the roots, last; and its rank
        among the roots (a detached signature before what it signs, what a client reads first last)."""

    def stale(self, unlisted: list[PackageRef], listed: list[IndexEntry]) -> list[PackageRef]:
        """Of the packages in the tree no index lists, those the indexes should list (an
        index that holds one version per name leaves the older ones out)."""

    def setup_files(self, top: str, *, url: str, suite: str, signer) -> dict[str, bytes]:
        """Install path -> bytes of the files the setup package `<top>-repo` ships: the
        client's source naming url (the format's tree) and the signing key; {} when the
        format has no setup package."""

    def setup_package(self, path: str) -> tuple[str, str, str]:
        """(name, upstream version, description) of a package file of this format: the setup
        package's own fields, read back to tell whether it needs writing anew."""


class PayloadVisitor(Protocol):
    """What a Reader hands a package's payload to, entry by entry, as it streams by
    (verify's inspector: markers, kpack archives, linkage). The reader knows nothing of
    what it looks for; the visitor knows nothing of the format."""

    def wants(self, path: str) -> bool:
        """Whether visit() takes the bytes of the regular file at this install path. A
        reader may skip a payload none of whose listed regular files is wanted."""

    def visit(self, entry: m.FileEntry, stream: BinaryIO | None) -> None:
        """One payload entry, in payload order: entry.path the absolute install path (no
        trailing slash, never "/"), entry.type FILE, DIR, SYMLINK or "other", entry.mode
        the permission bits, entry.size a regular file's size, entry.link_target a
        symlink's target. stream: a regular file's bytes when wants(entry.path), else None;
        the visitor reads what it needs and the reader skips the rest. A ValueError the
        visitor raises (too many entries, too long) stops the read: the reader raises
        RocpkgInputError saying so."""


class Reader(Protocol):
    """A format's read-back for verify: the package files of the format's tree, a package
    file's metadata as a PackageSpec, one streamed pass over its payload, and the exact
    version a relation pins. Reading never loads a whole package into memory and writes
    nothing. Bad input (a damaged or hostile package) raises RocpkgInputError, whose
    `what`s say why the package is unreadable. Each format's implementation is
    formats/<name>/reader.py (Format.reader)."""

    files_in_metadata: bool
    """True: read_meta's spec lists the package's files (rpm's header); False: the
    payload's entries, as read_payload hands them to the visitor, are its listing."""

    def package_files(self, tree: str) -> list[str]:
        """The package files of the format's tree OUT/<name>/ (already checked to hold no
        symlink and no special file), in a stable order; [] when the tree is absent."""

    def read_meta(self, path: str) -> m.PackageSpec:
        """A package's metadata: a PackageSpec of this format with its name, version,
        release, epoch and arch, and its relations (depends, pre_depends, recommends,
        suggests, provides, conflicts, replaces, breaks, obsoletes, where the format has
        them) in the format's syntax, without the package manager's own features
        (rpmlib()); files when files_in_metadata, else []. kind, target and definition
        are left for the caller."""

    def read_payload(self, path: str, spec: m.PackageSpec, visitor: PayloadVisitor) -> None:
        """One streamed pass over the payload of the package read_meta read as `spec`:
        each entry to visitor.visit(), in payload order. Where the format's metadata
        records the payload's contents (pacman's .MTREE), the payload is checked against
        it after the pass."""

    def pinned(self, relation: str) -> tuple[str, str] | None:
        """(name, evr) when a relation in the format's syntax pins a package at exactly
        one [epoch:]version-release (the inverse of Format.pin), else None."""
