"""The engine behind best-fit and first-fit decreasing: textbook results, work that grows with max_len, not n.

Documents are placed longest first (stable: equal lengths keep input order), all documents of one length in one
vectorized step. The open sequences are kept as *groups*: runs of consecutive sequence ids with the same remaining
room and the same number of documents so far. Sequences in one group are interchangeable, and one step changes at
most a few groups' shapes, so there are O(distinct lengths) groups, not O(sequences).

Within a step for length L, the textbook rule (put the document in the sequence with the least sufficient room,
best fit, or the lowest-numbered one with enough room, first fit; ties to the lowest-numbered sequence) makes the
visited sequence take ``room // L`` documents in a row before the next is visited, because its new room is still
the best (or first) fit. So a visited group takes ``count * (room // L)`` documents, the last visited group may be
cut in two, and what is left opens new sequences of ``max_len // L`` documents each.

Each step logs events (first sequence, sequence count, documents each, position in the row); the final order is
rebuilt from the log with a few vectorized passes over n.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from packcli.strategies._packing import Packing, empty_packing

# A group's sort key for best fit packs (room, first sequence id) into one int64.
_ID_BITS = 40

KeyFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]


def best_fit_key(room: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Visit groups by least remaining room, then lowest sequence id."""
    return (room << _ID_BITS) | start


def first_fit_key(room: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Visit groups by lowest sequence id."""
    return start


class _Groups:
    """Open sequences as groups, kept sorted by the strategy's visit key (parallel int64 arrays).

    Groups with no room left move to ``full`` (start, count, fill) and out of every later search.
    """

    def __init__(self, key_of: KeyFunction) -> None:
        self.key_of = key_of
        empty = np.zeros(0, dtype=np.int64)
        self.key, self.start, self.count, self.room, self.fill = empty, empty, empty, empty, empty
        self.full: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def replace(self, drop: np.ndarray, start: np.ndarray, count: np.ndarray, room: np.ndarray, fill: np.ndarray) -> None:
        """Remove the groups at indices ``drop`` and merge in new ones, keeping the key order."""
        keep = np.ones(len(self.key), dtype=bool)
        keep[drop] = False
        done = (count > 0) & (room == 0)
        self.full.append((start[done], count[done], fill[done]))
        open_ = (count > 0) & (room > 0)
        start, count, room, fill = start[open_], count[open_], room[open_], fill[open_]
        key = self.key_of(room, start)
        by_key = np.argsort(key, kind="stable")
        key, start, count, room, fill = key[by_key], start[by_key], count[by_key], room[by_key], fill[by_key]
        kept_key = self.key[keep]
        at = np.searchsorted(kept_key, key)
        self.key = np.insert(kept_key, at, key)
        self.start = np.insert(self.start[keep], at, start)
        self.count = np.insert(self.count[keep], at, count)
        self.room = np.insert(self.room[keep], at, room)
        self.fill = np.insert(self.fill[keep], at, fill)

    def all_groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every group, open or full, sorted by first sequence id: (start, count, fill)."""
        parts = [*self.full, (self.start, self.count, self.fill)]
        start, count, fill = (np.concatenate([part[i] for part in parts]) for i in range(3))
        by_start = np.argsort(start, kind="stable")
        return start[by_start], count[by_start], fill[by_start]


class _EventLog:
    """Events in placement order: sequences [start, start + count) each take ``take`` documents at row ``fill``."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, start: np.ndarray, count: np.ndarray, take: np.ndarray, fill: np.ndarray) -> None:
        self.parts.append((start, count, take, fill))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate([part[i] for part in self.parts]).astype(np.int64) for i in range(4))


def fit_decreasing(lengths: np.ndarray, max_len: int, key_of: KeyFunction) -> Packing:
    """Pack by a fit-decreasing rule whose visit order is given by ``key_of`` (best_fit_key or first_fit_key)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n == 0:
        return empty_packing()
    sort_key = (max_len - lengths).astype(np.uint16 if max_len < 2**16 else np.int64)
    by_length = np.argsort(sort_key, kind="stable")  # radix sort for 16-bit keys
    per_length = np.bincount(lengths, minlength=max_len + 1)
    events = _EventLog()
    groups = _Groups(key_of)

    # A document longer than max_len / 2 never fits beside another of at least its length: one sequence each.
    long_lengths = np.nonzero(per_length[max_len // 2 + 1 :])[0][::-1] + max_len // 2 + 1
    long_counts = per_length[long_lengths]
    long_starts = np.cumsum(long_counts) - long_counts
    events.add(long_starts, long_counts, np.ones_like(long_counts), np.zeros_like(long_counts))
    groups.replace(np.zeros(0, dtype=np.int64), long_starts, long_counts, max_len - long_lengths, np.ones_like(long_counts))
    next_id = int(long_counts.sum())

    for length in range(max_len // 2, 0, -1):
        pending = int(per_length[length])
        if pending:
            next_id = _place_length(groups, events, length, pending, max_len, next_id)

    return _rebuild(events, groups, by_length, next_id)


def _place_length(groups: _Groups, events: _EventLog, length: int, pending: int, max_len: int, next_id: int) -> int:
    """Place ``pending`` documents of one length; returns the next unused sequence id."""
    candidates = np.nonzero(groups.room >= length)[0]
    room = groups.room[candidates]
    each = room // length
    cumulative = np.cumsum(groups.count[candidates] * each)
    full = int(np.searchsorted(cumulative, pending))  # groups before `full` take all they can
    visited = candidates[:full]
    events.add(groups.start[visited], groups.count[visited], each[:full], groups.fill[visited])
    new = [
        (groups.start[visited], groups.count[visited], room[:full] % length, groups.fill[visited] + each[:full])
    ]
    left = pending - (int(cumulative[full - 1]) if full else 0)
    drop = visited
    if full < len(candidates):  # the last visited group may be cut: some take all, one takes part, rest wait
        index = candidates[full]
        start, count, fill, per = int(groups.start[index]), int(groups.count[index]), int(groups.fill[index]), int(each[full])
        room_now = int(room[full])
        whole, part = divmod(left, per)
        cut = _cut(events, start, whole, part, per, fill, room_now, length)
        rest = count - whole - (part > 0)
        new.append(cut)
        new.append(_row([start + count - rest], [rest], [room_now], [fill]))
        drop = candidates[: full + 1]
        left = 0
    if left:
        per = max_len // length
        whole, part = divmod(left, per)
        new.append(_cut(events, next_id, whole, part, per, 0, max_len, length))
        next_id += whole + (part > 0)
    groups.replace(drop, *(np.concatenate(column) for column in zip(*new)))
    return next_id


def _cut(events: _EventLog, start: int, whole: int, part: int, per: int, fill: int, room: int, length: int) -> tuple[np.ndarray, ...]:
    """``whole`` sequences from ``start`` take ``per`` documents each, the next takes ``part``; log and return them."""
    start_, count, take = np.array([start, start + whole]), np.array([whole, int(part > 0)]), np.array([per, part])
    fill_ = np.array([fill, fill])
    events.add(start_[count > 0], count[count > 0], take[count > 0], fill_[count > 0])
    return start_, count, room - take * length, fill_ + take


def _row(*columns: list[int]) -> tuple[np.ndarray, ...]:
    return tuple(np.array(column, dtype=np.int64) for column in columns)


def _rebuild(events: _EventLog, groups: _Groups, by_length: np.ndarray, n_sequences: int) -> Packing:
    """Turn the event log into order/offsets: documents in placement order land at row start + fill + i."""
    start, count, take, fill = events.arrays()
    # Documents per sequence: every sequence id lies in exactly one final group.
    _, group_count, group_fill = groups.all_groups()
    per_sequence = np.repeat(group_fill, group_count)
    offsets = np.zeros(n_sequences + 1, dtype=np.int64)
    np.cumsum(per_sequence, out=offsets[1:])
    # One entry per (event, sequence): its sequence id, documents taken, row position of its first document.
    first_entry = np.cumsum(count) - count
    sequence = np.repeat(start - first_entry, count) + np.arange(int(count.sum()))
    entry_take = np.repeat(take, count)
    entry_row_position = offsets[sequence] + np.repeat(fill, count)
    # Placement consumes documents in by_length order, entry by entry.
    first_document = np.cumsum(entry_take) - entry_take
    position = np.arange(len(by_length)) + np.repeat(entry_row_position - first_document, entry_take)
    order = np.empty_like(by_length)
    order[position] = by_length
    return Packing(order=order, offsets=offsets)
