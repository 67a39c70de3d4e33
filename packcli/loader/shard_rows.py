"""Rows of a packed output as numpy views into the memory-mapped shards: nothing is copied, whatever the number of
record batches.

A shard holds several record batches (the writer bounds their size), each with its own values and offsets
buffers. Row ``i`` is found by a binary search over the batches' first rows, then sliced from that batch's
buffers, so reading a row touches only that row's pages of the file and adds no anonymous memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.format.columns import LABELS_COLUMN, TOKEN_COLUMNS
from packcli.format.shards import read_shard

__all__ = ["ShardRows"]

Columns = dict[str, tuple[np.ndarray, np.ndarray]]


def list_views(array: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A ``list<int32>`` array as (values, offsets) numpy views of its own buffers; row k is
    ``values[offsets[k]:offsets[k + 1]]``. Raises where a view is impossible (nulls), never copies."""
    return array.values.to_numpy(zero_copy_only=True), array.offsets.to_numpy(zero_copy_only=True)


class ShardRows:
    """Every row of the listed shards, by global index (shards in order, rows in file order).

    Args:
        files: the shard files, in the manifest's order.
        rows: the row count the manifest gives; a mismatch is an error naming both.
    """

    def __init__(self, files: list[Path], rows: int) -> None:
        self.batches: list[Columns] = []
        starts = [0]
        for path in files:
            table = read_shard(path)
            names = [*TOKEN_COLUMNS, *([LABELS_COLUMN] if LABELS_COLUMN in table.column_names else [])]
            for batch in table.to_batches():
                self.batches.append({name: list_views(batch.column(name)) for name in names})
                starts.append(starts[-1] + batch.num_rows)
        self.starts = np.array(starts, dtype=np.int64)
        if starts[-1] != rows:
            raise PackcliError(f"the shards hold {starts[-1]} rows, the manifest says {rows}: rerun packcli verify")

    def row(self, index: int) -> dict[str, np.ndarray]:
        """Row ``index``: each column a view into its shard."""
        batch = int(np.searchsorted(self.starts, index, side="right")) - 1
        local = index - int(self.starts[batch])
        columns = self.batches[batch]
        return {name: values[offsets[local] : offsets[local + 1]] for name, (values, offsets) in columns.items()}
