"""``--to mds``: MosaicML streaming's MDS shards, as llm-foundry's text dataset reads them: ``index.json`` and
``shard.NNNNN.mds``, one packed row per sample in a single column ``tokens`` encoded ``ndarray:uint32`` (its
documents back to back, each ending in EOS).

Shard layout (``MDSWriter`` without compression): the sample count (uint32), the sample offsets from the start of
the file (uint32, count + 1), the writer's configuration as sorted JSON, then the samples. A sample: its column's
byte size (uint32), then the array: one byte ``ndim << 2 | shape dtype code`` (code 0-3: uint8-uint64, the
smallest holding the length), the length in that dtype, and the tokens as little-endian uint32. A shard closes
before a sample would take it past 64 MiB, counting 4 bytes per sample beside its bytes, as ``MDSWriter`` does.
Rows are the packed rows: a split document's pieces stay in their rows (MDS has no document index). Labels have
no column here: a fine-tuning output is refused.

A shard's count and sample offsets come before its samples, so its rows are planned ahead from the source's row
offsets (:class:`RowLengths`, 4 bytes per row), and each sample is written as its row arrives: the tokens as they
are in the source (verified ids are >= 0, so their int32 bytes are the uint32 ones). A row whose length differs
from its planned one (the source changed meanwhile) fails the export. Memory: one record batch of row lengths and
the planned lengths of one shard.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal, cast

import numpy as np

from packcli.errors import PackcliError, UsageError
from packcli.export.base import ExportTotals
from packcli.export.reading import PackedOutput, RowBatch
from packcli.format.shards import list_views, open_shard
from packcli.util.arrays import exclusive_cumsum

__all__ = ["MdsExporter", "RowLengths", "sample_header", "sample_sizes"]

SIZE_LIMIT = 1 << 26
CONFIG = {
    "column_encodings": ["ndarray:uint32"],
    "column_names": ["tokens"],
    "column_sizes": [None],
    "compression": None,
    "format": "mds",
    "hashes": [],
    "size_limit": SIZE_LIMIT,
    "version": 2,
}
CONFIG_BYTES = json.dumps(CONFIG, sort_keys=True).encode()
WRITE_BUFFER = 1 << 23  # the samples (a header and a row of tokens each) reach the file in few large writes
EMPTY_SHARD = 8 + len(CONFIG_BYTES)  # a shard's bytes before its samples, as MDSWriter counts them


class MdsExporter:
    view: Literal["documents", "rows"] = "rows"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        if packed.labelled:
            raise UsageError(
                "mds's text samples ('tokens') have no place for labels, and this is a fine-tuning output: export it "
                "--to bridge (packed SFT), olmo-core or nanotron (label masks)"
            )
        self.directory = directory
        self.rows = RowLengths(packed)  # reads nothing until the first batch
        self.planned = np.zeros(0, dtype=np.int64)  # the row lengths of the open shard
        self.written = 0  # of its rows
        self.shard: BinaryIO | None = None
        self.shards: list[dict[str, Any]] = []
        self.totals = ExportTotals()

    def write(self, batch: RowBatch) -> None:
        # ids are >= 0 (verified), so their little-endian int32 bytes are their uint32 bytes: no copy
        body = np.ascontiguousarray(batch.tokens, dtype="<i4").view("<u4").data.cast("B")
        lengths = np.diff(batch.row_offsets)
        row = 0
        while row < batch.rows:
            if self.shard is None:
                self._open()
            rows = slice(row, row + min(batch.rows - row, len(self.planned) - self.written))
            if not np.array_equal(lengths[rows], self.planned[self.written : self.written + rows.stop - row]):
                raise PackcliError(
                    "a shard changed while it was exported (a row's length differs from its offsets read before); "
                    "nothing was exported",
                    self.directory,
                )
            bounds = (batch.row_offsets[rows.start : rows.stop + 1] * 4).tolist()
            cast(BinaryIO, self.shard).writelines(
                part
                for length, start, end in zip(lengths[rows].tolist(), bounds[:-1], bounds[1:])
                for part in (sample_header(length), body[start:end])
            )
            self.written += rows.stop - row
            row = rows.stop
            if self.written == len(self.planned):
                self._close_shard()
        self.totals.sequences += batch.rows
        self.totals.documents += len(batch.lengths)
        self.totals.tokens += len(batch.tokens)

    def _open(self) -> None:
        """Open the next shard: its rows planned from the lengths ahead, its count and offsets written first."""
        self.planned, self.written = self.rows.next_shard(), 0
        if not len(self.planned):
            raise PackcliError("more rows came than the shards' offsets hold; nothing was exported", self.directory)
        sizes = sample_sizes(self.planned)
        offsets = exclusive_cumsum(sizes) + 4 + 4 * (len(sizes) + 1) + len(CONFIG_BYTES)
        name = f"shard.{len(self.shards):05d}.mds"
        self.shard = open(self.directory / name, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by _close_shard)
        self.shard.write(np.uint32(len(sizes)).tobytes())
        self.shard.write(offsets.astype("<u4").tobytes())
        self.shard.write(CONFIG_BYTES)
        raw = {"basename": name, "bytes": int(offsets[-1]), "hashes": {}}
        self.shards.append({"samples": len(sizes), "raw_data": raw, "zip_data": None, **CONFIG})

    def _close_shard(self) -> None:
        if self.shard is not None:
            self.shard.close()
            self.shard = None

    def close(self) -> None:
        self._close_shard()

    def finish(self) -> ExportTotals:
        if self.shard is not None or len(self.rows.next_shard()):
            raise PackcliError("fewer rows came than the shards' offsets hold; nothing was exported", self.directory)
        with open(self.directory / "index.json", "w", encoding="utf-8") as index:
            json.dump({"version": 2, "shards": self.shards}, index, sort_keys=True)
        return self.totals


class RowLengths:
    """The packed rows' lengths in output order, read ahead of the rows themselves from the offsets of the shards'
    ``input_ids`` (4 bytes per row), so that a shard's count and sample offsets can be written before its samples.
    Memory: the lengths of one record batch and of the rows of one MDS shard."""

    def __init__(self, packed: PackedOutput) -> None:
        self.batches = self._lengths(packed)
        self.ahead = np.zeros(0, dtype=np.int64)  # read, not yet planned into a shard

    @staticmethod
    def _lengths(packed: PackedOutput) -> Iterator[np.ndarray]:
        for path in packed.shard_paths():
            for batch in open_shard(path):  # from a URL, streamed: one record batch in memory
                yield np.diff(list_views(batch.column("input_ids"))[1]).astype(np.int64)

    def next_shard(self) -> np.ndarray:
        """The lengths of the rows of the next shard: as many as fit in SIZE_LIMIT (one at least), counting each
        sample's bytes and 4 more, as ``MDSWriter`` does; empty when no row is left."""
        taken: list[np.ndarray] = []
        room = SIZE_LIMIT - EMPTY_SHARD
        while True:
            if not len(self.ahead):
                following = next(self.batches, None)
                if following is None:
                    break
                self.ahead = following
                continue
            used = np.cumsum(sample_sizes(self.ahead) + 4)
            fit = int(np.searchsorted(used, room, side="right"))
            if fit == 0 and not taken:
                fit = 1  # a sample over the limit goes alone
            taken.append(self.ahead[:fit])
            self.ahead = self.ahead[fit:]
            if len(self.ahead) or fit == 0:
                break
            room -= int(used[fit - 1])
        return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


def sample_sizes(lengths: np.ndarray) -> np.ndarray:
    """Each sample's bytes (int64): its header (:func:`sample_header`) and its uint32 tokens."""
    shape_bytes = np.select([lengths < 1 << 8, lengths < 1 << 16, lengths < 1 << 32], [1, 2, 4], 8)
    return np.asarray(4 + 1 + shape_bytes + 4 * lengths, dtype=np.int64)


@functools.lru_cache(maxsize=1 << 12)  # rows of one length are common (full rows): each header packed once
def sample_header(length: int) -> bytes:
    """What precedes a sample's ``length`` uint32 tokens: its column's byte size (uint32), then the ndarray header
    (1-D, the length in the smallest unsigned dtype that holds it)."""
    code = next(code for code in range(4) if length < 1 << (8 << code))
    return struct.pack(f"<IB{'BHIQ'[code]}", 1 + (1 << code) + 4 * length, (1 << 2) | code, length)
