"""What pyarrow reads an input from: the local file (Arrow IPC memory-mapped, as an output's shard is) or, for a URL,
a seekable stream of its object, so a reader of Parquet or Arrow takes either without a branch of its own."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from packcli.format.shards import open_file as arrow_source
from packcli.storage.urls import UrlPath

__all__ = ["arrow_source", "parquet_source"]


def parquet_source(path: Path) -> Path | IO[bytes]:
    """What ``pq.ParquetFile`` opens: the path, or the object's stream."""
    return path.open("rb") if isinstance(path, UrlPath) else path
