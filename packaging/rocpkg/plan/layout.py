"""The install tree around a release's prefix, as TheRock lays out /opt/rocm: the
directories above the prefix that a release owns (so that removing the last release
leaves nothing, and nothing it does not own is deleted), and the links to the newest
installed release that one package per release manages with update-alternatives."""
from __future__ import annotations

import posixpath
import re

from rocpkg.formats.filelist import SYSTEM_DIRS
from rocpkg.model import Alternative

# What TheRock's core postinst links beside the prefix (/opt/rocm/bin -> core-7.1/bin)
# and into /usr/bin; a link is made only where the release has the target.
SUBDIRS = ("bin", "lib", "include", "llvm", "amdgcn", "libexec", "share")
TOOLS = ("hipcc", "hipconfig", "hipify-clang", "rocminfo", "amdclang", "amdclang++", "amdclang-cl",
         "amdclang-cpp", "amdflang", "amdlld")


def owned_ancestors(prefix: str) -> list[str]:
    """The directories between the base system's and the prefix, which every package of
    the release owns: /opt/rocm/core-7.1 -> [/opt/rocm]; /opt/rocm-7.1.0 -> []."""
    out = []
    parent = posixpath.dirname(prefix.rstrip("/"))
    while parent not in SYSTEM_DIRS and parent not in ("", "/"):
        out.append(parent)
        parent = posixpath.dirname(parent)
    return sorted(out)


def priority(version: str) -> int:
    """update-alternatives priority from the version: the newest release wins (7.1.0 ->
    70100, 7.10.2 -> 71002); minor and patch above 99 count as 99."""
    parts = [int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split(".")[:3]]
    parts += [0] * (3 - len(parts))
    major, minor, patch = parts
    return min(major, 200000) * 10000 + min(minor, 99) * 100 + min(patch, 99)


def alternatives(prefix: str, shared: bool = True) -> list[Alternative]:
    """TheRock's links for a release installed at `prefix` (/opt/rocm/core-7.1):
    /opt/rocm/core (newest release) with /opt/rocm/{bin,lib,...} and /usr/bin/{hipcc,...}
    as its slaves, and /opt/rocm/core-7 (newest release of that major version). Nothing
    for a prefix that carries no version. shared=False (a variant build,
    /opt/rocm/core-asan-7.1): its own /opt/rocm/core-asan and core-asan-7 only, without the
    slaves, which are the normal release's (update-alternatives lets a slave name
    belong to one group only, and a variant must never take /opt/rocm/bin or /usr/bin/hipcc)."""
    base = posixpath.basename(prefix)
    match = re.match(r"^(.*?)[-_]?(\d+)(\.\d+)*\Z", base)
    if not match or not match.group(1):
        return []
    unversioned, major = match.group(1), match.group(2)
    parent = posixpath.dirname(prefix)
    slaves = []
    if shared:
        if parent not in SYSTEM_DIRS:  # /opt/rocm/bin; never /opt/bin
            group = posixpath.basename(parent)
            slaves += [(f"{parent}/{sub}", f"{group}-{sub}", f"{prefix}/{sub}") for sub in SUBDIRS]
        slaves += [(f"/usr/bin/{tool}", tool, f"{prefix}/bin/{tool}") for tool in TOOLS]
    out = [Alternative(unversioned, posixpath.join(parent, unversioned), prefix, tuple(slaves))]
    by_major = f"{unversioned}-{major}"
    if by_major != base:
        out.append(Alternative(by_major, posixpath.join(parent, by_major), prefix))
    return out
