"""Context parallelism: which tokens of a packed (THD) sequence each of ``cp_size`` ranks keeps.

The load-balanced split of Transformer Engine and Megatron-LM for packed sequences: every document is padded to a
multiple of ``2 * cp_size`` and cut into ``2 * cp_size`` equal chunks; rank ``r`` keeps chunks ``r`` and
``2 * cp_size - 1 - r`` of every document (under causal attention a late chunk costs more than an early one, so
each rank gets the same work). A rank's share lists, document after document, its two chunks in that order, the
order of Transformer Engine's ``thd_get_partitioned_indices``. Invariant: the shares of all ranks, put back at
these positions, are exactly the padded sequence, each position kept by one rank.
"""

from __future__ import annotations

import numpy as np

from packcli.write.layout import exclusive_cumsum, position_ids

__all__ = ["padded_lengths", "share_positions"]


def padded_lengths(lengths: np.ndarray, cp_size: int) -> np.ndarray:
    """Each document length rounded up to a multiple of ``2 * cp_size``."""
    rounded: np.ndarray = lengths + (-lengths % (2 * cp_size))
    return rounded


def share_positions(padded: np.ndarray, cp_size: int, cp_rank: int) -> np.ndarray:
    """The positions in the padded sequence (documents of ``padded`` lengths, back to back) that rank ``cp_rank``
    keeps, in the share's order: chunk ``cp_rank`` then chunk ``2 * cp_size - 1 - cp_rank`` of each document."""
    chunk = padded // (2 * cp_size)
    starts = exclusive_cumsum(padded)[:-1]
    firsts = np.stack([starts + cp_rank * chunk, starts + (2 * cp_size - 1 - cp_rank) * chunk], axis=1).ravel()
    runs = np.repeat(chunk, 2)
    return np.repeat(firsts, runs) + position_ids(runs).astype(np.int64)
