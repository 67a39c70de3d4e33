"""The per-row checks of one shard, batch by batch: the format's row rules (:mod:`packcli.format.rows`), then BOS and
EOS where pack puts them and the split pieces each document is, and what every shard of an output must be: the rows
that verify drives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.format.columns import FORMAT_VERSION, IGNORE_INDEX, LABELS_COLUMN, TOKEN_COLUMNS
from packcli.format.rows import check_rows, flat, row_of_token
from packcli.report.accounting import Observed
from packcli.report.specials import SpecialsRule, misplaced_specials
from packcli.report.splits import UNRECORDED, WHOLE, Places, SplitPieceCheck

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
        rows = check_rows(batch, expected.max_len, expected.vocab_size)
        for bad, what in rows.faults:
            self.flag(bad, what)
        ids, doc_row, doc_start, doc_length = rows.ids, rows.doc_row, rows.doc_start, rows.doc_length
        places = self.shard.pieces.observe(
            self.shard.number, self.first_row, rows.bad_cu, ids, doc_row, doc_start, doc_length
        )
        self._check_specials(ids, doc_row, doc_start, doc_length, places)
        if LABELS_COLUMN in batch.schema.names:
            self._count_labels(*flat(batch, LABELS_COLUMN))
        self.documents += rows.documents
        self.tokens += len(ids)
        self.first_row += batch.num_rows

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

    def _count_labels(self, labels: np.ndarray, label_offsets: np.ndarray) -> None:
        """Sum the supervised tokens and the rows without any (the totals' figures)."""
        supervised = labels != IGNORE_INDEX
        if len(labels) and np.diff(label_offsets).min() >= 1:
            per_row = np.add.reduceat(supervised, label_offsets[:-1], dtype=np.int64)
        else:  # a row without labels (at fault already) has nothing to reduce
            per_row = np.bincount(row_of_token(label_offsets)[supervised], minlength=len(label_offsets) - 1)
        self.observed.labelled = True
        self.observed.supervised_tokens += int(np.count_nonzero(supervised))
        self.observed.unsupervised_sequences += int(np.count_nonzero(per_row == 0))
