"""A local file of an output memory-mapped as one Arrow buffer whose pages can be let go once read.

A memory-mapped file read from end to end (a shard hashed and checked by ``verify``, the shards an export reads)
keeps every page it touched resident in the process (its RSS) until it is unmapped: a 512 MiB shard holds 512 MiB,
and an export that also reads split pieces out of order from a second mapping of a shard held two. Releasing pages
(``madvise(MADV_DONTNEED)``) drops them from the process only: the kernel keeps them in its page cache and maps them
again if they are read again, so a release never changes what is read, only what stays resident. Where the platform
has no such advice, release does nothing.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import pyarrow as pa

__all__ = ["ReleasableMap"]


class ReleasableMap:
    """``path`` mapped read-only: ``buffer`` is the whole file (zero-copy); :meth:`release` lets pages go."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as handle:
            empty = handle.seek(0, 2) == 0
            self.map = None if empty else mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self.buffer = pa.py_buffer(self.map if self.map is not None else b"")
        self.released = 0  # the bytes before it let go by release_before

    def release(self, start: int = 0, stop: int | None = None) -> None:
        """Let go of the pages of bytes ``start`` to ``stop`` (the end when None) of the file, page-aligned."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if self.map is None or advice is None:
            return
        stop = len(self.map) if stop is None else min(stop, len(self.map))
        start = max(0, start - start % mmap.PAGESIZE)
        if stop > start:
            self.map.madvise(advice, start, stop - start)

    def release_before(self, address: int, keep: int = 0) -> None:
        """Let go of the pages before ``address`` (a memory address inside ``buffer``), less the last ``keep`` bytes
        before it (read by someone else still, who would only map them again)."""
        stop = address - self.buffer.address - keep
        if stop > self.released:
            self.release(self.released, stop)
            self.released = stop
