"""The progress interface every long stage reports through (bytes read, documents, tokens, the stage's name), and
the silent default; the displays on stderr are :mod:`packcli.cli.progress`'s.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Reporter", "SilentReporter"]


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
