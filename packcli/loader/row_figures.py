"""Figures of every row of an output, computed once per dataset from the shards' columns (a record batch at a time,
numpy over the flat buffers, no loop over rows): its cost under a :class:`RowCost` and its supervised tokens.

Supervised tokens follow the loader's label rule: the ``labels`` column (or ``input_ids``) with -100 at every
document's first token. Example: a row of documents [3, 2] without a labels column has 5 - 2 = 3; with labels
[-100 -100 7 8 9] it has 2 (positions 2 and 4: position 3 starts a document).
"""

from __future__ import annotations

import numpy as np

from packcli.format.columns import IGNORE_INDEX, LABELS_COLUMN
from packcli.loader.balance import RowCost, row_document_lengths
from packcli.loader.shard_rows import Columns, ShardRows
from packcli.util.arrays import exclusive_cumsum

__all__ = ["row_costs", "supervised_tokens"]


def _flat(columns: Columns, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A record batch's column as its rows' values back to back and int64 offsets from 0."""
    values, offsets = columns[name]
    return values[offsets[0] : offsets[-1]], offsets.astype(np.int64) - offsets[0]


def _documents(columns: Columns) -> tuple[np.ndarray, np.ndarray]:
    """The batch's document lengths and each row's offsets into them."""
    return row_document_lengths(*_flat(columns, "cu_seqlens"))


def row_costs(rows: ShardRows, cost: RowCost) -> np.ndarray:
    """Every row's cost (float64), by global row index."""
    parts = [cost.row_costs(*_documents(columns)) for columns in rows.batches]
    return np.concatenate(parts) if parts else np.zeros(0)


def supervised_tokens(rows: ShardRows) -> np.ndarray:
    """Every row's tokens whose label is not -100 under the loader's rule (int64), by global row index."""
    parts = []
    for columns in rows.batches:
        lengths, offsets = _documents(columns)
        if LABELS_COLUMN not in columns:  # input_ids are never -100: every token but the documents' first
            parts.append(np.diff(exclusive_cumsum(lengths)[offsets]) - np.diff(offsets))
            continue
        labels, label_offsets = _flat(columns, LABELS_COLUMN)
        counted = labels != IGNORE_INDEX
        counted[exclusive_cumsum(lengths)[:-1]] = False
        parts.append(np.diff(exclusive_cumsum(counted)[label_offsets]))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
