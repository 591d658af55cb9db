"""Errors of the kpack library. Both are input errors: the CLIs (kpack's and rocpkg's)
turn them into one `error: ...` line and exit status 2, never a traceback."""
from __future__ import annotations


class KpackFormatError(Exception):
    """A file that claims to be a kpack archive, a device-code container or a host marker
    but is malformed. `where` is an offset (int, printed as `offset N`) or a key path
    (str, e.g. `toc['lib/x.so#0']['gfx942'].ordinal`); `path` is the file, when known.

    str(error) is `<path>: <where>: <what>`, leaving out the parts that are unknown."""

    def __init__(self, what: str, *, where: int | str | None = None, path: str | None = None):
        self.what = what
        self.where = where
        self.path = path
        super().__init__(what)

    @property
    def location(self) -> str:
        if self.where is None:
            return ""
        return f"offset {self.where}" if isinstance(self.where, int) else str(self.where)

    def with_path(self, path) -> "KpackFormatError":
        """Attach the file name if it is not set yet; returns self for `raise ... from`."""
        if self.path is None:
            self.path = str(path)
        return self

    def __str__(self) -> str:
        return ": ".join(part for part in (self.path or "", self.location, self.what) if part)


class InvalidTargetError(ValueError):
    """A string that is not a GPU target ID (`gfx942:sramecc+:xnack-`) or a family name."""
