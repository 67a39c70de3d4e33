"""Best-fit decreasing: each document, longest first, goes to the sequence with the least room that still fits it.

Complexity: O(n) for the radix sort and the final gather, plus O(max_len * groups) vectorized work, where groups
is O(distinct lengths); no per-document Python. Tie-break: equal lengths keep input order; among sequences with
equal least room, the lowest-numbered (earliest opened) one. Choose it by default: it gives the textbook BFD
sequence count, within a few sequences of the lower bound on real length distributions.
"""

from __future__ import annotations

import numpy as np

from packcli.strategies._fit import fit_decreasing
from packcli.strategies._packing import Packing


def bfd(lengths: np.ndarray, max_len: int) -> Packing:
    """Best-fit decreasing (the default): the tightest packing, deterministic, O(n) plus O(max_len^2)."""
    return fit_decreasing(lengths, max_len, first_fit=False)
