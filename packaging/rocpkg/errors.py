"""Errors the CLI turns into `error: <where>: <what>` lines and exit status 2."""
from __future__ import annotations


class RocpkgInputError(Exception):
    """Bad input: config, artifacts, arguments or payload files. `problems` holds one
    (where, what) pair per problem so that all of them are reported at once."""

    def __init__(self, problems: list[tuple[str, str]] | str, what: str | None = None):
        if isinstance(problems, str):
            problems = [(problems, what or "")]
        self.problems = list(problems)
        super().__init__("; ".join(f"{w}: {m}" for w, m in self.problems))
