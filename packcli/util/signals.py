"""Signals that unwind a command, with one handler that ``main`` installs: SIGTERM and SIGHUP raise
:class:`Terminated` (a ``KeyboardInterrupt``) and Ctrl-C :class:`Interrupted`, so every cleanup on the way out runs
(a staging directory, a spool of standard input); once unwound, the process ends by the terminating signal, as it
would have at once, so a scheduler sees the usual exit status. A step that must not be cut (an output's swap, its
cleanup) holds signals back for its duration (:func:`signals_held`); one that came meanwhile takes effect after.

Without ``main`` (a library caller), signals keep their own handlers: what a killed run leaves, the next removes.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Interrupted", "Terminated", "ending_by_signal", "signals_held"]


class Interrupted(BaseException):
    """Ctrl-C during a command: unwinds every cleanup, then the error mapper says what was left (exit 130). Not a
    ``KeyboardInterrupt``, which typer turns into a silent exit before any message; its text is that message, which
    an output's publication makes precise (nothing written, the resume area kept, or the output complete)."""

    def __init__(self, message: str = "interrupted") -> None:
        super().__init__(message)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a command: unwinds like Ctrl-C so that every cleanup runs (a staging directory, a
    spool of standard input), before the signal takes effect (:func:`ending_by_signal`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


_TERMINATING = (signal.SIGTERM, signal.SIGHUP)
_terminated_by: list[int] = []  # the terminating signals raised as Terminated in this command
_held: list[bool] = []  # non-empty while a step holds signals back
_pending: list[int] = []  # the signals that came while held


def _take_effect(signum: int) -> None:
    if signum == signal.SIGINT:
        raise Interrupted
    _terminated_by.append(signum)
    raise Terminated(signum)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """The one handler: unwind now, or once the step that holds signals is done."""
    if _held:
        _pending.append(signum)
        return
    _take_effect(signum)


@contextmanager
def ending_by_signal() -> Iterator[None]:
    """Install the handler for the block (``main`` does, once): SIGTERM, SIGHUP and SIGINT where left at their
    defaults, main thread only. Once the block has unwound from SIGTERM or SIGHUP, the process ends by it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (*_TERMINATING, signal.SIGINT)}
    for signum, handler in previous.items():
        if handler in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _on_signal)
    _terminated_by.clear()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if _terminated_by:
            os.kill(os.getpid(), _terminated_by[0])


@contextmanager
def signals_held() -> Iterator[None]:
    """Within the block, signals wait (the block is never cut); the first that came then takes effect."""
    _held.append(True)
    try:
        yield
    finally:
        _held.pop()
        if not _held and _pending:
            signum = _pending[0]
            _pending.clear()
            _take_effect(signum)
