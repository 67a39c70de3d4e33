"""Shard files, the reader beside the writer: Arrow IPC stream format, uncompressed (memory-mappable), written
atomically and hashed as written; the schema is :mod:`packcli.format.schema`'s. A shard on disk is read
memory-mapped; one in an output on object storage is streamed from its object (no local copy).

Each shard is written as ``shard-NNNNN.arrow.tmp``, fsynced, then renamed; on any error the writer removes what it
wrote and the error propagates. A shard rolls over before a batch would take it past ``shard_size`` bytes.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.format.schema import SHARD_COLUMN_TYPE

__all__ = [
    "ShardInfo",
    "ShardWriter",
    "file_buffer",
    "flat_list_column",
    "int32_array",
    "list_array",
    "list_views",
    "open_file",
    "open_shard",
    "read_shard",
    "shard_name",
]

HASH_AHEAD = 32 << 20  # bytes written but not yet hashed, at most (each holds its buffer alive)
SYNC_BYTES = 8 << 20  # a shard's written part is flushed to disk early every this many bytes
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def int32_array(values: np.ndarray) -> pa.Array:
    """A zero-copy Arrow int32 array over a numpy array (``pa.array`` would first import pandas: 0.2 s)."""
    values = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def list_array(offsets: np.ndarray, values: np.ndarray) -> pa.ListArray:
    """An Arrow ``list<int32>`` column from int32 values and row offsets."""
    return pa.ListArray.from_arrays(int32_array(offsets), int32_array(values))


def shard_name(index: int, prefix: str = "shard") -> str:
    """``shard-00007.arrow``; a prefix lets partitions of a distributed run name their own shards."""
    return f"{prefix}-{index:05d}.arrow"


@dataclass(frozen=True)
class ShardInfo:
    """One shard's manifest entry."""

    file: str
    rows: int
    documents: int
    tokens: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class _HashingFile:
    """A binary sink that hashes every byte on its way to disk (so no second read is needed).

    Two helper threads keep this off the writer's path (hashlib and fdatasync release the GIL): one hashes the
    buffers in order, at most HASH_AHEAD bytes behind the writes; the other flushes the written part to disk every
    SYNC_BYTES, so the fsync at :meth:`close` waits for little more than the last batch.
    """

    def __init__(self, path: Path) -> None:
        self.file: IO[bytes] = open(path, "wb")  # noqa: SIM115 (closed by close(), after fsync)
        self.hash = hashlib.sha256()
        self.size = 0
        self.closed = False
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packcli-hash")
        self._hashing: deque[tuple[Future[None], int]] = deque()  # in write order, with their sizes
        self._hashing_bytes = 0
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packcli-sync")
        self._syncs: list[Future[None]] = []
        self._unsynced = 0

    def write(self, data: bytes | memoryview) -> int:
        size = len(data)
        self._hashing.append((self._hasher.submit(self.hash.update, data), size))  # holds ``data`` until hashed
        self._hashing_bytes += size
        while self._hashing_bytes > HASH_AHEAD:
            future, hashed = self._hashing.popleft()
            future.result()
            self._hashing_bytes -= hashed
        self.size += size
        written = self.file.write(data)
        self._unsynced += size
        if self._unsynced >= SYNC_BYTES and (not self._syncs or self._syncs[-1].done()):
            self.file.flush()
            self._syncs.append(self._syncer.submit(_fdatasync, self.file.fileno()))
            self._unsynced = 0
        return written

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        """Wait for the hash and the early flushes (raising their errors: a failed fdatasync may not show again),
        then fsync and close."""
        if not self.closed:
            self.closed = True
            try:
                self.file.flush()
                for future in [*(future for future, _ in self._hashing), *self._syncs]:
                    future.result()
                os.fsync(self.file.fileno())
            finally:
                self._stop()
                self.file.close()

    def discard(self) -> None:
        """Stop the helpers and close the file, whatever state they are in (the file is deleted after)."""
        self.closed = True
        self._stop()
        self.file.close()

    def _stop(self) -> None:
        for helper in (self._hasher, self._syncer):
            helper.shutdown(wait=True, cancel_futures=True)


class ShardWriter:
    """Write record batches into rolling shards in ``directory``; use as a context manager.

    Args:
        directory: where shards go (it exists).
        schema: the shard schema (see :func:`shard_schema`).
        shard_size: the byte budget of one shard.
        prefix: the shard name prefix.
    """

    def __init__(self, directory: Path, schema: pa.Schema, shard_size: int, prefix: str = "shard") -> None:
        self.directory = directory
        self.schema = schema
        self.shard_size = shard_size
        self.prefix = prefix
        self.shards: list[ShardInfo] = []
        self._sink: _HashingFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._counts = [0, 0, 0]  # rows, documents, tokens of the open shard
        self._bytes = 0

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self._close_shard()
        else:
            self.abort()

    def _tmp_path(self) -> Path:
        return self.directory / (shard_name(len(self.shards), self.prefix) + ".tmp")

    def write(self, batch: pa.RecordBatch, documents: int, tokens: int, nbytes: int) -> None:
        """Append one batch of rows; ``nbytes`` is its payload estimate used for roll-over."""
        if self._writer is not None and self._bytes + nbytes > self.shard_size:
            self._close_shard()
        if self._writer is None:
            self._sink = _HashingFile(self._tmp_path())
            self._writer = pa.ipc.new_stream(pa.PythonFile(self._sink, mode="w"), self.schema)
            self._counts, self._bytes = [0, 0, 0], 0
        self._writer.write_batch(batch)
        self._bytes += nbytes
        self._counts = [
            self._counts[0] + batch.num_rows,
            self._counts[1] + documents,
            self._counts[2] + tokens,
        ]

    def _close_shard(self) -> None:
        if self._writer is None or self._sink is None:
            return
        self._writer.close()
        self._sink.close()
        tmp = self._tmp_path()
        final = tmp.with_suffix("")
        os.replace(tmp, final)
        rows, documents, tokens = self._counts
        self.shards.append(ShardInfo(final.name, rows, documents, tokens, self._sink.size, self._sink.hash.hexdigest()))
        self._writer, self._sink = None, None

    def abort(self) -> None:
        """Remove the open temporary shard and every shard this writer finished."""
        if self._sink is not None:
            self._sink.discard()
            self._tmp_path().unlink(missing_ok=True)
        for info in self.shards:
            (self.directory / info.file).unlink(missing_ok=True)
        self._writer, self._sink = None, None


def open_file(path: Path) -> pa.NativeFile:
    """A file of an output (a shard, or a file beside it) as pyarrow reads it: memory-mapped on disk; at a URL (a
    :class:`~packcli.storage.urls.UrlPath`, which ``os.fspath`` refuses) a seekable stream of its object, each
    read fetched then and retried, nothing copied to disk.

    Raises:
        PackcliError: on disk, ``path`` is not a regular file (a pipe, a device), named.
    """
    try:
        local = os.fspath(path)
    except TypeError:
        return pa.PythonFile(path.open("rb"), mode="r")
    if not stat.S_ISREG(os.stat(local).st_mode):  # opening a pipe would wait for a writer, for good
        raise PackcliError("not a regular file (a pipe, a device or a socket): not a file packcli wrote", path)
    if _utf8_path(local):
        return pa.memory_map(local)
    with open(local, "rb") as handle:  # pyarrow opens UTF-8 paths alone; Python's mmap takes any
        size = os.fstat(handle.fileno()).st_size
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    return pa.BufferReader(pa.py_buffer(mapped))


def _utf8_path(local: str) -> bool:
    """Whether ``local`` names its file in UTF-8 (Linux allows any bytes; Python holds the others as surrogates)."""
    try:
        local.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def file_buffer(path: Path) -> pa.Buffer:
    """The whole of a file of an output as one buffer: memory-mapped on disk, read into memory from a URL."""
    return open_file(path).read_buffer()


def open_shard(path: Path) -> pa.ipc.RecordBatchStreamReader:
    """The record batches of one shard, local (memory-mapped) or at a URL (streamed: a batch is fetched when read)."""
    return pa.ipc.open_stream(open_file(path))


def read_shard(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One shard as a table: memory-mapped on disk (zero-copy: only the listed columns' pages are ever read), or
    read whole into memory from a URL."""
    table = open_shard(path).read_all()
    return table.select(columns) if columns is not None else table


def list_views(array: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A ``list<int32>`` array as (values, int32 offsets) read-only numpy views of its own Arrow buffers; row k is
    ``values[offsets[k]:offsets[k + 1]]``. Never copies, and never imports pandas (``Array.to_numpy`` does).

    Raises:
        ValueError: the array is not a ``list<int32>`` without nulls (every shard column is one).
    """
    if array.type != SHARD_COLUMN_TYPE or array.null_count or array.values.null_count:
        raise ValueError(f"a {array.type} column with {array.null_count} nulls is not a list<int32> without nulls")
    child = array.values  # the whole child array: the list's own offset is in its offsets buffer
    return _int32_view(child.buffers()[1], child.offset, len(child)), _int32_view(
        array.buffers()[1], array.offset, len(array) + 1
    )


def _int32_view(buffer: pa.Buffer | None, start: int, count: int) -> np.ndarray:
    if buffer is None:  # an empty array may have no buffer at all
        return np.zeros(count, dtype=np.int32)
    return np.frombuffer(buffer, dtype=np.int32, count=count, offset=4 * start)


def flat_list_column(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (values, int64 row offsets from 0) numpy arrays: for one chunk of ``list<int32>`` without
    nulls, the values are a view of its buffer (no copy, no pandas import); another list of integers (a damaged
    shard, which verify reports) is converted."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    try:
        values, offsets = list_views(array)
    except ValueError:
        values, offsets = array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy()
    offsets = offsets.astype(np.int64)
    return values[offsets[0] : offsets[-1]], offsets - offsets[0]
