"""Re-read a packed output and check every invariant of the format and every checksum of the manifest.

Checks, per shard: listed once, inside the output directory, present, size and sha256 as listed, the columns the
manifest implies (``labels`` for fine-tuning outputs), each ``list<int32>``, self-describing metadata, row, document
and token counts. Per row, each check on its own (so one bad row never hides another): 1..max_len tokens,
``position_ids`` as long as ``input_ids`` and restarting exactly at ``cu_seqlens``, ``cu_seqlens`` from 0 strictly
rising to the row length, ids in ``[0, vocab_size)``, labels (where present) -100 or the input id and -100 at
every document's first token. Per document (``cu_seqlens`` segment), placed by the shards' ``split_pieces``
sidecars as a whole document or a piece of a split one, BOS and EOS exactly where pack puts them
(:mod:`packcli.report.specials`). Then the ``split_pieces`` against the pieces the shards hold, digests included
(:mod:`packcli.report.splits`), the sidecar files and source indexes (:mod:`packcli.report.sidecars`), the
manifest's totals against the sums and against each other (:mod:`packcli.report.accounting`), and stray temporary
or unlisted shard files. An output packed with ``--no-position-ids`` stores no ``position_ids``: no
position check there.

The EOS checks follow the EOS id the manifest implies, and an edited manifest cannot switch them off: a manifest
whose ``tokenizer.eos_id`` is null (or missing) while its options say EOS was appended (``eos`` true, and a
tokenizer ran or one was given, or ``--eos-id``) is refused, and each shard's own ``packcli.eos_id`` metadata
(written since this check exists; older shards lack it) must name the same id. Only a forger who rewrites every
shard as well gets past this: nothing inside an output can tell its own bytes from a consistent rewrite of them.
Speed (verify reads every byte, and every export runs it): each shard is memory-mapped once (in an output on
object storage, streamed once into memory: nothing is copied to disk); a helper thread hashes the bytes (hashlib
releases the GIL) while the rows are checked, batch by batch, vectorised over the batch.
The checks over every token prove an intact batch in a few passes (ids' minimum and maximum; position_ids rising by
one except exactly at the document starts; labels equal to -100 or the id); only a batch that fails one of them is
searched row by row for what to name. An export passes a consumer that receives each batch once it is checked, as
long as nothing is wrong so far, so the export reads the shards once; nothing it writes is published unless the
whole output verifies. Shards are read one record batch at a time: memory stays bounded whatever the shard size
(but for a shard at a URL, held whole while it is checked: one shard, never the output).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.format.columns import FORMAT_VERSION, IGNORE_INDEX, LABELS_COLUMN, POSITIONS_COLUMN, TOKEN_COLUMNS
from packcli.format.manifest import SHARD_FILE, TEMPORARY_SUFFIX, read_manifest, shard_path
from packcli.format.shards import file_buffer, flat_list_column
from packcli.report.accounting import Observed, check_totals
from packcli.report.sidecars import sidecar_problems, source_problems
from packcli.report.specials import SpecialsRule, misplaced_specials
from packcli.report.splits import UNRECORDED, WHOLE, Places, SplitPieceCheck
from packcli.util.arrays import exclusive_cumsum

__all__ = ["MAX_LISTED", "Consumer", "verify_output"]

# receives each checked batch: (the shard's index in the manifest, the batch's first row in the shard, the batch)
Consumer = Callable[[int, int, pa.RecordBatch], None]
Add = Callable[[str], None]

MAX_LISTED = 20
COLUMN_TYPE = pa.list_(pa.int32())
STORED_ALWAYS = tuple(name for name in TOKEN_COLUMNS if name != POSITIONS_COLUMN)  # the rows cannot be read without


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


def eos_problems(manifest: dict[str, Any]) -> list[str]:
    """What in the manifest contradicts how pack decides on EOS and BOS: with ``eos`` on, pack appends the
    tokenizer's EOS (refusing a tokenizer without one) or ``--eos-id``; only pre-tokenized records without either
    get none. With ``bos`` on, pack prepends the tokenizer's BOS and refuses a tokenizer without one."""
    tokenizer, options = manifest["tokenizer"], manifest["options"]
    if options.get("bos") is True and tokenizer.get("bos_id") is None:
        return ["manifest: tokenizer.bos_id is null or missing, yet options.bos is true: pack prepends a BOS then"]
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


def column_problems(manifest: dict[str, Any]) -> list[str]:
    """The manifest's ``columns`` against its options: ``position_ids`` is stored unless ``options.position_ids`` is
    false (``--no-position-ids``; the default leaves that key out)."""
    stored = manifest["options"].get("position_ids", True) is not False
    if "columns" not in manifest or (POSITIONS_COLUMN in manifest["columns"]) == stored:
        return []
    if stored:
        return ["manifest: columns leave out position_ids, yet options do not say position_ids false"]
    return ["manifest: columns list position_ids, yet options.position_ids is false"]


def verify_output(out: Path, consumer: Consumer | None = None) -> Report:
    """Check a packed output; the report lists what is wrong (nothing when it is intact).

    Args:
        out: the output directory.
        consumer: called with each batch of rows once it is checked, in output order, while no problem has been
            found (an export writes them as they come; it publishes nothing unless the report is clean).
    """
    report = Report()
    manifest = read_manifest(out)
    expected = Expected.of(manifest)
    for problem in [*eos_problems(manifest), *column_problems(manifest)]:
        report.add(problem)
    observed = Observed()
    pieces = SplitPieceCheck(out, manifest, LABELS_COLUMN in expected.columns)
    seen: set[str] = set()
    for number, entry in enumerate(manifest["shards"]):
        try:
            path = shard_path(out, entry["file"])
        except PackcliError as exc:
            report.add(exc.message)
            continue
        if path.name in seen:
            report.add(f"{path.name}: listed twice in the manifest")
            continue
        seen.add(path.name)
        shard = ShardUnderCheck(number, entry, expected, observed, pieces)
        _check_shard(path, shard, report, None if consumer is None else lambda *batch, n=number: consumer(n, *batch))
    for problem in [*sidecar_problems(out, manifest), *source_problems(out, manifest)]:
        report.add(problem)
    for path in sorted(out.iterdir()):
        if path.name.endswith(TEMPORARY_SUFFIX):
            report.add(f"{path.name}: a temporary file left by an interrupted write (not part of the output)")
        elif SHARD_FILE.fullmatch(path.name) and path.name not in seen:
            report.add(f"{path.name}: shard file not listed in the manifest")
    for problem in pieces.problems():
        report.add(problem)
    for problem in check_totals(manifest, observed, expected.specials.eos_id is not None):
        report.add(problem)
    for problem in _bos_problems(manifest["totals"], observed, expected.specials.bos_id):
        report.add(problem)
    report.shards = len(seen)
    return report


@dataclass(frozen=True)
class ShardUnderCheck:
    """One shard to check: its place in the manifest, its entry, and where what it holds is summed."""

    number: int
    entry: dict[str, Any]
    expected: Expected
    observed: Observed
    pieces: SplitPieceCheck


Feed = Callable[[int, pa.RecordBatch], None]  # a consumer bound to one shard: (first row, batch)


def _check_shard(path: Path, shard: ShardUnderCheck, report: Report, feed: Feed | None) -> None:
    """Check one shard against its manifest entry and the format, adding what it holds to ``shard.observed``;
    ``feed`` gets each checked batch while nothing is wrong."""
    name, entry = path.name, shard.entry
    if not path.is_file():
        report.add(f"{name}: missing")
        return
    data = file_buffer(path)  # memory-mapped; from a URL streamed into memory, never to disk
    if data.size != entry["bytes"]:
        report.add(f"{name}: {data.size} bytes, the manifest says {entry['bytes']}")
    later: list[str] = []  # found while the hash runs: reported after its verdict, in the order of the checks
    with ThreadPoolExecutor(1, thread_name_prefix="packcli-verify") as hasher:
        digest = hasher.submit(_sha256, data)
        rows, tokens = _check_contents(name, data, shard, later, feed if report.ok else None)
        if digest.result() != entry["sha256"]:
            report.add(f"{name}: sha256 differs from the manifest (the file was changed or damaged)")
    for problem in later:
        report.add(problem)
    report.rows += rows
    report.tokens += tokens


def _sha256(data: pa.Buffer) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_contents(
    name: str, data: pa.Buffer, shard: ShardUnderCheck, problems: list[str], feed: Feed | None
) -> tuple[int, int]:
    """Check a shard's bytes as an Arrow stream (schema metadata, columns, rows, counts), appending to ``problems``;
    returns the rows and tokens checked."""
    expected, entry = shard.expected, shard.entry
    try:
        table = pa.ipc.open_stream(data).read_all()
    except (pa.ArrowException, OSError) as exc:
        problems.append(f"{name}: unreadable as an Arrow IPC stream ({exc})")
        return 0, 0
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    shard.pieces.shard_metadata(metadata)
    for key, value in expected.metadata.items():
        if metadata.get(key) != value:
            problems.append(f"{name}: schema metadata {key} is {metadata.get(key)!r}, expected {value!r}")
    for key, value in expected.written_since.items():
        if key in metadata and metadata[key] != value:
            problems.append(f"{name}: schema metadata {key} is {metadata[key]!r}, the manifest implies {value!r}")
    if not _check_columns(name, table.schema, expected.columns, problems.append):
        return 0, 0
    rows = RowChecks(name, shard)
    for batch in table.to_batches():
        first_row = rows.first_row
        rows.check(batch)
        if feed is not None and not problems and rows.intact:
            feed(first_row, batch)
    shard.pieces.shard_read(shard.number)
    rows.report_to(problems.append)
    counts = {"rows": table.num_rows, "documents": rows.documents, "tokens": rows.tokens}
    for key, value in counts.items():
        if entry.get(key, value) != value:
            problems.append(f"{name}: holds {value} {key}, the manifest says {entry[key]}")
    shard.observed.sequences += table.num_rows
    shard.observed.documents += rows.documents
    shard.observed.tokens += rows.tokens
    return table.num_rows, rows.tokens


def _check_columns(name: str, schema: pa.Schema, columns: tuple[str, ...], add: Add) -> bool:
    """Report missing, extra and mistyped columns; True when the rows can still be read (every column present is a
    list of integers, ``input_ids`` and ``cu_seqlens`` there)."""
    readable = True
    for column in dict.fromkeys([*columns, *STORED_ALWAYS]):
        if column not in schema.names:
            add(f"{name}: missing column {column}")
            readable = readable and column not in STORED_ALWAYS
    for column in schema.names:
        kind = schema.field(column).type
        if column not in columns:
            add(f"{name}: column {column} is not one the manifest lists ({', '.join(columns)})")
        elif kind != COLUMN_TYPE:
            add(f"{name}: column {column} is {kind}, expected {COLUMN_TYPE}")
            is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
            readable = readable and is_list and pa.types.is_integer(kind.value_type)
    return readable


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


def _bos_problems(totals: dict[str, Any], observed: Observed, bos_id: int | None) -> list[str]:
    """With BOS prepended, the documents that do not start with it and whose place is not recorded (an output
    packed before ``split_pieces``) can only be later pieces of split documents: no more of them than such pieces."""
    if bos_id is None:
        return []
    later_pieces = (
        totals["documents"] - totals.get("input_documents", totals["documents"]) + totals["dropped_documents"]
    )
    if observed.unmarked_starts <= max(later_pieces, 0):
        return []
    return [
        f"{observed.unmarked_starts} document(s) do not start with the BOS id {bos_id}, yet at most {later_pieces} "
        "are later pieces of a split document (the output does not record which): the manifest's tokenizer.bos_id "
        "is not what pack prepended"
    ]
