"""Engines: schedulers only. Each runs a list of jobs with the function it is given, calling back as each finishes;
none knows what a job does (they import nothing of :mod:`packcli.run`). A new engine goes here.

- ``inline``: in this process, one job after the other (a plain run: one job).
- ``local``: a pool of worker processes on this machine (``--engine local``).
- ``ray``: a pool of Ray actors on a cluster (``--engine ray``, the ``packcli[ray]`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Protocol

__all__ = ["Engine", "OnResult", "Start", "Task", "Unconnected"]

Task = Callable[[Any, Any], Any]  # (the worker's state, a job) -> its result; a job that fails raises
OnResult = Callable[[Any], None]  # a finished job's result
Start = Callable[[Any, "int | None"], Any]  # (what the driver shipped, the worker's threads) -> its state: once each


class Engine(Protocol):
    """What the driver needs of an engine; a context manager that holds its workers (or connection) while open."""

    def __enter__(self) -> Engine: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None: ...

    def run(self, jobs: Sequence[Any], task: Task, on_result: OnResult, start: Start | None, shipped: Any) -> None:
        """Run ``task(state, job)`` for every job, calling ``on_result`` with each result as it comes. A worker
        makes its ``state = start(shipped, threads)`` once before its first job (None without ``start``), ``threads``
        its share of the cores: state passed along, not kept in a module, so two runs in one process share none.
        ``task``, ``start`` and ``shipped`` must pickle for engines with other processes. A job that raises stops
        the start of further jobs; those running finish, then the error of the first failed job in ``jobs``' order
        is raised as the job raised it (a :class:`~packcli.errors.PackcliError` keeps its fields through pickling)."""
        ...


class Unconnected:
    """An engine that holds nothing between runs: entering and leaving it do nothing."""

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        pass
