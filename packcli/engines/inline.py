"""The in-process engine: jobs run one after the other in this process, errors raised as they are. A plain run is
one job on it, so it takes the same path as a partitioned one without a worker's start-up or pickling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packcli.engines import OnResult, Start, Task, Unconnected

__all__ = ["InlineEngine"]


class InlineEngine(Unconnected):
    """Runs jobs in this process, in order, with ``threads`` tokenizer threads (None: every core)."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads

    def run(self, jobs: Sequence[Any], task: Task, on_result: OnResult, start: Start | None, shipped: Any) -> None:
        """Run each job in turn; ``start(shipped, threads)`` first, as a worker would."""
        state = start(shipped, self.threads) if start is not None else None
        for job in jobs:
            on_result(task(state, job))
