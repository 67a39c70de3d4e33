"""The in-process engine: jobs run one after the other in this process, errors raised as they are. A plain run is
one job on it, so it takes the same path as a partitioned one without a worker's start-up or pickling."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

__all__ = ["InlineEngine"]


class InlineEngine:
    """Runs jobs in this process, in order."""

    def __enter__(self) -> InlineEngine:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        pass

    def run(
        self,
        jobs: Sequence[Any],
        task: Callable[[Any], Any],
        on_result: Callable[[Any], bool],
        start: Callable[[Any, int | None], None] | None = None,
        shipped: Any = None,
    ) -> None:
        """Run each job in turn; ``start(shipped, None)`` first, as a worker would (None: every core)."""
        if start is not None:
            start(shipped, None)
        for job in jobs:
            if not on_result(task(job)):
                return
