"""The one rule for every URL rocpkg writes into a source line: rocm.list (apt's one-line
format), a setup package's deb822 `.sources`, rocm.repo and the setup package's .repo
files (dnf and zypper), pacman's `Server =` line. What comes out is read the same way by all
of them:

- a scheme apt, dnf and zypper all fetch from, lower-case: `http`, `https`, `file`;
- http(s): an ASCII host name or [IPv6] literal (lower-cased), a port from 1 to 65535,
  no user name or password (the files are world-readable), no query and no fragment
  (apt appends `dists/SUITE` to the path, and a `#` starts a comment);
- file: no host (apt fetches nothing from `file://HOST/`), an absolute path;
- the path percent-encoded wherever a client would read a character as something else:
  whitespace and `,` (dnf's list separators), `#`, `"`, `$` (apt's `$(ARCH)`, dnf's
  `$basearch`), `;`, `%` that starts no escape, non-ASCII and undecodable bytes; an escape
  already there is kept, so the rule applied to its own output changes nothing;
- no trailing `/`: callers append a format's tree (`/deb`) or a key (`/rocm.asc`).

A local path (OUT, DEST, an absolute path given as --base-url) becomes `file://` and the
path percent-encoded (apt, dnf, libzypp and curl decode a file URL's escapes). Refused,
with the option or path named: control characters (a line break would inject a source or a
.repo section), a typed URL holding whitespace (documented as one token), a relative path,
`file:relative`, any other scheme.
"""
from __future__ import annotations

import os
import re
import urllib.parse

from rocpkg.errors import RocpkgInputError

SCHEMES = ("http", "https", "file")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# what stays as it is in a path: RFC 3986's unreserved characters, "/" and the delimiters
# no client reads (no `,` `;` `$`); everything else is percent-encoded
_PATH_SAFE = "/-._~!&'()*+=:@"
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
                   r"|\[[0-9a-f:.]+\]")
# characters apt's one-line `[signed-by=...]` option cannot hold in a keyring path
_KEYRING_BREAKERS = re.compile(r"[\s,\"\[\]]")


def _control(text: str) -> bool:
    return any(not ch.isprintable() and ch != " " and not 0xDC80 <= ord(ch) <= 0xDCFF for ch in text)


def source_url(location: str, where: str | None = None) -> str:
    """The URL written into a source line for `location` (a URL or an absolute local path),
    by the rule of this module's docstring; RocpkgInputError((where or location, why)) when
    no URL every client reads the same way can be made of it."""
    where = location if where is None else where
    if _control(location):
        raise RocpkgInputError((where, f"{location!r} holds a control character: a line break "
                                       "would add a line of its own to the source or .repo file"))
    scheme = _SCHEME.match(location)
    if scheme is None:
        if not location.startswith("/"):
            raise RocpkgInputError((where, f"{location!r} is neither a URL ({'/'.join(SCHEMES)}://...) "
                                           "nor an absolute path"))
        return "file://" + _quoted(os.path.normpath(location), literal_percent=True)
    if any(ch.isspace() for ch in location):
        raise RocpkgInputError((where, f"{location!r} holds a space: a URL is one token (write %20)"))
    name = scheme.group(1).lower()
    if name not in SCHEMES:
        raise RocpkgInputError((where, f"{location!r}: scheme {name!r} is not one apt, dnf and zypper all fetch "
                                       f"from (use {', '.join(SCHEMES)}, or an absolute path)"))
    try:
        parts = urllib.parse.urlsplit(location)
        port = parts.port
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host     # urlsplit drops an IPv6 literal's brackets
    except ValueError as exc:
        raise RocpkgInputError((where, f"{location!r} is not a URL: {exc}")) from None
    if parts.query or parts.fragment or "?" in location or "#" in location:
        raise RocpkgInputError((where, f"{location!r} has a query or a fragment ('?', '#'): apt appends "
                                       "dists/SUITE to the path and reads '#' as a comment (write %23, %3F)"))
    if parts.username is not None or parts.password is not None:
        raise RocpkgInputError((where, f"{location!r} holds a user name or password: source files are "
                                       "world-readable (use apt's auth.conf, dnf's username/password)"))
    if name == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise RocpkgInputError((where, f"{location!r} is not file:///ABSOLUTE/PATH (apt reads no host, "
                                           "and a relative path has no meaning to a client)"))
        return "file://" + _quoted(parts.path, literal_percent=False)
    if not _HOST.fullmatch(host):
        raise RocpkgInputError((where, f"{location!r} names no host of ASCII letters, digits, '-' and '.' "
                                       "(or [IPv6]); write an international name in its xn-- form"))
    if port == 0:
        raise RocpkgInputError((where, f"{location!r}: port 0 is no port"))
    netloc = host if port is None else f"{host}:{port}"
    return f"{name}://{netloc}{_quoted(parts.path, literal_percent=False)}"


def _quoted(path: str, literal_percent: bool) -> str:
    """path percent-encoded by the module's rule, without a trailing '/'. literal_percent:
    a '%' is the character itself (a local path), else one starting an escape is kept."""
    if not literal_percent:
        path = _STRAY_PERCENT.sub("%25", path)
    raw = os.fsencode(path) if literal_percent else path.encode("utf-8", "surrogateescape")
    return urllib.parse.quote(raw, safe=_PATH_SAFE + ("" if literal_percent else "%")).rstrip("/")


def keyring_path(path: str, where: str | None = None) -> str:
    """path, when apt's one-line `[signed-by=PATH]` can name it: an absolute path without
    whitespace, ',' (signed-by's list separator), '"', '[' or ']' and no control character
    (a file path takes no percent-encoding there)."""
    found = _KEYRING_BREAKERS.search(path)
    if _control(path) or not path.startswith("/") or found:
        why = f"holds {found.group()!r}" if found and found.group() in " ,\"[]" else "is not a one-line absolute path"
        raise RocpkgInputError((where or path, f"{path!r} {why}: apt's signed-by= in rocm.list cannot "
                                               "name a keyring there"))
    return path
