"""What a package's bytes depend on, hashed: rocpkg's own code and templates, the spec,
the options that change bytes, the signer and the source files' identities. build.py
compares it with the state recorded for each package to decide what to rebuild."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re

from rocpkg import model as m

_FROM_IMPORT = re.compile(rb"^[ \t]*from[ \t]+(rocpkg(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(rb"^[ \t]*import[ \t]+([^\n]*)", re.M)


def _rocpkg_imports(source: bytes) -> list[str]:
    """The rocpkg modules a source file imports, at any indentation (lazy imports count).
    A regular expression, not ast.parse: it runs before every build, and parsing the
    writers' modules took a third of a second."""
    found = []
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
    rocpkg or editing a template rebuilds what it changes."""
    from pathlib import Path     # here, not at the top: the build's parent imports this
                                 # module before its first write and needs it not
    from rocpkg import bundled_dir

    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    # Every module the writers import, found by reading imports (never a list of file
    # names, so a new or split module can't drop out); a package counts with all its files.
    files: set[Path] = set()
    todo = ["rocpkg.deb", "rocpkg.rpm", "rocpkg.sign"]
    while todo:
        parts = todo.pop().split(".")[1:]
        if not parts:
            continue
        package = here.joinpath(*parts)
        found = sorted(package.glob("*.py")) if package.is_dir() else [package.with_suffix(".py")]
        for path in (p for p in found if p.is_file() and p not in files):
            files.add(path)
            todo += _rocpkg_imports(path.read_bytes())
    for path in sorted(files):
        name = path.relative_to(here).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes())
    root = Path(bundled_dir("rocpkg.templates"))

    def walk(node, prefix=""):
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            rel = f"{prefix}/{child.name}"
            if child.is_dir():
                walk(child, rel)
            elif child.name.endswith(".j2"):
                digest.update(rel.encode() + b"\0" + child.read_bytes())

    walk(root)
    return digest.hexdigest()


def _options_key(options: m.BuildOptions) -> dict:
    # threads never change the output (see module doc), so they are not part of it
    return {"source_date_epoch": options.source_date_epoch, "compression": options.compression,
            "compression_level": options.compression_level}


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(m.PackageSpec) if f.name != "files")
_FILE_FIELDS = tuple(f.name for f in dataclasses.fields(m.FileEntry))


def _spec_fields(spec: m.PackageSpec) -> dict:
    """Every field of a spec, files as lists of their fields: what dataclasses.asdict
    gives, without its deep copies (which cost more than writing a small package)."""
    fields = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    fields["files"] = [[getattr(entry, name) for name in _FILE_FIELDS] for entry in spec.files]
    return fields


def source_identities(spec: m.PackageSpec) -> list[list]:
    """Each source file's (path, size, mtime_ns, inode), or (path, None) when it cannot be
    stat'ed. Taken before the package is written: a file changed while it is read then
    differs from its record, and the next build rebuilds the package."""
    sources = []
    for entry in spec.files:
        if entry.type != m.FILE:
            continue
        try:
            st = os.stat(entry.source)
            sources.append([entry.source, st.st_size, st.st_mtime_ns, st.st_ino])
        except OSError:
            sources.append([entry.source, None])
    return sources


def package_fingerprint(spec: m.PackageSpec, options: m.BuildOptions, code: str, signer_id: str = "",
                        sources: list[list] | None = None) -> str:
    """What a package's bytes depend on, hashed. Source files count by (path, size,
    mtime_ns, inode): a touched or replaced file rebuilds its packages. sources: their
    identities as source_identities took them (default: now)."""
    if sources is None:
        sources = source_identities(spec)
    blob = json.dumps({"code": code, "spec": _spec_fields(spec), "options": _options_key(options),
                       "signer": signer_id, "sources": sources}, sort_keys=True, separators=(",", ":"),
                      default=bytes.hex)  # FileEntry.patches hold bytes
    return hashlib.sha256(blob.encode()).hexdigest()
