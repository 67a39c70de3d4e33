"""What pyarrow reads a file from, an input or a file of an output: the local file itself (memory-mapped for Arrow
IPC), or for a URL a seekable stream of its object (:func:`~packcli.storage.objects.open_object`), so a reader of
Parquet or Arrow takes either without a branch of its own, and no object is copied to local disk."""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO

import pyarrow as pa

from packcli.storage.urls import UrlPath

__all__ = ["arrow_buffer", "arrow_source", "parquet_source"]


def parquet_source(path: Path) -> Path | IO[bytes]:
    """What ``pq.ParquetFile`` opens: the path, or the object's stream."""
    return path.open("rb") if isinstance(path, UrlPath) else path


def arrow_source(path: Path) -> pa.NativeFile:
    """What ``pa.ipc`` opens: the memory-mapped file, or the object's stream."""
    return pa.PythonFile(path.open("rb"), mode="r") if isinstance(path, UrlPath) else pa.memory_map(str(path))


def arrow_buffer(path: Path) -> pa.Buffer:
    """The whole file as one buffer: memory-mapped, or for a URL its object read into memory block by block (what
    ``verify`` hashes and checks at once, one shard at a time)."""
    if not isinstance(path, UrlPath):
        return pa.memory_map(str(path)).read_buffer()
    with path.open("rb") as stream:
        data = bytearray(stream.seek(0, io.SEEK_END))
        stream.seek(0)
        view, filled = memoryview(data), 0
        while filled < len(data) and (count := stream.readinto(view[filled:])):
            filled += count
    return pa.py_buffer(data if filled == len(data) else data[:filled])
