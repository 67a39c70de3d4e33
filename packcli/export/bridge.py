"""``--to bridge``: Megatron-Bridge's packed SFT Parquet, ``training_{N}.idx.parquet``, and its metadata JSON
``{N}_metadata.jsonl`` (N: the pack size).

One packcli row is one Parquet row: ``input_ids`` (list<int32>), ``seq_start_id`` (list<int32>: each document's
first position), ``loss_mask`` (list<uint8>, stored shifted by one: position t is 1 when token t + 1 is a target of
the same document; a document's last position is 0). Bridge's collate function trains the L - 1 positions of an
L-token document (its EOS is the last target), so the supervised positions are exactly packcli's (labels != -100;
for an output without labels, every token but each document's first). ``--pad-to-multiple M`` (M from 1 to
max_len) pads every document with EOS to a multiple of M tokens (loss 0), for context and sequence parallelism; N
is then the longest padded row if that exceeds max_len. The metadata is a one-element list: ``dataset_max_seqlen``
(the longest document), ``max_samples_per_bin`` (the most documents in a row), ``packing_factor`` (documents per
row), ``packing_efficiency`` (percent of N filled, on average), ``pack_size`` (N) and ``min_packed_seqlen`` (the
shortest row), both ratios rounded to 2 decimals as Bridge's packer rounds them. Rows are the packed rows: a split
document's pieces stay where packing put them (each is a document of its own there, as in packcli's loader).

The Parquet is written in row groups of one record batch, to a temporary name; it is renamed once N is known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.errors import UsageError
from packcli.export.base import ExportTotals
from packcli.export.reading import PackedOutput, RowBatch
from packcli.format.columns import INT32_MAX
from packcli.format.shards import int32_array, list_array
from packcli.util.arrays import exclusive_cumsum

__all__ = ["BridgeExporter", "bridge_row_group", "pad_multiple"]

SCHEMA = pa.schema(
    [("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())), ("seq_start_id", pa.list_(pa.int32()))]
)
PENDING = "training.idx.parquet.tmp"
# zstd at pyarrow's default level: a seventh of the uncompressed file for about 0.1 s more encoding on gcide (the
# codecs are measured in docs/export.md, Speed); Bridge reads any codec pyarrow reads
COMPRESSION = "zstd"


class BridgeExporter:
    view: Literal["documents", "rows"] = "rows"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        self.max_len = int(packed.manifest["max_len"])
        self.multiple = pad_multiple(options.get("pad_to_multiple", 1), self.max_len)
        if self.multiple > 1 and packed.eos_id is None:
            raise UsageError("--pad-to-multiple pads with EOS, and this output has none (packed with --no-eos)")
        self.directory = directory
        self.eos = packed.eos_id or 0
        # no dictionary pages or statistics, which token lists do not use and which took a quarter of the export's time
        self.writer = pq.ParquetWriter(
            directory / PENDING, SCHEMA, compression=COMPRESSION, use_dictionary=False, write_statistics=False
        )
        self.totals = ExportTotals()
        self.longest_document = 0
        self.most_documents = 0
        self.shortest_row: int | None = None
        self.longest_row = 0

    def write(self, batch: RowBatch) -> None:
        table, lengths, row_lengths, supervised = bridge_row_group(batch, self.multiple, self.eos)
        self.writer.write_table(table)
        self.totals.sequences += batch.rows
        self.totals.documents += len(lengths)
        self.totals.tokens += int(row_lengths.sum())
        self.totals.padding_tokens += int(row_lengths.sum()) - len(batch.tokens)
        self.totals.supervised_tokens += supervised
        if batch.rows:
            self.longest_document = max(self.longest_document, int(lengths.max()))
            self.most_documents = max(self.most_documents, int(np.diff(batch.row_documents).max()))
            shortest = int(row_lengths.min())
            self.shortest_row = shortest if self.shortest_row is None else min(self.shortest_row, shortest)
            self.longest_row = max(self.longest_row, int(row_lengths.max()))

    def close(self) -> None:
        self.writer.close()

    def finish(self) -> ExportTotals:
        self.close()
        pack_size = max(self.max_len, self.longest_row)
        rows = max(self.totals.sequences, 1)
        metadata = {
            "dataset_max_seqlen": self.longest_document,
            "max_samples_per_bin": self.most_documents,
            "packing_factor": round(self.totals.documents / rows, 2),
            "packing_efficiency": round(self.totals.tokens / rows / pack_size * 100, 2),
            "pack_size": pack_size,
            "min_packed_seqlen": self.shortest_row or 0,
        }
        (self.directory / PENDING).rename(self.directory / f"training_{pack_size}.idx.parquet")
        (self.directory / f"{pack_size}_metadata.jsonl").write_text(json.dumps([metadata]), encoding="utf-8")
        return self.totals


def pad_multiple(value: Any, max_len: int) -> int:
    """``--pad-to-multiple``, checked: a whole number from 1 (no padding) to ``max_len``.

    Raises:
        UsageError: anything else (a multiple above max_len would pad every document past the pack size).
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_len:
        raise UsageError(
            f"--pad-to-multiple {value!r}: give a whole number from 1 to the output's max_len {max_len} (a larger "
            "multiple would pad every document past the pack size)"
        )
    return value


def bridge_row_group(batch: RowBatch, multiple: int, eos: int) -> tuple[pa.Table, np.ndarray, np.ndarray, int]:
    """The Parquet rows of one batch of packed rows; the (padded) document and row lengths; the supervised count."""
    lengths = batch.lengths
    source_starts = exclusive_cumsum(lengths)
    target = np.ones(len(batch.tokens), dtype=bool) if batch.mask is None else batch.mask.copy()
    target[source_starts[:-1]] = False  # a document's first token is never a target
    if multiple == 1:  # the tokens as stored; position t predicts token t + 1
        padded, doc_starts, tokens = lengths, source_starts, batch.tokens
        loss = np.zeros(len(tokens), dtype=np.uint8)
        loss[:-1] = target[1:]
    else:  # each stored token goes to its document's start plus its place in the document
        padded = -(-lengths // multiple) * multiple
        doc_starts = exclusive_cumsum(padded)
        # before the padded batch is allocated: its list<int32> offsets hold at most INT32_MAX tokens
        if int(doc_starts[-1]) > INT32_MAX:
            raise UsageError(
                f"--pad-to-multiple {multiple} pads the {len(lengths):,} documents of {batch.rows:,} row(s) to "
                f"{int(doc_starts[-1]):,} tokens, more than the {INT32_MAX:,} a Parquet list<int32> holds: choose a "
                "smaller multiple"
            )
        tokens = np.full(int(doc_starts[-1]), eos, dtype=np.int32)
        place = np.arange(len(batch.tokens)) + np.repeat(doc_starts[:-1] - source_starts[:-1], lengths)
        tokens[place] = batch.tokens
        loss = np.zeros(len(tokens), dtype=np.uint8)
        loss[place[target] - 1] = 1
    row_starts = doc_starts[batch.row_documents]
    starts = doc_starts[:-1] - np.repeat(row_starts[:-1], np.diff(batch.row_documents))
    columns = [
        list_array(row_starts, tokens),
        pa.ListArray.from_arrays(int32_array(row_starts), _uint8_array(loss)),
        list_array(batch.row_documents, starts),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA), padded, np.diff(row_starts), int(np.count_nonzero(target))


def _uint8_array(values: np.ndarray) -> pa.Array:
    """A zero-copy Arrow uint8 array over a numpy one (``pa.array`` would first import pandas)."""
    return pa.Array.from_buffers(pa.uint8(), len(values), [None, pa.py_buffer(values)])
