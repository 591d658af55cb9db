"""DNF repository metadata: OUT/rpm/<arch>/*.rpm -> OUT/rpm/repodata/ (primary,
filelists, other as `<sha256>-<kind>.xml.gz`, repomd.xml, repomd.xml.asc and the
armored public key repomd.xml.key, where zypper looks for it).

createrepo_c's model: one dumper per metadata kind, each a streaming XML writer over a
counting, hashing gzip stream, so every checksum and size in repomd.xml is known the
moment a file is written and nothing is read back. What goes into each kind follows
createrepo_c (the tests compare against it). Like the APT side, the whole tree is the
truth (a publish lists every RPM present), an RPM that replaces a published one with
other bytes is refused, and new metadata is written beside the old, repomd.xml last.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import time
import xml.etree.ElementTree as ET
from contextlib import closing
from dataclasses import dataclass
from xml.sax.saxutils import XMLGenerator

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.indexes import Rehash
from rocpkg.formats.rpm import RpmPackageRecord, package_from_header, read_rpm, split_evr
from rocpkg.formats.rpm.record import DEPENDENCY_TAGS
from rocpkg.formats.rpm.relations import FLAG_NAMES, PRE_FLAGS
from rocpkg.formats.rpm.header_signing import SignedCopy, sign_copies
from rocpkg.formats.sign import ARMORED_KEY_NAME, Signer
from rocpkg.formats.streams import AtomicOutput, HashingWriter, make_dirs, remove_file, touching
from rocpkg.formats.urls import source_url

NS_COMMON = "http://linux.duke.edu/metadata/common"
NS_RPM = "http://linux.duke.edu/metadata/rpm"
NS_FILELISTS = "http://linux.duke.edu/metadata/filelists"
NS_OTHER = "http://linux.duke.edu/metadata/other"
NS_REPO = "http://linux.duke.edu/metadata/repo"

# zypper fetches the repository's key from here (and imports it with --gpg-auto-import-keys)
REPOMD_KEY_NAME = "repomd.xml.key"

CHANGELOG_LIMIT = 10        # createrepo_c's default --changelog-limit

# XML 1.0 cannot carry these at all, escaped or not.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def publish_dnf(out_dir: str | os.PathLike, *, signer: Signer | None = None,
                source_date_epoch: int | None = None, sign_packages: bool = False, digests=None,
                change=None, rewritten: dict | None = None) -> list[str]:
    """Index every OUT/rpm/**/*.rpm into OUT/rpm/repodata; with a signer, sign
    repomd.xml (and, with sign_packages, each RPM's header not signed yet, in place, before
    indexing: RPMs signed at build time are not read beyond their headers).

    Returns the paths written. Raises RocpkgInputError for unreadable RPMs and for a
    package already published with different bytes (all such problems at once).
    source_date_epoch dates the index; the caller resolves SOURCE_DATE_EPOCH
    (rocpkg.store.dates.published_source_date_epoch), None means now. digests: the source
    of the packages' SHA-256 (sha256(path, key) -> (hex, size); save() once the metadata is
    written), None to hash every package. change: the journaled change of OUT the
    re-index runs in (keep(path) before a package is replaced by its signed copy), or None.
    rewritten: a dict given the (size, sha256) of each package signed in place, by its path
    relative to OUT.
    """
    if signer is not None:
        signer.check()              # an unusable key fails here, before any work
    rpm_root = os.path.join(os.fspath(out_dir), "rpm")
    repodata = os.path.join(rpm_root, "repodata")
    when = int(time.time()) if source_date_epoch is None else int(source_date_epoch)
    previous = _published_metadata(repodata)
    published = _published_packages(repodata, previous)

    written: list[str] = []
    files = _rpm_files(rpm_root)
    headers = _read_headers(rpm_root, files)    # each once (a package signed here again after)
    signed: dict[str, SignedCopy] = {}
    unsigned = [os.path.join(rpm_root, rel) for rel, record in headers.items() if not record.header_signed]
    if sign_packages and signer is not None and unsigned:   # signed at build time: none to read here
        signed = _sign_packages(unsigned, signer, published, change)
        written += sorted(signed)
        if rewritten is not None:
            rewritten.update({os.path.relpath(path, out_dir).replace(os.sep, "/"): (copy.size, copy.sha256)
                              for path, copy in signed.items()})
        headers.update(_read_headers(rpm_root, [rel for rel in files if os.path.join(rpm_root, rel) in signed]))
    unsigned_digests = {path: copy.unsigned_sha256 for path, copy in signed.items() if copy.unsigned_sha256}
    digests = Rehash() if digests is None else digests
    packages, problems = [], []
    for rel in files:
        try:
            packages.append(_read_package(rpm_root, rel, headers[rel], source_date_epoch, digests, signed))
        except RocpkgInputError as exc:
            problems += exc.problems
    if problems:
        raise RocpkgInputError(*problems)
    _refuse_conflicts(packages, published, unsigned_digests)
    packages.sort(key=lambda p: (p.name, p.arch, p.epoch, p.version, p.release, p.href))

    records = []
    for kind, dumper in (("primary", _dump_primary), ("filelists", _dump_filelists),
                         ("other", _dump_other)):
        record = _write_metadata(repodata, kind, packages, dumper)
        record["timestamp"] = when
        records.append(record)
        written.append(os.path.join(rpm_root, record["href"]))

    repomd = _repomd_bytes(records, when)
    outputs = [("repomd.xml", repomd)]
    if signer is not None:
        outputs[:0] = [(REPOMD_KEY_NAME, signer.public_key(armored=True)),
                       ("repomd.xml.asc", signer.detached_armored(repomd))]
    for name, data in outputs:
        with AtomicOutput(os.path.join(repodata, name)) as f:
            f.write(data)
        written.append(os.path.join(repodata, name))
    if signer is None:
        for name in ("repomd.xml.asc", REPOMD_KEY_NAME):
            _unlink(os.path.join(repodata, name))
    _remove_unreferenced(repodata, keep={r["href"] for r in records} | set(previous.values()))
    if signer is not None:
        written += signer.export_public_keys(out_dir)
    digests.save()
    return written


def write_client_snippet(out_dir: str | os.PathLike, base_url: str | None = None,
                         gpgkey_url: str | None = None, repo_id: str = "rocm",
                         name: str = "ROCm packages built by rocpkg") -> str:
    """Write OUT/rocm.repo for /etc/yum.repos.d or /etc/zypp/repos.d with package and
    metadata signature checks on (dnf reads gpgcheck/repo_gpgcheck and ignores
    pkg_gpgcheck; libzypp checks package signatures of a signed repository only with
    pkg_gpgcheck). base_url is a URL or an absolute local path of the rpm/ directory
    (default file://<absolute OUT>/rpm); gpgkey_url defaults to the exported OUT/rocm.asc;
    both written as rocpkg.formats.urls.source_url makes them (or refused). Checks are on
    only when true on disk (repomd.xml.asc and the key exist), else gpgcheck=0."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    url = source_url(base_url or os.path.join(out_dir, "rpm"))
    key = source_url(gpgkey_url or os.path.join(out_dir, ARMORED_KEY_NAME))
    signed = os.path.isfile(os.path.join(out_dir, "rpm", "repodata", "repomd.xml.asc")) \
        and os.path.isfile(os.path.join(out_dir, ARMORED_KEY_NAME))
    text = repo_file_text(repo_id, name, url, key if signed else None, zypper=True)
    path = os.path.join(out_dir, f"{repo_id}.repo")
    with AtomicOutput(path) as f:
        f.write(text.encode("utf-8"))
    return path


def repo_file_text(repo_id: str, name: str, base_url: str, gpgkey_url: str | None, *, zypper: bool) -> str:
    """A .repo file's text: with a key, every signature check on (zypper: also
    pkg_gpgcheck=1, which dnf ignores); without one, checks off (an unsigned repository)."""
    if gpgkey_url is None:
        checks = "gpgcheck=0\nrepo_gpgcheck=0\n"
    else:
        checks = "gpgcheck=1\nrepo_gpgcheck=1\n" + ("pkg_gpgcheck=1\n" if zypper else "") + f"gpgkey={gpgkey_url}\n"
    return f"[{repo_id}]\nname={name}\nbaseurl={base_url}\nenabled=1\n{checks}"


# -- reading packages ---------------------------------------------------------------------

@dataclass
class _Package:
    """One RPM's header record and the facts of its file: checksum, size, location."""

    record: RpmPackageRecord
    href: str
    checksum: str
    size: int
    file_time: int

    def __getattr__(self, name: str):
        return getattr(self.record, name)   # name, arch, epoch, version, release, path...

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.epoch}:{self.version}-{self.release}.{self.arch}"


def _rpm_files(rpm_root: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(rpm_root):
        dirnames[:] = sorted(d for d in dirnames if d != "repodata")
        for name in filenames:
            if name.endswith(".rpm") and not name.endswith(".src.rpm"):
                found.append(os.path.relpath(os.path.join(dirpath, name), rpm_root))
    return sorted(found)


def _read_headers(rpm_root: str, files: list[str]) -> dict[str, RpmPackageRecord]:
    """rel -> the record of the RPM's header (its payload is not read); bad input naming
    every unreadable one."""
    headers, problems = {}, []
    for rel in files:
        try:
            headers[rel] = package_from_header(read_rpm(os.path.join(rpm_root, rel)))
        except RocpkgInputError as exc:
            problems += exc.problems
    if problems:
        raise RocpkgInputError(*problems)
    return headers


def _read_package(rpm_root: str, rel: str, record: RpmPackageRecord, source_date_epoch: int | None,
                  digests, signed: dict[str, SignedCopy]) -> _Package:
    """rel's index entry from its header's record: its SHA-256 and size as signed, else from
    the digest source (which may be bad input: the file's bytes are not those recorded)."""
    path = os.path.join(rpm_root, rel)
    href = rel.replace(os.sep, "/")
    if path in signed:      # hashed as it was signed
        sha256, size = signed[path].sha256, signed[path].size
    else:
        sha256, size = digests.sha256(path, href)
    mtime = int(os.stat(path).st_mtime)
    if source_date_epoch is not None:
        mtime = min(mtime, int(source_date_epoch))
    return _Package(record=record, href=href, checksum=sha256, size=size, file_time=mtime)


def _sign_packages(paths: list[str], signer: Signer, published: dict[tuple, tuple[str, str]],
                   change=None) -> dict[str, SignedCopy]:
    """Header-sign every RPM that has no header signature yet, on all cores
    (rocpkg.formats.rpm.header_signing), each signed copy renamed over its package (a kill
    never leaves a half-signed package; the journaled change of OUT, change: its keep(path),
    keeps the unsigned one until the change is complete). Returns path -> its signed copy's
    record; a package already published carries the sha256 of its bytes before signing:
    signing a package published unsigned is no conflict."""
    signed: dict[str, SignedCopy] = {}
    with closing(sign_copies(paths, signer, unsigned_of=frozenset(published))) as copies:
        for copy in copies:
            if change is not None:
                change.keep(copy.path)
            os.replace(copy.copy, copy.path)
            signed[copy.path] = copy
    return signed


def _is_primary_file(path: str) -> bool:
    """createrepo_c's cr_is_primary(): the files dnf may resolve path requires against
    without downloading filelists."""
    return path.startswith("/etc/") or path == "/usr/lib/sendmail" or "bin/" in path


# -- what is already published ------------------------------------------------------------

def _published_metadata(repodata: str) -> dict[str, str]:
    """kind -> href (relative to rpm/) of the current repomd.xml, empty without one."""
    path = os.path.join(repodata, "repomd.xml")
    if not os.path.isfile(path):
        return {}
    hrefs = {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:       # damaged: written anew, as if there were none
        return {}
    for data in root.iter(f"{{{NS_REPO}}}data"):
        location = data.find(f"{{{NS_REPO}}}location")
        if location is not None:
            hrefs[data.get("type")] = location.get("href")
    return hrefs


def _published_packages(repodata: str, hrefs: dict[str, str]) -> dict[tuple, tuple[str, str]]:
    """(name, epoch, version, release, arch) -> (href, sha256) from the current primary."""
    published: dict[tuple, tuple[str, str]] = {}
    if "primary" not in hrefs:
        return published
    path = os.path.join(os.path.dirname(repodata), hrefs["primary"] or "")
    if not os.path.isfile(path) or ".." in (hrefs["primary"] or "").split("/") or os.path.isabs(hrefs["primary"]):
        return published
    try:
        with gzip.open(path, "rb") as f:
            for _event, elem in ET.iterparse(f):
                if elem.tag != f"{{{NS_COMMON}}}package":
                    continue
                version = elem.find(f"{{{NS_COMMON}}}version")
                key = (elem.findtext(f"{{{NS_COMMON}}}name"), int(version.get("epoch") or 0),
                       version.get("ver"), version.get("rel"), elem.findtext(f"{{{NS_COMMON}}}arch"))
                published[key] = (elem.find(f"{{{NS_COMMON}}}location").get("href"),
                                  elem.findtext(f"{{{NS_COMMON}}}checksum"))
                elem.clear()
    except (OSError, EOFError, ValueError, AttributeError, ET.ParseError):   # damaged: written anew
        return {}
    return published


def _refuse_conflicts(packages: list[_Package], published: dict[tuple, tuple[str, str]],
                      unsigned_digests: dict[str, str]) -> None:
    """Same NEVRA must mean the same bytes, in the tree and against the published
    primary; a package that differs only by the header signature just added is fine."""
    problems = []
    seen: dict[tuple, _Package] = {}
    for pkg in packages:
        key = (pkg.name, pkg.epoch, pkg.version, pkg.release, pkg.arch)
        if key in seen:
            problems.append((pkg.path, f"{pkg.nevra} is also in {seen[key].href} "
                                       f"(sha256 {seen[key].checksum}); one build per NEVRA"))
            continue
        seen[key] = pkg
        old = published.get(key)
        if old and old[1] not in (pkg.checksum, unsigned_digests.get(pkg.path)):
            problems.append((pkg.path, f"{pkg.nevra} has sha256 {pkg.checksum} but the published "
                                       f"{old[0]} has sha256 {old[1]}; refusing to replace a "
                                       f"published package (bump the version or release)"))
    if problems:
        raise RocpkgInputError(*problems)


# -- metadata writers ---------------------------------------------------------------------

class _Xml:
    """Thin streaming XML writer: proper escaping (XMLGenerator), readable indentation,
    characters XML cannot carry dropped."""

    def __init__(self, sink):
        self.out = XMLGenerator(sink, encoding="UTF-8", short_empty_elements=True)
        self.out.startDocument()

    def newline(self, depth: int) -> None:
        self.out.ignorableWhitespace("\n" + "  " * depth)

    def start(self, name: str, attrs: dict | None = None) -> None:
        self.out.startElement(name, {k: _clean(str(v)) for k, v in (attrs or {}).items()
                                     if v is not None})

    def end(self, name: str) -> None:
        self.out.endElement(name)

    def element(self, name: str, text: str | None = None, attrs: dict | None = None) -> None:
        self.start(name, attrs)
        if text:
            self.out.characters(_clean(text))
        self.end(name)


class _RawSink(io.RawIOBase):
    """Lets io.BufferedWriter gather the XML writer's many small writes into large
    ones before they reach the hashing and gzip layers."""

    def __init__(self, sink):
        self.sink = sink

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return self.sink.write(bytes(data))


def _clean(text: str) -> str:
    return _XML_INVALID.sub("", text)


def _write_metadata(repodata: str, kind: str, packages: list[_Package], dumper) -> dict:
    """Stream one metadata kind through gzip (mtime 0) into a temporary file, counting
    and hashing both sides, then rename it to `<sha256>-<kind>.xml.gz`."""
    make_dirs(repodata)
    tmp = os.path.join(repodata, f".{kind}.xml.gz.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as raw:
            packed = HashingWriter(raw)
            with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
                opened = HashingWriter(gz)
                buffered = io.BufferedWriter(_RawSink(opened), buffer_size=1 << 16)
                dumper(_Xml(buffered), packages)
                buffered.flush()
        name = f"{packed.hexdigest()}-{kind}.xml.gz"
        touching(os.path.join(repodata, name))
        os.replace(tmp, os.path.join(repodata, name))
    except BaseException:
        _unlink(tmp)
        raise
    return {"type": kind, "href": f"repodata/{name}", "checksum": packed.hexdigest(),
            "size": packed.count, "open-checksum": opened.hexdigest(), "open-size": opened.count}


def _version_attrs(pkg: _Package) -> dict:
    return {"epoch": str(pkg.epoch), "ver": pkg.version, "rel": pkg.release}


def _dump_primary(xml: _Xml, packages: list[_Package]) -> None:
    xml.start("metadata", {"xmlns": NS_COMMON, "xmlns:rpm": NS_RPM, "packages": str(len(packages))})
    for pkg in packages:
        r = pkg.record
        xml.newline(0)
        xml.start("package", {"type": "rpm"})
        for name, text, attrs in (
                ("name", pkg.name, None), ("arch", pkg.arch, None),
                ("version", None, _version_attrs(pkg)),
                ("checksum", pkg.checksum, {"type": "sha256", "pkgid": "YES"}),
                ("summary", r.summary, None), ("description", r.description, None),
                ("packager", r.packager, None), ("url", r.url, None),
                ("time", None, {"file": pkg.file_time, "build": r.build_time}),
                ("size", None, {"package": pkg.size, "installed": r.installed_size,
                                "archive": r.archive_size}),
                ("location", None, {"href": pkg.href})):
            xml.newline(1)
            xml.element(name, text, attrs)
        xml.newline(1)
        xml.start("format")
        for name, text in (("rpm:license", r.license), ("rpm:vendor", r.vendor), ("rpm:group", r.group),
                           ("rpm:buildhost", r.buildhost), ("rpm:sourcerpm", r.sourcerpm)):
            xml.newline(2)
            xml.element(name, text)
        xml.newline(2)
        xml.element("rpm:header-range", None, {"start": r.header_start, "end": r.header_end})
        for kind, entries in _primary_dependencies(r):
            xml.newline(2)
            xml.start(f"rpm:{kind}")
            for attrs in entries:
                xml.newline(3)
                xml.element("rpm:entry", None, attrs)
            xml.newline(2)
            xml.end(f"rpm:{kind}")
        for f in r.files:
            if _is_primary_file(f.path):
                xml.newline(2)
                xml.element("file", f.path, {"type": f.kind or None})
        xml.newline(1)
        xml.end("format")
        xml.newline(0)
        xml.end("package")
    xml.newline(0)
    xml.end("metadata")
    xml.out.ignorableWhitespace("\n")


def _primary_dependencies(record: RpmPackageRecord):
    """(kind, [entry attrs]) per non-empty dependency kind, filtered as createrepo_c does:
    no rpmlib() requires, no requires on the package's own primary files, no repeats."""
    files = {f.path for f in record.files}
    for kind in DEPENDENCY_TAGS:
        entries, seen = [], set()
        for name, flags, evr in record.dependencies[kind]:
            pre = None
            if kind == "requires":
                if name.startswith("rpmlib("):
                    continue
                if name.startswith("/") and name in files and _is_primary_file(name):
                    continue
                if flags & PRE_FLAGS:
                    pre = "1"
            epoch, version, release = split_evr(evr)
            attrs = {"name": name, "flags": FLAG_NAMES.get(flags & 0xF),
                     "epoch": epoch, "ver": version, "rel": release, "pre": pre}
            key = tuple(attrs.values())
            if key in seen:
                continue
            seen.add(key)
            entries.append(attrs)
        if entries:
            yield kind, entries


def _dump_filelists(xml: _Xml, packages: list[_Package]) -> None:
    xml.start("filelists", {"xmlns": NS_FILELISTS, "packages": str(len(packages))})
    for pkg in packages:
        xml.newline(0)
        xml.start("package", {"pkgid": pkg.checksum, "name": pkg.name, "arch": pkg.arch})
        xml.newline(1)
        xml.element("version", None, _version_attrs(pkg))
        for f in pkg.record.files:
            xml.newline(1)
            xml.element("file", f.path, {"type": f.kind or None})
        xml.newline(0)
        xml.end("package")
    xml.newline(0)
    xml.end("filelists")
    xml.out.ignorableWhitespace("\n")


def _dump_other(xml: _Xml, packages: list[_Package]) -> None:
    xml.start("otherdata", {"xmlns": NS_OTHER, "packages": str(len(packages))})
    for pkg in packages:
        xml.newline(0)
        xml.start("package", {"pkgid": pkg.checksum, "name": pkg.name, "arch": pkg.arch})
        xml.newline(1)
        xml.element("version", None, _version_attrs(pkg))
        entries = pkg.record.changelog[:CHANGELOG_LIMIT]
        for when, author, text in reversed(entries):     # oldest first, as createrepo_c
            xml.newline(1)
            xml.element("changelog", text, {"author": author, "date": when})
        xml.newline(0)
        xml.end("package")
    xml.newline(0)
    xml.end("otherdata")
    xml.out.ignorableWhitespace("\n")


def _repomd_bytes(records: list[dict], revision: int) -> bytes:
    root = ET.Element("repomd", {"xmlns": NS_REPO, "xmlns:rpm": NS_RPM})
    ET.SubElement(root, "revision").text = str(revision)
    for record in records:
        data = ET.SubElement(root, "data", {"type": record["type"]})
        ET.SubElement(data, "checksum", {"type": "sha256"}).text = record["checksum"]
        ET.SubElement(data, "open-checksum", {"type": "sha256"}).text = record["open-checksum"]
        ET.SubElement(data, "location", {"href": record["href"]})
        ET.SubElement(data, "timestamp").text = str(record["timestamp"])
        ET.SubElement(data, "size").text = str(record["size"])
        ET.SubElement(data, "open-size").text = str(record["open-size"])
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


# -- small helpers ------------------------------------------------------------------------

def _remove_unreferenced(repodata: str, keep: set[str]) -> None:
    """Drop metadata files neither the new nor the previous repomd.xml names: readers
    that fetched the previous repomd.xml can still fetch what it lists."""
    keep_names = {os.path.basename(href) for href in keep if href}
    for name in os.listdir(repodata):
        if name.endswith(".xml.gz") and name not in keep_names:
            _unlink(os.path.join(repodata, name))


def _unlink(path: str) -> None:
    remove_file(path)
