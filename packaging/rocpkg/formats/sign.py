"""OpenPGP signatures for repositories and RPM headers, made by a signer the maintainer
already trusts with their keys (no crypto of our own: only the OpenPGP framing, armor and
cleartext frame, is done here).

A Signer is one or more keys and the backend that signs with them:

  gpg      the local GnuPG home (`--gpg-home`) holds the secret keys. Every signature is
           made with `--batch --pinentry-mode loopback`, so nothing ever prompts. With a
           `signature_time`, gpg signs as of that time (clamped to the newest key's
           creation time, which gpg requires): RSA signatures are deterministic, so a
           signed repository is byte-identical across runs with the same SOURCE_DATE_EPOCH.
  program  an external gpg-compatible program (`--gpg-program`, as rpmsign's _gpg_path;
           TheRock's gpgshim is one): it is run once per key and signature as
           `PROGRAM --batch --detach-sign --local-user FPR --digest-algo SHA256
           [--textmode]`, data on stdin, a binary signature on stdout. Nothing else is
           asked of it: no file names, no --clearsign, no --output.
  server   TheRock's signing server (`--signing-server URL`): one JSON request per key and
           signature ({"data", "key_id", "digest_algo", "armor", "clearsign"}), with
           $GPG_SERVER_TOKEN as a bearer token when set.

With the program or the server the secret keys are elsewhere: the public keys come from
`public_keys` (files, armored or binary); their facts (algorithm, expiry, the digests of
their self-signatures) are read from those with gpg in a throwaway home.

Several keys sign at once (a key rotation): InRelease, Release.gpg, repomd.xml.asc carry
one signature per key; a binary detached signature (an RPM header, a pacman package or
database, whose readers want every signature in it verifiable) is made by the newest key
only; the exported public keys are all of them. InRelease from a signer that makes only
detached signatures is a cleartext frame (RFC 4880 7) around the Release text, with a
text-mode (class 0x01) detached signature per key over that text canonicalized (trailing
whitespace dropped, no final line end): what gpg --clearsign makes. A program that answers
--textmode with a binary-mode signature (gpgshim does) gets no InRelease: clearsign
returns b"" and APT reads Release with Release.gpg.

A Signer is plain, picklable data (no process or socket is held between calls): build
workers sign RPM headers through copies of it. `check()` applies the key policy today's
clients enforce before anything is written.
"""
from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.openpgp import (RSA_ALGORITHMS, armor, cleartext, cleartext_frame, dearmor, key_problems,
                                    packets, signature_class)
from rocpkg.formats.rpm import TYPE_BIN, SigTag, package_from_header, read_rpm, replace_signature
from rocpkg.formats.streams import AtomicOutput, write_all

DIGEST = "SHA256"

KEYRING_NAME = "rocm.gpg"     # binary keyring, for apt's signed-by=
ARMORED_KEY_NAME = "rocm.asc"  # armored key, for dnf's gpgkey= and rpm --import

GPG, PROGRAM, SERVER = "gpg", "program", "server"


@dataclass(frozen=True)
class KeyFacts:
    """One signing key as gpg lists it: primary key and subkeys as (algorithm id, bits,
    creation time, expiry time or 0, capabilities, validity) rows, the primary first."""

    fingerprint: str
    uid: str
    keys: tuple[tuple[str, int, int, int, str, str], ...]

    @property
    def algorithm(self) -> str:
        return self.keys[0][0]

    @property
    def created(self) -> int:
        return self.keys[0][2]

    @property
    def name(self) -> str:
        return f"{self.fingerprint} ({self.uid})" if self.uid else self.fingerprint


class Signer:
    """Signs bytes with one or more keys (key_id: one key id, fingerprint or user id, or
    several) through one backend (module doc)."""

    def __init__(self, gnupg_home: str | os.PathLike | None, key_id, *, passphrase: str | None = None,
                 signature_time: int | None = None, program: str | None = None, server: str | None = None,
                 public_keys=(), valid_for: int | None = None):
        self.gnupg_home = os.path.abspath(os.fspath(gnupg_home)) if gnupg_home else ""
        self.key_ids = (key_id,) if isinstance(key_id, str) else tuple(key_id)
        self.key_id = ", ".join(self.key_ids)
        self.passphrase = passphrase
        self.signature_time = signature_time
        self.program = program
        self.server = server
        self.public_keys = tuple(os.path.abspath(os.fspath(p)) for p in public_keys)
        self.valid_for = valid_for          # seconds APT's Release is valid for (Valid-Until), None: no limit
        self._facts: tuple[KeyFacts, ...] | None = None
        self._exported: dict[bool, bytes] = {}

    @property
    def backend(self) -> str:
        return SERVER if self.server else PROGRAM if self.program else GPG

    def describe(self) -> dict:
        """What signs, as plain data (for a record of OUT's settings): backend, where, keys."""
        where = self.server or self.program or self.gnupg_home
        return {"backend": self.backend, "where": where, "keys": list(self.fingerprints),
                "public_keys": list(self.public_keys)}

    # -- key facts -------------------------------------------------------------------

    def keys(self) -> tuple[KeyFacts, ...]:
        """Facts of each key, in the order given; a missing or ambiguous key is bad input."""
        if self._facts is None:
            if self.backend == GPG:
                facts = tuple(self._find(self.gnupg_home, k, secret=True) for k in self.key_ids)
            else:
                with self._public_home() as home:
                    facts = tuple(self._find(home, k, secret=False) for k in self.key_ids)
            seen = [f.fingerprint for f in facts]
            twice = sorted({f for f in seen if seen.count(f) > 1})
            if twice:
                raise RocpkgInputError(("--sign-key", f"key {twice[0]} given more than once"))
            self._facts = facts
        return self._facts

    def _find(self, home: str, key_id: str, *, secret: bool) -> KeyFacts:
        listing = "--list-secret-keys" if secret else "--list-keys"
        out = _gpg(home, ["--with-colons", "--fixed-list-mode", listing, "--", key_id], what="list the key",
                   key=key_id, check=False)
        found = _parse_listing(out.decode("utf-8", "replace"))
        where = home if secret else ", ".join(self.public_keys) or "no --public-key file"
        if not found:
            raise RocpkgInputError(("--sign-key", f"no {'secret ' if secret else ''}key {key_id!r} in {where}"))
        if len(found) > 1:
            raise RocpkgInputError(("--sign-key", f"{key_id!r} names {len(found)} keys in {where} "
                                                  f"({', '.join(f.fingerprint for f in found)}): give a fingerprint"))
        return found[0]

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The keys' fingerprints, oldest first: the order of the signatures in a document
        signed by all of them (libzypp 17.25 reads the first signature's key only, and every
        client set up before a rotation holds the oldest)."""
        keys = self.keys()
        return tuple(f.fingerprint for f in sorted(keys, key=lambda f: (f.created, keys.index(f))))

    @property
    def newest(self) -> KeyFacts:
        """The key binary signatures are made with: the most recently created (the first
        given of those created at the same time)."""
        keys = self.keys()
        return max(keys, key=lambda f: (f.created, -keys.index(f)))

    @property
    def oldest(self) -> KeyFacts:
        """The least recently created key (the first given of those created at the same time)."""
        keys = self.keys()
        return min(keys, key=lambda f: (f.created, keys.index(f)))

    def only(self, fingerprint: str) -> "Signer":
        """A copy of this signer that signs with one of its keys."""
        one = copy.copy(self)
        one.key_ids, one.key_id = (fingerprint,), fingerprint
        one._facts = tuple(f for f in self.keys() if f.fingerprint == fingerprint)
        one._exported = {}
        return one

    @property
    def fingerprint(self) -> str:
        """The newest key's fingerprint; with several keys, all of them, the newest first."""
        newest = self.newest.fingerprint
        return ", ".join([newest] + [f for f in self.fingerprints if f != newest])

    @property
    def rpm_header_signature_tag(self) -> int:
        """The signature-header tag rpm expects for the newest key's header signature."""
        return SigTag.RSA if self.newest.algorithm in RSA_ALGORITHMS else SigTag.DSA      # how rpm files them

    def check(self) -> list[str]:
        """Raise RocpkgInputError now, before anything is written, for a key that is
        missing or that clients refuse (key_problems); returns the warnings (a key that
        expires soon)."""
        problems, warnings = key_problems(self.keys(), self.public_key_packets(), now=int(time.time()))
        if problems:
            raise RocpkgInputError(("--sign-key", "; ".join(problems)))
        return warnings

    # -- signatures ------------------------------------------------------------------

    def clearsign(self, data: bytes) -> bytes:
        """Cleartext-signed copy of data (APT's InRelease), one signature per key; b"" when
        the signer makes no text-mode signatures (module doc)."""
        if self.backend == GPG:
            return self._local(["--clearsign"], data, self.fingerprints)
        text = cleartext(data)
        signatures = b"".join(self._remote(text, fpr, text_mode=True) for fpr in self.fingerprints)
        if any(signature_class(body) != 0x01 for tag, body, _raw in packets(signatures) if tag == 2):
            return b""
        return cleartext_frame(text, signatures)

    def detached_armored(self, data: bytes) -> bytes:
        """ASCII-armored detached signature, one per key (Release.gpg, repomd.xml.asc)."""
        if self.backend == GPG:
            return self._local(["--detach-sign", "--armor"], data, self.fingerprints)
        return armor(b"".join(self._remote(data, fpr) for fpr in self.fingerprints), "SIGNATURE")

    def detached_binary(self, data: bytes) -> bytes:
        """Binary detached signature packet by the newest key (an RPM header's
        RSAHEADER/DSAHEADER, a pacman .sig)."""
        newest = self.newest.fingerprint
        if self.backend == GPG:
            return self._local(["--detach-sign"], data, (newest,))
        return self._remote(data, newest)

    # -- public key ------------------------------------------------------------------

    def public_key(self, armored: bool) -> bytes:
        """Every key's public key, as apt (binary) or dnf/rpm (armored, one block per key) want it."""
        if armored not in self._exported:
            if self.backend == GPG:
                self._exported[armored] = self._export(self.gnupg_home, armored)
            else:
                with self._public_home() as home:
                    self._exported[armored] = self._export(home, armored)
        return self._exported[armored]

    def public_key_packets(self) -> list[bytes]:
        """Each key's public key, binary, in the order given."""
        binary = self.public_key(armored=False)
        keys, current = [], b""
        for tag, _body, raw in packets(binary):
            if tag == 6 and current:
                keys.append(current)
                current = b""
            current += raw
        return keys + ([current] if current else [])

    def _export(self, home: str, armored: bool) -> bytes:
        out = b""
        for fpr in self.fingerprints:
            args = ["--export", "--export-options", "export-minimal"] + (["--armor"] if armored else [])
            one = _gpg(home, args + ["--", fpr], what="export the public key", key=fpr)
            if not one:
                raise RocpkgInputError(("--sign-key", f"gpg exported no public key for {fpr}"))
            out += one
        return out

    def export_public_keys(self, out_dir: str | os.PathLike) -> list[str]:
        """Write OUT/rocm.gpg and OUT/rocm.asc (atomically); returns their paths."""
        written = []
        for name, armored in ((KEYRING_NAME, False), (ARMORED_KEY_NAME, True)):
            path = os.path.join(os.fspath(out_dir), name)
            with AtomicOutput(path) as f:
                f.write(self.public_key(armored))
            written.append(path)
        return written

    def _public_home(self):
        """A throwaway GnuPG home holding the --public-key files' keys."""
        if not self.public_keys:
            raise RocpkgInputError(("--public-key", f"signing through {self.server or self.program} needs the "
                                                    "public keys: give --public-key FILE"))
        return _ImportedKeys(self.public_keys)

    # -- the backends ----------------------------------------------------------------

    def _local(self, mode: list[str], data: bytes, fingerprints) -> bytes:
        args = [a for fpr in fingerprints for a in ("--local-user", fpr)] + ["--digest-algo", DIGEST]
        if self.signature_time is not None:
            when = max([int(self.signature_time)] + [f.created for f in self.keys()])
            args += ["--faked-system-time", f"{when}!"]
        return _gpg(self.gnupg_home, args + mode + ["--output", "-"], data, what="sign", key=self.key_id,
                    passphrase=self.passphrase)

    def _remote(self, data: bytes, fingerprint: str, *, text_mode: bool = False) -> bytes:
        """A binary detached signature by one key from the program or the server."""
        if self.server:
            return dearmor(_ask_server(self.server, data, fingerprint, clearsign=text_mode), fingerprint)
        cmd = [self.program, "--batch", "--detach-sign", "--local-user", fingerprint, "--digest-algo", DIGEST]
        try:
            proc = subprocess.run(cmd + (["--textmode"] if text_mode else []), input=data, capture_output=True)
        except OSError as exc:
            raise RocpkgInputError(("--gpg-program", f"cannot run {self.program}: {exc}")) from None
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        if proc.returncode != 0:
            raise RocpkgInputError(("--gpg-program", f"{self.program} could not sign with {fingerprint}: "
                                    + (message[-1] if message else f"exit {proc.returncode}")))
        signature = dearmor(proc.stdout, fingerprint) if proc.stdout.lstrip().startswith(b"-----") else proc.stdout
        if not any(tag == 2 for tag, _, _ in packets(signature)):
            raise RocpkgInputError(("--gpg-program", f"{self.program} returned no signature for {fingerprint}"))
        return signature


class _ImportedKeys:
    """Context manager: a temporary GnuPG home with the given public key files imported."""

    def __init__(self, files):
        self.files = files
        self.home = ""

    def __enter__(self) -> str:
        self.home = tempfile.mkdtemp(prefix="rocpkg-keys-")
        try:
            for path in self.files:
                self._import(path)
        except BaseException:
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        return self.home

    def _import(self, path: str) -> None:
        try:
            with open(path, "rb") as fh:
                data = fh.read(1 << 20)
        except OSError as exc:
            raise RocpkgInputError((path, f"cannot read the public key: {exc.strerror}")) from None
        if _run_gpg(self.home, ["--import"], data).returncode != 0:
            raise RocpkgInputError((path, "not an OpenPGP public key gpg can import"))

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def _ask_server(url: str, data: bytes, fingerprint: str, *, clearsign: bool) -> bytes:
    """The signature TheRock's signing server answers for one request (armored)."""
    from urllib.error import HTTPError, URLError
    from urllib.request import Request, urlopen

    body = json.dumps({"data": base64.b64encode(data).decode("ascii"), "key_id": fingerprint,
                       "digest_algo": DIGEST, "armor": True, "clearsign": clearsign}).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "rocpkg"}
    if os.environ.get("GPG_SERVER_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['GPG_SERVER_TOKEN']}"
    try:
        with urlopen(Request(url, data=body, headers=headers, method="POST"), timeout=60) as response:
            answer = json.loads(response.read(1 << 20).decode("utf-8"))
        return base64.b64decode(answer["signature"], validate=True)
    except HTTPError as exc:
        raise RocpkgInputError(("--signing-server", f"{url} refused to sign with {fingerprint}: HTTP {exc.code} "
                                                    f"{exc.reason}")) from None
    except (URLError, OSError) as exc:
        raise RocpkgInputError(("--signing-server", f"cannot reach {url}: {exc}")) from None
    except (ValueError, KeyError, TypeError):
        raise RocpkgInputError(("--signing-server", f"{url} answered no signature for {fingerprint}")) from None


def _gpg(home: str, args: list[str], data: bytes = b"", *, what: str, key: str, passphrase: str | None = None,
         check: bool = True) -> bytes:
    """gpg's output for args in GnuPG home `home`; with check, a failure is bad input
    saying what could not be done with which key."""
    proc = _run_gpg(home, args, data, passphrase)
    if proc.returncode != 0 and check:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RocpkgInputError(("--sign-key", f"gpg could not {what} with {key!r}: "
                               + (message[-1] if message else f"exit {proc.returncode}")))
    return proc.stdout


def _run_gpg(home: str, args: list[str], data: bytes = b"", passphrase: str | None = None):
    """gpg run in batch mode in GnuPG home `home` (never a prompt), data on stdin; a missing
    gpg is bad input."""
    cmd = ["gpg", "--homedir", home, "--batch", "--no-tty", "--quiet", "--pinentry-mode", "loopback"]
    pass_fds: tuple[int, ...] = ()
    read_fd = write_fd = -1
    if passphrase is not None:
        read_fd, write_fd = os.pipe()
        write_all(write_fd, passphrase.encode() + b"\n")
        os.close(write_fd)
        cmd += ["--passphrase-fd", str(read_fd)]
        pass_fds = (read_fd,)
    try:
        return subprocess.run(cmd + args, input=data, capture_output=True, pass_fds=pass_fds)
    except FileNotFoundError as exc:
        raise RocpkgInputError(("gpg", f"cannot run gpg: {exc}")) from None
    finally:
        if read_fd >= 0:
            os.close(read_fd)


def _parse_listing(text: str) -> list[KeyFacts]:
    """KeyFacts of each key in gpg's --with-colons listing."""
    found: list[KeyFacts] = []
    fpr, uid, rows = "", "", []

    def flush():
        if rows:
            found.append(KeyFacts(fpr, uid, tuple(rows)))

    for line in text.splitlines():
        f = line.split(":")
        if f[0] in ("pub", "sec"):
            flush()
            fpr, uid, rows = "", "", []
        if f[0] in ("pub", "sec", "sub", "ssb") and len(f) > 11:
            rows.append((f[3], int(f[2] or 0), int(f[5] or 0), int(f[6] or 0), f[11], f[1]))
        elif f[0] == "fpr" and len(rows) == 1 and not fpr:
            fpr = f[9]
        elif f[0] == "uid" and not uid and len(f) > 9:
            uid = f[9].replace("\\x3a", ":")
    flush()
    return found


def sign_rpm_header(path: str | os.PathLike, signer: Signer) -> bool:
    """Add an OpenPGP signature over an RPM's main header (what `rpmsign --addsign` does
    for v4 packages: RSAHEADER or DSAHEADER in the signature header), in place, keeping
    the file size, main header and payload byte-identical. An RPM that already carries a
    header signature is left as it is. Returns whether it signed."""
    record = package_from_header(read_rpm(path))
    if record.header_signed:
        return False
    with open(path, "rb") as f:
        f.seek(record.header_start)
        header_bytes = f.read(record.header_end - record.header_start)
    signature = signer.detached_binary(header_bytes)
    replace_signature(path, {signer.rpm_header_signature_tag: (TYPE_BIN, signature)})
    return True
