"""Reference packers for the benchmarks: the straightforward pure-Python best-fit decreasing."""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np


def bisect_bfd(lengths: np.ndarray, max_len: int) -> int:
    """Textbook BFD with bisect over a sorted list of remaining capacities; returns the sequence count."""
    rooms: list[int] = []  # sorted remaining capacities of open sequences
    sequences = 0
    for length in sorted(lengths.tolist(), reverse=True):
        at = bisect_left(rooms, length)
        if at == len(rooms):
            sequences += 1
            room = max_len - length
        else:
            room = rooms.pop(at) - length
        if room:
            insort(rooms, room)
    return sequences
