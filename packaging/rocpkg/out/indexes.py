"""What OUT's published indexes say: the packages APT's Release -> Packages and DNF's
repomd.xml -> primary list, each with its size and SHA-256, and the package files OUT
holds. Read by the integrity check and by build's pre-write check (releases).

The indexes are OUT's own files read back, as hostile as any input: opened as
rocpkg.out.files opens them (no symlink, a regular file, bounded), and a damaged one (not
UTF-8, not XML, a size that is not a number, a truncated gzip) is bad input naming the
index and what is wrong, never a traceback. `rocpkg repo` writes them anew."""
from __future__ import annotations

import contextlib
import gzip
import io
import os
from dataclasses import dataclass

from rocpkg.formats.registry import REGISTERED
from rocpkg.errors import RocpkgInputError
from rocpkg.out.files import INDEX_LIMIT, open_file

NS_COMMON = "{http://linux.duke.edu/metadata/common}"
NS_REPO = "{http://linux.duke.edu/metadata/repo}"
FORMAT_ROOTS = {"deb": "deb", "rpm": "rpm"}


@dataclass(frozen=True)
class PackageRef:
    """One package by name-version-release-architecture, and its file."""

    format: str
    name: str
    version: str
    release: str
    arch: str
    file: str           # relative to OUT


@dataclass(frozen=True)
class IndexEntry(PackageRef):
    """One package as an index publishes it."""

    index: str = ""     # the index file, relative to OUT
    size: int = -1
    sha256: str = ""


# -- reading the indexes -------------------------------------------------------------------

def apt_suites(out_dir: str) -> list[str]:
    """OUT/deb/dists/<suite> directories that hold a Release file."""
    dists = os.path.join(out_dir, "deb", "dists")
    if not os.path.isdir(dists):
        return []
    return sorted(os.path.join(dists, s) for s in os.listdir(dists)
                  if os.path.isfile(os.path.join(dists, s, "Release")))


@contextlib.contextmanager
def damaged_index(path: str):
    """What goes wrong reading an index becomes bad input naming it."""
    import xml.etree.ElementTree as ET

    try:
        yield
    except FileNotFoundError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, EOFError, OSError, ET.ParseError) as exc:
        raise RocpkgInputError((path, f"damaged index ({type(exc).__name__}: {exc}): run `rocpkg repo` "
                                      f"to write it anew")) from None


def _index_text(root: str, rel: str):
    """An index opened as text (UTF-8, strict), read as OUT's own files are."""
    return io.TextIOWrapper(open_file(root, rel, INDEX_LIMIT), encoding="utf-8")


def release_files(suite_dir: str) -> dict[str, tuple[int, str]]:
    """name relative to the suite -> (size, sha256) as Release lists it."""
    from debian import deb822   # here: a build's first write need not wait for its import

    with damaged_index(os.path.join(suite_dir, "Release")), _index_text(suite_dir, "Release") as fh:
        release = deb822.Release(fh)
        return {f["name"]: (int(f["size"]), f["sha256"]) for f in release.get("SHA256", [])}


def apt_index_entries(out_dir: str | os.PathLike) -> list[IndexEntry]:
    """Every package every APT suite's Packages lists."""
    out_dir = os.fspath(out_dir)
    paths = [os.path.join(suite_dir, name) for suite_dir in apt_suites(out_dir)
             for name in sorted(release_files(suite_dir)) if name.endswith("/Packages")]
    paths = [path for path in paths if os.path.isfile(path)]
    if not paths:
        return []   # a new OUT: no deb822 to import on the way to the first write
    from debian import deb822

    entries = []
    for path in paths:
        index = os.path.relpath(path, out_dir)
        with damaged_index(path), _index_text(out_dir, index.replace(os.sep, "/")) as fh:
            for stanza in deb822.Packages.iter_paragraphs(fh, use_apt_pkg=False):
                version, _, release = stanza.get("Version", "").rpartition("-")
                if not version:
                    version, release = stanza.get("Version", ""), ""
                entries.append(IndexEntry("deb", stanza.get("Package", ""), version, release,
                                          stanza.get("Architecture", ""), "deb/" + stanza.get("Filename", ""),
                                          index, int(stanza.get("Size", -1)), stanza.get("SHA256", "")))
    return entries


def repomd_records(out_dir: str) -> dict[str, dict]:
    """kind -> {href, checksum, size, open-checksum} from OUT/rpm/repodata/repomd.xml."""
    path = os.path.join(out_dir, "rpm", "repodata", "repomd.xml")
    if not os.path.isfile(path):
        return {}   # a new OUT: no XML parser to import on the way to the first write
    import xml.etree.ElementTree as ET

    records = {}
    with damaged_index(path), open_file(out_dir, "rpm/repodata/repomd.xml", INDEX_LIMIT) as fh:
        for data in ET.parse(fh).getroot().iter(f"{NS_REPO}data"):
            location = data.find(f"{NS_REPO}location")
            records[data.get("type")] = {
                "href": location.get("href") if location is not None else "",
                "checksum": data.findtext(f"{NS_REPO}checksum", ""),
                "size": int(data.findtext(f"{NS_REPO}size", "-1")),
                "open-checksum": data.findtext(f"{NS_REPO}open-checksum", "")}
    return records


def dnf_index_entries(out_dir: str | os.PathLike) -> list[IndexEntry]:
    """Every package the DNF primary metadata lists."""
    out_dir = os.fspath(out_dir)
    primary = repomd_records(out_dir).get("primary")
    if not primary:
        return []
    path = os.path.join(out_dir, "rpm", primary["href"])
    if not os.path.isfile(path):
        return []
    import xml.etree.ElementTree as ET

    index = os.path.relpath(path, out_dir)
    entries = []
    with damaged_index(path), open_file(out_dir, f"rpm/{primary['href']}", INDEX_LIMIT) as raw, \
            gzip.open(raw, "rb") as fh:
        for _event, elem in ET.iterparse(fh):
            if elem.tag != f"{NS_COMMON}package":
                continue
            version = elem.find(f"{NS_COMMON}version")
            size = elem.find(f"{NS_COMMON}size")
            entries.append(IndexEntry("rpm", elem.findtext(f"{NS_COMMON}name", ""),
                                      version.get("ver", ""), version.get("rel", ""),
                                      elem.findtext(f"{NS_COMMON}arch", ""),
                                      "rpm/" + elem.find(f"{NS_COMMON}location").get("href", ""), index,
                                      int(size.get("package", -1)) if size is not None else -1,
                                      elem.findtext(f"{NS_COMMON}checksum", "")))
            elem.clear()
    return entries


def published_entries(out_dir: str | os.PathLike) -> list[IndexEntry]:
    """Every package OUT's APT and DNF indexes publish."""
    return apt_index_entries(out_dir) + dnf_index_entries(out_dir)


def package_files(out_dir: str) -> dict[str, str]:
    """Every package file under OUT (relative path -> format): deb/pool/**.deb, rpm/**.rpm."""
    found = {}
    for fmt, form in REGISTERED.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(out_dir, fmt, form.package_root)):
            dirnames[:] = sorted(d for d in dirnames if d not in form.index_dirs)
            for name in filenames:
                if name.endswith(form.suffix):
                    found[os.path.relpath(os.path.join(dirpath, name), out_dir).replace(os.sep, "/")] = fmt
    return found
