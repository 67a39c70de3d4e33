"""Reference packers for the benchmarks: a fair plain-Python best-fit decreasing, one document at a time.

Fair means it computes the same packing as packcli's ``bfd`` (which documents go to which sequence, not just how
many sequences), as fast as plain Python manages: open sequences are kept in buckets by remaining room (each a heap
of sequence ids), and a ``bytearray`` marks the non-empty buckets, so the least room that fits a document is one
``bytearray.find`` (a C scan over at most max_len bytes), and each document costs a few Python steps whatever the
number of open sequences. Of the plain-Python ways tried that compute the packing, it ran fastest (slower were a
sorted list of (room, sequence) pairs with ``bisect``/``insort``, and a segment tree over the rooms); a bisect
loop over bare rooms runs faster still, but only counts sequences and packs nothing.

Placement is exactly ``bfd``'s: longest first, equal lengths in input order, into the sequence with the least room
that fits, ties to the lowest-numbered sequence; within a sequence, documents in placement order.
"""

from __future__ import annotations

import heapq

import numpy as np


def room_bfd(lengths: np.ndarray, max_len: int) -> list[list[int]]:
    """Best-fit decreasing in plain Python; the sequences as lists of document indices (see the module docstring)."""
    values = lengths.tolist()
    open_rooms = bytearray(max_len + 1)  # open_rooms[r] == 1: some open sequence has exactly r tokens of room
    buckets: dict[int, list[int]] = {}  # room -> heap of the ids of the open sequences with that room
    sequences: list[list[int]] = []
    for document in sorted(range(len(values)), key=lambda index: -values[index]):  # stable: input order on ties
        length = values[document]
        room = open_rooms.find(1, length)
        if room < 0:
            sequence, room = len(sequences), max_len
            sequences.append([])
        else:
            bucket = buckets[room]
            sequence = heapq.heappop(bucket)
            if not bucket:
                open_rooms[room] = 0
        sequences[sequence].append(document)
        left = room - length
        if left:
            bucket = buckets.setdefault(left, [])
            if not bucket:
                open_rooms[left] = 1
            heapq.heappush(bucket, sequence)
    return sequences
