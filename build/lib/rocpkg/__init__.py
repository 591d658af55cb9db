"""rocpkg: DEB/RPM packages and APT/DNF repositories from multi-architecture GPU build artifacts."""

__version__ = "0.1.0"
