"""Where the pieces of split documents landed: each shard's ``split_pieces`` sidecar (docs/format.md).

``--overflow split`` cuts a long document into pieces that packing places in any rows of any shards; exports rebuild
the document from them. A shard's sidecar lists its pieces as ``[row, index, document, piece]``, a digest of the
piece's tokens and, with labels, ``first_supervised``. Invariant: every piece of every split document is listed
exactly once. Example: document 7 cut in two, its pieces in rows 3 and 0 of one shard -> ``[[0, 1, 7, 1], [3, 0, 7,
0]]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.format.manifest import SPLIT_PIECES
from packcli.format.shards import ShardInfo
from packcli.format.sidecars import (
    DIGEST_COLUMN,
    FIRST_SUPERVISED_COLUMN,
    PIECE_COLUMNS,
    SIDECARS,
    integer_array,
    piece_digest,
    write_sidecar,
)
from packcli.write.layout import Gather, Rows, batch_spans

__all__ = ["shard_entries", "split_pieces"]

DIGEST_BATCH_TOKENS = 1 << 22  # tokens gathered at once while digesting pieces


def split_pieces(rows: Rows, shards: list[ShardInfo]) -> list[np.ndarray]:
    """For each shard, the (k, 5) int64 ``[row, index, document, piece, entry]`` of the split documents' pieces it
    holds, by row then index; the last column is the piece's entry in ``rows`` (to digest it)."""
    entries = [np.zeros((0, 5), dtype=np.int64) for _ in shards]
    split = np.flatnonzero(rows.pieces > 1)  # in row order: by row, then index
    if not len(split) or not shards:
        return entries
    row = np.searchsorted(rows.offsets, split, side="right") - 1
    index = split - rows.offsets[row]
    shard_rows = np.array([shard.rows for shard in shards], dtype=np.int64)
    shard_ends = np.cumsum(shard_rows)
    shard = np.searchsorted(shard_ends, row, side="right")
    row_in_shard = row - (shard_ends[shard] - shard_rows[shard])
    table = np.stack([row_in_shard, index, rows.document[split], rows.piece[split], split], axis=1)
    bounds = np.searchsorted(shard, np.arange(len(shards) + 1))
    return [table[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def _digests(tokens: Gather, rows: Rows, listed: np.ndarray) -> np.ndarray:
    """:func:`~packcli.format.sidecars.piece_digest` of each listed piece, its tokens gathered a few million at a
    time."""
    index = listed[:, 4]
    lengths = rows.length[index]
    digests = np.zeros(len(index), dtype=np.int64)
    for first, last in batch_spans(lengths, DIGEST_BATCH_TOKENS):
        gathered = tokens(rows.start[index[first:last]], lengths[first:last])
        bounds = np.concatenate(([0], np.cumsum(lengths[first:last]))).tolist()
        for k in range(first, last):
            piece = gathered[bounds[k - first] : bounds[k - first + 1]]
            digests[k] = piece_digest(int(listed[k, 2]), int(listed[k, 3]), piece)
    return digests


def shard_entries(
    directory: Path, shards: list[ShardInfo], rows: Rows, tokens: Gather, mask: Gather | None
) -> list[dict[str, Any]]:
    """The manifest's ``shards``: each shard's entry, with a ``split_pieces`` sidecar written beside it in
    ``directory`` when it holds any (with ``first_supervised`` given the supervision ``mask``)."""
    entries: list[dict[str, Any]] = []
    for shard, listed in zip(shards, split_pieces(rows, shards)):
        entry: dict[str, Any] = shard.to_json()
        if len(listed):
            columns = [integer_array(listed[:, k], kind) for k, kind in enumerate(PIECE_COLUMNS.values())]
            columns.append(integer_array(_digests(tokens, rows, listed), pa.int64()))
            names = [*PIECE_COLUMNS, DIGEST_COLUMN]
            if mask is not None:  # the mask at the piece's first token; 0 for a first piece (never supervised)
                starts = rows.start[listed[:, 4]]
                supervised = mask(starts, np.ones(len(starts), dtype=np.int64)) & (listed[:, 3] > 0)
                columns.append(integer_array(supervised.astype(np.int8), pa.int8()))
                names.append(FIRST_SUPERVISED_COLUMN)
            table = pa.table(columns, names=names)
            entry[SIDECARS] = {SPLIT_PIECES: write_sidecar(directory, shard.file, SPLIT_PIECES, table)}
        entries.append(entry)
    return entries
