"""OpenPGP signatures for repositories and RPM headers, made by the `gpg` a maintainer
already trusts with their key (no crypto of our own).

One Signer = one GNUPGHOME + one key. Every signature is made with `--batch
--pinentry-mode loopback`, so nothing ever prompts. With a `signature_time`, gpg signs
as of that time (clamped to the key's creation time, which gpg requires): RSA
signatures are deterministic, so a signed repository is byte-identical across runs
with the same SOURCE_DATE_EPOCH.
"""
from __future__ import annotations

import os
import subprocess

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.rpm import TYPE_BIN, SigTag, package_from_header, read_rpm, replace_signature
from rocpkg.formats.streams import AtomicOutput, write_all

# OpenPGP public key algorithm ids (RFC 4880 9.1) that rpm files under SigTag.RSA.
_RSA_ALGORITHMS = {"1", "2", "3"}

KEYRING_NAME = "rocm.gpg"     # binary keyring, for apt's signed-by=
ARMORED_KEY_NAME = "rocm.asc"  # armored key, for dnf's gpgkey= and rpm --import


class Signer:
    """Signs bytes with one key from one GnuPG home."""

    def __init__(self, gnupg_home: str | os.PathLike, key_id: str, *,
                 passphrase: str | None = None, signature_time: int | None = None):
        self.gnupg_home = os.path.abspath(os.fspath(gnupg_home))
        self.key_id = key_id
        self.passphrase = passphrase
        self.signature_time = signature_time
        self._key_info: tuple[str, int, str] | None = None

    # -- key facts -------------------------------------------------------------------

    def _secret_key(self) -> tuple[str, int, str]:
        """(algorithm id, creation time, fingerprint) of the signing key, from gpg's
        machine-readable listing; a missing key is bad input, named as such."""
        if self._key_info is None:
            out = self._gpg(["--with-colons", "--fixed-list-mode", "--list-secret-keys",
                             self.key_id], what="list the secret key", check=False)
            algorithm, created, fingerprint = "", 0, ""
            for line in out.decode("utf-8", "replace").splitlines():
                fields = line.split(":")
                if fields[0] == "sec" and not algorithm:
                    algorithm, created = fields[3], int(fields[5] or 0)
                elif fields[0] == "fpr" and algorithm and not fingerprint:
                    fingerprint = fields[9]
            if not algorithm:
                raise RocpkgInputError(("--sign-key", f"no secret key {self.key_id!r} in {self.gnupg_home}"))
            self._key_info = (algorithm, created, fingerprint)
        return self._key_info

    def check(self) -> None:
        """Raise RocpkgInputError now if the key is missing, rather than mid-publish."""
        self._secret_key()

    @property
    def fingerprint(self) -> str:
        return self._secret_key()[2]

    @property
    def rpm_header_signature_tag(self) -> int:
        """The signature-header tag rpm expects for this key's header signature."""
        return SigTag.RSA if self._secret_key()[0] in _RSA_ALGORITHMS else SigTag.DSA

    # -- signatures ------------------------------------------------------------------

    def clearsign(self, data: bytes) -> bytes:
        """Cleartext-signed copy of data (APT's InRelease)."""
        return self._sign(["--clearsign"], data)

    def detached_armored(self, data: bytes) -> bytes:
        """ASCII-armored detached signature (Release.gpg, repomd.xml.asc)."""
        return self._sign(["--detach-sign", "--armor"], data)

    def detached_binary(self, data: bytes) -> bytes:
        """Binary detached signature packet (RPM RSAHEADER/DSAHEADER over the main header)."""
        return self._sign(["--detach-sign"], data)

    # -- public key ------------------------------------------------------------------

    def public_key(self, armored: bool) -> bytes:
        """The public key, as apt (binary) or dnf/rpm (armored) want it."""
        args = ["--export", "--export-options", "export-minimal"]
        if armored:
            args.append("--armor")
        out = self._gpg(args + [self.fingerprint], what="export the public key")
        if not out:
            raise RocpkgInputError(("--sign-key", f"gpg exported no public key for {self.key_id!r}"))
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

    # -- gpg -------------------------------------------------------------------------

    def _sign(self, mode: list[str], data: bytes) -> bytes:
        args = ["--local-user", self.fingerprint, "--digest-algo", "SHA256"]
        if self.signature_time is not None:
            when = max(int(self.signature_time), self._secret_key()[1])
            args += ["--faked-system-time", f"{when}!"]
        return self._gpg(args + mode + ["--output", "-"], data, what="sign", secret=True)

    def _gpg(self, args: list[str], data: bytes = b"", *, what: str, secret: bool = False,
             check: bool = True) -> bytes:
        cmd = ["gpg", "--homedir", self.gnupg_home, "--batch", "--no-tty", "--quiet",
               "--pinentry-mode", "loopback"]
        pass_fds: tuple[int, ...] = ()
        read_fd = write_fd = -1
        if secret and self.passphrase is not None:
            read_fd, write_fd = os.pipe()
            write_all(write_fd, self.passphrase.encode() + b"\n")
            os.close(write_fd)
            cmd += ["--passphrase-fd", str(read_fd)]
            pass_fds = (read_fd,)
        try:
            proc = subprocess.run(cmd + args, input=data, capture_output=True, pass_fds=pass_fds)
        except FileNotFoundError as exc:
            raise RocpkgInputError(("gpg", f"cannot run gpg: {exc}")) from None
        finally:
            if read_fd >= 0:
                os.close(read_fd)
        if proc.returncode != 0 and check:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RocpkgInputError(("--sign-key", f"gpg could not {what} with {self.key_id!r}: "
                                   + (message[-1] if message else f"exit {proc.returncode}")))
        return proc.stdout


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
