"""Progress of a run on stderr: a rich bar on a terminal, plain lines for logs (Slurm, Kubernetes, CI)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from packcli.errors import UsageError
from packcli.util.progress import Reporter, SilentReporter

__all__ = ["INTERVAL_ENV", "PlainReporter", "RichReporter", "make_reporter"]

INTERVAL_ENV = "PACKCLI_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 5.0  # seconds between plain progress lines


class RichReporter:
    """A progress bar on stderr: input bytes read, documents, tokens per second, time left."""

    def __init__(self) -> None:
        from rich import progress as bar  # imported here: without a terminal, rich is never loaded
        from rich.console import Console

        self._progress = bar.Progress(
            bar.TextColumn("{task.description}"),
            bar.BarColumn(),
            bar.DownloadColumn(),
            bar.TextColumn("{task.fields[documents]:,} docs  {task.fields[rate]}"),
            bar.TimeElapsedColumn(),
            bar.TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task: Any = None

    def start(self, total_bytes: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("tokenizing", total=total_bytes, documents=0, rate="")

    def advance(self, bytes_done: int, documents: int, tokens: int) -> None:
        if self._task is None:
            return
        elapsed = self._progress.tasks[0].elapsed or 0.0
        rate = f"{tokens / elapsed / 1e6:.2f}M tok/s" if elapsed > 0 else ""
        self._progress.update(self._task, completed=bytes_done, documents=documents, rate=rate)

    def stage(self, description: str) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=description)

    def close(self) -> None:
        self._progress.stop()


@dataclass
class PlainReporter:
    """Plain lines on stderr for logs: one every ``interval`` seconds while tokenizing, and one at each stage
    change; a run shorter than ``interval`` prints nothing (so an early error stays the only line)::

        packcli: tokenizing  12,341 documents  0.23M tokens/s  9% of 13.6 MB  ETA 0:00:50
        packcli: packing (61.0 s)
    """

    interval: float = DEFAULT_INTERVAL
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Callable[[], float] = time.monotonic
    _total: int = field(default=0, init=False)
    _stage: str = field(default="tokenizing", init=False)

    def __post_init__(self) -> None:
        self._began = self._last = self.clock()

    def _print(self, text: str) -> None:
        print(f"packcli: {text}", file=self.stream, flush=True)

    def start(self, total_bytes: int) -> None:
        self._total = total_bytes
        self._began = self._last = self.clock()

    def advance(self, bytes_done: int, documents: int, tokens: int) -> None:
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        elapsed = max(now - self._began, 1e-9)
        share = bytes_done / self._total if self._total else 1.0
        eta = _clock_time(elapsed * (1 - share) / share) if share > 0 else "-"
        self._print(
            f"{self._stage}  {documents:,} documents  {tokens / elapsed / 1e6:.2f}M tokens/s  "
            f"{share:.0%} of {_size(self._total)}  ETA {eta}"
        )

    def stage(self, description: str) -> None:
        self._stage = description
        elapsed = self.clock() - self._began
        if elapsed >= self.interval:
            self._print(f"{description} ({elapsed:.1f} s)")

    def close(self) -> None:
        pass


def make_reporter(quiet: bool) -> Reporter:
    """Nothing with ``quiet``; a rich bar when stderr is a terminal; else plain lines every
    ``$PACKCLI_PROGRESS_INTERVAL`` seconds (default 5; 0: every batch and stage)."""
    if quiet:
        return SilentReporter()
    if sys.stderr.isatty():
        return RichReporter()
    setting = os.environ.get(INTERVAL_ENV) or str(DEFAULT_INTERVAL)
    try:
        interval = float(setting)
    except ValueError:
        raise UsageError(f"${INTERVAL_ENV} must be a number of seconds, got {setting!r}") from None
    return PlainReporter(interval)


def _size(count: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _clock_time(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
