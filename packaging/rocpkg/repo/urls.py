"""The root URL of OUT's source lines: the URL each format's tree (OUT/<format>/) and the
keys lie below, made by the one URL rule (rocpkg.formats.urls)."""
from __future__ import annotations

import os

from rocpkg.formats.urls import source_url


def repository_url(out_dir: str, base_url: str | None) -> str:
    """The root URL (each format's tree below it) OUT's source lines name: --base-url's, else
    OUT's own file:// URL. Checked before anything is written by every command that indexes."""
    if base_url is not None:
        return source_url(base_url, "--base-url")
    return source_url(os.path.abspath(out_dir))
