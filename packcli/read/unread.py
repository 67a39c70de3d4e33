"""Files found in the inputs (by a directory walk or a glob) and not read, named in one line: each with why where
its name is no reason (a pipe named ``b.jsonl``, a link to nothing), the first few of them, the rest counted."""

from __future__ import annotations

import stat
from pathlib import Path

from packcli.storage import UrlPath
from packcli.util.files import why_absent

__all__ = ["not_read"]

NAMED = 5  # files named; the rest are counted


def not_read(paths: list[Path], lead: str = ": ") -> str:
    """``lead`` and the first of ``paths``, each with why where its name is no reason; "" for none."""
    if not paths:
        return ""
    more = f" and {len(paths) - NAMED:,} more" if len(paths) > NAMED else ""
    return lead + ", ".join(_named(path) for path in paths[:NAMED]) + more


def _named(path: Path) -> str:
    """A file not read, with why where its name is no reason: a pipe, a device or a socket, a link to nothing, a
    loop of links, or gone since it was found."""
    if isinstance(path, UrlPath):  # a store lists objects only: no question asked of it again
        return str(path)
    try:
        if stat.S_ISREG(path.stat().st_mode):
            return str(path)
    except OSError:
        return f"{path} ({why_absent(path)})"
    return f"{path} (a pipe, a device or a socket)"
