"""Greedy next-fit in input order: documents stay in the order they were read; a new sequence opens when the next
document does not fit the current one.

Complexity: O(n log n) vectorized search plus one Python step per sequence. Choose it when document order must be
kept (curricula, streams already shuffled upstream); it pays 10-25% more sequences than bfd on real corpora.
"""

from __future__ import annotations

import numpy as np

from packcli.strategies._packing import Packing, check_lengths, empty_packing

__all__ = ["greedy"]


def greedy(lengths: np.ndarray, max_len: int) -> Packing:
    """Next-fit in input order: keeps document order, opens a sequence when the next document does not fit."""
    lengths = check_lengths(lengths, max_len)  # a length over max_len would never advance the loop below
    n = len(lengths)
    if n == 0:
        return empty_packing()
    ends = np.cumsum(lengths)
    # From a sequence starting at document i, the documents that fit end before searchsorted(ends, start + max_len).
    limit = np.searchsorted(ends, (ends - lengths) + max_len, side="right")
    starts = [0]
    while (nxt := int(limit[starts[-1]])) < n:
        starts.append(nxt)
    starts.append(n)
    return Packing(order=np.arange(n, dtype=np.int64), offsets=np.array(starts, dtype=np.int64))
