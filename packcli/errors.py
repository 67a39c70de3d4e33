"""Errors users see: one line naming the file (and line) at fault, and the exit code it maps to.

Exit codes: 0 success, 1 a data or runtime error (:class:`PackcliError`), 2 a usage error (:class:`UsageError`).
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_DATA = 1
EXIT_USAGE = 2


class PackcliError(Exception):
    """A data or runtime error, reported as ``error: FILE:LINE: message`` with exit code 1.

    Args:
        message: what is wrong, and where possible how to fix it.
        path: the file at fault, if any.
        line: the 1-based line (or record) number in ``path``, if known.
    """

    exit_code = EXIT_DATA

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return f"{where}{self.message}"


class UsageError(PackcliError):
    """A wrong option or argument: exit code 2."""

    exit_code = EXIT_USAGE


class BadRecordError(PackcliError):
    """One input record is unusable (bad JSON, missing or non-string text); ``--skip-bad-records`` counts it."""
