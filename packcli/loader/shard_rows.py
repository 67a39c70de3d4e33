"""Rows of a packed output as numpy views into the memory-mapped shards: nothing is copied, whatever the number of
record batches, and nothing imports pandas (the views are taken from the Arrow buffers themselves).

A shard holds several record batches (the writer bounds their size), each with its own values and offsets
buffers. Row ``i`` is found by a binary search over the batches' first rows, then sliced from that batch's
buffers, so reading a row touches only that row's pages of the file and adds no anonymous memory. Opening checks
the manifest's listing against the files (:mod:`packcli.format.listing`), so an edited manifest is refused. An
output packed with ``--no-position-ids`` has its rows' ``position_ids`` rebuilt from their ``cu_seqlens``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from packcli.format.columns import LABELS_COLUMN, POSITIONS_COLUMN, TOKEN_COLUMNS
from packcli.format.listing import check_listing, open_listed_shard
from packcli.format.schema import row_position_ids
from packcli.format.shards import list_views

__all__ = ["ShardRows"]

Columns = dict[str, tuple[np.ndarray, np.ndarray]]


class ShardRows:
    """Every row of an output's shards, by global index (shards in the manifest's order, rows in file order).

    Args:
        directory: the output directory.
        manifest: its validated manifest; the listing and each shard's counts are checked against the files.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        check_listing(directory, manifest)
        self.batches: list[Columns] = []
        starts = [0]
        for index in range(len(manifest["shards"])):
            table = open_listed_shard(directory, manifest, index)
            names = [name for name in (*TOKEN_COLUMNS, LABELS_COLUMN) if name in table.column_names]
            for batch in table.to_batches():
                self.batches.append({name: list_views(batch.column(name)) for name in names})
                starts.append(starts[-1] + batch.num_rows)
        self.starts = np.array(starts, dtype=np.int64)

    def row(self, index: int) -> dict[str, np.ndarray]:
        """Row ``index``: each column a view into its shard (``position_ids`` rebuilt where none is stored)."""
        batch = int(np.searchsorted(self.starts, index, side="right")) - 1
        local = index - int(self.starts[batch])
        columns = self.batches[batch]
        row = {name: values[offsets[local] : offsets[local + 1]] for name, (values, offsets) in columns.items()}
        if POSITIONS_COLUMN not in row:
            row[POSITIONS_COLUMN] = row_position_ids(row["cu_seqlens"])
        return row
