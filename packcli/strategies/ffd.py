"""First-fit decreasing: each document, longest first, goes to the lowest-numbered sequence with room for it.

Complexity as bfd (the same engine, visiting groups by sequence id instead of by room), except that picking the
lowest-numbered group that fits is an O(R) vectorized scan over the R distinct rooms open; nothing grows with
max_len. Tie-break: equal lengths keep input order. Choose it to compare with tools that use FFD; on real
distributions it ties bfd or trails it slightly.
"""

from __future__ import annotations

import numpy as np

from packcli.strategies._fit import fit_decreasing
from packcli.strategies._packing import Packing

__all__ = ["ffd"]


def ffd(lengths: np.ndarray, max_len: int) -> Packing:
    """First-fit decreasing: textbook FFD sequence count, deterministic, O(n) plus O(events x rooms) vectorized."""
    return fit_decreasing(lengths, max_len, first_fit=True)
