"""The rules every row of a shard obeys, one record batch at a time, vectorised over the batch: 1..max_len tokens,
ids in the vocabulary, ``cu_seqlens`` from 0 rising strictly to the row length, ``position_ids`` as long as the row
and restarting exactly at ``cu_seqlens``, labels as long as the row, each -100 or the input id, and -100 at every
document's first token. Each rule gives its rows at fault (a boolean per row) with its one wording. Each check over
every token first asks, in a few passes, whether the whole batch holds; only a batch that fails is searched row by
row. ``packcli verify`` adds what a whole output must hold (BOS and EOS places, split pieces, totals), and a rerun
checks the parts it reuses by these rules (:func:`packcli.format.listing.check_intact`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from packcli.format.columns import IGNORE_INDEX, LABELS_COLUMN, POSITIONS_COLUMN
from packcli.format.shards import flat_list_column
from packcli.util.arrays import exclusive_cumsum

__all__ = ["BatchRows", "check_rows", "flat", "row_of_token"]


@dataclass
class BatchRows:
    """One batch under the rules: its ids and row offsets, its documents by ``cu_seqlens`` (every row's, sound or
    not), the rows whose ``cu_seqlens`` is wrong, the documents of the other rows (row, first token in the batch,
    length; in row order), and the rules' faults."""

    ids: np.ndarray
    offsets: np.ndarray
    documents: int
    bad_cu: np.ndarray
    doc_row: np.ndarray
    doc_start: np.ndarray
    doc_length: np.ndarray
    faults: list[tuple[np.ndarray, str]] = field(default_factory=list)  # (bad rows, what), each with a bad row

    def fault(self, bad_rows: np.ndarray, what: str) -> None:
        if bad_rows.any():
            self.faults.append((bad_rows, what))


def check_rows(batch: pa.RecordBatch, max_len: int, vocab_size: int | None) -> BatchRows:
    """The batch under every row rule (``vocab_size`` None: pre-tokenized ids without a tokenizer, which need only
    be non-negative)."""
    ids, offsets = flat(batch, "input_ids")
    cu, cu_offsets = flat(batch, "cu_seqlens")
    lengths = np.diff(offsets)
    bad_lengths = (lengths < 1) | (lengths > max_len)
    bad_cu, doc_row, doc_start, doc_length = _documents(cu, cu_offsets, offsets)
    documents = int(np.maximum(np.diff(cu_offsets) - 1, 0).sum())
    rows = BatchRows(ids, offsets, documents, bad_cu, doc_row, doc_start, doc_length)
    rows.fault(bad_lengths, f"not within 1..{max_len} tokens")
    if len(ids) and (int(ids.min()) < 0 or (vocab_size is not None and int(ids.max()) >= vocab_size)):
        outside = (ids < 0) if vocab_size is None else (ids < 0) | (ids >= vocab_size)
        vocabulary = f"[0, {vocab_size})" if vocab_size else "(negative)"
        rows.fault(
            _rows_with(outside, row_of_token(offsets), len(lengths)), f"with an id outside the vocabulary {vocabulary}"
        )
    rows.fault(bad_cu, "whose cu_seqlens does not start at 0, rise strictly and end at the row length")
    if POSITIONS_COLUMN in batch.schema.names:  # --no-position-ids stores none: readers rebuild them
        positions, position_offsets = flat(batch, POSITIONS_COLUMN)
        same_length = np.diff(position_offsets) == lengths
        rows.fault(~same_length, "with position_ids and input_ids of different lengths")
        if not (same_length.all() and not bad_cu.any() and _restart_at(positions, doc_start)):
            located = _positions_at_fault(
                positions, position_offsets, offsets, same_length, doc_row, doc_start, doc_length
            )
            rows.fault(located, "whose position_ids do not restart exactly at cu_seqlens")
    if LABELS_COLUMN in batch.schema.names:
        _check_labels(rows, *flat(batch, LABELS_COLUMN))
    return rows


def _documents(
    cu: np.ndarray, cu_offsets: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows whose cu_seqlens is wrong (a bool per row) and the documents of the other rows: (row, index of the
    first token in the batch, length), in row order."""
    n_rows = len(offsets) - 1
    entries = np.diff(cu_offsets)
    has = entries > 0
    first, last = np.full(n_rows, -1, dtype=np.int64), np.full(n_rows, -1, dtype=np.int64)
    first[has] = cu[cu_offsets[:-1][has]]
    last[has] = cu[cu_offsets[1:][has] - 1]
    cu_row = np.repeat(np.arange(n_rows), entries)
    steps = np.diff(cu.astype(np.int64))
    inside = cu_row[1:] == cu_row[:-1]  # a step between two entries of one row: a document
    falling = _rows_with(inside & (steps <= 0), cu_row[:-1], n_rows)
    bad = (entries < 2) | (first != 0) | (last != np.diff(offsets)) | falling
    document = inside & ~bad[cu_row[:-1]]
    doc_row = cu_row[:-1][document]
    return bad, doc_row, offsets[doc_row] + cu[:-1][document], steps[document]


def _positions_at_fault(
    positions: np.ndarray,
    position_offsets: np.ndarray,
    offsets: np.ndarray,
    same_length: np.ndarray,
    doc_row: np.ndarray,
    doc_start: np.ndarray,
    doc_length: np.ndarray,
) -> np.ndarray:
    """The rows of equal lengths and sound cu_seqlens (the others are at fault already) whose position_ids do not
    count 0, 1, ... from each document start."""
    keep = same_length[doc_row]
    starts, kept_lengths, kept_rows = doc_start[keep], doc_length[keep], doc_row[keep]
    within = np.arange(kept_lengths.sum()) - np.repeat(exclusive_cumsum(kept_lengths)[:-1], kept_lengths)
    token = np.repeat(starts, kept_lengths) + within
    shift = np.repeat((position_offsets - offsets)[kept_rows], kept_lengths)
    wrong = positions[token + shift] != within
    return _rows_with(wrong, row_of_token(offsets)[token], len(offsets) - 1)


def _check_labels(rows: BatchRows, labels: np.ndarray, label_offsets: np.ndarray) -> None:
    """The labels' rules: as long as the row, each -100 or the input id, -100 at every document's first token."""
    ids, offsets, doc_row, doc_start = rows.ids, rows.offsets, rows.doc_row, rows.doc_start
    n_rows = len(offsets) - 1
    same_length = np.diff(label_offsets) == np.diff(offsets)
    rows.fault(~same_length, "with labels and input_ids of different lengths")
    if not same_length.all() or np.any((labels != IGNORE_INDEX) & (labels != ids)):
        of_token = row_of_token(offsets)
        token = np.flatnonzero(same_length[of_token])
        shift = np.repeat((label_offsets - offsets)[:-1], np.diff(offsets))[token]
        kept = labels[token + shift]
        wrong = (kept != IGNORE_INDEX) & (kept != ids[token])
        rows.fault(_rows_with(wrong, of_token[token], n_rows), "with a label neither -100 nor the input id")
    starts = same_length[doc_row]
    start_rows = doc_row[starts]
    supervised_start = labels[doc_start[starts] + (label_offsets - offsets)[start_rows]] != IGNORE_INDEX
    rows.fault(
        _rows_with(supervised_start, start_rows, n_rows), "with a label other than -100 at a document's first token"
    )


def flat(batch: pa.RecordBatch, column: str) -> tuple[np.ndarray, np.ndarray]:
    """A list column of the batch as (values, int64 row offsets from 0)."""
    return flat_list_column(pa.chunked_array([batch.column(column)]))


def row_of_token(offsets: np.ndarray) -> np.ndarray:
    """The row of each value, from the row offsets."""
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


def _restart_at(positions: np.ndarray, doc_start: np.ndarray) -> bool:
    """Whether ``positions`` count 0, 1, ... from each document start (``doc_start`` ascending, its documents
    covering every position): 0 at every start, and a step of exactly one everywhere else."""
    if not len(positions):
        return True
    if np.any(positions[doc_start] != 0):
        return False
    steps_elsewhere = np.flatnonzero(positions[1:] - positions[:-1] != 1) + 1
    return np.array_equal(steps_elsewhere, doc_start[1:])


def _rows_with(bad: np.ndarray, row_of: np.ndarray, n_rows: int) -> np.ndarray:
    """A boolean per row: whether any element (belonging to row ``row_of``) is ``bad``."""
    rows = np.zeros(n_rows, dtype=bool)
    rows[row_of[bad]] = True
    return rows
