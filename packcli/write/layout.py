"""Row layout from piece lengths in output order: token gather index, position_ids, cu_seqlens; vectorized.

Example, two rows: [doc a (3 tokens), doc b (2)] and [doc c (2)]:
    input_ids    [a0 a1 a2 b0 b1]   [c0 c1]
    position_ids [0  1  2  0  1 ]   [0  1 ]
    cu_seqlens   [0, 3, 5]          [0, 2]
and the Arrow list offsets are [0, 5, 7] for the token columns, [0, 3, 5] for cu_seqlens.
"""

from __future__ import annotations

import numpy as np

from packcli.format.schema import position_ids
from packcli.util.arrays import exclusive_cumsum

__all__ = ["cu_seqlens", "gather_index", "row_token_offsets"]


def gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices of every token of pieces (start, length), concatenated in order."""
    index: np.ndarray = np.repeat(np.asarray(starts, dtype=np.int64), lengths)
    index += position_ids(lengths)
    return index


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
