"""The Debian format's repository (rocpkg.formats.plugin.Repository): OUT/deb/ as an APT
archive. The indexer is rocpkg.formats.deb.archive (dists/<suite>/: Packages, Release,
InRelease, Release.gpg, by-hash copies); the client's source line is OUT/rocm.list; the
setup package ships a deb822 .sources file and the binary keyring.

Reading the archive back: a suite is a directory of dists/ holding a Release file, whose
SHA256 list names the index files; every Packages it lists names packages with their size
and SHA-256."""
from __future__ import annotations

import io
import os
import posixpath
import re

from rocpkg.formats.deb.plugin import SNIPPET
from rocpkg.formats.indexes import IndexEntry, IndexFile, Signature, damaged_index

ROOT = "deb"
ROOTS = ("Release", "Release.gpg", "InRelease")      # publish's order among them: InRelease, read first, last
_BY_HASH = {"SHA256": "sha256", "SHA512": "sha512"}
_CONTENT_ADDRESSED = re.compile(r"deb/pool/.*|deb/dists/.*/by-hash/[^/]+/[^/]+", re.DOTALL)


def suites(out_dir: str) -> list[str]:
    """The suites of OUT/deb/dists, those holding a Release file, sorted."""
    dists = os.path.join(out_dir, ROOT, "dists")
    if not os.path.isdir(dists):
        return []
    return sorted(s for s in os.listdir(dists) if os.path.isfile(os.path.join(dists, s, "Release")))


def _text(opener, rel: str):
    """An index opened as text (UTF-8, strict)."""
    return io.TextIOWrapper(opener(rel), encoding="utf-8")


def release_files(out_dir: str, suite: str, opener) -> dict[str, tuple[int, str]]:
    """name relative to the suite -> (size, sha256) as its Release lists it."""
    from debian import deb822   # here: a build's first write need not wait for its import

    rel = f"{ROOT}/dists/{suite}/Release"
    with damaged_index(os.path.join(out_dir, rel)), _text(opener, rel) as fh:
        release = deb822.Release(fh)
        return {f["name"]: (int(f["size"]), f["sha256"]) for f in release.get("SHA256", [])}


class AptRepository:
    """rocpkg.formats.plugin.Repository over OUT/deb/ (the Protocol states each method's contract)."""

    clients = "APT"

    def index(self, out_dir, *, suite, signer, source_date_epoch, digests, change, rewritten=None):
        from rocpkg.formats.deb.archive import publish_apt

        return publish_apt(out_dir, suite=suite, signer=signer, source_date_epoch=source_date_epoch, digests=digests)

    def write_snippet(self, out_dir, *, suite, url, key_url=None, keyring=None):
        from rocpkg.formats.deb.archive import write_client_snippet

        return write_client_snippet(out_dir, suite=suite, base_url=url, **({"keyring": keyring} if keyring else {}))

    def summary(self, out_dir, suite):
        return f"apt: {os.path.join(out_dir, ROOT, 'dists', suite)} (source line in {SNIPPET})"

    def client_setup(self, out_dir, *, suite, snippet, keyring):
        lines = ["Debian/Ubuntu (apt):"]
        if keyring:
            lines += [f"sudo install -m 644 {keyring} /usr/share/keyrings/rocm.gpg",
                      f"sudo cp {snippet} /etc/apt/sources.list.d/rocm.list"]
        else:
            lines.append(f"echo 'deb [trusted=yes] file://{out_dir}/{ROOT} {suite} main' | "
                         "sudo tee /etc/apt/sources.list.d/rocm.list")
        return lines + ["sudo apt update"]

    def indexed(self, out_dir):
        return bool(suites(out_dir))

    def entries(self, out_dir, opener):
        indexes = [f"{ROOT}/dists/{suite}/{name}" for suite in suites(out_dir)
                   for name in sorted(release_files(out_dir, suite, opener)) if name.endswith("/Packages")]
        indexes = [rel for rel in indexes if os.path.isfile(os.path.join(out_dir, rel))]
        if not indexes:
            return []   # a new OUT: no deb822 to import on the way to the first write
        from debian import deb822

        entries = []
        for rel in indexes:
            with damaged_index(os.path.join(out_dir, rel)), _text(opener, rel) as fh:
                for stanza in deb822.Packages.iter_paragraphs(fh, use_apt_pkg=False):
                    version, _, release = stanza.get("Version", "").rpartition("-")
                    if not version:
                        version, release = stanza.get("Version", ""), ""
                    entries.append(IndexEntry(ROOT, stanza.get("Package", ""), version, release,
                                              stanza.get("Architecture", ""), f"{ROOT}/" + stanza.get("Filename", ""),
                                              rel, int(stanza.get("Size", -1)), stanza.get("SHA256", "")))
        return entries

    def index_files(self, out_dir, opener):
        found = []
        for suite in suites(out_dir):
            top = f"{ROOT}/dists/{suite}"
            found += [IndexFile(f"{top}/{name}") for name in ROOTS]
            found += [IndexFile(posixpath.normpath(f"{top}/{name}"), "Release", size, sha,
                                required=name.endswith(("Packages", "Packages.gz", "Packages.xz")))
                      for name, (size, sha) in sorted(release_files(out_dir, suite, opener).items())]
        return found

    def signatures(self, out_dir):
        found = []
        for suite in suites(out_dir):
            top = f"{ROOT}/dists/{suite}"
            found.append(Signature(f"{top}/Release.gpg", f"{top}/Release"))
            # no InRelease beside a Release.gpg: a signer without text-mode signatures (rocpkg.formats.sign)
            if os.path.exists(os.path.join(out_dir, top, "InRelease")) or \
                    not os.path.exists(os.path.join(out_dir, top, "Release.gpg")):
                found.append(Signature(f"{top}/InRelease", f"{top}/Release", clearsigned=True))
        return found

    def named_by_digest(self, rel):
        parts = rel.split("/")
        if len(parts) > 4 and parts[:2] == [ROOT, "dists"] and parts[-3] == "by-hash" and parts[-2] in _BY_HASH:
            return _BY_HASH[parts[-2]], parts[-1]
        return None

    def publish_stage(self, rel):
        name = rel.rsplit("/", 1)[-1]
        if rel.startswith(f"{ROOT}/dists/") and name in ROOTS:
            return 2, ROOTS.index(name)
        return (0 if _CONTENT_ADDRESSED.fullmatch(rel) else 1), 0

    def stale(self, unlisted, listed):
        return list(unlisted)

    def setup_files(self, top, *, url, suite, signer):
        from rocpkg.formats.deb.archive import COMPONENT

        keyring = f"/usr/share/keyrings/{top}-archive-keyring.gpg"
        sources = (f"Types: deb\nURIs: {url}\nSuites: {suite}\nComponents: {COMPONENT}\n"
                   f"Signed-By: {keyring}\n")
        return {f"/etc/apt/sources.list.d/{top}.sources": sources.encode(),
                keyring: signer.public_key(armored=False)}

    def setup_package(self, path):
        from rocpkg.formats.deb import read_deb_control

        control = read_deb_control(path)
        return control.get("Package", ""), control.get("Version", "").split("-")[0], control.get("Description", "")


REPOSITORY = AptRepository()
