"""Standard output closed by its reader before the command is done with it (``packcli show out | head -1``): the
command ends as coreutils and git do, quietly by SIGPIPE (exit status 141 in a shell), once every cleanup on its way
out has run.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError instead; left alone, typer ends it as a
silent exit 1 (an error, by packcli's exit codes) and the interpreter's last flush as an ``Exception ignored ...
BrokenPipeError`` line, and rich's console as a silent exit 1 too. The error mapper
(:class:`packcli.cli.OneLineErrors`) raises each as :class:`ReaderGone` wherever typer would meet it
(:func:`reader_gone_raised`), and ends the process by :func:`end_by_sigpipe`. Standard error closed from the start
(``2>&-``) is standard error sent to /dev/null (:func:`stderr_kept_open`). A write that fails otherwise (``>
/dev/full``, an I/O error) is said as standard output's (:func:`stdout_named`), not as a bare ``[Errno 28]``.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from packcli.errors import PackcliError

__all__ = [
    "ReaderGone",
    "StdoutFailed",
    "end_by_sigpipe",
    "reader_gone_raised",
    "said_with_what_was_done",
    "stderr_kept_open",
    "stdout_named",
]


class ReaderGone(Exception):
    """Standard output's reader closed it. Not an OSError, so that typer lets it through to the error mapper."""


class StdoutFailed(PackcliError):
    """A write to standard output failed, its reader not gone: a full disk or device, an I/O error."""


class _NamedStdout:
    """Standard output whose failed writes raise :class:`StdoutFailed`; everything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        with _failures_named():
            return self._stream.write(text)

    def flush(self) -> None:
        with _failures_named():
            self._stream.flush()


@contextmanager
def _failures_named() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:  # its reader gone: ReaderGone's, said by SIGPIPE
        raise
    except OSError as exc:
        raise StdoutFailed(f"cannot write standard output ({exc.strerror or exc})") from None


@contextmanager
def stdout_named() -> Iterator[None]:
    """Within the block, a write to standard output that fails but for a closed reader is :class:`StdoutFailed`."""
    stream = sys.stdout
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="backslashreplace")  # an ASCII terminal gets \u2588, not a UnicodeEncodeError
    sys.stdout = _NamedStdout(stream)
    try:
        yield
    finally:
        sys.stdout = stream


@contextmanager
def said_with_what_was_done(done: str) -> Iterator[None]:
    """Within the block (what a command prints once its output is in place, flushed at its end), a standard output
    that fails is said with ``done``: "cannot write standard output (...); out was published and is complete"."""
    try:
        yield
        sys.stdout.flush()
    except StdoutFailed as exc:
        raise PackcliError(f"{exc.message}; {done}") from None


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe (poll says POLLERR) or a socket (POLLHUP) whose reader has closed it: a
    broken pipe to anything else (a worker process, a server) stays an error like any other."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR and POLLHUP are reported whatever is asked
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no file behind it (a test's capture), or closed
        return False
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in events)


@contextmanager
def reader_gone_raised() -> Iterator[None]:
    """Within the block, a BrokenPipeError of standard output, its reader gone, is raised as :class:`ReaderGone`."""
    try:
        yield
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():
            raise
        raise ReaderGone(str(exc)) from exc
    except SystemExit as exc:
        # rich's console (typer's help, stats, show) ends a broken pipe of its own (Console.on_broken_pipe): it
        # points standard output at /dev/null, then raises SystemExit(1) while it handles the BrokenPipeError
        if not isinstance(exc.__context__, BrokenPipeError):
            raise
        raise ReaderGone(str(exc.__context__)) from exc


def end_by_sigpipe() -> None:
    """End the process by SIGPIPE, as a program that keeps the signal's default ends at the write that met the
    closed pipe: nothing on stderr, and no flush of what is left in standard output's buffer (main thread only)."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


def stderr_kept_open() -> None:
    """Standard error closed before the command started (``2>&-``, Python's ``sys.stderr`` None) is opened on
    /dev/null, as ``2>/dev/null``: progress and warnings then have a file to go to, and no file the command opens
    takes descriptor 2, where a library's message would land in it."""
    if sys.stderr is not None:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    if null != 2:
        os.dup2(null, 2)
        os.close(null)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115 (it lives as long as the process)
