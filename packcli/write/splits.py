"""Where the pieces of split documents landed: each shard's ``split_pieces`` sidecar (:mod:`packcli.format.sidecars`).

``--overflow split`` cuts a long document into pieces that packing places like any other document, in any rows of
any shards. Readers that rebuild documents (``packcli export`` to formats that find documents by EOS or by an
index) need to know which pieces belong together, and in what order. Each shard's sidecar lists the pieces it holds
of such documents as ``[row, index, document, piece]`` plus a digest: the row in the shard, the document's index in
the row's ``cu_seqlens``, a number shared by the pieces of one document (unique among the shards of one partition:
the shards whose names share the prefix before ``shard-``), the piece's place in its document (0, 1, ...), and
:func:`~packcli.format.sidecars.piece_digest` of the piece's tokens as cut from the source; for an output with
labels, ``first_supervised``: whether the piece's first token is supervised in the whole document (the shards hold
-100 there, each piece being a document of its own; 0 for a first piece, as for any document's first token).
Shards without such pieces have no sidecar. Invariant: every piece of every split document is listed exactly once.
Example: document 7 cut in two, its pieces in rows 3 and 0 of one shard -> ``[[0, 1, 7, 1], [3, 0, 7, 0]]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.encode.store import TokenStore
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
from packcli.packing.overflow import Pieces
from packcli.strategies import Packing

__all__ = ["first_supervised", "piece_digests", "piece_places", "shard_entries", "split_pieces"]

DIGEST_BATCH_TOKENS = 1 << 22  # tokens gathered from the store at once while digesting pieces


def piece_places(pieces: Pieces) -> tuple[np.ndarray, np.ndarray]:
    """Each piece's number in its document (from 0) and its document's number of pieces, int64, in input order
    (a document's pieces are adjacent there). Example: documents [4, 4, 7] -> numbers [0, 1, 0], counts [2, 2, 1]."""
    if not len(pieces.document):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    first = np.concatenate(([True], pieces.document[1:] != pieces.document[:-1]))
    start_of = np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))
    group = np.cumsum(first) - 1
    return np.arange(len(first)) - start_of, np.bincount(group)[group]


def split_pieces(pieces: Pieces, packing: Packing, shards: list[ShardInfo]) -> list[np.ndarray]:
    """For each shard, the (k, 5) int64 ``[row, index, document, piece, piece index]`` of the split documents'
    pieces it holds, by row then index; the last column is the piece's index in ``pieces`` (to digest it)."""
    entries = [np.zeros((0, 5), dtype=np.int64) for _ in shards]
    if not len(pieces.document) or not shards:
        return entries
    number, count = piece_places(pieces)
    split = np.nonzero(count > 1)[0]
    if not len(split):
        return entries
    place = np.empty(len(packing.order), dtype=np.int64)
    place[np.asarray(packing.order, dtype=np.int64)] = np.arange(len(packing.order))
    offsets = np.asarray(packing.offsets, dtype=np.int64)
    row = np.searchsorted(offsets, place[split], side="right") - 1
    index = place[split] - offsets[row]
    rows = np.array([shard.rows for shard in shards], dtype=np.int64)
    shard_ends = np.cumsum(rows)
    shard = np.searchsorted(shard_ends, row, side="right")
    row_in_shard = row - (shard_ends[shard] - rows[shard])
    table = np.stack([row_in_shard, index, pieces.document[split], number[split], split], axis=1)
    order = np.lexsort((index, row))
    table, shard = table[order], shard[order]
    bounds = np.searchsorted(shard, np.arange(len(shards) + 1))
    return [table[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def piece_digests(store: TokenStore, pieces: Pieces, listed: np.ndarray) -> np.ndarray:
    """:func:`~packcli.format.sidecars.piece_digest` of each listed piece (rows of :func:`split_pieces`), its
    tokens read from the store a few million at a time."""
    index = listed[:, 4]
    lengths = pieces.length[index]
    digests = np.zeros(len(index), dtype=np.int64)
    batch = (np.cumsum(lengths) - lengths) // DIGEST_BATCH_TOKENS
    cuts = np.concatenate(([0], np.flatnonzero(np.diff(batch)) + 1, [len(index)]))
    for first, last in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        tokens = store.gather(pieces.start[index[first:last]], lengths[first:last])
        bounds = np.concatenate(([0], np.cumsum(lengths[first:last]))).tolist()
        for k in range(first, last):
            piece = tokens[bounds[k - first] : bounds[k - first + 1]]
            digests[k] = piece_digest(int(listed[k, 2]), int(listed[k, 3]), piece)
    return digests


def first_supervised(store: TokenStore, pieces: Pieces, listed: np.ndarray) -> np.ndarray:
    """Whether each listed piece's first token is supervised in its whole document (int8 0/1, rows of
    :func:`split_pieces`): the store's mask there, 0 for a document's first piece (never supervised)."""
    index = listed[:, 4]
    mask = store.gather_mask(pieces.start[index], np.ones(len(index), dtype=np.int64))
    return (mask & (listed[:, 3] > 0)).astype(np.int8)


def shard_entries(
    directory: Path, shards: list[ShardInfo], split: list[np.ndarray], store: TokenStore, pieces: Pieces
) -> list[dict[str, Any]]:
    """The manifest's ``shards``: each shard's entry, with a ``split_pieces`` sidecar written beside it in
    ``directory`` when it holds any (with ``first_supervised`` when the store has a supervision mask)."""
    entries: list[dict[str, Any]] = []
    for shard, listed in zip(shards, split):
        entry: dict[str, Any] = shard.to_json()
        if len(listed):
            columns = [integer_array(listed[:, k], kind) for k, kind in enumerate(PIECE_COLUMNS.values())]
            columns.append(integer_array(piece_digests(store, pieces, listed), pa.int64()))
            names = [*PIECE_COLUMNS, DIGEST_COLUMN]
            if store.has_mask:
                columns.append(integer_array(first_supervised(store, pieces, listed), pa.int8()))
                names.append(FIRST_SUPERVISED_COLUMN)
            table = pa.table(columns, names=names)
            entry[SIDECARS] = {SPLIT_PIECES: write_sidecar(directory, shard.file, SPLIT_PIECES, table)}
        entries.append(entry)
    return entries
