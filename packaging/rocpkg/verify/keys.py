"""Which key `rocpkg verify OUT` and `rocpkg publish` check OUT's index signatures
against: the one given (--keyring), else OUT's own public key as `rocpkg repo` exports it
(OUT/rocm.gpg, else rocm.asc); and what the report says of it. Reading only."""
from __future__ import annotations

import os
import subprocess
import tempfile

from rocpkg.formats.sign import ARMORED_KEY_NAME, KEYRING_NAME
from rocpkg.store.indexes import formats_present
from rocpkg.store.settings import RepoSettings, read_settings
from rocpkg.verify.view import Problem


def own_keyring(out_dir: str) -> str | None:
    """OUT's own public key as `rocpkg repo` exports it, OUT/rocm.gpg (else rocm.asc): the
    key the index signatures are checked against when no other is given; None when OUT
    has neither as a regular file."""
    for name in (KEYRING_NAME, ARMORED_KEY_NAME):
        path = os.path.join(out_dir, name)
        if os.path.isfile(path) and not os.path.islink(path):
            return path
    return None


def index_signatures(out_dir: str) -> list[str]:
    """The signatures over its indexes OUT has (paths), of every format present."""
    return [os.path.join(out_dir, s.signature) for form in formats_present(out_dir)
            for s in form.repo.signatures(out_dir) if os.path.exists(os.path.join(out_dir, s.signature))]


def key_fingerprints(keyring: str) -> list[str]:
    """The primary keys' fingerprints in a public key file (binary or armored), as gpg
    reads it; [] when it holds none gpg can read."""
    with tempfile.TemporaryDirectory(prefix="rocpkg-gpg-") as home:
        try:
            proc = subprocess.run(["gpg", "--batch", "--homedir", home, "--with-colons", "--show-keys",
                                   os.fspath(keyring)], capture_output=True, text=True, errors="replace")
        except FileNotFoundError:
            return []
    found, primary = [], False
    for line in proc.stdout.splitlines():
        fields = line.split(":")
        if fields[0] in ("pub", "sub"):
            primary = fields[0] == "pub"
        elif fields[0] == "fpr" and primary and len(fields) > 9:
            found.append(fields[9])
            primary = False
    return found


def signature_key(out_dir: str, keyring: str | None) -> tuple[str | None, dict, list[Problem]]:
    """(the key file to check OUT's signatures against, None when there is none; what the
    report says of it: {"checked", "signed", "keyring", "fingerprints", "own_key"}; the
    problem of a signed tree with no key to check it against, a bad-signature). OUT's own
    key is not used for a tree that has no signature and whose settings record it unsigned
    (`repo --unsigned`, rocpkg.store.settings): a key left from before says nothing."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    signed = index_signatures(out_dir)
    recorded = read_settings(out_dir)
    unsigned_on_record = not signed and recorded != RepoSettings() and not recorded.signer
    chosen = keyring or (None if unsigned_on_record else own_keyring(out_dir))
    said = {"checked": chosen is not None, "signed": bool(signed), "keyring": chosen,
            "fingerprints": key_fingerprints(chosen) if chosen else [], "own_key": chosen is not None and not keyring}
    problems = []
    if chosen is None and signed:
        problems.append(Problem("bad-signature", "index", os.path.relpath(signed[0], out_dir), "-",
                                "the indexes are signed and OUT has no rocm.gpg or rocm.asc to check them "
                                "against: give --keyring"))
    return chosen, said, problems
