"""pacman's naming, version and relation syntax, as pure functions: what the plan applies
once to make a pacman PackageSpec, and what the writer checks again.

Names (makepkg's lint_pkgname, Arch's convention of lower case): `[a-z0-9@._+-]+`, not
starting with `-` or `.`; package_name() lower-cases a plan name (rocm-gfx110X ->
rocm-gfx110x).

Versions: `[epoch:]pkgver-pkgrel`. pkgver may not hold `-`, `:`, `/` or whitespace
(makepkg's lint_pkgver), and pacman's vercmp (alpm's rpmvercmp) has no `~`: it reads every
character other than a letter or digit as a separator, and a separator before a trailing
letter run makes a version NEWER than the same version without it (`7.1.0.rc1` >
`7.1.0`), while a trailing letter run joined without one makes it older (`7.1.0rc1` <
`7.1.0`). So pkgver() maps each `~` of an upstream version to what keeps the order:

    `~` before a letter      dropped              7.1.0~rc1            -> 7.1.0rc1
    `~` before a digit       "pre"                7.1.0~20260301       -> 7.1.0pre20260301
                                                  7.1.0~20260301.rc2   -> 7.1.0pre20260301.rc2
                                                  7.1.0~20260301~dev3  -> 7.1.0pre20260301dev3

For rocpkg's channels (rocpkg.inputs.channels) this keeps dpkg's order: on one date dev
(`dev` joined: a letter run without a separator) < nightly (the end) < prerelease (`.rcN`:
a separator, then more) < the release X.Y.Z, and across dates the date's number decides
first (tests/test_pacman.py checks it with pacman's own vercmp). Any other character
outside `[A-Za-z0-9._+]` has no pacman spelling and is refused.

pkgrel is `integer[.integer]` (makepkg's check_pkgrel); an epoch is a non-negative integer,
written only when not 0.

Relations: pacman has `name`, `name<op>version` with op one of `<`, `<=`, `=`, `>=`, `>`,
and no alternatives. relation() takes either that or Debian's `a (>= 1.0) | b`, keeping the
first alternative (`a>=1.0`), `>>`/`<<` as `>`/`<`, and maps the version's upstream part
with pkgver() (a Debian revision is the pkgrel).

Architectures: x86_64, aarch64, and `any` for arch-independent packages (Debian's `all`,
rpm's `noarch`). File name: `name-[epoch:]pkgver-pkgrel-arch.pkg.tar.zst` as makepkg
writes it (the epoch is part of the name, colon and all). Pool: one directory per
repository architecture, OUT/pacman/<arch>/, holding the packages, their signatures and
the repository database side by side (repo-add's layout; pacman's `Server = .../$arch`);
an `any` package lives in the directory of the architecture it was built with.
"""
from __future__ import annotations

import re

from rocpkg.errors import RocpkgInputError

FORMAT = "pacman"
ROOT = "pacman"                 # OUT/pacman/<arch>/
DEFAULT_ARCH = "x86_64"
ANY = "any"

NAME = re.compile(r"[a-z0-9@_+][a-z0-9@._+-]*")    # makepkg's lint_pkgname, lower case
_PKGVER = re.compile(r"[A-Za-z0-9._+]+")
_PKGREL = re.compile(r"[0-9]+(\.[0-9]+)?")
_OPERATORS = ("<=", ">=", "=", "<", ">")
_DEBIAN_OPERATORS = {"<<": "<", "<=": "<=", "=": "=", ">=": ">=", ">>": ">", "<": "<=", ">": ">="}
_DEBIAN_RELATION = re.compile(r"\s*(?P<name>[^\s(:]+)(?::[a-z0-9-]+)?\s*"
                              r"(?:\(\s*(?P<op><<|<=|=|>=|>>|<|>)\s*(?P<version>[^\s)]+)\s*\))?\s*")
_PACMAN_RELATION = re.compile(r"(?P<name>[^<>=\s]+)(?:(?P<op><=|>=|=|<|>)(?P<version>[^<>=\s]+))?")
ARCHITECTURES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64",
                 "all": ANY, "noarch": ANY, ANY: ANY}
SUFFIXES = {"zstd": "zst", "xz": "xz", "gzip": "gz"}


def _refuse(where: str, what: str) -> RocpkgInputError:
    return RocpkgInputError((where, what))


def name_problem(name: str) -> str:
    """Why `name` is no pacman package name ("" when it is one)."""
    if NAME.fullmatch(name):
        return ""
    return (f"{name!r} is not a pacman package name: lower-case letters, digits and @._+- only, "
            "not starting with - or .")


def package_name(name: str) -> str:
    """A plan's package name in pacman's spelling (lower case), checked."""
    lowered = name.lower()
    problem = name_problem(lowered)
    if problem:
        raise _refuse(name, problem)
    return lowered


def pkgver(version: str) -> str:
    """pacman's pkgver of an upstream version (see the module's table); a pkgver given
    again comes back unchanged."""
    out = []
    for index, char in enumerate(version):
        if char != "~":
            out.append(char)
            continue
        following = version[index + 1:index + 2]
        if following.isascii() and following.isalpha():
            continue
        if following.isascii() and following.isdigit():
            out.append("pre")
            continue
        raise _refuse(version, "a '~' not followed by a letter or a digit has no pacman spelling")
    mapped = "".join(out)
    if not _PKGVER.fullmatch(mapped) or not mapped[0].isalnum():
        raise _refuse(version, "not a pacman pkgver: letters, digits and ._+ only (no '-', ':', '/', "
                               "whitespace), starting with a letter or digit")
    return mapped


def pkgrel(release: str) -> str:
    """pacman's pkgrel, checked: integer[.integer]."""
    if not _PKGREL.fullmatch(release):
        raise _refuse(release, "not a pacman pkgrel: integer[.integer]")
    return release


def full_version(version: str, release: str, epoch: int = 0) -> str:
    """`[epoch:]pkgver-pkgrel`: .PKGINFO's pkgver, the database's %VERSION%."""
    if not isinstance(epoch, int) or epoch < 0:
        raise _refuse(str(epoch), "an epoch is a non-negative integer")
    base = f"{pkgver(version)}-{pkgrel(release)}"
    return f"{epoch}:{base}" if epoch else base


def split_full_version(text: str) -> tuple[int, str, str]:
    """(epoch, pkgver, pkgrel) of `[epoch:]pkgver-pkgrel`, each checked."""
    epoch_text, colon, rest = text.partition(":")
    if not colon:
        epoch_text, rest = "0", text
    version, dash, release = rest.rpartition("-")
    if not epoch_text.isdigit() or not dash:
        raise _refuse(text, "not a pacman version [epoch:]pkgver-pkgrel")
    if pkgver(version) != version:
        raise _refuse(text, "its pkgver is not in pacman's spelling")
    return int(epoch_text), version, pkgrel(release)


def pin(name: str, version: str, release: str, epoch: int = 0) -> str:
    """The relation on exactly one build of a package: `name=[epoch:]pkgver-pkgrel`."""
    return f"{package_name(name)}={full_version(version, release, epoch)}"


def _relation_version(text: str, where: str) -> str:
    """A relation's version in pacman's spelling: [epoch:]upstream[-revision], the upstream
    part through pkgver()."""
    epoch, colon, rest = text.partition(":")
    if not colon:
        epoch, rest = "", text
    if colon and not epoch.isdigit():
        raise _refuse(where, f"version {text!r}: the epoch is not a number")
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    mapped = pkgver(upstream) + (f"-{pkgrel(revision)}" if dash else "")
    return f"{epoch}:{mapped}" if colon else mapped


def relation(text: str) -> str:
    """One relation in pacman's syntax, from Debian's (`a (>= 1.0) | b` -> `a>=1.0`: the
    first alternative) or pacman's own (checked, returned as is)."""
    first = text.split("|")[0]
    debian = _DEBIAN_RELATION.fullmatch(first)
    pacman = _PACMAN_RELATION.fullmatch(first.strip())
    if debian is not None and not any(c in debian["name"] for c in "<>="):
        name, op, version = debian["name"], debian["op"] and _DEBIAN_OPERATORS[debian["op"]], debian["version"]
    elif pacman is not None:
        name, op, version = pacman["name"], pacman["op"], pacman["version"]
    else:
        raise _refuse(text, "not a relation `name`, `name<op>version` or Debian's `name (op version)`")
    name = package_name(name)
    if op is None:
        return name
    return f"{name}{op}{_relation_version(version, text)}"


def relations(texts) -> list[str]:
    """relation() of each, in order, without repeats."""
    out: list[str] = []
    for text in texts:
        mapped = relation(text)
        if mapped not in out:
            out.append(mapped)
    return out


def architecture(arch: str) -> str:
    """pacman's architecture of a Debian, rpm or pacman one (`all`/`noarch` -> `any`)."""
    try:
        return ARCHITECTURES[arch]
    except KeyError:
        raise _refuse(arch, f"no pacman architecture for {arch!r} ({', '.join(sorted(set(ARCHITECTURES.values())))})") \
            from None


def package_filename(name: str, version: str, release: str, arch: str, epoch: int = 0,
                     compression: str = "zstd") -> str:
    """`name-[epoch:]pkgver-pkgrel-arch.pkg.tar.zst` (makepkg's $pkgname-$fullver-$arch$PKGEXT)."""
    if compression not in SUFFIXES:
        raise _refuse(compression, f"unknown compression {compression!r} ({', '.join(SUFFIXES)})")
    return (f"{package_name(name)}-{full_version(version, release, epoch)}-{architecture(arch)}"
            f".pkg.tar.{SUFFIXES[compression]}")


def pool_dir(arch: str, build_arch: str = DEFAULT_ARCH) -> str:
    """The repository directory (relative to OUT) a package of `arch` goes to: pacman/<arch>/,
    an `any` package's that of the architecture it was built with."""
    pacman_arch = architecture(arch)
    return f"{ROOT}/{architecture(build_arch) if pacman_arch == ANY else pacman_arch}"


# -- version order: alpm's rpmvercmp (lib/libalpm/version.c) ----------------------------------

def _segment_compare(a: str, b: str) -> int:
    """alpm_pkg_vercmp's rpmvercmp of two version strings without epoch or release."""
    if a == b:
        return 0
    one = two = 0
    while one < len(a) and two < len(b):
        start_one, start_two = one, two
        while one < len(a) and not a[one].isalnum():
            one += 1
        while two < len(b) and not b[two].isalnum():
            two += 1
        if one >= len(a) or two >= len(b):
            break
        if one - start_one != two - start_two:          # separator runs of different length
            return -1 if one - start_one < two - start_two else 1
        seg_one, seg_two = one, two
        numeric = a[one].isdigit()
        take = str.isdigit if numeric else str.isalpha
        while one < len(a) and a[one].isascii() and take(a[one]):
            one += 1
        while two < len(b) and b[two].isascii() and take(b[two]):
            two += 1
        if two == seg_two:                              # b's segment is of the other kind
            return 1 if numeric else -1
        x, y = a[seg_one:one], b[seg_two:two]
        if numeric:
            x, y = x.lstrip("0"), y.lstrip("0")
            if len(x) != len(y):
                return 1 if len(x) > len(y) else -1
        if x != y:
            return 1 if x > y else -1
    rest_one, rest_two = a[one:], b[two:]
    if not rest_one and not rest_two:
        return 0
    # a remaining letter run never beats the end: `1.0rc` < `1.0`, `1.0` < `1.0.1`
    if (not rest_one and not rest_two[:1].isalpha()) or rest_one[:1].isalpha():
        return -1
    return 1


def vercmp(a: str, b: str) -> int:
    """pacman's order of two versions `[epoch:]pkgver[-pkgrel]` (-1, 0, 1), as `vercmp`
    prints it: epochs as numbers, then pkgver, then pkgrel when both have one."""
    if a == b:
        return 0
    ea, va, ra = _parse_evr(a)
    eb, vb, rb = _parse_evr(b)
    result = _segment_compare(ea, eb)
    if result == 0:
        result = _segment_compare(va, vb)
        if result == 0 and ra is not None and rb is not None:
            result = _segment_compare(ra, rb)
    return result


def _parse_evr(text: str) -> tuple[str, str, str | None]:
    """alpm's parseEVR: epoch "0" when absent, release None when absent."""
    digits = 0
    while digits < len(text) and text[digits].isdigit():
        digits += 1
    if text[digits:digits + 1] == ":":
        epoch, rest = text[:digits] or "0", text[digits + 1:]
    else:
        epoch, rest = "0", text
    version, dash, release = rest.rpartition("-")
    if not dash:
        return epoch, rest, None
    return epoch, version, release
