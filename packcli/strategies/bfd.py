"""Best-fit decreasing: each document, longest first, goes to the sequence with the least room that still fits it.

Complexity: O(n) for the sort (a radix sort while documents are under 2**16 tokens, else O(n log n)) and the
final gather, plus one Python step per distinct length and per event, each a bisection over the R distinct rooms
open, O(log R) (see ``_fit``); no per-document Python, and nothing grows with max_len. Tie-break: equal lengths
keep input order; among sequences with equal least room, the lowest-numbered (earliest opened) one. Choose it by
default: it gives the textbook BFD sequence count, within a few sequences of the lower bound on real length
distributions.
"""

from __future__ import annotations

import numpy as np

from packcli.strategies._fit import fit_decreasing
from packcli.strategies._packing import Packing

__all__ = ["bfd"]


def bfd(lengths: np.ndarray, max_len: int) -> Packing:
    """Best-fit decreasing (the default): the tightest packing, deterministic, O(n) plus O(events log rooms)."""
    return fit_decreasing(lengths, max_len, first_fit=False)
