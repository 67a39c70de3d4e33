"""Signals that unwind a command: SIGTERM and SIGHUP raise :class:`Terminated` (a ``KeyboardInterrupt``), so every
cleanup on the way out runs (a staging directory, a spool of standard input); once unwound, the process ends by the
signal, as it would have at once, so a scheduler sees the usual exit status.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Terminated", "ending_by_signal", "unwinds"]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a command: unwinds like Ctrl-C so that every cleanup runs (a staging directory, a
    spool of standard input), before the signal takes effect (:func:`ending_by_signal`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


_TERMINATING = (signal.SIGTERM, signal.SIGHUP)
_terminated_by: list[int] = []  # the signals that :func:`_unwind` turned into Terminated in this command


def _unwind(signum: int, frame: FrameType | None) -> None:
    _terminated_by.append(signum)
    raise Terminated(signum)


def unwinds(handler: object) -> bool:
    """Whether ``handler`` is the one :func:`ending_by_signal` installs: code that needs signals held back for a
    while (an output's swap) may put its own handler in front of it."""
    return handler is _unwind


@contextmanager
def ending_by_signal() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP (where left at their defaults; main thread only) raise
    :class:`Terminated`, so every cleanup in it runs; once the block has unwound, the process ends by that signal,
    as it would have at once (a scheduler sees the usual exit status)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in _TERMINATING}
    for signum, handler in previous.items():
        if handler == signal.SIG_DFL:
            signal.signal(signum, _unwind)
    _terminated_by.clear()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if _terminated_by:
            os.kill(os.getpid(), _terminated_by[0])
