"""Errors users see: one line naming the file (and line) at fault, and the exit code it maps to.

Exit codes: 0 success, 1 a data or runtime error (:class:`PackcliError`), 2 a usage error (:class:`UsageError`), 3 a
``stats`` gate failed (:class:`packcli.report.gates.GateFailed`); a command whose standard output is closed by its
reader ends by SIGPIPE, 141 in a shell (:mod:`packcli.cli.closed_stdout`).
A missing optional dependency is one of these errors too, so :func:`requires_extra` lives here
rather than alone.

``packcli.pack()`` says what the command line warns of as lost with :class:`PackcliDataLossWarning`; a warning said
as it arises that must reach the user is a :class:`DataLossNotice`.

A message names a ``pack`` option as its caller writes it, :func:`option`: ``--max-len 64``, ``--overwrite`` on the
command line, ``max_len=64``, ``overwrite=True`` in Python. The front end says which (:func:`keyword_spelling`,
around ``packcli.pack()``); the message is spelled where it is made, never rewritten after.

Optional dependencies: every import of an extra's module sits inside ``with requires_extra(...)``
(tests/test_imports.py checks it), so a missing one reads ``packcli.torch needs torch, which is not installed: pip
install 'packcli[torch]'``, never a bare ``ModuleNotFoundError``. ``EXTRA_MODULES`` mirrors
``[project.optional-dependencies]`` in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

__all__ = [
    "EXIT_DATA",
    "EXIT_GATE",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXTRA_MODULES",
    "BadRecordError",
    "DataLossNotice",
    "MissingExtraError",
    "PackcliDataLossWarning",
    "PackcliError",
    "UsageError",
    "keyword_spelling",
    "one_line",
    "option",
    "requires_extra",
]

EXIT_OK = 0
EXIT_DATA = 1
EXIT_USAGE = 2
EXIT_GATE = 3


class PackcliError(Exception):
    """A data or runtime error, reported as ``error: FILE:LINE: message`` with exit code 1.

    Args:
        message: what is wrong, and where possible how to fix it.
        path: the file at fault, if any.
        line: the 1-based line (or record) number in ``path``, if known.
    """

    exit_code = EXIT_DATA
    partition: int | None = None  # the partition whose job raised it, for the driver to name

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as class, arguments and fields, whatever a subclass's ``__init__`` takes: a job's error reaches
        its run's driver from a worker process or a Ray actor with its file, line and exit code."""
        return _restore, (type(self), self.args, self.__dict__)

    @property
    def path(self) -> str | None:
        """The file at fault, as the user named it."""
        return self._path

    @path.setter
    def path(self, path: str | Path | None) -> None:
        self._path = None if path is None else str(path)

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return f"{where}{self.message}"


def _restore(kind: type[PackcliError], args: tuple[Any, ...], fields: dict[str, Any]) -> PackcliError:
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


class UsageError(PackcliError):
    """A wrong option or argument: exit code 2."""

    exit_code = EXIT_USAGE


_KEYWORDS: ContextVar[bool] = ContextVar("packcli_keywords", default=False)  # the caller is Python, not the shell


# Control characters (a line break in a file's name, a library's multi-line message) written as Python escapes them
_ONE_LINE = {code: repr(chr(code))[1:-1] for code in (*range(32), 127)}


def one_line(text: str) -> str:
    """``text`` on one line: its control characters written as escapes (``\\n``), as an error line or a file's name
    is printed."""
    return text.translate(_ONE_LINE)


def option(name: str, value: object = None) -> str:
    """The option ``name`` (a :class:`~packcli.options.PackOptions` field, or ``out``/``overwrite``) as the caller
    writes it, with ``value`` if given: ``--max-len``, ``--max-len 64``, ``--overwrite`` (True), ``--no-eos``
    (``eos``, False) on the command line; ``max_len``, ``max_len=64``, ``overwrite=True``, ``eos=False`` in
    Python (:func:`keyword_spelling`)."""
    if _KEYWORDS.get():
        return name if value is None else f"{name}={value}"
    flag = name.replace("_", "-")
    if value is True or value is False:
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag}" if value is None else f"--{flag} {value}"


@contextmanager
def keyword_spelling() -> Iterator[None]:
    """Within the block (in this thread), messages name options as Python keyword arguments (:func:`option`)."""
    token = _KEYWORDS.set(True)
    try:
        yield
    finally:
        _KEYWORDS.reset(token)


class BadRecordError(PackcliError):
    """One input record is unusable (bad JSON, missing or non-string text); ``--skip-bad-records`` counts it."""


# extra name -> the top-level module it provides (the tests check this against pyproject.toml).
EXTRA_MODULES = {"torch": "torch", "ray": "ray", "plot": "matplotlib", "hf": "datasets", "cloud": "fsspec"}


class MissingExtraError(PackcliError, ImportError):
    """An optional dependency is not installed: exit code 1, and an ``ImportError`` to Python callers."""


@contextmanager
def requires_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn a missing module of ``extra`` inside the block into one line naming the extra that installs it.

    Example::

        with requires_extra("torch", "packcli.torch"):
            import torch

    Args:
        extra: the extra's name in pyproject.toml, a key of ``EXTRA_MODULES``.
        feature: what needs it, as the user knows it (``packcli.torch``, ``--engine ray``, ``stats --plot``).

    Raises:
        MissingExtraError: the extra's module is not installed. A missing module that is not the extra's (a
            broken install of the extra itself) propagates unchanged, since reinstalling packcli would not fix it.
    """
    module = EXTRA_MODULES[extra]
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise MissingExtraError(
            f"{feature} needs {module}, which is not installed: pip install 'packcli[{extra}]'"
        ) from None


class PackcliDataLossWarning(UserWarning):
    """``packcli.pack()`` left data out: each loss ``packcli pack`` warns of (even with ``--quiet``), worded with
    keyword arguments. ``warnings.simplefilter("error", packcli.PackcliDataLossWarning)`` makes any an error."""


class DataLossNotice(str):
    """A warning, said as it arises, that the output's data is lost or supervised otherwise than asked (a template
    that supervises each assistant's header): ``pack`` and ``stats`` say it even with ``--quiet``, and
    ``packcli.pack()`` raises it as a :class:`PackcliDataLossWarning`. Any other warning is a plain ``str``."""
