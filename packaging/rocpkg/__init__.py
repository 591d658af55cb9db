"""rocpkg: DEB/RPM packages and APT/DNF repositories from multi-architecture GPU build artifacts."""

__version__ = "0.1.0"


def bundled_dir(package: str) -> str | None:
    """The directory of one of rocpkg's data packages (rocpkg.templates, rocpkg.defaults)
    as installed, or None when rocpkg runs from a source checkout (PYTHONPATH=packaging),
    which has none: the caller then takes the repository's own. Found by the package's
    spec, not importlib.resources: that import (zipfile, tempfile, pathlib) took 30 ms of
    the 0.3 s before a build's first write, and as much again in each worker."""
    from importlib.util import find_spec

    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))
