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

With ``--sources`` (option ``sources``) a second column ``sources`` encoded ``json`` (sorted first, as
``MDSWriter`` sorts columns) holds each row's documents' sources (:mod:`packcli.export.sources`): a sample is then
both columns' byte sizes (uint32 each), the JSON text, then the array as above.

A shard's count and sample offsets come before its samples, so its rows are planned ahead from the source's row
offsets (:class:`RowLengths`, 4 bytes per row; with sources, each row's JSON text from the shards' source index),
and each sample is written as its row arrives: the tokens as they are in the source (verified ids are >= 0, so
their int32 bytes are the uint32 ones). A row whose length differs from its planned one (the source changed
meanwhile) fails the export. Memory: one record batch of row lengths and the planned rows of one shard (their JSON
text too: under the shard's 64 MiB), and one source shard's source index.
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
from packcli.export.sources import ShardSources
from packcli.format.shards import list_views, open_shard
from packcli.util.arrays import exclusive_cumsum

__all__ = ["MdsExporter", "RowLengths", "sample_header", "sample_sizes", "sourced_sample"]

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
# with --sources: MDSWriter(columns={"tokens": "ndarray:uint32", "sources": "json"})'s configuration
SOURCES_CONFIG = {
    **CONFIG,
    "column_encodings": ["json", "ndarray:uint32"],
    "column_names": ["sources", "tokens"],
    "column_sizes": [None, None],
}


class MdsExporter:
    view: Literal["documents", "rows"] = "rows"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        if packed.labelled:
            raise UsageError(
                "mds's text samples ('tokens') have no place for labels, and this is a fine-tuning output: export it "
                "--to bridge (packed SFT), olmo-core or nanotron (label masks)"
            )
        self.directory = directory
        self.config = SOURCES_CONFIG if options.get("sources") else CONFIG
        self.config_bytes = json.dumps(self.config, sort_keys=True).encode()
        self.rows = RowLengths(packed, 8 + len(self.config_bytes), bool(options.get("sources")))  # reads nothing yet
        self.planned = np.zeros(0, dtype=np.int64)  # the row lengths of the open shard
        self.sources: list[bytes] | None = None  # and their sources' JSON text, with --sources
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
            sizes = lengths[rows].tolist()
            if self.sources is None:
                parts = (
                    part
                    for length, start, end in zip(sizes, bounds[:-1], bounds[1:])
                    for part in (sample_header(length), body[start:end])
                )
            else:
                texts = self.sources[self.written : self.written + len(sizes)]
                parts = (
                    part
                    for length, text, start, end in zip(sizes, texts, bounds[:-1], bounds[1:])
                    for part in sourced_sample(length, text, body[start:end])
                )
            cast(BinaryIO, self.shard).writelines(parts)
            self.written += rows.stop - row
            row = rows.stop
            if self.written == len(self.planned):
                self._close_shard()
        self.totals.sequences += batch.rows
        self.totals.documents += len(batch.lengths)
        self.totals.tokens += len(batch.tokens)

    def _open(self) -> None:
        """Open the next shard: its rows planned from the lengths ahead, its count and offsets written first."""
        (self.planned, self.sources), self.written = self.rows.next_shard(), 0
        if not len(self.planned):
            raise PackcliError("more rows came than the shards' offsets hold; nothing was exported", self.directory)
        sizes = sample_sizes(self.planned, self.sources)
        offsets = exclusive_cumsum(sizes) + 4 + 4 * (len(sizes) + 1) + len(self.config_bytes)
        name = f"shard.{len(self.shards):05d}.mds"
        self.shard = open(self.directory / name, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by _close_shard)
        self.shard.write(np.uint32(len(sizes)).tobytes())
        self.shard.write(offsets.astype("<u4").tobytes())
        self.shard.write(self.config_bytes)
        raw = {"basename": name, "bytes": int(offsets[-1]), "hashes": {}}
        self.shards.append({"samples": len(sizes), "raw_data": raw, "zip_data": None, **self.config})

    def _close_shard(self) -> None:
        if self.shard is not None:
            self.shard.close()
            self.shard = None

    def close(self) -> None:
        self._close_shard()

    def finish(self) -> ExportTotals:
        if self.shard is not None or len(self.rows.next_shard()[0]):
            raise PackcliError("fewer rows came than the shards' offsets hold; nothing was exported", self.directory)
        with open(self.directory / "index.json", "w", encoding="utf-8") as index:
            json.dump({"version": 2, "shards": self.shards}, index, sort_keys=True)
        return self.totals


class RowLengths:
    """The packed rows' lengths in output order, read ahead of the rows themselves from the offsets of the shards'
    ``input_ids`` (4 bytes per row), so that a shard's count and sample offsets can be written before its samples;
    with ``sources``, each row's sources as JSON text too (from the shards' ``cu_seqlens`` offsets and source index).
    Memory: the lengths of one record batch and of the rows of one MDS shard (with their JSON text)."""

    def __init__(self, packed: PackedOutput, empty_shard: int, sources: bool) -> None:
        self.empty_shard = empty_shard  # an MDS shard's bytes before its samples
        self.batches = self._lengths(packed, sources)
        self.ahead = np.zeros(0, dtype=np.int64)  # read, not yet planned into a shard
        self.ahead_sources: list[bytes] | None = None

    @staticmethod
    def _lengths(packed: PackedOutput, sources: bool) -> Iterator[tuple[np.ndarray, list[bytes] | None]]:
        shard_sources = ShardSources(packed)
        for shard, path in enumerate(packed.shard_paths()):
            before = 0  # the shard's documents in its batches before
            for batch in open_shard(path):  # from a URL, streamed: one record batch in memory
                lengths = np.diff(list_views(batch.column("input_ids"))[1]).astype(np.int64)
                if not sources:
                    yield lengths, None
                    continue
                shard_sources.load(shard)
                documents = np.diff(list_views(batch.column("cu_seqlens"))[1]).astype(np.int64) - 1
                bounds = (before + np.concatenate(([0], np.cumsum(documents)))).tolist()
                before = bounds[-1]
                texts = [shard_sources.listed(a, b).encode() for a, b in zip(bounds, bounds[1:])]
                yield lengths, texts

    def next_shard(self) -> tuple[np.ndarray, list[bytes] | None]:
        """The lengths of the rows of the next shard (and their sources' JSON text, with sources): as many as fit
        in SIZE_LIMIT (one at least), counting each sample's bytes and 4 more, as ``MDSWriter`` does; empty when
        no row is left."""
        taken: list[np.ndarray] = []
        texts: list[bytes] | None = None
        room = SIZE_LIMIT - self.empty_shard
        while True:
            if not len(self.ahead):
                following = next(self.batches, None)
                if following is None:
                    break
                self.ahead, self.ahead_sources = following
                continue
            used = np.cumsum(sample_sizes(self.ahead, self.ahead_sources) + 4)
            fit = int(np.searchsorted(used, room, side="right"))
            if fit == 0 and not taken:
                fit = 1  # a sample over the limit goes alone
            taken.append(self.ahead[:fit])
            self.ahead = self.ahead[fit:]
            if self.ahead_sources is not None:
                texts = (texts or []) + self.ahead_sources[:fit]
                self.ahead_sources = self.ahead_sources[fit:]
            if len(self.ahead) or fit == 0:
                break
            room -= int(used[fit - 1])
        return (np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)), texts


def sample_sizes(lengths: np.ndarray, sources: list[bytes] | None = None) -> np.ndarray:
    """Each sample's bytes (int64): its header (:func:`sample_header`) and its uint32 tokens; with ``sources``, also
    each one's JSON text and its byte size (uint32)."""
    shape_bytes = np.select([lengths < 1 << 8, lengths < 1 << 16, lengths < 1 << 32], [1, 2, 4], 8)
    sizes = np.asarray(4 + 1 + shape_bytes + 4 * lengths, dtype=np.int64)
    if sources is not None:
        sizes += 4 + np.fromiter(map(len, sources), dtype=np.int64, count=len(sources))
    return sizes


@functools.lru_cache(maxsize=1 << 12)  # rows of one length are common (full rows): each header packed once
def sample_header(length: int) -> bytes:
    """What precedes a sample's ``length`` uint32 tokens: its column's byte size (uint32), then the ndarray header
    (1-D, the length in the smallest unsigned dtype that holds it)."""
    code = next(code for code in range(4) if length < 1 << (8 << code))
    return struct.pack(f"<IB{'BHIQ'[code]}", 1 + (1 << code) + 4 * length, (1 << 2) | code, length)


def sourced_sample(length: int, text: bytes, tokens: memoryview) -> tuple[bytes, bytes, bytes, memoryview]:
    """A sample with a ``sources`` column, in parts: both columns' byte sizes, the JSON text, the array's header, the
    tokens (``sample_header``'s size and header, the sources' size and text put before the header)."""
    header = sample_header(length)
    return struct.pack("<I", len(text)) + header[:4], text, header[4:], tokens
