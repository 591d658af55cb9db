"""Errors the CLI turns into `error: ...` lines: bad input (exit status 2), a lost worker
(exit status 1)."""
from __future__ import annotations


class RocpkgInputError(Exception):
    """Bad input: config, artifacts, arguments or payload files. Raised one way, with one
    (where, what) pair per problem so that all of them are reported at once:
    `RocpkgInputError(("--shard", "expected I/N"))`, `RocpkgInputError(*problems)`."""

    def __init__(self, *problems: tuple[str, str]):
        if not problems or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in problems):
            raise TypeError("RocpkgInputError takes one or more (where, what) pairs")
        self.problems = [(str(where), str(what)) for where, what in problems]
        super().__init__("; ".join(f"{w}: {m}" for w, m in self.problems))


class RocpkgWorkerLost(Exception):
    """A worker process (the build's, verify's, repo's) ended while it held work (a signal,
    the out-of-memory killer, a crash): not bad input; the message says what to do next."""
