"""What the writers take, as plain arrays (:class:`Rows`, a :data:`Gather` of tokens), and the row layout from
piece lengths: row token offsets, cu_seqlens (position_ids: :mod:`packcli.format.schema`).

Example, two rows: [doc a (3 tokens), doc b (2)] and [doc c (2)]:
    input_ids    [a0 a1 a2 b0 b1]   [c0 c1]
    position_ids [0  1  2  0  1 ]   [0  1 ]
    cu_seqlens   [0, 3, 5]          [0, 2]
and the Arrow list offsets are [0, 5, 7] for the token columns, [0, 3, 5] for cu_seqlens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from packcli.util.arrays import exclusive_cumsum

__all__ = ["Gather", "Rows", "batch_spans", "cu_seqlens", "row_token_offsets"]

# The tokens (or the supervision mask, bool) of pieces (start, length), concatenated: the token store's reads.
Gather = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Rows:
    """The packed rows, one entry per piece (a document, or a piece of a split one) in the order the rows hold
    them: row k holds entries ``offsets[k]:offsets[k + 1]``. Every array int64."""

    offsets: np.ndarray  # one more than the rows
    start: np.ndarray  # the piece's first token, where a Gather finds it
    length: np.ndarray
    document: np.ndarray  # the piece's document in the packed stream, shared by the pieces of a split one
    piece: np.ndarray  # the piece's number in its document, from 0
    pieces: np.ndarray  # its document's number of pieces

    @classmethod
    def packed(
        cls, start: np.ndarray, length: np.ndarray, document: np.ndarray, order: np.ndarray, offsets: np.ndarray
    ) -> Rows:
        """The rows a packing makes of pieces listed in input order (a document's pieces adjacent): ``order`` lists
        the pieces row by row, row k's at ``order[offsets[k]:offsets[k + 1]]``."""
        order = np.asarray(order, dtype=np.int64)
        first = np.flatnonzero(np.concatenate(([True], document[1:] != document[:-1])))  # each document's first piece
        count = np.diff(first, append=len(document))  # its pieces: document [4, 4, 7] -> pieces [0, 1, 0] of [2, 2, 1]
        number = np.arange(len(document)) - np.repeat(first, count)
        count = np.repeat(count, count)
        offsets = np.asarray(offsets, dtype=np.int64)
        return cls(offsets, start[order], length[order], document[order], number[order], count[order])

    def __len__(self) -> int:
        return len(self.offsets) - 1


def row_token_offsets(lengths: np.ndarray, row_offsets: np.ndarray) -> np.ndarray:
    """Token offset of each row's start (plus the end), given pieces per row as CSR ``row_offsets``."""
    offsets: np.ndarray = exclusive_cumsum(lengths)[row_offsets]
    return offsets


def cu_seqlens(lengths: np.ndarray, row_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``[0, l1, l1+l2, ..., row length]``, flattened, with its list offsets (both int64)."""
    bounds = exclusive_cumsum(lengths)
    per_row = np.diff(row_offsets) + 1
    list_offsets = exclusive_cumsum(per_row)
    # Row k takes bounds[row_offsets[k] : row_offsets[k+1] + 1], shifted to start at 0.
    local = np.arange(int(list_offsets[-1]), dtype=np.int64) - np.repeat(list_offsets[:-1], per_row)
    first = np.repeat(row_offsets[:-1], per_row)
    values = bounds[first + local] - bounds[first]
    return values, list_offsets


def batch_spans(sizes: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Items in batches of about ``budget``, as ``(first, end)`` spans: batch k holds the items whose sizes start in
    ``[k * budget, (k + 1) * budget)`` (deterministic and vectorized); one empty span for no items."""
    batch = exclusive_cumsum(sizes)[:-1] // budget
    cuts = np.concatenate(([0], np.flatnonzero(np.diff(batch)) + 1, [len(sizes)])).tolist()
    return list(zip(cuts[:-1], cuts[1:]))
