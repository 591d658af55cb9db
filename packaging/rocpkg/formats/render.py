"""Jinja2 over templates/: the package metadata text (DEB control, changelog, copyright,
maintainer scripts). Templates are the single source of that text; the writers parse what
is rendered here and never spell a field themselves.

Metadata strings are checked again before they are rendered (config.py checked them where
they came from): a newline in a one-line field would start a new control field or spec
tag. Descriptions are folded the deb822 way; in spec text every `%` is written `%%`, so
that no string from package.json is expanded as an rpm macro.
"""
from __future__ import annotations

import dataclasses
import functools
import gzip
import os
import posixpath
import re
import shlex
import stat
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from rocpkg import bundled_dir

from rocpkg.errors import RocpkgInputError
from rocpkg.model import DIR, FILE, RELATION_FIELDS, BuildOptions, PackageSpec
from rocpkg.formats.preflight import control_problem

SYNOPSIS_MAX = 79           # lintian: synopsis must be shorter than 80 characters
DESCRIPTION_WIDTH = 79      # extended description lines, leading space included
SCRIPT_NAMES = ("preinst", "postinst", "prerm", "postrm")

# RPM-style license names (TheRock's package.json) -> DEP-5 short names.
_DEP5_LICENSE_NAMES = {
    "asl 2.0": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache-2.0": "Apache-2.0",
    "mit": "Expat",
    "expat": "Expat",
    "ncsa": "NCSA",
    "gpl": "GPL",
    "gplv2": "GPL-2",
    "gplv2+": "GPL-2+",
    "gplv3": "GPL-3",
    "gplv3+": "GPL-3+",
    "lgpl": "LGPL",
    "lgplv2+": "LGPL-2+",
    "bsd": "BSD",
}


@dataclass
class RenderedDeb:
    """Everything textual a .deb carries. doc_files are the generated data.tar members
    (install path -> bytes: changelog.Debian.gz and copyright), installed_size is the
    control's Installed-Size in KiB."""

    control: str
    changelog: str
    copyright: str
    scripts: dict[str, str] = field(default_factory=dict)
    doc_files: dict[str, bytes] = field(default_factory=dict)
    installed_size: int = 0


class _TemplatesLoader(jinja2.BaseLoader):
    """Loads templates from the `rocpkg.templates` resource package; when rocpkg runs
    from a source checkout (PYTHONPATH=packaging) that package does not exist, so fall
    back to the repository's templates/ directory."""

    def __init__(self) -> None:
        self.root = Path(bundled_dir("rocpkg.templates"))

    def get_source(self, environment, template):
        node = self.root
        for part in template.split("/"):
            if part in ("", ".", ".."):
                raise jinja2.TemplateNotFound(template)
            node = node / part
        if not node.is_file():
            raise jinja2.TemplateNotFound(template)
        return node.read_text(encoding="utf-8"), str(node), lambda: True


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """The cache never fails a build: an entry that cannot be read back (damaged, cut
    short) is a miss, compiled again; one that cannot be written (a full disk, the
    directory gone) is skipped. Jinja2's own raises in both."""

    def load_bytecode(self, bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:   # unpickling and unmarshalling damaged bytes raise anything
            bucket.reset()

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def template_cache(environ=None) -> jinja2.BytecodeCache | None:
    """Compiled templates kept between runs: jinja2's bytecode cache, each entry checked
    against its template's source checksum, jinja2's bytecode format and Python's version
    (an edited template is compiled again). Loading the writer templates from here costs
    each worker of each build a small part of compiling them. Code is loaded from it, so
    only a directory of this user's alone will do ($XDG_CACHE_HOME/rocpkg/templates, else
    ~/.cache/...; a directory, not a symlink, owned by this user, mode 0700); none where
    that can't be had (the templates are then compiled in each process)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):     # the XDG spec: a relative path is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "rocpkg", "templates")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        return None
    return _TemplateCache(path)


def make_environment() -> jinja2.Environment:
    """The one Jinja2 environment for every template: StrictUndefined (a missing variable
    is an error, not an empty string), trailing newlines kept, block tags trimmed
    (trim_blocks + lstrip_blocks) so that `{% if %}` lines leave no blank lines."""
    env = jinja2.Environment(
        loader=_TemplatesLoader(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        bytecode_cache=template_cache(),
    )
    env.filters["deb_description"] = deb_description
    env.filters["deb_relations"] = deb_relations
    env.filters["shquote"] = shlex.quote
    return env


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """One shared environment, so each template is compiled once per process."""
    return make_environment()


# -- filters ---------------------------------------------------------------------------


def deb_synopsis(summary: str) -> str:
    """First line of the summary, shortened at a word boundary below 80 characters."""
    line = " ".join(summary.strip().splitlines()[0].split()) if summary.strip() else ""
    if len(line) <= SYNOPSIS_MAX:
        return line
    return textwrap.shorten(line, width=SYNOPSIS_MAX, placeholder="...")


def deb_description(spec: PackageSpec) -> str:
    """The Description field value: synopsis, then the long text folded as Debian policy
    wants (paragraphs wrapped at 79 columns, each line starting with a space, blank lines
    between paragraphs written as ' .')."""
    return _folded_description(spec.summary or spec.name, spec.description)


@functools.lru_cache(maxsize=512)
def _folded_description(summary: str, description: str) -> str:
    """deb_description's text, once per summary and description: a definition's packages
    for every target share them, and textwrap is a large part of a small .deb's rendering."""
    paragraphs = [p for p in re.split(r"\n\s*\n", description.strip()) if p.strip()]
    lines = [deb_synopsis(summary)]
    for index, paragraph in enumerate(paragraphs):
        if index:
            lines.append(" .")
        lines.extend(
            textwrap.wrap(
                " ".join(paragraph.split()),
                width=DESCRIPTION_WIDTH,
                initial_indent=" ",
                subsequent_indent=" ",
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def deb_relations(relations: list[str]) -> str:
    """A relation field value: the plan already wrote each relation in DEB syntax."""
    return ", ".join(r.strip() for r in relations if r.strip())


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def changelog_date(source_date_epoch: int) -> str:
    """RFC 2822 date in UTC, as Debian changelogs want it: email.utils.format_datetime's
    text (tests/test_deb.py holds it to that), spelled here so that a build's workers
    do not import email.utils before their first write."""
    at = datetime.fromtimestamp(source_date_epoch, tz=timezone.utc)
    return (f"{_WEEKDAYS[at.weekday()]}, {at.day:02d} {_MONTHS[at.month - 1]} {at.year:04d} "
            f"{at.hour:02d}:{at.minute:02d}:{at.second:02d} +0000")


def dep5_licenses(license_expression: str) -> tuple[str, list[str]]:
    """(DEP-5 License expression, license names needing a stand-alone paragraph) from a
    package.json `License` such as 'MIT AND GPL AND NCSA' or 'ASL 2.0 with exceptions'."""
    expression = license_expression.strip() or "UNKNOWN"
    parts = re.split(r"\s+(and|or|AND|OR)\s+", expression)
    out, names = [], []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part.lower())
            continue
        with_exception = re.match(r"(.*?)\s+with\s+(.*)\Z", part, re.I)
        base, exception = with_exception.groups() if with_exception else (part, "")
        name = _DEP5_LICENSE_NAMES.get(base.strip().lower(), base.strip().replace(" ", "-"))
        if name not in names:
            names.append(name)
        if exception:
            words = exception.strip().split()
            if words and words[-1].lower() in ("exception", "exceptions"):
                words = words[:-1]
            out.append(f"{name} with {'-'.join(words) or 'upstream'} exception")
        else:
            out.append(name)
    return " ".join(out), names


# -- context ---------------------------------------------------------------------------


def install_prefix(spec: PackageSpec) -> str:
    """spec.prefix, else the longest common directory of the package's paths."""
    if spec.prefix:
        return spec.prefix.rstrip("/") or "/"
    paths = [f.path for f in spec.files]
    if not paths:
        return ""
    common = posixpath.commonpath(paths)
    if any(f.path == common and f.type != DIR for f in spec.files):
        common = posixpath.dirname(common)
    return common


def convenience_link(prefix: str) -> tuple[str, str]:
    """(link path, link target) of the release's unversioned convenience symlink:
    /opt/rocm-7.1.0 -> (/opt/rocm, rocm-7.1.0), /opt/rocm/core-7.1 -> (/opt/rocm/core,
    core-7.1). ("", "") when the prefix carries no version to drop."""
    if not prefix or prefix == "/":
        return "", ""
    base = posixpath.basename(prefix)
    unversioned = re.sub(r"[-_]?\d+(\.\d+)*$", "", base)
    if not unversioned or unversioned == base:
        return "", ""
    return posixpath.join(posixpath.dirname(prefix), unversioned), base


def script_context(spec: PackageSpec, options: BuildOptions, fmt: str) -> dict:
    prefix = install_prefix(spec)
    link, link_target = convenience_link(prefix)
    return {
        "spec": spec,
        "options": options,
        "format": fmt,
        "prefix": prefix,
        "link": link,
        "link_target": link_target,
        "alternatives": spec.links,
        "priority": spec.link_priority,
    }


# -- rendering -------------------------------------------------------------------------


def compile_templates(specs, writer_templates) -> None:
    """Compile every template these specs will render (writer_templates: those of their
    formats' writers, the specs' scripts), now: a build does it once in the parent, before
    its workers fork, instead of once in each of them."""
    env = _environment()
    names = set(writer_templates)
    names |= {t if "/" in t else f"scripts/{t}" for spec in specs for t in spec.scripts.values()}
    for name in sorted(names):
        try:
            env.get_template(name)
        except jinja2.TemplateNotFound:
            pass  # render_script names the package and the script


def render_script(name: str, spec: PackageSpec, options: BuildOptions) -> str:
    """The shared POSIX sh body of spec.scripts[name] (templates/scripts/...), rendered for
    spec.format; the DEB and RPM writers wrap it in their own calling convention."""
    template_name = spec.scripts[name]
    if "/" not in template_name:
        template_name = f"scripts/{template_name}"
    env = _environment()
    try:
        return env.get_template(template_name).render(
            script=name, **script_context(spec, options, spec.format)
        )
    except jinja2.TemplateNotFound:
        raise RocpkgInputError((f"{spec.name}: {name}", f"no script template {template_name}")) from None


def _doc_dir(spec: PackageSpec) -> str:
    return f"/usr/share/doc/{spec.name}"


def gzip_n(data: bytes) -> bytes:
    """`gzip -9n`: maximum compression, no file name, mtime 0 (reproducible)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def installed_size_kib(spec: PackageSpec, doc_files: dict[str, bytes]) -> int:
    """Installed-Size the way dpkg-gencontrol counts it: size // 1024 + 1 per regular file,
    1 per directory and symlink (a file-system block each); shared ancestors such as /opt
    and /usr are not counted."""
    total = 0
    for entry in spec.files:
        total += entry.size // 1024 + 1 if entry.type == FILE else 1
    total += 1  # /usr/share/doc/<name>
    total += sum(len(data) // 1024 + 1 for data in doc_files.values())
    return total


_ONE_LINE = ("name", "version", "release", "arch", "maintainer", "vendor", "license", "homepage", "section",
             "priority", "group", "summary")


def check_metadata(spec: PackageSpec) -> None:
    """Refuse a string that would break out of its field: a newline or control character
    in a one-line field or a relation, a control character in the description."""
    problems = [(f"{spec.name}: {name}", control_problem(str(getattr(spec, name))))
                for name in _ONE_LINE if control_problem(str(getattr(spec, name)))]
    problems += [(f"{spec.name}: {name}", control_problem(rel)) for name in RELATION_FIELDS
                 for rel in getattr(spec, name) if control_problem(rel)]
    problems += [(f"{spec.name}: {name}", control_problem(value) or "not a control field name")
                 for name, value in spec.deb_fields
                 if control_problem(value) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", name)]
    if control_problem(spec.description, multi_line=True):
        problems.append((f"{spec.name}: description", control_problem(spec.description, multi_line=True)))
    if problems:
        raise RocpkgInputError(*problems)


def rpm_escape(text: str) -> str:
    """Spec text reads `%` as the start of a macro; `%%` is a literal percent sign."""
    return text.replace("%", "%%")


def render_deb(spec: PackageSpec, options: BuildOptions) -> RenderedDeb:
    """Render control, changelog, copyright and maintainer scripts of one .deb."""
    check_metadata(spec)
    if not spec.maintainer.strip():
        raise RocpkgInputError((spec.name, "no Maintainer: Debian packages need one"))
    unknown = sorted(set(spec.scripts) - set(SCRIPT_NAMES))
    if unknown:
        raise RocpkgInputError((spec.name, f"unknown maintainer script {unknown[0]!r}"))
    env = _environment()
    date = changelog_date(options.source_date_epoch)
    year = datetime.fromtimestamp(options.source_date_epoch, tz=timezone.utc).year
    changelog = env.get_template("deb/changelog.j2").render(spec=spec, options=options, date=date)
    license_expression, license_names = dep5_licenses(spec.license)
    copyright_text = env.get_template("deb/copyright.j2").render(
        spec=spec, options=options, year=year,
        license_expression=license_expression, license_names=license_names,
    )
    doc_dir = _doc_dir(spec)
    doc_files = {
        f"{doc_dir}/changelog.Debian.gz": gzip_n(changelog.encode("utf-8")),
        f"{doc_dir}/copyright": copyright_text.encode("utf-8"),
    }
    if any(entry.path == doc_dir for entry in spec.files):
        doc_files = {}  # the package ships its doc dir itself (a dbgsym's link to its package's)
    installed_size = installed_size_kib(spec, doc_files)
    control = env.get_template("deb/control.j2").render(
        spec=spec, options=options, installed_size=installed_size
    )
    scripts = {}
    wrapper = env.get_template("deb/maintscript.j2")
    for name in SCRIPT_NAMES:
        if name in spec.scripts:
            body = render_script(name, spec, options)
            scripts[name] = wrapper.render(spec=spec, script=name, body=body.strip("\n"))
    return RenderedDeb(
        control=control,
        changelog=changelog,
        copyright=copyright_text,
        scripts=scripts,
        doc_files=doc_files,
        installed_size=installed_size,
    )


# -- RPM ---------------------------------------------------------------------------------

RPM_SCRIPTLETS = {"preinst": "pre", "postinst": "post", "prerm": "preun", "postrm": "postun"}


def rpm_description(spec: PackageSpec) -> str:
    """%description text: paragraphs wrapped at 79 columns (rpmlint's line limit)."""
    paragraphs = [p for p in re.split(r"\n\s*\n", spec.description.strip()) if p.strip()]
    if not paragraphs:
        paragraphs = [spec.summary or spec.name]
    return "\n\n".join(
        textwrap.fill(" ".join(p.split()), width=DESCRIPTION_WIDTH, break_on_hyphens=False)
        for p in paragraphs
    )


def render_spec(spec: PackageSpec, options: BuildOptions) -> str:
    """The RPM spec text of one package (templates/rpm/spec.j2): preamble, %description,
    scriptlets (shared templates/scripts bodies, Debian names mapped to %pre/%post/%preun/
    %postun), %files for review and %changelog dated from SOURCE_DATE_EPOCH."""
    check_metadata(spec)
    unknown = sorted(set(spec.scripts) - set(RPM_SCRIPTLETS))
    if unknown:
        raise RocpkgInputError((spec.name, f"unknown maintainer script {unknown[0]!r}"))
    scriptlets = [
        (RPM_SCRIPTLETS[name], render_script(name, spec, options).strip("\n"))
        for name in SCRIPT_NAMES
        if name in spec.scripts
    ]
    date = datetime.fromtimestamp(options.source_date_epoch, tz=timezone.utc)
    escaped = dataclasses.replace(
        spec, license=rpm_escape(spec.license), homepage=rpm_escape(spec.homepage), vendor=rpm_escape(spec.vendor),
        maintainer=rpm_escape(spec.maintainer), group=rpm_escape(spec.group),
        files=[dataclasses.replace(f, path=rpm_escape(f.path)) if "%" in f.path else f for f in spec.files])
    return _environment().get_template("rpm/spec.j2").render(
        spec=escaped,
        options=options,
        summary=rpm_escape(deb_synopsis(spec.summary or spec.name)),
        description=rpm_escape(rpm_description(spec)),
        scriptlets=scriptlets,
        changelog_date=date.strftime("%a %b %d %Y"),
        packager=rpm_escape(spec.maintainer or spec.vendor or "rocpkg"),
    )
