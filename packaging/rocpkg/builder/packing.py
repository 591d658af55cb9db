"""One package, written by a worker process: the task the build hands out, what comes
back, and the function that writes it. Apart from rocpkg.builder.run (the parent's side: the
checks, the hand-out, the moves, the manifest), so that a worker imports the
writers and this alone, not build's release, index and check modules, before its
first write."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

from rocpkg.formats.registry import file_name, get as get_format
from rocpkg import model as m
from rocpkg.errors import RocpkgInputError
from rocpkg.builder.fingerprint import code_fingerprint, package_fingerprint
from rocpkg.formats.streams import hash_file


@dataclass(frozen=True)
class PackageOutcome:
    """One package of the build: its manifest entry plus how it was obtained."""

    format: str
    name: str
    version: str
    release: str
    arch: str
    kind: str
    target: str
    family: str
    file: str                   # relative to OUT
    size: int
    sha256: str
    depends: tuple[str, ...]
    payload: int                # planned payload bytes (bytes in)
    rebuilt: bool               # False: up to date, not rewritten
    seconds: float = 0.0
    built_for: tuple[str, ...] = ()     # PackageSpec.built_for: recorded only when not empty

    def manifest_entry(self) -> dict:
        return {"name": self.name, "format": self.format, "version": self.version, "release": self.release,
                "arch": self.arch, "kind": self.kind, "target": self.target, "family": self.family,
                "file": self.file, "size": self.size, "sha256": self.sha256, "depends": list(self.depends),
                **({"built_for": list(self.built_for)} if self.built_for else {})}


def package_dir(out_dir: str, spec: m.PackageSpec) -> str:
    """The directory of OUT that holds a package's file: its format's pool."""
    return os.path.join(out_dir, spec.format, get_format(spec.format).pool(spec))


def outcome(spec: m.PackageSpec, size: int, sha256: str, rebuilt: bool, seconds: float = 0.0) -> PackageOutcome:
    rel = os.path.join(package_dir("", spec), file_name(spec))
    return PackageOutcome(spec.format, spec.name, spec.version, spec.release, spec.arch, spec.kind, spec.target,
                          spec.family, rel, size, sha256, tuple(spec.depends), spec.payload_size, rebuilt, seconds,
                          spec.built_for)


@dataclass(frozen=True)
class Task:
    spec: m.PackageSpec
    out_dir: str
    options: m.BuildOptions
    signer: object = None       # rocpkg.formats.sign.Signer: RPM header signatures
    staging: str = ""           # where the package is written until it is whole (rocpkg.store.outdir)
    build: str = ""             # this build's id: each writing process takes the code's fingerprint once per build


_CODE_FINGERPRINT: dict[str, str] = {}


def code_fingerprint_of(build: str) -> str:
    """rocpkg's code fingerprint, taken once per build in each process that writes, after
    its first package (never before a write)."""
    if build not in _CODE_FINGERPRINT:
        _CODE_FINGERPRINT.clear()
        _CODE_FINGERPRINT[build] = code_fingerprint()
    return _CODE_FINGERPRINT[build]


@dataclass(frozen=True)
class Written:
    """A package a worker wrote into the staging area, with what the parent records of it."""

    outcome: PackageOutcome
    metadata: str       # the rendered control file / spec
    state: dict         # what the next build compares (rocpkg.builder.run._up_to_date)
    staged: str         # the whole package, until the parent moves it into place


def build_one(task: Task) -> Written | list[tuple[str, str]]:
    """Write one package into the staging area, with the state its next build compares.
    Its fingerprint is taken here, in parallel (not in the parent, which moves and records
    every package one at a time), from its sources' identities as the writer found them
    before reading them (BuiltPackage.sources): a source changed while it was read no
    longer matches, so the next build writes the package again. Bad input comes
    back as a problem list (exceptions lose their structure crossing processes). The
    parent moves it into place and writes its rendered metadata and its state
    (rocpkg.builder.run._record): many workers creating small files at once spend more CPU in
    the kernel's file system locks than on the files."""
    spec = task.spec
    started = time.perf_counter()
    try:
        form = get_format(spec.format)
        built = form.write(spec, task.staging, task.options)
        if task.signer is not None and form.sign_in_place:
            if form.load(form.sign_in_place)(built.path, task.signer):
                whole = hash_file(built.path)
                built = dataclasses.replace(built, size=whole.count, sha256=whole.hexdigest())
        st = os.stat(built.path)    # a rename keeps the inode and the mtime
    except RocpkgInputError as exc:
        return exc.problems
    done = outcome(spec, built.size, built.sha256, rebuilt=True, seconds=time.perf_counter() - started)
    signer_id = task.signer.fingerprint if task.signer is not None else ""
    fingerprint = package_fingerprint(spec, task.options, code_fingerprint_of(task.build), signer_id,
                                      built.sources)
    state = {"fingerprint": fingerprint, "file": done.file, "size": built.size, "sha256": built.sha256,
             "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
    return Written(done, built.metadata, state, built.path)
