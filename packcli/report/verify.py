"""Re-read a packed output and check every invariant of the format and every checksum of the manifest.

Checks, per shard: listed once, inside the output directory, present, size and sha256 as listed, the columns the
manifest implies (``labels`` for fine-tuning outputs), each ``list<int32>``, self-describing metadata, row, document
and token counts. Per row, each check on its own (so one bad row never hides another): 1..max_len tokens,
``position_ids`` as long as ``input_ids`` and restarting exactly at ``cu_seqlens``, ``cu_seqlens`` from 0 strictly
rising to the row length, ids in ``[0, vocab_size)``, labels (where present) -100 or the input id and -100 at
every document's first token, and with EOS appended, every document that does not end with EOS cut at exactly
max_len. Then the manifest's totals against the sums and against each other (:mod:`packcli.report.accounting`),
and stray temporary or unlisted shard files.

The EOS checks follow the EOS id the manifest implies, and an edited manifest cannot switch them off: a manifest
whose ``tokenizer.eos_id`` is null (or missing) while its options say EOS was appended (``eos`` true, and a
tokenizer ran or one was given, or ``--eos-id``) is refused, and each shard's own ``packcli.eos_id`` metadata
(written since this check exists; older shards lack it) must name the same id. Only a forger who rewrites every
shard as well gets past this: nothing inside an output can tell its own bytes from a consistent rewrite of them.
Shards are read one record batch at a time: memory stays bounded whatever the shard size.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.report.accounting import Observed, check_totals
from packcli.write.layout import exclusive_cumsum
from packcli.write.manifest import FORMAT_VERSION, SHARD_FILE, TEMPORARY_SUFFIX, read_manifest, shard_path
from packcli.write.shards import IGNORE_INDEX, LABELS_COLUMN, TOKEN_COLUMNS, flat_list_column, read_shard

__all__ = ["MAX_LISTED", "verify_output"]

MAX_LISTED = 20
COLUMN_TYPE = pa.list_(pa.int32())


@dataclass
class Report:
    """Problems found (all of them counted, the first ones kept) and what was checked."""

    problems: list[str] = field(default_factory=list)
    count: int = 0
    shards: int = 0
    rows: int = 0
    tokens: int = 0

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)

    @property
    def ok(self) -> bool:
        return self.count == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problem_count": self.count,
            "problems": self.problems,
            "shards": self.shards,
            "rows": self.rows,
            "tokens": self.tokens,
        }


@dataclass(frozen=True)
class Expected:
    """What every shard of an output must be, from its manifest."""

    max_len: int
    vocab_size: int | None  # None: pre-tokenized records without a tokenizer (ids need only fit int32)
    columns: tuple[str, ...]
    eos_id: int | None  # the EOS id appended to every document, if one was
    metadata: dict[str, str]
    written_since: dict[str, str]  # metadata that newer shards carry: checked where a shard has the key

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> Expected:
        tokenizer, options, totals = manifest["tokenizer"], manifest["options"], manifest["totals"]
        fine_tuning = options.get("prompt_field") is not None or options.get("messages_field") is not None
        labelled = fine_tuning or "supervised_tokens" in totals
        columns = manifest.get("columns") or [*TOKEN_COLUMNS, *([LABELS_COLUMN] if labelled else [])]
        eos_id = tokenizer.get("eos_id") if options.get("eos") is True else None
        return cls(
            max_len=manifest["max_len"],
            vocab_size=tokenizer["vocab_size"],
            columns=tuple(columns),
            eos_id=eos_id,
            metadata={
                "packcli.format_version": str(FORMAT_VERSION),
                "packcli.max_len": str(manifest["max_len"]),
                "packcli.tokenizer_sha256": tokenizer["sha256"] or "",
            },
            written_since={"packcli.eos_id": "" if eos_id is None else str(eos_id)},
        )


def eos_problems(manifest: dict[str, Any]) -> list[str]:
    """What in the manifest contradicts how pack decides on EOS: with ``eos`` on, pack appends the tokenizer's EOS
    (refusing a tokenizer without one) or ``--eos-id``; only pre-tokenized records without either get none."""
    tokenizer, options = manifest["tokenizer"], manifest["options"]
    if options.get("eos") is not True:
        return []
    given = options.get("eos_id")
    if given is not None and tokenizer.get("eos_id") != given:
        return [f"manifest: tokenizer.eos_id is {tokenizer.get('eos_id')}, yet options.eos_id is {given}"]
    if tokenizer.get("eos_id") is None and (given is not None or tokenizer.get("ran", True) or tokenizer["sha256"]):
        return [
            "manifest: tokenizer.eos_id is null or missing, yet options.eos is true with a tokenizer (or --eos-id): "
            "pack appends an EOS then, so the manifest was edited"
        ]
    return []


def verify_output(out: Path) -> Report:
    """Check a packed output; the report lists what is wrong (nothing when it is intact)."""
    report = Report()
    manifest = read_manifest(out)
    expected = Expected.of(manifest)
    for problem in eos_problems(manifest):
        report.add(problem)
    observed = Observed()
    seen: set[str] = set()
    for entry in manifest["shards"]:
        try:
            path = shard_path(out, entry["file"])
        except PackcliError as exc:
            report.add(exc.message)
            continue
        if path.name in seen:
            report.add(f"{path.name}: listed twice in the manifest")
            continue
        seen.add(path.name)
        _check_shard(path, entry, expected, observed, report)
    for path in sorted(out.iterdir()):
        if path.name.endswith(TEMPORARY_SUFFIX):
            report.add(f"{path.name}: a temporary file left by an interrupted write (not part of the output)")
        elif SHARD_FILE.fullmatch(path.name) and path.name not in seen:
            report.add(f"{path.name}: shard file not listed in the manifest")
    for problem in check_totals(manifest, observed, expected.eos_id is not None):
        report.add(problem)
    report.shards = len(seen)
    return report


def _check_shard(path: Path, entry: dict[str, Any], expected: Expected, observed: Observed, report: Report) -> None:
    """Check one shard against its manifest entry and the format, adding what it holds to ``observed``."""
    name = path.name
    if not path.is_file():
        report.add(f"{name}: missing")
        return
    size = path.stat().st_size
    if size != entry["bytes"]:
        report.add(f"{name}: {size} bytes, the manifest says {entry['bytes']}")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    if digest.hexdigest() != entry["sha256"]:
        report.add(f"{name}: sha256 differs from the manifest (the file was changed or damaged)")
    try:
        table = read_shard(path)
    except (pa.ArrowException, OSError) as exc:
        report.add(f"{name}: unreadable as an Arrow IPC stream ({exc})")
        return
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    for key, value in expected.metadata.items():
        if metadata.get(key) != value:
            report.add(f"{name}: schema metadata {key} is {metadata.get(key)!r}, expected {value!r}")
    for key, value in expected.written_since.items():
        if key in metadata and metadata[key] != value:
            report.add(f"{name}: schema metadata {key} is {metadata[key]!r}, the manifest implies {value!r}")
    if not _check_columns(name, table.schema, expected.columns, report):
        return
    rows = RowChecks(name, expected, observed)
    for batch in table.to_batches():
        rows.check(batch)
    rows.report_to(report)
    counts = {"rows": table.num_rows, "documents": rows.documents, "tokens": rows.tokens}
    for key, value in counts.items():
        if entry.get(key, value) != value:
            report.add(f"{name}: holds {value} {key}, the manifest says {entry[key]}")
    observed.sequences += table.num_rows
    observed.documents += rows.documents
    observed.tokens += rows.tokens
    report.rows += table.num_rows
    report.tokens += rows.tokens


def _check_columns(name: str, schema: pa.Schema, columns: tuple[str, ...], report: Report) -> bool:
    """Report missing, extra and mistyped columns; True when the rows can still be read (every column present is a
    list of integers, the token columns all there)."""
    readable = True
    for column in columns:
        if column not in schema.names:
            report.add(f"{name}: missing column {column}")
            readable = readable and column not in TOKEN_COLUMNS
    for column in schema.names:
        kind = schema.field(column).type
        if column not in columns:
            report.add(f"{name}: column {column} is not one the manifest lists ({', '.join(columns)})")
        elif kind != COLUMN_TYPE:
            report.add(f"{name}: column {column} is {kind}, expected {COLUMN_TYPE}")
            is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
            readable = readable and is_list and pa.types.is_integer(kind.value_type)
    return readable


class RowChecks:
    """The per-row checks of one shard, batch by batch; each kind of damage counted with its first row."""

    def __init__(self, name: str, expected: Expected, observed: Observed) -> None:
        self.name = name
        self.expected = expected
        self.observed = observed
        self.bad: dict[str, list[int]] = {}  # what is wrong -> [rows, first row]
        self.first_row = 0
        self.documents = 0
        self.tokens = 0

    def flag(self, bad_rows: np.ndarray, what: str) -> None:
        """Count the rows where ``bad_rows`` (a boolean per row of the batch) holds."""
        count = int(np.count_nonzero(bad_rows))
        if count:
            entry = self.bad.setdefault(what, [0, self.first_row + int(np.argmax(bad_rows))])
            entry[0] += count

    def report_to(self, report: Report) -> None:
        for what, (count, first) in self.bad.items():
            report.add(f"{self.name}: {count} row(s) {what} (first: row {first})")

    def check(self, batch: pa.RecordBatch) -> None:
        expected = self.expected
        ids, offsets = _flat(batch, "input_ids")
        positions, position_offsets = _flat(batch, "position_ids")
        cu, cu_offsets = _flat(batch, "cu_seqlens")
        n_rows = batch.num_rows
        lengths = np.diff(offsets)
        row_of_token = np.repeat(np.arange(n_rows), lengths)
        self.flag((lengths < 1) | (lengths > expected.max_len), f"not within 1..{expected.max_len} tokens")
        outside = (ids < 0) if expected.vocab_size is None else (ids < 0) | (ids >= expected.vocab_size)
        vocabulary = f"[0, {expected.vocab_size})" if expected.vocab_size else "(negative)"
        self.flag(_rows_with(outside, row_of_token, n_rows), f"with an id outside the vocabulary {vocabulary}")
        doc_row, doc_start, doc_length = self._check_cu(cu, cu_offsets, offsets)
        same_length = np.diff(position_offsets) == lengths
        self.flag(~same_length, "with position_ids and input_ids of different lengths")
        keep = same_length[doc_row]
        starts, kept_lengths, kept_rows = doc_start[keep], doc_length[keep], doc_row[keep]
        within = np.arange(kept_lengths.sum()) - np.repeat(exclusive_cumsum(kept_lengths)[:-1], kept_lengths)
        token = np.repeat(starts, kept_lengths) + within
        shift = np.repeat((position_offsets - offsets)[kept_rows], kept_lengths)
        wrong = positions[token + shift] != within
        self.flag(
            _rows_with(wrong, row_of_token[token], n_rows), "whose position_ids do not restart exactly at cu_seqlens"
        )
        self._count_pieces(ids, n_rows, doc_row, doc_start, doc_length)
        if LABELS_COLUMN in batch.schema.names:
            self._check_labels(batch, ids, offsets, row_of_token, doc_row, doc_start)
        self.documents += int(np.maximum(np.diff(cu_offsets) - 1, 0).sum())
        self.tokens += len(ids)
        self.first_row += n_rows

    def _check_cu(
        self, cu: np.ndarray, cu_offsets: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flag rows whose cu_seqlens is wrong; returns the documents of the other rows: (row, index of the first
        token in the batch, length)."""
        n_rows = len(offsets) - 1
        entries = np.diff(cu_offsets)
        has = entries > 0
        first, last = np.full(n_rows, -1, dtype=np.int64), np.full(n_rows, -1, dtype=np.int64)
        first[has] = cu[cu_offsets[:-1][has]]
        last[has] = cu[cu_offsets[1:][has] - 1]
        cu_row = np.repeat(np.arange(n_rows), entries)
        steps = np.diff(cu)
        inside = cu_row[1:] == cu_row[:-1]  # a step between two entries of one row: a document
        falling = _rows_with(inside & (steps <= 0), cu_row[:-1], n_rows)
        bad = (entries < 2) | (first != 0) | (last != np.diff(offsets)) | falling
        self.flag(bad, "whose cu_seqlens does not start at 0, rise strictly and end at the row length")
        document = inside & ~bad[cu_row[:-1]]
        doc_row = cu_row[:-1][document]
        return doc_row, offsets[doc_row] + cu[:-1][document], steps[document]

    def _count_pieces(
        self, ids: np.ndarray, n_rows: int, doc_row: np.ndarray, doc_start: np.ndarray, doc_length: np.ndarray
    ) -> None:
        """Count full and cut documents; with EOS appended, one that does not end with it was cut at max_len."""
        full = doc_length == self.expected.max_len
        self.observed.full_pieces += int(np.count_nonzero(full))
        if self.expected.eos_id is None:
            return
        cut = ids[doc_start + doc_length - 1] != self.expected.eos_id
        self.observed.cut_pieces += int(np.count_nonzero(cut))
        self.flag(
            _rows_with(cut & ~full, doc_row, n_rows),
            f"with a document that does not end with EOS yet is shorter than max_len {self.expected.max_len}",
        )

    def _check_labels(
        self,
        batch: pa.RecordBatch,
        ids: np.ndarray,
        offsets: np.ndarray,
        row_of_token: np.ndarray,
        doc_row: np.ndarray,
        doc_start: np.ndarray,
    ) -> None:
        labels, label_offsets = _flat(batch, LABELS_COLUMN)
        n_rows = batch.num_rows
        same_length = np.diff(label_offsets) == np.diff(offsets)
        self.flag(~same_length, "with labels and input_ids of different lengths")
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
        supervised = labels != IGNORE_INDEX
        label_rows = np.repeat(np.arange(n_rows), np.diff(label_offsets))
        per_row = np.bincount(label_rows[supervised], minlength=n_rows)
        self.observed.labelled = True
        self.observed.supervised_tokens += int(np.count_nonzero(supervised))
        self.observed.unsupervised_sequences += int(np.count_nonzero(per_row == 0))


def _flat(batch: pa.RecordBatch, column: str) -> tuple[np.ndarray, np.ndarray]:
    values, offsets = flat_list_column(pa.chunked_array([batch.column(column)]))
    return values.astype(np.int64, copy=False), offsets


def _rows_with(bad: np.ndarray, row_of: np.ndarray, n_rows: int) -> np.ndarray:
    """A boolean per row: whether any element (belonging to row ``row_of``) is ``bad``."""
    rows = np.zeros(n_rows, dtype=bool)
    rows[row_of[bad]] = True
    return rows
