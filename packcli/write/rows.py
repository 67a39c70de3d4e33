"""Write packed rows: gather each row's tokens (a :data:`~packcli.write.layout.Gather`), lay out its columns, and
write them in packing order, in record batches of about BATCH_BYTES, as rolling shards. ``labels`` hold -100 at
every document's first token whatever the mask says (:func:`packcli.format.schema.ignore_document_starts`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from packcli.format.columns import IGNORE_INDEX, POSITIONS_COLUMN
from packcli.format.schema import ignore_document_starts, position_ids
from packcli.format.shards import ShardInfo, ShardWriter, list_array
from packcli.write.layout import Gather, Rows, batch_spans, cu_seqlens, row_token_offsets

__all__ = ["Supervision", "row_batch", "write_rows"]

# Small enough that numpy's temporaries are recycled by the allocator instead of faulted in afresh.
BATCH_BYTES = 8 << 20


@dataclass
class Supervision:
    """Fine-tuning totals gathered while writing: supervised tokens, and rows with none at all."""

    supervised_tokens: int = 0
    unsupervised_sequences: int = 0


def write_rows(
    directory: Path,
    tokens: Gather,
    mask: Gather | None,
    rows: Rows,
    schema: pa.Schema,
    shard_size: int,
    supervision: Supervision | None = None,
    prefix: str = "shard",
) -> list[ShardInfo]:
    """Write the rows, with labels given the supervision ``mask``, as shards named ``{prefix}-NNNNN.arrow``."""
    row_tokens = np.diff(row_token_offsets(rows.length, rows.offsets))
    # every column but cu_seqlens holds an int32 a token; cu_seqlens one a document, plus one
    row_bytes = 4 * (len(schema.names) - 1) * row_tokens + 4 * (np.diff(rows.offsets) + 1) + 16

    def batch_of(first: int, last: int) -> pa.RecordBatch:
        row_offsets = rows.offsets[first : last + 1] - rows.offsets[first]
        docs = slice(rows.offsets[first], rows.offsets[last])
        return row_batch(tokens, mask, rows.start[docs], rows.length[docs], row_offsets, schema, supervision)

    # The next batch is gathered on a helper thread while this one is written (the store's reads and the shard's
    # writes release the GIL): one batch ahead, in order, so the bytes are those of one thread. On an error the
    # executor waits for that one batch, no more.
    with ShardWriter(directory, schema, shard_size, prefix) as writer, ThreadPoolExecutor(1, "packcli-gather") as ahead:
        spans = batch_spans(row_bytes, min(shard_size, BATCH_BYTES))
        pending = [ahead.submit(batch_of, *span) for span in spans[:1]]
        for index, (first, last) in enumerate(spans):
            batch = pending.pop().result()
            pending = [ahead.submit(batch_of, *span) for span in spans[index + 1 : index + 2]]
            writer.write(
                batch,
                int(rows.offsets[last] - rows.offsets[first]),
                int(row_tokens[first:last].sum()),
                int(row_bytes[first:last].sum()),
            )
    return writer.shards


def row_batch(
    tokens: Gather,
    mask: Gather | None,
    starts: np.ndarray,
    lengths: np.ndarray,
    row_offsets: np.ndarray,
    schema: pa.Schema,
    supervision: Supervision | None = None,
) -> pa.RecordBatch:
    """One record batch of rows whose pieces (start, length) are listed in row order."""
    token_offsets = row_token_offsets(lengths, row_offsets)
    cu_values, cu_offsets = cu_seqlens(lengths, row_offsets)
    ids = tokens(starts, lengths)
    columns = [list_array(token_offsets, ids)]
    if POSITIONS_COLUMN in schema.names:
        columns.append(list_array(token_offsets, position_ids(lengths)))
    columns.append(list_array(cu_offsets, cu_values))
    if mask is not None:
        labels = ignore_document_starts(np.where(mask(starts, lengths), ids, IGNORE_INDEX), lengths)
        columns.append(list_array(token_offsets, labels))
        if supervision is not None:
            taken = (labels != IGNORE_INDEX).astype(np.int64)
            per_row = np.add.reduceat(taken, token_offsets[:-1]) if len(taken) else taken
            supervision.supervised_tokens += int(per_row.sum())
            supervision.unsupervised_sequences += int(np.count_nonzero(per_row == 0))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
