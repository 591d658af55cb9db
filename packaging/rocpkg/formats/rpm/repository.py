"""The RPM format's repository (rocpkg.formats.plugin.Repository): OUT/rpm/ as a DNF (and
zypper) repository. The indexer is rocpkg.formats.rpm.repodata (repodata/: repomd.xml, its
signature and key, `<sha256>-<kind>.xml.gz`; RPM headers signed in place); the client's
repo file is OUT/rocm.repo; the setup package ships .repo files for dnf and zypper and the
armored key.

Reading it back: repodata/repomd.xml lists each metadata file with its size, SHA-256 and
the SHA-256 of its text; the primary metadata names packages with their size and SHA-256."""
from __future__ import annotations

import gzip
import os
import posixpath
import re

from rocpkg.formats.indexes import IndexEntry, IndexFile, Signature, damaged_index
from rocpkg.formats.rpm.plugin import SNIPPET

ROOT = "rpm"
REPOMD = f"{ROOT}/repodata/repomd.xml"
ROOTS = ("repomd.xml.asc", "repomd.xml")        # publish's order: the signature, then what dnf reads first
NS_COMMON = "{http://linux.duke.edu/metadata/common}"
NS_REPO = "{http://linux.duke.edu/metadata/repo}"
_METADATA = re.compile(r"rpm/repodata/([0-9a-f]{64})-[^/]+")


def repomd_records(out_dir: str, opener) -> dict[str, dict]:
    """kind -> {href, checksum, size, open-checksum} from OUT/rpm/repodata/repomd.xml."""
    if not os.path.isfile(os.path.join(out_dir, REPOMD)):
        return {}   # a new OUT: no XML parser to import on the way to the first write
    import xml.etree.ElementTree as ET

    records = {}
    with damaged_index(os.path.join(out_dir, REPOMD)), opener(REPOMD) as fh:
        for data in ET.parse(fh).getroot().iter(f"{NS_REPO}data"):
            location = data.find(f"{NS_REPO}location")
            records[data.get("type")] = {
                "href": location.get("href") if location is not None else "",
                "checksum": data.findtext(f"{NS_REPO}checksum", ""),
                "size": int(data.findtext(f"{NS_REPO}size", "-1")),
                "open-checksum": data.findtext(f"{NS_REPO}open-checksum", "")}
    return records


class DnfRepository:
    """rocpkg.formats.plugin.Repository over OUT/rpm/ (the Protocol states each method's contract)."""

    clients = "DNF and zypper"

    def index(self, out_dir, *, suite, signer, source_date_epoch, digests, change, rewritten=None):
        from rocpkg.formats.rpm.repodata import publish_dnf

        return publish_dnf(out_dir, signer=signer, source_date_epoch=source_date_epoch,
                           sign_packages=signer is not None, digests=digests, change=change, rewritten=rewritten)

    def write_snippet(self, out_dir, *, suite, url, key_url=None, keyring=None):
        from rocpkg.formats.rpm.repodata import write_client_snippet

        return write_client_snippet(out_dir, base_url=url, gpgkey_url=key_url)

    def summary(self, out_dir, suite):
        return f"dnf: {os.path.join(out_dir, ROOT, 'repodata')} (repo file {SNIPPET})"

    def client_setup(self, out_dir, *, suite, snippet, keyring):
        if keyring:
            return ["Fedora/RHEL (dnf):", f"sudo cp {snippet} /etc/yum.repos.d/rocm.repo"]
        return ["Fedora/RHEL (dnf):", f"printf '[rocm]\\nname=rocm\\nbaseurl=file://{out_dir}/{ROOT}\\ngpgcheck=0\\n' | "
                                      "sudo tee /etc/yum.repos.d/rocm.repo"]

    def indexed(self, out_dir):
        return os.path.isfile(os.path.join(out_dir, REPOMD))

    def entries(self, out_dir, opener):
        primary = repomd_records(out_dir, opener).get("primary")
        if not primary:
            return []
        index = posixpath.normpath(f"{ROOT}/{primary['href']}")
        if not os.path.isfile(os.path.join(out_dir, index)):
            return []
        import xml.etree.ElementTree as ET

        entries = []
        with damaged_index(os.path.join(out_dir, index)), opener(f"{ROOT}/{primary['href']}") as raw, \
                gzip.open(raw, "rb") as fh:
            for _event, elem in ET.iterparse(fh):
                if elem.tag != f"{NS_COMMON}package":
                    continue
                version = elem.find(f"{NS_COMMON}version")
                size = elem.find(f"{NS_COMMON}size")
                entries.append(IndexEntry(ROOT, elem.findtext(f"{NS_COMMON}name", ""),
                                          version.get("ver", ""), version.get("rel", ""),
                                          elem.findtext(f"{NS_COMMON}arch", ""),
                                          f"{ROOT}/" + elem.find(f"{NS_COMMON}location").get("href", ""), index,
                                          int(size.get("package", -1)) if size is not None else -1,
                                          elem.findtext(f"{NS_COMMON}checksum", "")))
                elem.clear()
        return entries

    def index_files(self, out_dir, opener):
        found = [IndexFile(f"{ROOT}/repodata/{name}") for name in ("repomd.xml", "repomd.xml.asc", "repomd.xml.key")]
        return found + [IndexFile(posixpath.normpath(f"{ROOT}/{r['href']}"), "repomd.xml", r["size"], r["checksum"],
                                  open_sha256=r["open-checksum"])
                        for _kind, r in sorted(repomd_records(out_dir, opener).items())]

    def signatures(self, out_dir):
        return [Signature(f"{REPOMD}.asc", REPOMD)]

    def named_by_digest(self, rel):
        match = _METADATA.fullmatch(rel)
        return ("sha256", match.group(1)) if match else None

    def publish_stage(self, rel):
        name = rel.rsplit("/", 1)[-1]
        if rel.startswith(f"{ROOT}/repodata/") and name in ROOTS:
            return 2, ROOTS.index(name)
        return (0 if rel.endswith(".rpm") or _METADATA.fullmatch(rel) else 1), 0

    def stale(self, unlisted, listed):
        return list(unlisted)

    def setup_files(self, top, *, url, suite, signer):
        from rocpkg.formats.rpm.repodata import repo_file_text

        key_path = f"/etc/pki/rpm-gpg/RPM-GPG-KEY-{top}"
        name = f"{top} packages"
        return {f"/etc/yum.repos.d/{top}.repo": repo_file_text(top, name, url, f"file://{key_path}", zypper=False).encode(),
                f"/etc/zypp/repos.d/{top}.repo": repo_file_text(top, name, url, f"file://{key_path}", zypper=True).encode(),
                key_path: signer.public_key(armored=True)}

    def setup_package(self, path):
        from rocpkg.formats.rpm import package_from_header, read_rpm

        record = package_from_header(read_rpm(path))
        return record.name, record.version, record.description


REPOSITORY = DnfRepository()
