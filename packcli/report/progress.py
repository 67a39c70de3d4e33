"""Progress reporting for long runs: a protocol the pipeline calls, a silent default, and a rich bar on stderr."""

from __future__ import annotations

from typing import Any, Protocol


class Reporter(Protocol):
    """What the pipeline tells about its progress."""

    def start(self, total_bytes: int) -> None:
        """Reading begins; ``total_bytes`` is the inputs' size on disk."""
        ...

    def advance(self, bytes_done: int, documents: int, tokens: int) -> None:
        """Progress so far: input bytes read, documents and tokens stored."""
        ...

    def stage(self, description: str) -> None:
        """A new stage after tokenizing ("packing", "writing")."""
        ...

    def close(self) -> None:
        """Done (called more than once is fine)."""
        ...


class SilentReporter:
    """Reports nothing: without a TTY, with --quiet, and in library use."""

    def start(self, total_bytes: int) -> None:
        pass

    def advance(self, bytes_done: int, documents: int, tokens: int) -> None:
        pass

    def stage(self, description: str) -> None:
        pass

    def close(self) -> None:
        pass


class RichReporter:
    """A progress bar on stderr: input bytes read, documents, tokens per second, time left."""

    def __init__(self) -> None:
        from rich.console import Console  # imported here: without a terminal, rich is never loaded
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[documents]:,} docs  {task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
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
