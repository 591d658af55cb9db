"""A built OUT tree read back into the per-format view (rocpkg.verify.view): names, relations
and files from each package's metadata, markers and archives from one streamed pass over
its payload, each read by its format's Reader (rocpkg.formats.plugin.Reader). Reading
never loads a package and writes nothing: the payload streams by the inspector once; of a
host ELF only its first HEAD_WINDOW and last TAIL_WINDOW bytes are kept in memory to read
its marker section from (a marker elsewhere in a larger file is reported unreadable, never
spilled to disk); of a kpack archive only its header and TOC are kept.

A package is as hostile as any input: one with more than MAX_ENTRIES payload entries, or
whose payload takes longer than MAX_SECONDS to read, is reported unreadable."""
from __future__ import annotations

import io
import os
import struct
import time

from kpack import targets as kt
from kpack.archive import KpackReader
from kpack.errors import KpackFormatError
from kpack import elfread
from kpack.marker import Marker, marker_in_sections
from rocpkg import model as m
from rocpkg.inputs.facts import ArchiveToc
from rocpkg.inputs.config import common_namespace, external_rule
from rocpkg.errors import RocpkgInputError
from rocpkg.formats import registry
from rocpkg.formats.parallel import file_size, spread
from rocpkg.formats.reading import why
from rocpkg.store.outdir import STAGING_DIR
from rocpkg.store.files import check_tree
from rocpkg.formats.streams import read_exact, read_upto, skip_exact
from rocpkg.verify.view import Problem, ReleaseView, looks_host_elf, payload

KPACK_HEAD = 68                 # header, zeros to 64, and the zstd frame count at 64
MAX_TOC = 256 << 20             # a TOC larger than this is refused, not read into memory
HEAD_WINDOW = 4 << 20           # of a host ELF: its start (headers, program headers) ...
TAIL_WINDOW = 32 << 20          # ... and its end (section table, names, the marker a tool appends)
MAX_ENTRIES = 250_000           # payload entries of one package (TheRock's largest: tens of thousands)
MAX_SECONDS = 600               # to stream one package's payload


def reader_of(fmt: str):
    """The registered format's Reader (rocpkg.formats.plugin.Reader)."""
    form = registry.get(fmt)
    return form.load(form.reader)


def read_tree_release(fmt: str, paths: list[str], jobs: int | None = None) -> ReleaseView:
    """One format's packages: metadata first (cheap, decides host and device packages),
    then one streamed pass over each payload; nothing is written to disk. Both run on
    `jobs` processes (rocpkg.formats.parallel.spread: the view is the same for any number)."""
    reader = reader_of(fmt)
    specs: dict[str, m.PackageSpec] = {}
    files_of: dict[str, str] = {}
    release = ReleaseView(fmt, specs, lambda name: False, {f: list(t) for f, t in kt.FAMILIES.items()})
    for path, spec, error in spread(_read_meta, [(fmt, path) for path in paths], jobs):
        if error is not None:
            release.problem("unreadable", os.path.basename(path), path, "", error)
        elif spec.name in specs:
            release.problem("duplicate-package", spec.name, path, "",
                            f"a second package of this name (besides {os.path.basename(files_of[spec.name])}): "
                            f"verify checks one release")
        else:
            specs[spec.name] = spec
            files_of[spec.name] = path
    release.is_external = external_rule(common_namespace(specs))
    _classify_tree(release, reader)
    names = list(specs)
    inspectors = spread(_read_payload, [(fmt, specs[name], files_of[name]) for name in names], jobs,
                        size=lambda item: file_size(item[2]))
    for name, inspector in zip(names, inspectors):
        if inspector.listing is not None:
            specs[name].files = inspector.listing
        release.markers.update(inspector.markers)
        release.archives.update(inspector.archives)
        release.linkage.update(inspector.linkage)
        release.problems.extend(inspector.problems)
    _kinds_after_payload(release, reader)
    return release


def package_files(out_dir: str) -> dict[str, list[str]]:
    """Each registered format's package files under OUT/<format>/ (its Reader's listing),
    after OUT's trees are checked to hold no symlink and no special file
    (outfiles.check_tree): what is listed is read safely."""
    check_tree(out_dir, discarded=(STAGING_DIR,))
    return {fmt: reader_of(fmt).package_files(os.path.join(out_dir, fmt)) for fmt in registry.NAMES}


def _read_meta(fmt: str, path: str):
    """(path, spec, None), or (path, None, why it is unreadable)."""
    try:
        return path, reader_of(fmt).read_meta(path), None
    except RocpkgInputError as exc:
        return path, None, why(exc)


def _read_payload(fmt: str, spec: m.PackageSpec, package_file: str) -> "_Inspector":
    """One pass over the payload: the inspector's look at each entry, and the listing
    when the payload is it (Reader.files_in_metadata false)."""
    reader = reader_of(fmt)
    inspector = _Inspector(spec, listing=not reader.files_in_metadata)
    try:
        reader.read_payload(package_file, spec, inspector)
    except RocpkgInputError as exc:
        inspector.problems.append(Problem("unreadable", spec.name, package_file, "-", why(exc), spec.format))
    return inspector


def _target_suffix(name: str) -> str:
    """The bare target a package name ends with (`rocm-blas7.1-gfx942` -> gfx942), or ""."""
    tail = name.rsplit("-", 1)[-1]
    try:
        tid = kt.parse_target(tail)
    except kt.InvalidTargetError:
        return ""
    return tid.processor if tid.processor in kt.MACH_BY_PROCESSOR and not tid.features else ""


def _family_suffix(name: str, families: dict[str, list[str]]) -> str:
    tail = name.rsplit("-", 1)[-1].lower()
    return next((f for f in families if f.lower() == tail and not _target_suffix(name)), "")


def _pins(spec: m.PackageSpec, reader) -> set[str]:
    """Packages this one depends on at exactly its own version (the format's Reader.pinned)."""
    pinned = set()
    for rel in spec.depends + spec.pre_depends:
        pin = reader.pinned(rel)
        if pin is not None and pin[1] == spec.evr:
            pinned.add(pin[0])
    return pinned


def _classify_tree(release: ReleaseView, reader) -> None:
    """Host and device packages from the relations alone (see verify_tree)."""
    specs = release.specs
    pins = {name: _pins(spec, reader) for name, spec in specs.items()}
    pinned_by: dict[str, set[str]] = {}
    for name, pinned in pins.items():
        for dep in pinned:
            pinned_by.setdefault(dep, set()).add(name)
    for name, spec in specs.items():
        target = _target_suffix(name)
        if not target:
            continue
        for host in sorted(pins[name]):
            if host not in specs or _target_suffix(host):
                continue
            if any(name in pins[meta] for meta in pinned_by.get(host, ()) if meta != name):
                spec.kind, spec.target, spec.definition = m.KIND_DEVICE, target, host
                specs[host].kind, specs[host].definition = m.KIND_HOST, host
                break


def _kinds_after_payload(release: ReleaseView, reader) -> None:
    """Files, meta, family and alias packages once the payload listing is known; a package
    named for a target that ships files but belongs to no host is reported. A "host" that
    ships no file (a release's links package, pinned by every per-target meta-package
    and by the all-target one, looks like one from the relations) is no host: its
    "devices" are per-target meta-packages."""
    empty_hosts = {n for n, s in release.specs.items() if s.kind == m.KIND_HOST and not payload(s)}
    for spec in release.specs.values():
        if spec.definition in empty_hosts and spec.kind in (m.KIND_HOST, m.KIND_DEVICE):
            spec.kind, spec.definition = "", ""
    for name, spec in release.specs.items():
        if spec.kind in (m.KIND_HOST, m.KIND_DEVICE):
            continue
        has_files = bool(payload(spec))
        spec.kind = m.KIND_FILES if has_files else m.KIND_META
        spec.target = _target_suffix(name)
        spec.family = "" if spec.target else _family_suffix(name, release.families)
        if has_files and spec.target:
            release.problem("device-host", name, "", spec.target,
                            "ships files for a target but pins no host package at its own version "
                            "(is it a device package that lost its host dependency?)")
    for spec in release.specs.values():
        # an alias pins the family meta of its family (rocm-gfx110x -> rocm7.1-gfx110x)
        if spec.kind == m.KIND_META and spec.family and any(
                release.specs[dep].family == spec.family for dep in _pins(spec, reader) if dep in release.specs):
            spec.kind = m.KIND_ALIAS


class _SparseImage(io.RawIOBase):
    """A kpack archive's header and TOC at their offsets, zeros elsewhere: all that
    KpackReader reads to list target IDs and kernel keys."""

    def __init__(self, name: str, size: int, pieces: list[tuple[int, bytes]], strict: bool = False):
        self.name = name
        self.size = size
        self.pieces = pieces
        self.strict = strict    # reading a byte no piece holds is an error, not a zero
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.size, self.pos + n)
        out = bytearray(max(0, end - self.pos))
        held = 0
        for start, data in self.pieces:
            lo, hi = max(start, self.pos), min(start + len(data), end)
            if lo < hi:
                out[lo - self.pos: hi - self.pos] = data[lo - start: hi - start]
                held += hi - lo
        if self.strict and held < len(out):
            raise KpackFormatError(f"bytes [{self.pos}, {end}) lie outside the first {HEAD_WINDOW} and last "
                                   f"{TAIL_WINDOW} bytes of a {self.size}-byte ELF that verify reads")
        self.pos = end
        return bytes(out)


class _Inspector:
    """The payload visitor (rocpkg.formats.plugin.PayloadVisitor): looks at each payload
    member once, as it streams by: kpack archives keep their header and TOC, host ELF
    files their head and tail windows, to read their marker. With `listing`, it keeps
    every entry visited: the package's files, as far as its payload could be read."""

    def __init__(self, spec: m.PackageSpec, listing: bool = False):
        self.spec = spec
        self.deadline = time.monotonic() + MAX_SECONDS
        self.entries = 0
        self.listing: list[m.FileEntry] | None = [] if listing else None
        self.markers: dict[tuple[str, str], Marker] = {}
        self.archives: dict[tuple[str, str], ArchiveToc] = {}
        self.linkage: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}   # (SONAME, DT_NEEDED)
        self.problems: list[Problem] = []

    def wants(self, path: str) -> bool:
        return path.endswith(".kpack") or (self.spec.kind != m.KIND_DEVICE
                                           and not path.startswith(f"/usr/share/doc/{self.spec.name}/"))

    def count(self) -> None:
        """One more payload entry: past MAX_ENTRIES or MAX_SECONDS the package is unreadable."""
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            raise ValueError(f"more than {MAX_ENTRIES} entries, more than verify reads of one package")
        if time.monotonic() > self.deadline:
            raise ValueError(f"reading its payload took more than {MAX_SECONDS} s")

    def visit(self, entry: m.FileEntry, stream) -> None:
        self.count()
        if self.listing is not None:
            self.listing.append(entry)
        if stream is not None:
            self.member(entry.path, entry.size, stream)

    def member(self, path: str, size: int, stream) -> None:
        try:
            if path.endswith(".kpack"):
                self.archives[(self.spec.name, path)] = self._archive(path, size, stream)
            elif self.spec.kind != m.KIND_DEVICE:
                image = self._host_image(path, size, stream)
                if image is not None:
                    try:        # the section table, read once for the marker and the linkage
                        found = elfread.sections(image, size)
                    except KpackFormatError as exc:
                        raise exc.with_path(path)
                    linkage = _linkage(image, found, size)
                    if linkage is not None:
                        self.linkage[(self.spec.name, path)] = linkage
                    marker = marker_in_sections(image, found, size, path)
                    if marker is not None:
                        self.markers[(self.spec.name, path)] = marker
        except KpackFormatError as exc:
            self.problems.append(Problem("unreadable", self.spec.name, path, "-", str(exc), self.spec.format))

    def _archive(self, path: str, size: int, stream) -> ArchiveToc:
        head = read_upto(stream, min(size, KPACK_HEAD))
        pieces = [(0, head)]
        if len(head) >= 16 and head[:4] == b"KPAK":
            (toc_offset,) = struct.unpack_from("<Q", head, 8)
            if len(head) <= toc_offset < size:
                if size - toc_offset > MAX_TOC:
                    raise KpackFormatError(f"TOC of {size - toc_offset} bytes is larger than verify reads")
                skip_exact(stream, toc_offset - len(head))
                pieces.append((toc_offset, read_exact(stream, size - toc_offset)))
        with KpackReader(_SparseImage(path, size, pieces)) as reader:
            return ArchiveToc.from_entries(reader.gfx_arches, reader.entries())

    def _host_image(self, path: str, size: int, stream) -> "_SparseImage | None":
        """A host ELF's head and tail windows (None for any other file)."""
        head = read_upto(stream, min(size, 64))
        if not looks_host_elf(head):
            return None
        head += read_upto(stream, min(size, HEAD_WINDOW) - len(head))
        pieces = [(0, head)]
        if size > len(head):
            tail_at = max(len(head), size - TAIL_WINDOW)
            skip_exact(stream, tail_at - len(head))
            pieces.append((tail_at, read_exact(stream, size - tail_at)))
        return _SparseImage(path, size, pieces, strict=True)


def _linkage(image, found: list, size: int) -> tuple[str, tuple[str, ...]] | None:
    """(SONAME, DT_NEEDED) of a host ELF read through its windows, its section table
    `found`; None when the dynamic table lies outside them or does not parse (the plan's
    missing-library check read the whole file)."""
    try:
        names = elfread.dynamic_names(image, found, size)
    except KpackFormatError:
        return None
    soname = next((name for tag, name in names if tag == elfread.DT_SONAME), "")
    return soname, tuple(name for tag, name in names if tag == elfread.DT_NEEDED)
