"""Rows of a packed output as numpy views into the memory-mapped shards: nothing is copied, whatever the number of
record batches, and nothing imports pandas (the views are taken from the Arrow buffers themselves).

A shard holds several record batches (the writer bounds their size), each with its own values and offsets
buffers. Row ``i`` is found by a binary search over the batches' first rows, then sliced from that batch's
buffers, so reading a row touches only that row's pages of the file and adds no anonymous memory. Opening checks
the manifest's listing against the files (:mod:`packcli.format.listing`), so an edited manifest is refused. An
output packed with ``--no-position-ids`` has its rows' ``position_ids`` rebuilt from their ``cu_seqlens``. A row's
documents' sources come from its shard's source index, read on the first row of that shard asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError
from packcli.format.columns import LABELS_COLUMN, POSITIONS_COLUMN, TOKEN_COLUMNS
from packcli.format.listing import check_listing, open_listed_shard
from packcli.format.schema import row_position_ids
from packcli.format.shards import list_views
from packcli.format.sidecars import SIDECARS, SOURCES, Sources, read_sources

__all__ = ["ShardRows", "check_sources"]

Columns = dict[str, tuple[np.ndarray, np.ndarray]]
NO_SOURCES = "keeps no source index (packed before packcli kept one): repack it to have sources=True"


class ShardRows:
    """Every row of an output's shards, by global index (shards in the manifest's order, rows in file order).

    Args:
        directory: the output directory.
        manifest: its validated manifest; the listing and each shard's counts are checked against the files.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        check_listing(directory, manifest)
        self.directory, self.entries = directory, manifest["shards"]
        self.batches: list[Columns] = []
        starts = [0]
        self.shard_of_batch: list[int] = []
        self.first_document: list[int] = []  # per batch: the documents of its shard before it
        for index in range(len(self.entries)):
            table = open_listed_shard(directory, manifest, index)
            names = [name for name in (*TOKEN_COLUMNS, LABELS_COLUMN) if name in table.column_names]
            documents = 0
            for batch in table.to_batches():
                self.batches.append({name: list_views(batch.column(name)) for name in names})
                starts.append(starts[-1] + batch.num_rows)
                self.shard_of_batch.append(index)
                self.first_document.append(documents)
                offsets = self.batches[-1]["cu_seqlens"][1]  # a row's cu_seqlens: its documents + 1 entries
                documents += int(offsets[-1]) - int(offsets[0]) - batch.num_rows
        self.starts = np.array(starts, dtype=np.int64)
        self.sources: dict[int, Sources] = {}  # shard -> its source index, read when first asked for

    def _locate(self, index: int) -> tuple[int, int]:
        """The record batch holding row ``index`` and the row's place in it."""
        batch = int(np.searchsorted(self.starts, index, side="right")) - 1
        return batch, index - int(self.starts[batch])

    def row(self, index: int) -> dict[str, np.ndarray]:
        """Row ``index``: each column a view into its shard (``position_ids`` rebuilt where none is stored)."""
        batch, local = self._locate(index)
        columns = self.batches[batch]
        row = {name: values[offsets[local] : offsets[local + 1]] for name, (values, offsets) in columns.items()}
        if POSITIONS_COLUMN not in row:
            row[POSITIONS_COLUMN] = row_position_ids(row["cu_seqlens"])
        return row

    def row_sources(self, index: int) -> list[dict[str, Any]]:
        """Where each document of row ``index`` came from, in row order: ``{"input", "record", "piece", "pieces"}``
        (input name, line or row from 1, piece k of n from 0), as ``packcli show --json`` names them."""
        batch, local = self._locate(index)
        sources = self._shard_sources(self.shard_of_batch[batch])
        offsets = self.batches[batch]["cu_seqlens"][1]
        first = self.first_document[batch] + int(offsets[local]) - int(offsets[0]) - local
        count = int(offsets[local + 1]) - int(offsets[local]) - 1
        window = slice(first, first + count)
        return [
            {"input": sources.inputs[name], "record": record, "piece": piece, "pieces": pieces}
            for name, record, piece, pieces in zip(
                sources.input[window].tolist(),
                sources.record[window].tolist(),
                sources.piece[window].tolist(),
                sources.pieces[window].tolist(),
            )
        ]

    def _shard_sources(self, shard: int) -> Sources:
        """The source index of shard ``shard``, read the first time it is asked for.

        Raises:
            PackcliError: the shard has none, or it lists another number of documents than the shard holds.
        """
        if shard not in self.sources:
            entry = self.entries[shard]
            sources = read_sources(self.directory, entry)
            if sources is None:  # checked when the dataset was built; the output was replaced since
                raise PackcliError(f"{entry['file']} {NO_SOURCES}", self.directory)
            if len(sources.input) != entry["documents"]:
                raise PackcliError(
                    f"the source index of {entry['file']} lists {len(sources.input)} documents, the shard holds "
                    f"{entry['documents']}: run packcli verify, or repack",
                    self.directory,
                )
            self.sources[shard] = sources
        return self.sources[shard]


def check_sources(directory: Path, manifest: dict[str, Any]) -> None:
    """That every shard of the output names a source index (nothing is read: the loader reads one when asked).

    Raises:
        PackcliError: a shard has none (packed before packcli kept one), naming the output and saying to repack.
    """
    for entry in manifest["shards"]:
        sidecars = entry.get(SIDECARS)
        if not (isinstance(sidecars, dict) and isinstance(sidecars.get(SOURCES), dict)):
            raise PackcliError(f"{entry['file']} {NO_SOURCES}", directory)
