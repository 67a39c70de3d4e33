"""Whether a local output was replaced while a command read it. ``pack --overwrite`` swaps whole directories, so a
reader that read the old manifest may go on to open the new shards: what it then finds is no finding about either
output, and the reader says the output was replaced instead of calling it damaged."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from packcli.errors import PackcliError

__all__ = ["OutputReplaced", "reads_output"]

P = ParamSpec("P")
R = TypeVar("R")


class OutputReplaced(PackcliError):
    """The output directory is not the one the read began in (exit code 1: read it again)."""


def reads_output(read: Callable[Concatenate[Path, P], R]) -> Callable[Concatenate[Path, P], R]:
    """``read(out, ...)``, raising :class:`OutputReplaced` if, when it ends (with an error or not), the directory at
    ``out`` is not the one it began with: what was read may mix two outputs. A store URL is never replaced this way
    (its manifest names the run whose objects it lists)."""

    @functools.wraps(read)
    def guarded(out: Path, /, *args: P.args, **kwargs: P.kwargs) -> R:
        began = _identity(out)
        try:
            result = read(out, *args, **kwargs)
        except (PackcliError, OSError) as exc:
            if began is not None and _identity(out) != began:
                raise _replaced(out) from exc
            raise
        if began is not None and _identity(out) != began:
            raise _replaced(out)
        return result

    return guarded


def _replaced(out: Path) -> OutputReplaced:
    return OutputReplaced(
        "replaced by another run (pack --overwrite?) while it was read, so what was read may mix two outputs: "
        "run the command again",
        out,
    )


def _identity(out: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(out)
    except (OSError, TypeError):  # gone, or a store URL (os.fspath of one raises)
        return None
    return status.st_dev, status.st_ino
