"""rocpkg: DEB/RPM packages and APT/DNF repositories from multi-architecture GPU build artifacts."""

import os

__version__ = "0.1.0"


# where each data package lives in a source checkout, relative to the repository (as
# pyproject.toml's package-dir maps it for an installed rocpkg)
_CHECKOUT_DIRS = {"rocpkg.templates": "templates", "rocpkg.defaults": "."}


def bundled_dir(package: str) -> str:
    """The directory of one of rocpkg's data packages (rocpkg.templates, rocpkg.defaults):
    as installed, or the repository's own when rocpkg runs from a source checkout
    (PYTHONPATH=packaging), which has no such package. Found by the package's spec, not
    importlib.resources: that import (zipfile, tempfile, pathlib) would be a large part of
    what a build does before its first write, and again in each worker."""
    from importlib.util import find_spec

    spec = find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        return next(iter(spec.submodule_search_locations))
    repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.normpath(os.path.join(repository, _CHECKOUT_DIRS[package]))
