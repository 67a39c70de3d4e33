"""Re-read a packed output and check every invariant of the format and every checksum of the manifest.

Checks, first, the names and sizes of :mod:`packcli.format.integrity` (each listed file inside the output, listed
once, present at its listed size; no shard or sidecar file there unlisted); then per shard: sha256 as listed, the
columns the manifest implies (``labels`` for fine-tuning outputs), each ``list<int32>``, self-describing metadata,
row, document and token counts (depth 2 of :mod:`packcli.format.integrity` on what it counted). Per row, each check
on its own (so one bad row never hides another): 1..max_len tokens, ``position_ids`` as long as ``input_ids`` and
restarting exactly at ``cu_seqlens``, ``cu_seqlens`` from 0 strictly rising to the row length, ids in
``[0, vocab_size)``, labels (where present) -100 or the input id and -100 at every document's first token. Per
document (``cu_seqlens`` segment), placed by the shards' ``split_pieces`` sidecars as a whole document or a piece of
a split one, BOS and EOS exactly where pack puts them (:mod:`packcli.report.specials`). Then the ``split_pieces``
against the pieces the shards hold, digests included (:mod:`packcli.report.splits`), the sidecar files and source
indexes (:mod:`packcli.report.sidecars`), the manifest's totals against the sums and against each other
(:mod:`packcli.report.accounting`), and stray temporary files. An output packed with ``--no-position-ids`` stores no
``position_ids``: no position check there.

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
(but for a shard at a URL, held whole while it is checked: one shard, never the output). A mapped shard's pages are
let go once read (:mod:`packcli.format.mapped`): the hash's a chunk at a time, the checks' all but ``KEEP_BEHIND``
bytes behind the batch just checked (an export's writer reads the batches there), so a 512 MiB shard is not held
resident whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from packcli.format.columns import LABELS_COLUMN, POSITIONS_COLUMN, TOKEN_COLUMNS
from packcli.format.integrity import Damage, count_damage, file_damage
from packcli.format.manifest import TEMPORARY_SUFFIX, read_manifest, shard_path
from packcli.format.mapped import ReleasableMap
from packcli.format.replaced import reads_output
from packcli.format.schema import SHARD_COLUMN_TYPE
from packcli.format.shards import file_buffer
from packcli.report.accounting import Observed, check_totals
from packcli.report.row_checks import Add, Expected, RowChecks, ShardUnderCheck
from packcli.report.sidecars import sidecar_problems, source_problems
from packcli.report.splits import SplitPieceCheck
from packcli.storage.urls import UrlPath, file_sizes

__all__ = ["MAX_LISTED", "Consumer", "verify_output"]

# receives each checked batch: (the shard's index in the manifest, the batch's first row in the shard, the batch)
Consumer = Callable[[int, int, pa.RecordBatch], None]

MAX_LISTED = 20
HASH_CHUNK = 1 << 24  # 16 MiB: the hash lets go of each chunk's pages once hashed
KEEP_BEHIND = 1 << 25  # 32 MiB behind the batch just checked stay mapped: an export writes the batches there
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


@reads_output  # problems found in an output replaced meanwhile are no finding about either
def verify_output(out: Path, consumer: Consumer | None = None) -> Report:
    """Check a packed output; the report lists what is wrong (nothing when it is intact).

    Args:
        out: the output directory.
        consumer: called with each batch of rows once it is checked, in output order, while no problem has been
            found (an export writes them as they come; it publishes nothing unless the report is clean).

    Raises:
        OutputReplaced: a local output was replaced (``pack --overwrite``) while it was read.
    """
    report = Report()
    manifest = read_manifest(out)
    expected = Expected.of(manifest)
    for problem in [*eos_problems(manifest), *column_problems(manifest)]:
        report.add(problem)
    damage = file_damage(manifest, file_sizes(out))  # names and sizes first: no file read
    for found in damage:
        report.add(str(found))
    said = {(found.file, found.kind) for found in damage}
    unread = {found.file for found in damage if found.kind != "twice"}  # left out, or of another size: not hashed
    observed = Observed()
    pieces = SplitPieceCheck(out, manifest, LABELS_COLUMN in expected.columns)
    seen: set[str] = set()
    for number, entry in enumerate(manifest["shards"]):
        name = entry["file"]
        if name in seen or (name, "outside") in said:
            continue
        seen.add(name)
        if (name, "missing") in said:
            continue
        shard = ShardUnderCheck(number, entry, expected, observed, pieces)
        feed = None if consumer is None else lambda *batch, n=number: consumer(n, *batch)
        _check_shard(shard_path(out, name), shard, report, feed)
    for problem in [*sidecar_problems(out, manifest, unread), *source_problems(out, manifest)]:
        report.add(problem)
    for path in sorted(out.iterdir()):
        if path.name.endswith(TEMPORARY_SUFFIX):
            report.add(f"{path.name}: a temporary file left by an interrupted write (not part of the output)")
    for problem in pieces.problems():
        report.add(problem)
    for problem in check_totals(manifest, observed, expected.specials.eos_id is not None):
        report.add(problem)
    for problem in _bos_problems(manifest["totals"], observed, expected.specials.bos_id):
        report.add(problem)
    report.shards = len(seen)
    return report


Feed = Callable[[int, pa.RecordBatch], None]  # a consumer bound to one shard: (first row, batch)


def _check_shard(path: Path, shard: ShardUnderCheck, report: Report, feed: Feed | None) -> None:
    """Check one shard against its manifest entry and the format, adding what it holds to ``shard.observed``;
    ``feed`` gets each checked batch while nothing is wrong."""
    name, entry = path.name, shard.entry
    mapped = _local_map(path)  # memory-mapped, its pages let go once read; from a URL streamed into memory
    data = file_buffer(path) if mapped is None else mapped.buffer
    later: list[str] = []  # found while the hash runs: reported after its verdict, in the order of the checks
    checked = None if mapped is None else lambda batch: mapped.release_before(_batch_start(batch), KEEP_BEHIND)
    with ThreadPoolExecutor(1, thread_name_prefix="packcli-verify") as hasher:
        digest = hasher.submit(_sha256, data, mapped)
        rows, tokens = _check_contents(name, data, shard, later, feed if report.ok else None, checked)
        if digest.result() != entry["sha256"]:
            report.add(str(Damage(entry["file"], "sha256")))
    for problem in later:
        report.add(problem)
    report.rows += rows
    report.tokens += tokens


def _sha256(data: pa.Buffer, mapped: ReleasableMap | None) -> str:
    """The buffer's sha256, hashed a chunk at a time, each chunk's pages let go once hashed (``mapped``)."""
    digest = hashlib.sha256()
    for start in range(0, data.size, HASH_CHUNK):
        digest.update(data.slice(start, min(HASH_CHUNK, data.size - start)))
        if mapped is not None:
            mapped.release(start, start + HASH_CHUNK)
    return digest.hexdigest()


def _local_map(path: Path) -> ReleasableMap | None:
    """A local shard memory-mapped; None for one at a URL (read into memory)."""
    return None if isinstance(path, UrlPath) else ReleasableMap(path)


def _batch_start(batch: pa.RecordBatch) -> int:
    """The memory address of the first byte of a record batch's data."""
    return int(min(buffer.address for column in batch.columns for buffer in column.buffers() if buffer is not None))


def _check_contents(
    name: str,
    data: pa.Buffer,
    shard: ShardUnderCheck,
    problems: list[str],
    feed: Feed | None,
    checked: Callable[[pa.RecordBatch], None] | None = None,
) -> tuple[int, int]:
    """Check a shard's bytes as an Arrow stream (schema metadata, columns, rows, counts), appending to ``problems``;
    returns the rows and tokens checked. ``checked`` is told of each batch once it is checked (and fed)."""
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
        if checked is not None:
            checked(batch)
    shard.pieces.shard_read(shard.number)
    rows.report_to(problems.append)
    counts = {"rows": table.num_rows, "documents": rows.documents, "tokens": rows.tokens}
    problems.extend(problem for _, problem in count_damage(name, entry, counts))
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
        elif kind != SHARD_COLUMN_TYPE:
            add(f"{name}: column {column} is {kind}, expected {SHARD_COLUMN_TYPE}")
            is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
            readable = readable and is_list and pa.types.is_integer(kind.value_type)
    return readable


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
