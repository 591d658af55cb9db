"""A tar member as the package formats here write it (the .deb's data.tar, a pacman
package): the given type, mode, time, size and link, owned by root (uid and gid 0)."""
from __future__ import annotations

import tarfile


def root_tarinfo(name: str, kind: bytes, mode: int, mtime: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    """The TarInfo of one member owned by root:root."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.size = size
    info.linkname = linkname
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
