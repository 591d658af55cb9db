"""Command-line options of signing, shared by every command that signs (build, repo, prune,
promote, export): add_signing_options() registers them, signer_of_args() turns them into a
rocpkg.formats.sign.Signer (checked against the key policy before anything is written);
rocpkg.cli.repo_settings records them in OUT.

  --sign-key KEY        repeatable: every key signs the indexes, the newest the packages
  --gpg-home DIR        the GnuPG home holding the secret keys (default $GNUPGHOME, ~/.gnupg)
  --gpg-program PROG    sign through a gpg-compatible program instead (TheRock's gpgshim)
  --signing-server URL  sign through TheRock's signing server instead ($GPG_SERVER_TOKEN)
  --public-key FILE     repeatable: the public keys, when the secret keys are elsewhere
  --valid-until DUR     APT's Release says Valid-Until: signing time + DUR (7d, 12h, 2w)
"""
from __future__ import annotations

import os
import re
import sys

from rocpkg.errors import RocpkgInputError

_DURATION = re.compile(r"([1-9][0-9]{0,5})([hdw])")
_UNIT = {"h": 3600, "d": 86400, "w": 7 * 86400}


def add_signing_options(p, *, what: str = "the indexes") -> None:
    """Register the signing options on a subcommand's parser; what: what they sign there."""
    p.add_argument("--sign-key", action="append", default=None, metavar="KEY",
                   help=f"key id, fingerprint or user id to sign {what} with; repeat it to sign with several keys "
                        "at once (a key rotation: every key signs InRelease, Release.gpg and repomd.xml.asc, the "
                        "newest the RPM headers and pacman files; README 'Signing key')")
    p.add_argument("--gpg-home", default=None, metavar="DIR",
                   help="GnuPG home holding the secret keys (default $GNUPGHOME, else ~/.gnupg)")
    p.add_argument("--gpg-program", default=None, metavar="PROGRAM",
                   help="sign through this gpg-compatible program instead of the local gpg, e.g. TheRock's gpgshim "
                        "(run as PROGRAM --batch --detach-sign --local-user FPR --digest-algo SHA256 [--textmode], "
                        "data on stdin); needs --public-key")
    p.add_argument("--signing-server", default=None, metavar="URL",
                   help="sign through TheRock's signing server at URL (its /sign endpoint; $GPG_SERVER_TOKEN is sent "
                        "as the bearer token when set); needs --public-key")
    p.add_argument("--public-key", action="append", default=None, metavar="FILE",
                   help="public key file (armored or binary) of the --sign-key keys, when they are signed with "
                        "elsewhere (--gpg-program, --signing-server); repeatable")
    p.add_argument("--valid-until", default=None, metavar="DURATION",
                   help="APT's Release says Valid-Until the signing time + DURATION (e.g. 7d, 12h, 2w): clients "
                        "refuse it once that has passed, so the repository must be re-signed before then")


def valid_for(text: str | None) -> int | None:
    """Seconds of a --valid-until DURATION (N h, d or w), None when not given."""
    if text is None:
        return None
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise RocpkgInputError(("--valid-until", f"{text!r} is not a duration: a number and h, d or w (7d, 12h, 2w)"))
    return int(match.group(1)) * _UNIT[match.group(2)]


def signer_of_args(args, source_date_epoch: int | None):
    """The Signer the options name, its keys found and checked against the key policy
    (a refused key is bad input here, before anything is built or written; a key that
    expires soon is a warning line); None when no --sign-key is given."""
    keys = getattr(args, "sign_key", None) or []
    program, server = getattr(args, "gpg_program", None), getattr(args, "signing_server", None)
    public = getattr(args, "public_key", None) or []
    for option, value in (("--gpg-home", args.gpg_home), ("--gpg-program", program), ("--signing-server", server),
                          ("--public-key", public), ("--valid-until", getattr(args, "valid_until", None))):
        if value and not keys:
            raise RocpkgInputError((option, "given without --sign-key"))
    if not keys:
        return None
    if program and server:
        raise RocpkgInputError(("--gpg-program", "give --gpg-program or --signing-server, not both"))
    if (program or server) and args.gpg_home:
        raise RocpkgInputError(("--gpg-home", f"the keys are used through {program or server}, not a GnuPG home"))
    if server and not re.fullmatch(r"https?://[^\s]+", server):
        raise RocpkgInputError(("--signing-server", f"{server!r} is not an http:// or https:// URL"))
    from rocpkg.formats.sign import Signer

    home = None if (program or server) else \
        args.gpg_home or os.environ.get("GNUPGHOME") or os.path.expanduser("~/.gnupg")
    signer = Signer(home, keys, signature_time=source_date_epoch, program=program, server=server,
                    public_keys=public, valid_for=valid_for(getattr(args, "valid_until", None)))
    for line in signer.check():
        print(f"warning: {line}", file=sys.stderr)
    return signer
