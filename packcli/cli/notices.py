"""Warnings on stderr for ``pack`` and ``stats``: the first few per-record ones, then a count of the rest; a
warning about lost tokens is always printed, even with ``--quiet``, so nothing is lost silently.
"""

from __future__ import annotations

import sys

__all__ = ["MAX_WARNINGS", "Warnings", "warn_loss"]

MAX_WARNINGS = 20


class Warnings:
    """Prints the first warnings to stderr and counts the rest; keeps the first ones for the run's summary."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.count = 0
        self.first: list[str] = []

    def __call__(self, message: str) -> None:
        self.count += 1
        if self.count <= MAX_WARNINGS:
            self.first.append(message)
            if not self.quiet:
                print(f"warning: {message}", file=sys.stderr)

    def close(self) -> None:
        if not self.quiet and self.count > MAX_WARNINGS:
            print(f"warning: {self.count - MAX_WARNINGS} more warnings not shown", file=sys.stderr)


def warn_loss(message: str | None) -> None:
    """The loss warning is printed even with --quiet: nothing is lost silently."""
    if message is not None:
        print(f"warning: {message}", file=sys.stderr)
