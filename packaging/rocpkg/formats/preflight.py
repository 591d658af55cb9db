"""Checks on a planned package set before a byte is written.

Everything that would otherwise fail half-way through a build, or worse, build and then
fail on a user's machine, is checked here on plain data: installed paths (valid UTF-8, no
control characters, short enough for the `.dpkg-new` / `;xxxxxxxx` names dpkg and rpm
write while unpacking), symlinks resolved through the release's other symlinks (never
out of the install tree), names, versions, architectures and relations in each format's
own syntax, one-line metadata fields, and an empty package set. Every problem is returned
at once, each one once.

The syntax rules themselves live here too (`deb_relation_problem`, `rpm_version_problem`,
...): config.py applies them to package.json strings with their JSON paths, check_plan to
what the plan made of them.
"""
from __future__ import annotations

import functools
import posixpath
import re

from rocpkg import model as m
from rocpkg.formats.filelist import SYSTEM_DIRS, path_problem

NAME_MAX = 255          # bytes in one path component (ext4, xfs, btrfs)
PATH_MAX = 4096         # bytes in a path, its terminating NUL included
UNPACK_SUFFIX = 10      # dpkg writes `<name>.dpkg-new`, rpm `<name>;<8 hex digits>` before renaming
COMPONENT_LIMIT = NAME_MAX - UNPACK_SUFFIX          # 245
PATH_LIMIT = PATH_MAX - 1 - UNPACK_SUFFIX           # 4085
PACKAGE_FILE_LIMIT = NAME_MAX - 12                  # OUT files are written as `<name>.tmp-<pid>` first
MAX_SYMLINK_FOLLOWS = 40  # Linux's MAXSYMLINKS: more than this is a loop

# C0 and C1 controls, DEL, Unicode line and paragraph separators, and the surrogate
# escapes that stand for bytes that are not UTF-8.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

DEB_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+\Z")                  # Debian policy 5.6.1
RPM_NAME = re.compile(r"^[A-Za-z0-9_+][A-Za-z0-9_.+-]*\Z")
DEB_ARCH = re.compile(r"^[a-z0-9][a-z0-9-]*\Z")
RPM_ARCH = re.compile(r"^[A-Za-z0-9_]+\Z")
# A library name or symbol version that can stand in a control file line and an rpm
# dependency without quoting (fullmatch: no trailing newline).
LIBRARY_NAME = re.compile(r"[A-Za-z0-9_.+@-]+")
_SUITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")      # one directory name: dists/<suite>/, <suite>.db
_DEB_UPSTREAM = re.compile(r"^[0-9][A-Za-z0-9.+~]*\Z")             # hyphens only with a revision
_DEB_UPSTREAM_WITH_REVISION = re.compile(r"^[0-9][A-Za-z0-9.+~-]*\Z")
_DEB_REVISION = re.compile(r"^[A-Za-z0-9.+~]+\Z")
_RPM_VERSION = re.compile(r"^[A-Za-z0-9._+~^]+\Z")                  # no '-': it separates the release
_DEB_OPERATORS = ("<<", "<=", "=", ">=", ">>")
_DEB_ALTERNATIVE = re.compile(
    r"^\s*(?P<name>[^\s:(|]+)(?::(?P<arch>[a-z0-9-]+))?\s*"
    r"(?:\(\s*(?P<op>[<>=]+)\s*(?P<version>[^\s)]*)\s*\))?\s*\Z")
_RPM_OPERATORS = ("<", "<=", "=", "==", ">=", ">")
_RPM_DEP_NAME = re.compile(r"^[A-Za-z0-9_/][A-Za-z0-9_.+/:-]*(?:\([^\s()]*\))*\Z")
_RPM_RICH_WORDS = ("and", "or", "if", "else", "with", "without", "unless")
# names such as `perl(File::Temp)` and `libc.so.6()(64bit)` are one token
_RPM_TOKEN = re.compile(r"[^\s()<>=]+(?:\([^\s()]*\))+|\(|\)|<=|>=|==|=|<|>|[^\s()<>=]+")


def printable(text: str) -> str:
    """A name as one printable line: control characters, DEL and undecodable bytes
    (surrogate escapes) written as \\xNN, so a hostile file name cannot forge lines."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def control_problem(text: str, multi_line: bool = False) -> str:
    """What is wrong with a metadata string ("" if nothing): one-line fields take no
    newline and no control character; multi-line ones no control character but newline
    and tab."""
    if not multi_line and ("\n" in text or "\r" in text):
        return "newline in a one-line field"
    found = (_CONTROL_BUT_NEWLINE if multi_line else _CONTROL).search(text)
    if found is None:
        return ""
    code = ord(found.group())
    if 0xD800 <= code <= 0xDFFF:
        return "not valid UTF-8"
    return f"control character U+{code:04X}"


def url_problem(text: str, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """What is wrong with a URL that names a server ("" if nothing): one token (no space, no
    control character), one of the schemes and a host. (A source line's URL is
    rocpkg.formats.urls'.)"""
    import urllib.parse

    if not text or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        return f"{printable(text)!r} holds a space or a control character (or is empty)"
    try:
        parsed = urllib.parse.urlsplit(text)
        host = parsed.hostname if parsed.scheme != "file" else "-"
        parsed.port     # a port that is not a number raises here
    except ValueError as exc:
        return f"{printable(text)!r} is not a URL: {exc}"
    if parsed.scheme not in schemes or not host:
        wanted = "/".join(schemes) + "://HOST[:PORT]"
        return f"expected {wanted}, got {printable(text)!r}"
    return ""


def _without_epoch(evr: str) -> tuple[str, str]:
    """(what is wrong with the epoch or "", the version after it): both formats write
    `[epoch:]version-release`."""
    epoch, sep, rest = evr.partition(":")
    if not sep:
        return "", evr
    return ("" if epoch.isdigit() else f"epoch {epoch!r} is not a number"), rest


@functools.lru_cache(maxsize=8192)   # a release repeats its relations and versions
def deb_version_problem(version: str) -> str:
    """Debian policy 5.6.12: [epoch:]upstream[-revision]."""
    problem, rest = _without_epoch(version)
    if problem:
        return problem
    upstream, sep, revision = rest.rpartition("-")
    if not sep:
        upstream, revision = rest, ""
    elif not _DEB_REVISION.match(revision):
        return f"Debian revision {revision!r} must be letters, digits and . + ~"
    if not (_DEB_UPSTREAM_WITH_REVISION if sep else _DEB_UPSTREAM).match(upstream):
        return f"{rest!r} is not a Debian version (a digit, then letters, digits and . + ~)"
    return ""


@functools.lru_cache(maxsize=8192)   # a release repeats its relations and versions
def rpm_version_problem(evr: str) -> str:
    """rpm's [epoch:]version[-release]: no '-' inside version or release."""
    problem, rest = _without_epoch(evr)
    if problem:
        return problem
    version, _, release = rest.partition("-")
    for what, value in (("version", version), ("release", release)):
        if (value or what == "version") and not _RPM_VERSION.match(value):
            return f"{what} {value!r} is not valid for rpm (letters, digits and . _ + ~ ^)"
    if "-" in release:
        return f"{rest!r} has more than one '-'"
    return ""


@functools.lru_cache(maxsize=8192)   # a release repeats its relations and versions
def deb_relation_problem(relation: str) -> str:
    """One DEB relation: `name[:arch] [(op version)]` alternatives joined by `|`."""
    if _CONTROL.search(relation):
        return control_problem(relation)
    for alternative in relation.split("|"):
        found = _DEB_ALTERNATIVE.match(alternative)
        if found is None:
            return f"{alternative.strip()!r} is not `name [(op version)]`"
        if not DEB_NAME.match(found["name"]):
            return f"{found['name']!r} is not a Debian package name"
        op = found["op"]
        if op is not None and op not in _DEB_OPERATORS:
            return f"operator {op!r} is not one of {' '.join(_DEB_OPERATORS)}"
        if op is not None and not found["version"]:
            return f"{alternative.strip()!r}: {op} without a version"
        if op is None and ("(" in alternative or ")" in alternative):
            return f"{alternative.strip()!r} is not `name [(op version)]`"
        if op is not None and deb_version_problem(found["version"]):
            return deb_version_problem(found["version"])
    return ""


@functools.lru_cache(maxsize=8192)   # a release repeats its relations and versions
def rpm_relation_problem(relation: str) -> str:
    """One RPM relation: `name [op evr]`, or a rich dependency `(a or (b >= 1 with c))`."""
    if _CONTROL.search(relation):
        return control_problem(relation)
    tokens = _RPM_TOKEN.findall(relation)
    if "".join(tokens) != "".join(relation.split()):
        return f"{relation.strip()!r} holds characters rpm cannot parse"
    if not tokens:
        return "empty relation"
    try:
        end = _rpm_rich(tokens, 0) if tokens[0] == "(" else _rpm_simple(tokens, 0)
        if end != len(tokens):
            raise ValueError(f"unexpected {tokens[end]!r}")
    except ValueError as exc:
        return f"{relation.strip()!r}: {exc}"
    return ""


def _rpm_simple(tokens: list[str], at: int) -> int:
    name = tokens[at]
    if not _RPM_DEP_NAME.match(name) or name in _RPM_RICH_WORDS:
        raise ValueError(f"{name!r} is not a package name")
    at += 1
    if at < len(tokens) and tokens[at] in _RPM_OPERATORS:
        if at + 1 >= len(tokens) or tokens[at + 1] in ("(", ")") or tokens[at + 1] in _RPM_OPERATORS:
            raise ValueError(f"{tokens[at]} without a version")
        problem = rpm_version_problem(tokens[at + 1])
        if problem:
            raise ValueError(problem)
        at += 2
    elif at < len(tokens) and re.match(r"^[<>=!]", tokens[at]):
        raise ValueError(f"operator {tokens[at]!r} is not one of {' '.join(_RPM_OPERATORS)}")
    return at


def _rpm_rich(tokens: list[str], at: int, depth: int = 0) -> int:
    if depth > 32:
        raise ValueError("rich dependency nested too deeply")
    at += 1  # "("
    while True:
        if at >= len(tokens):
            raise ValueError("unbalanced parentheses")
        at = _rpm_rich(tokens, at, depth + 1) if tokens[at] == "(" else _rpm_simple(tokens, at)
        if at >= len(tokens):
            raise ValueError("unbalanced parentheses")
        if tokens[at] == ")":
            return at + 1
        if tokens[at] not in _RPM_RICH_WORDS:
            raise ValueError(f"expected and/or/if/else/with/without/unless, got {tokens[at]!r}")
        at += 1


def suite_problem(suite: str) -> str:
    """What keeps `suite` from being an APT suite name rocpkg writes ("" if nothing): one
    path component under dists/ (a letter or digit, then letters, digits, '.', '_', '-';
    at most 64): never '/', '.' or '..', a space or a control character."""
    if isinstance(suite, str) and _SUITE.fullmatch(suite):
        return ""
    return f"{str(suite)!r} is not a suite name (letters, digits, '.', '_', '-'; it becomes a " \
           f"directory under deb/dists/)"


def path_problems(path: str, *, absolute: bool = True) -> list[str]:
    """What keeps dpkg or rpm from installing a path: the writers' own rule for install
    paths (filelist.path_problem: absolute, normalised, UTF-8, no newline or NUL), then
    what only shows when a package is unpacked: other control characters, and names or
    paths too long for the temporary names dpkg and rpm unpack to."""
    problem = path_problem(path) if absolute else None
    if problem:
        return [problem]
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        return ["not valid UTF-8"]
    problems = []
    found = _CONTROL.search(path)
    if found is not None:
        problems.append(f"control character U+{ord(found.group()):04X} in the name")
    if len(raw) > PATH_LIMIT:
        problems.append(f"path of {len(raw)} bytes is longer than {PATH_LIMIT} (PATH_MAX less the "
                        f"suffix dpkg and rpm add while unpacking)")
    for part in path.split("/") if len(raw) > COMPONENT_LIMIT else ():   # a shorter path has no longer name
        if len(part.encode("utf-8")) > COMPONENT_LIMIT:
            problems.append(f"file name of {len(part.encode('utf-8'))} bytes is longer than {COMPONENT_LIMIT} "
                            f"(dpkg and rpm add {UNPACK_SUFFIX} bytes while unpacking; the limit is {NAME_MAX})")
    return problems


# -- the plan ------------------------------------------------------------------------------

_ONE_LINE_FIELDS = ("maintainer", "vendor", "license", "homepage", "section", "priority", "group", "summary")


def check_plan(packages: dict[str, list[m.PackageSpec]], formats) -> list[tuple[str, str]]:
    """Every problem of a planned package set (format name -> its specs; formats: format
    name -> its rocpkg.formats.plugin.Format), each once, in a stable order: (where, what)
    pairs for RocpkgInputError."""
    problems: list[tuple[str, str]] = []
    if not any(packages.values()):
        problems.append(("package set", "empty: package.json defines no package to build (an empty list, "
                                        "or DisablePackaging on every definition)"))
    for fmt in sorted(packages):
        specs = packages[fmt]
        for spec in specs:
            problems += [(f"{fmt} package {printable(spec.name)}: {field}", what)
                         for field, what in _spec_problems(spec, formats[fmt])]
        nodes: dict[str, tuple[m.FileEntry, m.PackageSpec]] = {}
        for spec in specs:
            for fe in spec.files:
                nodes.setdefault(fe.path, (fe, spec))
        unfit: set[str] = set()
        for path, (fe, spec) in nodes.items():
            found = path_problems(path)
            if fe.type == m.DIR and path in SYSTEM_DIRS:
                found.append("a system directory, which no package may own")
            if found:  # said once for a directory, not again for everything below it
                origin = f" (artifact file {printable(fe.source)})" if fe.source else ""
                unfit.add(path)
                if posixpath.dirname(path) not in unfit:
                    problems += [(printable(path), what + origin) for what in found]
            if fe.type == m.SYMLINK:
                problems += [(printable(path), what) for what in _link_problems(fe, spec, nodes)]
        problems += _through_symlinks(nodes)
    return list(dict.fromkeys(problems))


def _spec_problems(spec: m.PackageSpec, form) -> list[tuple[str, str]]:
    out = []
    if not form.name_rule.fullmatch(spec.name):
        out.append(("name", f"{spec.name!r} is not a valid {form.title} package name"))
    version = form.version_problem(spec.evr)
    if version:
        out.append(("version", version))
    if not form.arch_rule.fullmatch(spec.arch):
        out.append(("architecture", f"{spec.arch!r} is not an architecture name"))
    filename = form.file_name(spec).encode("utf-8", "surrogateescape")
    if len(filename) > PACKAGE_FILE_LIMIT:
        out.append(("file name", f"{len(filename)} bytes, longer than {PACKAGE_FILE_LIMIT}"))
    for field in _ONE_LINE_FIELDS:
        problem = control_problem(getattr(spec, field) or "")
        if problem:
            out.append((field, problem))
    if form.needs_maintainer and not spec.maintainer.strip():
        out.append(("maintainer", f"empty: every {form.title} package needs a Maintainer"))
    problem = control_problem(spec.description or "", multi_line=True)
    if problem:
        out.append(("description", problem))
    if "%" in spec.name or "%" in spec.evr:
        out.append(("name", "'%' would start an rpm macro"))
    check = form.relation_problem
    for field in m.RELATION_FIELDS:
        for relation in getattr(spec, field):
            problem = check(relation)
            if problem:
                out.append((field, problem))
    return out


def _link_problems(fe: m.FileEntry, spec: m.PackageSpec, nodes) -> list[str]:
    """A shipped symlink, resolved through every symlink the release ships, must stay in
    the install tree: the lexical rule alone is beaten by chains of links."""
    problems = [f"symlink target: {what}" for what in path_problems(fe.link_target, absolute=False)]
    if problems:
        return problems
    root = spec.prefix.rstrip("/") or posixpath.dirname(fe.path)
    inside = lambda parts: "/" + "/".join(parts) == root or ("/" + "/".join(parts)).startswith(root + "/")  # noqa: E731
    current = fe.path.strip("/").split("/")[:-1]
    todo = fe.link_target.split("/")
    if fe.link_target.startswith("/"):
        current = []
    follows, left = 0, ""
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current[:-1]
        else:
            node = nodes.get("/" + "/".join(current + [part]))
            if node is not None and node[0].type == m.SYMLINK:
                follows += 1
                if follows > MAX_SYMLINK_FOLLOWS:
                    return [f"symlink to {fe.link_target!r} does not resolve: more than {MAX_SYMLINK_FOLLOWS} "
                            f"symlinks in a row (a loop)"]
                target = node[0].link_target
                todo = target.split("/") + todo
                if target.startswith("/"):
                    current = []
                continue
            current = current + [part]
        if not left and not inside(current):
            left = "/" + "/".join(current)
    if left:
        return [f"symlink to {fe.link_target!r} leaves the install tree {root} once the release's symlinks are "
                f"resolved (through {left}, it ends at /{'/'.join(current)})"]
    return []


def _through_symlinks(nodes) -> list[tuple[str, str]]:
    """Paths the release installs below a path it ships as a symlink: dpkg and rpm would
    write through the link."""
    links = {path for path, (fe, _) in nodes.items() if fe.type == m.SYMLINK}
    below: dict[str, list[str]] = {}
    # directory -> the shipped symlink at or above it, nearest first (None: none); the
    # paths are normalised and absolute, and a release's files share their directories
    nearest: dict[str, str | None] = {"": None}
    for path in nodes if links else ():
        directory, chain = path[:path.rfind("/")], []
        while directory not in nearest:
            if directory in links:
                nearest[directory] = directory
                break
            chain.append(directory)
            directory = directory[:directory.rfind("/")]
        found = nearest[directory]
        for passed in chain:
            nearest[passed] = found
        if found is not None:
            below.setdefault(found, []).append(path)
    return [(printable(link), f"is shipped as a symlink, but {printable(paths[0])}"
                              f"{f' and {len(paths) - 1} more paths are' if len(paths) > 1 else ' is'} "
                              f"installed through it")
            for link, paths in sorted(below.items())]
