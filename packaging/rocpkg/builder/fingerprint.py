"""What a package's bytes depend on, hashed: rocpkg's own code and templates, the spec,
the options that change bytes, the signer and the source files' identities. build.py
compares it with the state recorded for each package to decide what to rebuild."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import os
import re

from rocpkg.formats.registry import REGISTERED
from rocpkg import model as m

# anchored at a newline (the source is searched with one put before it), not at ^ with
# re.M: re scans ahead for a pattern's literal first character, which ^ defeats
_FROM_IMPORT = re.compile(rb"\n[ \t]*from[ \t]+(rocpkg(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)")
_IMPORT = re.compile(rb"\n[ \t]*import[ \t]+([^\n]*)")


def _rocpkg_imports(source: bytes) -> list[str]:
    """The rocpkg modules a source file imports, at any indentation (lazy imports count).
    A regular expression, not ast.parse: it runs before every build, and parsing the
    writers' modules costs far more than matching them."""
    found = []
    source = b"\n" + source
    for module, names in _FROM_IMPORT.findall(source):
        module = module.decode()
        found.append(module)
        for name in names.decode().strip("()").replace("\\", " ").split(","):
            name = name.split("#")[0].split(" as ")[0].strip()
            if name.isidentifier():
                found.append(f"{module}.{name}")
    for names in _IMPORT.findall(source):
        found += [n.split(" as ")[0].strip() for n in names.decode().split("#")[0].split(",")
                  if n.strip().startswith("rocpkg.")]
    return found


def code_fingerprint() -> str:
    """sha256 over the code and templates that decide a package's bytes: upgrading
    rocpkg or editing a template rebuilds what it changes. Every writing process takes it
    once per build, so each module name is looked up once and each file read once."""
    from rocpkg import bundled_dir

    digest = hashlib.sha256()
    for name, source in sorted(writer_sources().items(), key=lambda item: item[0].split("/")):
        digest.update(name.encode() + b"\0" + source)

    def walk(node: str, prefix: str = "") -> None:
        with os.scandir(node) as entries:
            children = sorted(entries, key=lambda entry: entry.name)
        for child in children:
            rel = f"{prefix}/{child.name}"
            if child.is_dir():
                walk(child.path, rel)
            elif child.name.endswith(".j2"):
                with open(child.path, "rb") as fh:
                    digest.update(rel.encode() + b"\0" + fh.read())

    walk(bundled_dir("rocpkg.templates"))
    return digest.hexdigest()


def writer_sources() -> dict[str, bytes]:
    """The source of every module the writers import, by its path under rocpkg's
    directory: found by reading imports (never a list of file names, so that a new or
    split module can't drop out)."""
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))     # rocpkg/, above build/
    sources: dict[str, bytes] = {}
    seen: set[str] = set()
    todo = [module for f in REGISTERED.values() for module in f.writer_modules]
    while todo:
        module = todo.pop()
        parts = module.split(".")[1:]
        if module in seen or not parts:
            continue
        seen.add(module)
        base = os.path.join(here, *parts)
        # a package's own code is its __init__; its modules count as they are imported
        found = [os.path.join(base, "__init__.py") if os.path.isdir(base) else base + ".py"]
        for path in found:
            name = path[len(here) + 1:].replace(os.sep, "/")
            if name in sources or not os.path.isfile(path):
                continue
            with open(path, "rb") as fh:
                sources[name] = fh.read()
            todo += _rocpkg_imports(sources[name])
    return sources


def _options_key(options: m.BuildOptions) -> dict:
    # threads never change the output (see module doc), so they are not part of it
    return {"source_date_epoch": options.source_date_epoch, "compression": options.compression,
            "compression_level": options.compression_level}


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(m.PackageSpec) if f.name != "files")
_FILE_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(m.FileEntry)))


def _spec_fields(spec: m.PackageSpec) -> dict:
    """Every field of a spec, files as lists of their fields: what dataclasses.asdict
    gives, without its deep copies (which cost more than writing a small package)."""
    fields = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    fields["links"] = [dataclasses.astuple(link) for link in spec.links]
    fields["files"] = list(map(_FILE_FIELDS, spec.files))    # each entry's fields, in order (a tuple)
    return fields


def source_identities(spec: m.PackageSpec) -> list[tuple]:
    """Each source file's (path, size, mtime_ns, inode) now, or (path, None) when it
    cannot be stat'ed: what a recorded package's sources are compared with. A writer
    reports the same identities as it found them before it read a byte
    (BuiltPackage.sources): a file changed while it was read then differs from its record,
    and the next build rebuilds the package."""
    sources = []
    for entry in spec.files:
        if entry.type != m.FILE:
            continue
        try:
            st = os.stat(entry.source)
            sources.append((entry.source, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            sources.append((entry.source, None))
    return sources


def package_fingerprint(spec: m.PackageSpec, options: m.BuildOptions, code: str, signer_id: str = "",
                        sources=None) -> str:
    """What a package's bytes depend on, hashed. Source files count by (path, size,
    mtime_ns, inode), in path order whatever order they were found in: a touched or
    replaced file rebuilds its packages. sources: their identities as the writer found
    them (BuiltPackage.sources; default: source_identities, now)."""
    if sources is None:
        sources = source_identities(spec)
    sources = sorted(sources, key=lambda found: found[0])
    blob = json.dumps({"code": code, "spec": _spec_fields(spec), "options": _options_key(options),
                       "signer": signer_id, "sources": sources}, sort_keys=True, separators=(",", ":"),
                      default=bytes.hex)  # FileEntry.patches hold bytes
    return hashlib.sha256(blob.encode()).hexdigest()
