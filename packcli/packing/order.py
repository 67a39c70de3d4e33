"""The order rows are written in: a seeded permutation of the packed rows, so that a trainer reading the shards in
order does not meet every long document in its first steps (best-fit decreasing packs the longest first).

Pure: a packing in, the same rows in another order out; the same seed gives the same order, and any seed keeps
the multiset of rows. Example, rows [d0 d1] [d2] [d3 d4] and the permutation [2, 0, 1]:
order [0 1 2 3 4], offsets [0 2 3 5]  ->  order [3 4 0 1 2], offsets [0 2 4 5].
"""

from __future__ import annotations

import numpy as np

from packcli.strategies import Packing

__all__ = ["permute_rows", "shuffle_rows"]

_STREAM = 0x726F7773  # "rows": keeps this permutation apart from other uses of the same --seed


def shuffle_rows(packing: Packing, seed: int) -> Packing:
    """``packing`` with its rows in a seeded random order; each row keeps its documents and their order."""
    permutation = np.random.default_rng((_STREAM, seed)).permutation(len(packing))
    return permute_rows(packing, permutation)


def permute_rows(packing: Packing, permutation: np.ndarray) -> Packing:
    """Row ``k`` of the result is row ``permutation[k]`` of ``packing``."""
    offsets = np.asarray(packing.offsets, dtype=np.int64)
    sizes = np.diff(offsets)[permutation]
    new_offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    # Position j of new row k reads old position offsets[permutation[k]] + j.
    source = np.repeat(offsets[:-1][permutation] - new_offsets[:-1], sizes) + np.arange(int(new_offsets[-1]))
    return Packing(order=np.asarray(packing.order, dtype=np.int64)[source], offsets=new_offsets)
