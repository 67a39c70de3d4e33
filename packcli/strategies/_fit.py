"""The engine behind best-fit and first-fit decreasing: textbook results, with Python work that follows the
distinct lengths and the sequence shapes present, never the number of documents or ``max_len``.

Documents are placed longest first (stable: equal lengths keep input order), all documents of one length in one
step. Open sequences are kept as *groups*: runs of consecutive sequence ids with the same remaining room and the
same number of documents so far, bucketed by room (only rooms some group has are kept), each bucket in id order.
Sequences in a group are interchangeable, and a step reshapes at most a few groups, so groups stay few however
many sequences there are.

Within a step for length L, the textbook rule (best fit: the sequence with the least room that fits; first fit: the
lowest-numbered sequence that fits; ties to the lowest-numbered) makes a visited sequence take ``room // L``
documents in a row, because its remaining room is still the best (or first) fit until it is below L. So a visited
group takes ``count * (room // L)`` documents, the last visited group may be cut in two, and what is left opens new
sequences of ``max_len // L`` documents each (the last perhaps fewer).

Each step logs events (first sequence, sequence count, documents each, position in the row); the final order is
rebuilt from the log with a few vectorized passes over n: the k-th document placed by an event goes to row
position ``offsets[sequence] + fill + i``.

Worked trace, best fit (first fit gives the same here), max_len 4, lengths [3, 3, 1, 1, 1]:

    by length (longest first, stable): documents 0 1 2 3 4; distinct lengths 3 (x2), 1 (x3)
    length 3, 2 documents: no group has room -> open sequences 0-1, max_len // 3 = 1 document each
        event (start 0, 2 sequences, 1 each, at 0)          groups: room 1: [start 0, count 2, fill 1]
    length 1, 3 documents: least room >= 1 is 1: group [0, 2, 1] takes 2 * (1 // 1) = 2 documents
        event (start 0, 2 sequences, 1 each, at 1)          groups: full: [0, 2, 2]
        1 left: open sequence 2 with max_len // 1 = 4 each, cut to 1
        event (start 2, 1 sequence, 1 each, at 0)           groups: full: [0, 2, 2]; room 3: [2, 1, 1]
    rebuild: documents per sequence from the final groups: [2, 2, 1] -> offsets [0, 2, 4, 5]
        documents 0, 1 (first event) land at offsets[0] + 0 = 0 and offsets[1] + 0 = 2
        documents 2, 3 (second event) land at offsets[0] + 1 = 1 and offsets[1] + 1 = 3
        document 4 (third event) lands at offsets[2] + 0 = 4
    order [0, 2, 1, 3, 4], offsets [0, 2, 4, 5]: sequences [3, 1] [3, 1] [1]

Complexity, for n documents, D distinct lengths, E events and R distinct rooms open at once (R <= the open groups,
and R < max_len): the sort is O(n) (a radix sort) when the longest document has under 2**16 tokens, else
O(n log n); placement is D + E Python steps, each a bisection over the rooms for best fit (O(log R); opening or
closing a room shifts up to R list entries in C) and an O(R) vectorized scan for first fit (the lowest-numbered
bucket head among the rooms that fit); the rebuild is O(n + E) vectorized. Memory: O(n) for the sort and the
result, O(E + R) besides; nothing grows with ``max_len``. Measured (``bench/bench_max_len.py``): 1M lognormal
lengths of at most 4096 tokens log about 12,200 events and end with about 5,500 groups at max_len 4096, and 5,000
events and 450 groups at 2**20, which packs in no more time or memory.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from packcli.strategies._packing import Packing, check_lengths, empty_packing

Event = tuple[int, int, int, int]  # (first sequence, sequences, documents each, row position of the first)


class _OpenSequences:
    """Groups ``[start, count, fill]`` of open sequences, bucketed by remaining room, each bucket in start order.

    Only rooms that some group has are kept (a sorted list), so memory and work follow the data, not max_len.
    """

    def __init__(self, first_fit: bool) -> None:
        self.first_fit = first_fit
        self.buckets: dict[int, list[list[int]]] = {}
        self.rooms: list[int] = []  # sorted rooms whose bucket is not empty
        self.heads = np.zeros(64, dtype=np.int64)  # first fit: heads[i] is the lowest start in bucket rooms[i]
        self.full: list[tuple[int, int, int]] = []  # groups with no room left

    def pick(self, length: int) -> int:
        """The room of the bucket whose head group takes the next document of ``length``; 0 when none fits."""
        at = bisect_left(self.rooms, length)
        if at == len(self.rooms):
            return 0
        if not self.first_fit:
            return self.rooms[at]  # best fit: the least room that fits
        return self.rooms[at + int(np.argmin(self.heads[at : len(self.rooms)]))]  # first fit: the lowest start

    def pop_head(self, room: int) -> list[int]:
        """Take the lowest-numbered group out of the bucket of ``room``."""
        bucket = self.buckets[room]
        group = bucket.pop(0)
        at = bisect_left(self.rooms, room)
        if not bucket:
            del self.buckets[room], self.rooms[at]
            if self.first_fit:
                self.heads[at : len(self.rooms)] = self.heads[at + 1 : len(self.rooms) + 1]
        elif self.first_fit:
            self.heads[at] = bucket[0][0]
        return group

    def put(self, room: int, start: int, count: int, fill: int) -> None:
        """Add a group (nothing if it is empty; to ``full`` if it has no room left)."""
        if count == 0:
            return
        if room == 0:
            self.full.append((start, count, fill))
            return
        bucket = self.buckets.get(room)
        if bucket is None:
            bucket = self.buckets[room] = []
            at = bisect_left(self.rooms, room)
            self.rooms.insert(at, room)
            if self.first_fit:
                if len(self.rooms) > len(self.heads):
                    self.heads = np.concatenate([self.heads, np.zeros_like(self.heads)])
                self.heads[at + 1 : len(self.rooms)] = self.heads[at : len(self.rooms) - 1]
        insort(bucket, [start, count, fill])
        if self.first_fit:
            self.heads[bisect_left(self.rooms, room)] = bucket[0][0]

    def all_groups(self) -> np.ndarray:
        """Every group, open or full, as rows (start, count, fill) sorted by start."""
        rows = [*self.full, *(tuple(group) for bucket in self.buckets.values() for group in bucket)]
        groups = np.array(rows, dtype=np.int64).reshape(-1, 3)
        return groups[np.argsort(groups[:, 0], kind="stable")]


def fit_decreasing(lengths: np.ndarray, max_len: int, first_fit: bool) -> Packing:
    """Pack by best-fit decreasing, or first-fit decreasing when ``first_fit``."""
    lengths = check_lengths(lengths, max_len)
    if len(lengths) == 0:
        return empty_packing()
    by_length, distinct, counts = _sort_by_length(lengths)
    events, sequences, n_sequences = place(distinct, counts, max_len, first_fit)
    return _rebuild(events, sequences.all_groups(), by_length, n_sequences)


def _sort_by_length(lengths: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """Document indices longest first (stable), and the distinct lengths, longest first, with their counts."""
    longest = int(lengths.max())
    key = longest - lengths  # ascending key, descending length
    key = key.astype(np.uint16) if longest < 2**16 else key  # 16-bit keys: numpy's stable sort is a radix sort
    by_length = np.argsort(key, kind="stable")
    sorted_key = key[by_length]
    del key
    firsts = np.flatnonzero(np.concatenate(([True], sorted_key[1:] != sorted_key[:-1])))
    distinct = (longest - sorted_key[firsts].astype(np.int64)).tolist()
    counts = np.diff(np.append(firsts, len(lengths))).tolist()
    del sorted_key
    if len(lengths) < 2**31:
        by_length = by_length.astype(np.int32)  # held to the end: half the memory
    return by_length, distinct, counts


def place(
    distinct: list[int], counts: list[int], max_len: int, first_fit: bool
) -> tuple[list[Event], _OpenSequences, int]:
    """Place ``counts[k]`` documents of length ``distinct[k]`` (longest first): the event log, the final groups and
    the number of sequences. One step per distinct length, plus one per group visited."""
    sequences = _OpenSequences(first_fit)
    events: list[Event] = []
    next_id = 0
    for length, pending in zip(distinct, counts):
        next_id = _place(sequences, events, length, pending, max_len, next_id)
    return events, sequences, next_id


def _place(
    sequences: _OpenSequences,
    events: list[Event],
    length: int,
    pending: int,
    max_len: int,
    next_id: int,
) -> int:
    """Place ``pending`` documents of one length; returns the next unused sequence id."""
    while pending:
        room = sequences.pick(length)
        if room == 0:  # nothing fits: open sequences of `each` documents, the last one perhaps fewer
            each = max_len // length
            whole, part = divmod(pending, each)
            _visit(sequences, events, [next_id, whole + (part > 0), 0], max_len, length, whole, part)
            return next_id + whole + (part > 0)
        group = sequences.pop_head(room)
        each = room // length
        whole, part = divmod(min(pending, group[1] * each), each)
        _visit(sequences, events, group, room, length, whole, part)
        pending -= whole * each + part
    return next_id


def _visit(
    sequences: _OpenSequences,
    events: list[Event],
    group: list[int],
    room: int,
    length: int,
    whole: int,
    part: int,
) -> None:
    """The first ``whole`` sequences of ``group`` take ``room // length`` documents each, the next takes ``part``."""
    start, count, fill = group
    each = room // length
    if whole:
        events.append((start, whole, each, fill))
        sequences.put(room - each * length, start, whole, fill + each)
    if part:
        events.append((start + whole, 1, part, fill))
        sequences.put(room - part * length, start + whole, 1, fill + part)
    rest = whole + (part > 0)
    sequences.put(room, start + rest, count - rest, fill)


def _rebuild(events: list[Event], groups: np.ndarray, by_length: np.ndarray, n_sequences: int) -> Packing:
    """Turn the event log into order/offsets: documents in placement order land at row start + fill + i.

    Memory: besides ``by_length`` and the result, one n-sized int32 array at a time (temporaries freed early).
    """
    n = len(by_length)
    index = np.int32 if n < 2**31 else np.int64
    table: np.ndarray = np.array(events, dtype=index).reshape(-1, 4)
    start, count, take, fill = (np.ascontiguousarray(table[:, k]) for k in range(4))
    # Documents per sequence: every sequence id lies in exactly one final group.
    offsets = np.zeros(n_sequences + 1, dtype=np.int64)
    np.cumsum(np.repeat(groups[:, 2], groups[:, 1]), out=offsets[1:])
    # One entry per (event, sequence): the row position of its first document minus its placement index.
    sequence = np.repeat(start - (np.cumsum(count, dtype=index) - count), count)
    sequence += np.arange(len(sequence), dtype=index)
    shift = offsets.astype(index)[sequence]
    del sequence
    shift += np.repeat(fill, count)
    entry_take = np.repeat(take, count)
    shift -= np.cumsum(entry_take, dtype=index)
    shift += entry_take
    position = np.repeat(shift, entry_take)
    del shift, entry_take
    chunk = 1 << 20
    for first in range(0, n, chunk):  # position += arange(n), without an n-sized temporary
        position[first : first + chunk] += np.arange(first, min(n, first + chunk), dtype=index)
    order = np.empty(n, dtype=np.int64)
    order[position] = by_length
    return Packing(order=order, offsets=offsets)
