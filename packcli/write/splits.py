"""Where the pieces of split documents landed: the ``split_pieces`` entry of a shard in the manifest.

``--overflow split`` cuts a long document into pieces that packing places like any other document, in any rows of
any shards. Readers that rebuild documents (``packcli export`` to formats that find documents by EOS or by an
index) need to know which pieces belong together, and in what order. Each shard's manifest entry lists the pieces
it holds of such documents as ``[row, index, document, piece]``: the row in the shard, the document's index in the
row's ``cu_seqlens``, a number shared by the pieces of one document (unique among the shards of one partition: the
shards whose names share the prefix before ``shard-``), and the piece's place in its document (0, 1, ...).
Shards without such pieces have no entry. Invariant: every piece of every split document is listed exactly once.
Example: document 7 cut in two, its pieces in rows 3 and 0 of one shard -> ``[[0, 1, 7, 1], [3, 0, 7, 0]]``.
"""

from __future__ import annotations

import numpy as np

from packcli.format.manifest import SPLIT_PIECES
from packcli.format.shards import ShardInfo
from packcli.packing.overflow import Pieces
from packcli.strategies import Packing

__all__ = ["shard_entries", "split_pieces"]


def split_pieces(pieces: Pieces, packing: Packing, shards: list[ShardInfo]) -> list[list[list[int]]]:
    """For each shard, the ``[row, index, document, piece]`` of the split documents' pieces it holds, by row."""
    entries: list[list[list[int]]] = [[] for _ in shards]
    if not len(pieces.document) or not shards:
        return entries
    first = np.concatenate(([True], pieces.document[1:] != pieces.document[:-1]))  # a document's pieces are adjacent
    start_of = np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))
    count = np.bincount(np.cumsum(first) - 1)[np.cumsum(first) - 1]
    split = np.nonzero(count > 1)[0]
    if not len(split):
        return entries
    place = np.empty(len(packing.order), dtype=np.int64)
    place[np.asarray(packing.order, dtype=np.int64)] = np.arange(len(packing.order))
    offsets = np.asarray(packing.offsets, dtype=np.int64)
    row = np.searchsorted(offsets, place[split], side="right") - 1
    index = place[split] - offsets[row]
    shard_ends = np.cumsum([shard.rows for shard in shards])
    shard = np.searchsorted(shard_ends, row, side="right")
    row_in_shard = row - (shard_ends[shard] - np.array([shard.rows for shard in shards])[shard])
    for k in np.lexsort((index, row)):
        entries[int(shard[k])].append(
            [int(row_in_shard[k]), int(index[k]), int(pieces.document[split[k]]), int(split[k] - start_of[split[k]])]
        )
    return entries


def shard_entries(shards: list[ShardInfo], split: list[list[list[int]]]) -> list[dict[str, object]]:
    """The manifest's ``shards``: each shard's entry, with its ``split_pieces`` when it holds any."""
    return [{**shard.to_json(), **({SPLIT_PIECES: pieces} if pieces else {})} for shard, pieces in zip(shards, split)]
