"""The per-row checks of one shard, batch by batch and vectorised over each batch (lengths, ids, ``cu_seqlens``,
``position_ids``, BOS and EOS, labels), and what every shard of an output must be: the rows that verify drives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.format.columns import FORMAT_VERSION, IGNORE_INDEX, LABELS_COLUMN, POSITIONS_COLUMN, TOKEN_COLUMNS
from packcli.format.shards import flat_list_column
from packcli.report.accounting import Observed
from packcli.report.specials import SpecialsRule, misplaced_specials
from packcli.report.splits import UNRECORDED, WHOLE, Places, SplitPieceCheck
from packcli.util.arrays import exclusive_cumsum

__all__ = ["Add", "Expected", "RowChecks", "ShardUnderCheck"]

Add = Callable[[str], None]


@dataclass(frozen=True)
class Expected:
    """What every shard of an output must be, from its manifest."""

    max_len: int
    vocab_size: int | None  # None: pre-tokenized records without a tokenizer (ids need only fit int32)
    columns: tuple[str, ...]
    specials: SpecialsRule  # BOS and EOS, as pack added them
    metadata: dict[str, str]
    written_since: dict[str, str]  # metadata that newer shards carry: checked where a shard has the key

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> Expected:
        tokenizer, options, totals = manifest["tokenizer"], manifest["options"], manifest["totals"]
        fine_tuning = options.get("prompt_field") is not None or options.get("messages_field") is not None
        labelled = fine_tuning or "supervised_tokens" in totals
        columns = manifest.get("columns") or [*TOKEN_COLUMNS, *([LABELS_COLUMN] if labelled else [])]
        specials = SpecialsRule.of(manifest)
        return cls(
            max_len=manifest["max_len"],
            vocab_size=tokenizer["vocab_size"],
            columns=tuple(columns),
            specials=specials,
            metadata={
                "packcli.format_version": str(FORMAT_VERSION),
                "packcli.max_len": str(manifest["max_len"]),
                "packcli.tokenizer_sha256": tokenizer["sha256"] or "",
            },
            written_since={"packcli.eos_id": "" if specials.eos_id is None else str(specials.eos_id)},
        )


@dataclass(frozen=True)
class ShardUnderCheck:
    """One shard to check: its place in the manifest, its entry, and where what it holds is summed."""

    number: int
    entry: dict[str, Any]
    expected: Expected
    observed: Observed
    pieces: SplitPieceCheck


class RowChecks:
    """The per-row checks of one shard, batch by batch; each kind of damage counted with its first row.

    Each check over every token first asks, in a few vectorised passes, whether the whole batch is intact; only
    when it is not are the rows at fault found (the exact, slower search), so an intact batch costs little."""

    def __init__(self, name: str, shard: ShardUnderCheck) -> None:
        self.name = name
        self.shard = shard
        self.expected = shard.expected
        self.observed = shard.observed
        self.bad: dict[str, list[int]] = {}  # what is wrong -> [rows, first row]
        self.bad_documents: dict[str, tuple[int, str]] = {}  # what is wrong -> (documents, the first one named)
        self.first_row = 0
        self.documents = 0
        self.tokens = 0

    def flag(self, bad_rows: np.ndarray, what: str) -> None:
        """Count the rows where ``bad_rows`` (a boolean per row of the batch) holds."""
        count = int(np.count_nonzero(bad_rows))
        if count:
            entry = self.bad.setdefault(what, [0, self.first_row + int(np.argmax(bad_rows))])
            entry[0] += count

    def flag_documents(self, bad: np.ndarray, what: str, name: Callable[[int], str]) -> None:
        """Count the documents of the batch where ``bad`` holds; ``name`` says which the first one is (given its
        place in the batch's documents)."""
        count = int(np.count_nonzero(bad))
        if count:
            counted, first = self.bad_documents.get(what, (0, ""))
            self.bad_documents[what] = (counted + count, first or name(int(np.argmax(bad))))

    @property
    def intact(self) -> bool:
        return not self.bad and not self.bad_documents

    def report_to(self, add: Add) -> None:
        for what, (count, first) in self.bad.items():
            add(f"{self.name}: {count} row(s) {what} (first: row {first})")
        for what, (count, named) in self.bad_documents.items():
            add(f"{self.name}: {count} {what} (first: {named})")

    def check(self, batch: pa.RecordBatch) -> None:
        expected = self.expected
        ids, offsets = _flat(batch, "input_ids")
        cu, cu_offsets = _flat(batch, "cu_seqlens")
        n_rows = batch.num_rows
        lengths = np.diff(offsets)
        self.flag((lengths < 1) | (lengths > expected.max_len), f"not within 1..{expected.max_len} tokens")
        self._check_ids(ids, offsets)
        bad_cu, doc_row, doc_start, doc_length = self._check_cu(cu, cu_offsets, offsets)
        if POSITIONS_COLUMN in batch.schema.names:  # --no-position-ids stores none: readers rebuild them
            positions, position_offsets = _flat(batch, POSITIONS_COLUMN)
            same_length = np.diff(position_offsets) == lengths
            self.flag(~same_length, "with position_ids and input_ids of different lengths")
            if not (same_length.all() and not bad_cu.any() and _restart_at(positions, doc_start)):
                located = (doc_row, doc_start, doc_length)
                self._locate_positions(positions, position_offsets, offsets, same_length, *located)
        places = self.shard.pieces.observe(
            self.shard.number, self.first_row, bad_cu, ids, doc_row, doc_start, doc_length
        )
        self._check_specials(ids, doc_row, doc_start, doc_length, places)
        if LABELS_COLUMN in batch.schema.names:
            self._check_labels(batch, ids, offsets, doc_row, doc_start)
        self.documents += int(np.maximum(np.diff(cu_offsets) - 1, 0).sum())
        self.tokens += len(ids)
        self.first_row += n_rows

    def _check_ids(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        """Flag rows with an id outside the vocabulary (searched for only when the extremes say there is one)."""
        vocab = self.expected.vocab_size
        if not len(ids) or (int(ids.min()) >= 0 and (vocab is None or int(ids.max()) < vocab)):
            return
        outside = (ids < 0) if vocab is None else (ids < 0) | (ids >= vocab)
        vocabulary = f"[0, {vocab})" if vocab else "(negative)"
        self.flag(
            _rows_with(outside, _row_of_token(offsets), len(offsets) - 1),
            f"with an id outside the vocabulary {vocabulary}",
        )

    def _check_cu(
        self, cu: np.ndarray, cu_offsets: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Flag rows whose cu_seqlens is wrong; returns them (a bool per row) and the documents of the other rows:
        (row, index of the first token in the batch, length), in row order."""
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
        self.flag(bad, "whose cu_seqlens does not start at 0, rise strictly and end at the row length")
        document = inside & ~bad[cu_row[:-1]]
        doc_row = cu_row[:-1][document]
        return bad, doc_row, offsets[doc_row] + cu[:-1][document], steps[document]

    def _locate_positions(
        self,
        positions: np.ndarray,
        position_offsets: np.ndarray,
        offsets: np.ndarray,
        same_length: np.ndarray,
        doc_row: np.ndarray,
        doc_start: np.ndarray,
        doc_length: np.ndarray,
    ) -> None:
        """Flag the rows whose position_ids do not count 0, 1, ... from each document start (the rows of equal
        lengths and sound cu_seqlens; the others are flagged already)."""
        keep = same_length[doc_row]
        starts, kept_lengths, kept_rows = doc_start[keep], doc_length[keep], doc_row[keep]
        within = np.arange(kept_lengths.sum()) - np.repeat(exclusive_cumsum(kept_lengths)[:-1], kept_lengths)
        token = np.repeat(starts, kept_lengths) + within
        shift = np.repeat((position_offsets - offsets)[kept_rows], kept_lengths)
        wrong = positions[token + shift] != within
        self.flag(
            _rows_with(wrong, _row_of_token(offsets)[token], len(offsets) - 1),
            "whose position_ids do not restart exactly at cu_seqlens",
        )

    def _check_specials(
        self, ids: np.ndarray, doc_row: np.ndarray, doc_start: np.ndarray, doc_length: np.ndarray, places: Places
    ) -> None:
        """Flag the documents whose BOS or EOS is not where pack puts it; count those only the totals can bound."""
        self.observed.full_pieces += int(np.count_nonzero(doc_length == self.expected.max_len))
        first, last = ids[doc_start], ids[doc_start + doc_length - 1]
        verdict = misplaced_specials(self.expected.specials, places, first, last, doc_length)
        for misplaced in verdict.misplaced:
            token, verb = (first, "starts with") if misplaced.end == "first" else (last, "ends with")
            name = partial(self._named, doc_row=doc_row, doc_length=doc_length, places=places, token=token, verb=verb)
            self.flag_documents(misplaced.bad, misplaced.what, name)
        self.observed.unmarked_starts += verdict.unmarked_starts
        self.observed.cut_pieces += verdict.cut

    def _named(
        self, k: int, doc_row: np.ndarray, doc_length: np.ndarray, places: Places, token: np.ndarray, verb: str
    ) -> str:
        """The batch's document ``k``: its row in the shard, its index in the row, its place, its length and the
        token it ``verb`` (``token[k]``)."""
        row = int(doc_row[k])
        index = k - int(np.searchsorted(doc_row, row))
        piece = int(places.piece[k])
        if piece == WHOLE:
            place = "a whole document"
        elif piece == UNRECORDED:
            place = "a document or piece (the output does not record its split pieces)"
        else:
            place = f"piece {piece}{' (the last)' if places.last[k] else ''} of split document {places.document[k]}"
        return f"row {self.first_row + row} segment {index}, {place}, {doc_length[k]} tokens: {verb} {token[k]}"

    def _check_labels(
        self, batch: pa.RecordBatch, ids: np.ndarray, offsets: np.ndarray, doc_row: np.ndarray, doc_start: np.ndarray
    ) -> None:
        labels, label_offsets = _flat(batch, LABELS_COLUMN)
        n_rows = batch.num_rows
        same_length = np.diff(label_offsets) == np.diff(offsets)
        self.flag(~same_length, "with labels and input_ids of different lengths")
        supervised = labels != IGNORE_INDEX
        if not same_length.all() or np.any(supervised & (labels != ids)):
            row_of_token = _row_of_token(offsets)
            token = np.flatnonzero(same_length[row_of_token])
            shift = np.repeat((label_offsets - offsets)[:-1], np.diff(offsets))[token]
            kept = labels[token + shift]
            wrong = (kept != IGNORE_INDEX) & (kept != ids[token])
            self.flag(_rows_with(wrong, row_of_token[token], n_rows), "with a label neither -100 nor the input id")
        starts = same_length[doc_row]
        start_rows = doc_row[starts]
        supervised_start = labels[doc_start[starts] + (label_offsets - offsets)[start_rows]] != IGNORE_INDEX
        self.flag(
            _rows_with(supervised_start, start_rows, n_rows), "with a label other than -100 at a document's first token"
        )
        label_lengths = np.diff(label_offsets)
        if len(labels) and label_lengths.min() >= 1:
            per_row = np.add.reduceat(supervised, label_offsets[:-1], dtype=np.int64)
        else:  # a row without labels (flagged above) has nothing to reduce
            per_row = np.bincount(_row_of_token(label_offsets)[supervised], minlength=n_rows)
        self.observed.labelled = True
        self.observed.supervised_tokens += int(np.count_nonzero(supervised))
        self.observed.unsupervised_sequences += int(np.count_nonzero(per_row == 0))


def _flat(batch: pa.RecordBatch, column: str) -> tuple[np.ndarray, np.ndarray]:
    return flat_list_column(pa.chunked_array([batch.column(column)]))


def _row_of_token(offsets: np.ndarray) -> np.ndarray:
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
