"""Warnings on stderr for ``pack`` and ``stats``: the first few per-record ones, then a count of the rest; a
warning about lost tokens, a :class:`~packcli.errors.DataLossNotice` (data supervised wrongly), and one about a
Markdown summary that cannot be written, are always printed, even with ``--quiet``, so nothing is lost silently.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packcli.errors import DataLossNotice, PackcliError, one_line

__all__ = ["MAX_WARNINGS", "Warnings", "resolve_summary", "warn_loss", "write_summary"]

MAX_WARNINGS = 20


class Warnings:
    """Prints the first warnings to stderr and counts the rest; keeps the first ones for the run's summary."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.count = 0
        self.first: list[str] = []

    def __call__(self, message: str) -> None:
        self.count += 1
        said = isinstance(message, DataLossNotice)  # even with --quiet, and never among those not shown
        if said or len(self.first) < MAX_WARNINGS:
            self.first.append(message)
            if said or not self.quiet:
                print(f"warning: {one_line(message)}", file=sys.stderr)

    def close(self) -> None:
        if not self.quiet and self.count > len(self.first):
            print(f"warning: {self.count - len(self.first)} more warnings not shown", file=sys.stderr)


def warn_loss(message: str | None) -> None:
    """The loss warning is printed even with --quiet: nothing is lost silently."""
    if message is not None:
        print(f"warning: {one_line(message)}", file=sys.stderr)


def resolve_summary(given: Path | None) -> Path | None:
    """Where this command's Markdown summary goes (``--summary FILE``, else ``$GITHUB_STEP_SUMMARY``), checked before
    its work: None where none is named, or where it cannot be written (one warning says so; the command goes on)."""
    from packcli.report.markdown import check_summary, summary_target

    target = summary_target(given)
    if target is None:
        return None
    try:
        check_summary(target)
    except PackcliError as exc:
        _summary_lost(exc)
        return None
    return target


def write_summary(markdown: str, target: Path | None) -> None:
    """Append ``markdown`` to ``target`` (from :func:`resolve_summary`); a write that fails is one warning, and the
    command's own result, output and exit code stand."""
    from packcli.report.markdown import append_summary

    if target is None:
        return
    try:
        append_summary(markdown, target)
    except PackcliError as exc:
        _summary_lost(exc)


def _summary_lost(exc: PackcliError) -> None:
    print(f"warning: {one_line(str(exc))}; no summary written, the command's result stands", file=sys.stderr)
