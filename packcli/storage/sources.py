"""What pyarrow reads an input file from: the local file itself (memory-mapped for Arrow IPC, as
:func:`packcli.format.shards.open_file` opens a file of an output), or for a URL a seekable stream of its object
(:func:`~packcli.storage.objects.open_object`), so a reader of Parquet or Arrow takes either without a branch of its
own."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pyarrow as pa

from packcli.format.shards import open_file
from packcli.storage.urls import UrlPath

__all__ = ["arrow_source", "parquet_source"]


def parquet_source(path: Path) -> Path | IO[bytes]:
    """What ``pq.ParquetFile`` opens: the path, or the object's stream."""
    return path.open("rb") if isinstance(path, UrlPath) else path


def arrow_source(path: Path) -> pa.NativeFile:
    """What ``pa.ipc`` opens: the memory-mapped file, or the object's stream."""
    return open_file(path)
