"""Find input files and stream their text field in batches, counting (or rejecting) bad and empty records.

JSON Lines are parsed by pyarrow (fast, multi-threaded). When pyarrow rejects a block, or a record lacks its text,
the file is re-read from that record on by a line-by-line parser that names the exact line at fault.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from packcli.errors import BadRecordError, PackcliError

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
SUPPORTED_SUFFIXES = (*JSONL_SUFFIXES, ".parquet", ".arrow")
_BLOCK_BYTES = 4 << 20
_SLOW_BATCH_RECORDS = 4096


@dataclass
class ReadCounts:
    """Records that did not become documents, by reason (these go to the manifest)."""

    bad_records: int = 0
    empty_documents: int = 0


@dataclass(frozen=True)
class TextBatch:
    """Texts read from one file, and how far into that file (in bytes on disk) reading has come."""

    texts: list[str]
    position: int


Warn = Callable[[str], None]
Reject = Callable[[BadRecordError], None]


def _is_supported(path: Path) -> bool:
    return path.name.endswith(SUPPORTED_SUFFIXES)


def find_inputs(specs: Sequence[str]) -> list[Path]:
    """Expand files, directories (searched recursively) and glob patterns into a sorted, de-duplicated list.

    Raises:
        PackcliError: an input does not exist, matches nothing, or has an unsupported format.
    """
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*") if p.is_file() and _is_supported(p))
            if not matches:
                raise PackcliError(f"directory holds no input file ({', '.join(SUPPORTED_SUFFIXES)})", path)
        elif path.is_file():
            if not _is_supported(path):
                raise PackcliError(f"unsupported input format; use one of {', '.join(SUPPORTED_SUFFIXES)}", path)
            matches = [path]
        elif glob.has_magic(spec):
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True) if _is_supported(Path(p)))
            if not matches:
                raise PackcliError("no input file matches this pattern", spec)
        else:
            raise PackcliError("no such file or directory", path)
        found.extend(matches)
    unique: dict[Path, None] = {}
    for path in found:
        unique.setdefault(path.resolve(), None)
    return list(unique)


def read_texts(
    path: Path, text_field: str, counts: ReadCounts, skip_bad_records: bool, warn: Warn
) -> Iterator[TextBatch]:
    """Yield the non-empty texts of one input file in batches.

    Args:
        path: an input file of a supported format.
        text_field: the field (column) holding the text.
        counts: updated with bad and empty records as they are met.
        skip_bad_records: count and warn about a bad record instead of raising.
        warn: called with a one-line message for each skipped record.
    """

    def reject(exc: BadRecordError) -> None:
        if not skip_bad_records:
            raise exc
        counts.bad_records += 1
        warn(f"skipped bad record: {exc}")

    name = path.name
    if name.endswith(".parquet"):
        batches = _read_parquet(path, text_field, reject)
    elif name.endswith(".arrow"):
        batches = _read_arrow(path, text_field, reject)
    elif _starts_with_bracket(path):
        batches = _read_json_array(path, text_field, reject)
    else:
        batches = _read_jsonl(path, text_field, reject)
    for batch in batches:
        texts = [text for text in batch.texts if text]
        counts.empty_documents += len(batch.texts) - len(texts)
        yield TextBatch(texts, batch.position)


def _codec(path: Path) -> str | None:
    if path.name.endswith(".gz"):
        return "gzip"
    if path.name.endswith(".zst"):
        return "zstd"
    return None


def _open_binary(path: Path) -> IO[bytes]:
    """Open a possibly compressed file as a decompressed binary stream."""
    codec = _codec(path)
    if codec == "gzip":
        return gzip.open(path, "rb")
    if codec == "zstd":
        return io.BufferedReader(pa.input_stream(str(path), compression="zstd"))  # type: ignore[arg-type]
    return open(path, "rb")


def _starts_with_bracket(path: Path) -> bool:
    """True when a JSON file holds one array of records rather than JSON Lines."""
    try:
        with _open_binary(path) as stream:
            head = stream.read(4096).lstrip()
    except OSError as exc:
        raise PackcliError(f"cannot read: {exc}", path) from exc
    return head.startswith(b"[")


class _SlowPathNeeded(Exception):
    """pyarrow could not take the file past ``records_done`` records; re-read from there line by line."""

    def __init__(self, records_done: int) -> None:
        super().__init__(records_done)
        self.records_done = records_done


def _read_jsonl(path: Path, text_field: str, reject: Reject) -> Iterator[TextBatch]:
    try:
        yield from _read_jsonl_fast(path, text_field)
    except _SlowPathNeeded as slow:
        yield from _read_jsonl_lines(path, text_field, slow.records_done, reject)


def _read_jsonl_fast(path: Path, text_field: str) -> Iterator[TextBatch]:
    """pyarrow's streaming JSON reader; raises _SlowPathNeeded at the first block it cannot take whole."""
    schema = pa.schema([(text_field, pa.string())])
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    read = pa_json.ReadOptions(block_size=_BLOCK_BYTES, use_threads=True)
    records = 0
    try:
        raw = pa.OSFile(str(path))
    except OSError as exc:
        raise PackcliError(f"cannot read: {exc}", path) from exc
    with raw:
        codec = _codec(path)
        stream = pa.CompressedInputStream(raw, codec) if codec else raw
        try:
            reader = pa_json.open_json(stream, read_options=read, parse_options=parse)
            for batch in reader:
                column = batch.column(0)
                if column.null_count:
                    raise _SlowPathNeeded(records)
                texts = column.to_pylist()
                records += len(texts)
                yield TextBatch(texts, raw.tell())
        except (pa.ArrowInvalid, UnicodeDecodeError, OSError) as exc:
            raise _SlowPathNeeded(records) from exc


def _read_jsonl_lines(path: Path, text_field: str, records_done: int, reject: Reject) -> Iterator[TextBatch]:
    """Parse line by line from record ``records_done`` on, naming the line of each bad record."""
    texts: list[str] = []
    records = 0
    position = 0
    with _open_binary(path) as stream:
        for line_number, raw_line in enumerate(stream, start=1):
            position += len(raw_line)
            if not raw_line.strip():
                continue
            records += 1
            if records <= records_done:
                continue
            try:
                texts.append(_parse_line(raw_line, text_field))
            except BadRecordError as exc:
                exc.path, exc.line = str(path), line_number
                reject(exc)
            if len(texts) >= _SLOW_BATCH_RECORDS:
                yield TextBatch(texts, position)
                texts = []
    yield TextBatch(texts, path.stat().st_size)


def _parse_line(raw_line: bytes, text_field: str) -> str:
    try:
        line = raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRecordError(f"invalid UTF-8 at byte {exc.start} of the line") from None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRecordError(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    return _text_of(record, text_field)


def _text_of(record: Any, text_field: str) -> str:
    if not isinstance(record, dict):
        raise BadRecordError(f"record is a JSON {type(record).__name__}, not an object")
    if text_field not in record:
        raise BadRecordError(f"record has no field {text_field!r} (use --text-field to pick another)")
    text = record[text_field]
    if not isinstance(text, str):
        raise BadRecordError(f"field {text_field!r} is {type(text).__name__}, not a string")
    return text


def _read_json_array(path: Path, text_field: str, reject: Reject) -> Iterator[TextBatch]:
    """A ``.json`` file holding one array of records; errors name the 1-based record number."""
    try:
        with _open_binary(path) as stream:
            records = json.loads(stream.read().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PackcliError(f"invalid UTF-8 at byte {exc.start}", path) from None
    except json.JSONDecodeError as exc:
        raise PackcliError(f"invalid JSON ({exc.msg})", path, exc.lineno) from None
    if not isinstance(records, list):
        raise PackcliError("expected an array of records", path)
    texts: list[str] = []
    for number, record in enumerate(records, start=1):
        try:
            texts.append(_text_of(record, text_field))
        except BadRecordError as exc:
            exc.path, exc.message = str(path), f"record {number}: {exc.message}"
            reject(exc)
    yield TextBatch(texts, path.stat().st_size)


def _text_column(path: Path, schema: pa.Schema, text_field: str) -> None:
    """Check that ``text_field`` is a string column of ``schema``."""
    if text_field not in schema.names:
        raise PackcliError(f"no column {text_field!r} (columns: {', '.join(schema.names)}); use --text-field", path)
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise PackcliError(f"column {text_field!r} is {kind}, not a string", path)


def _column_texts(path: Path, column: pa.Array, first_row: int, reject: Reject) -> list[str]:
    """The column's values as Python strings; a null is a bad record named by its 1-based row."""
    texts: list[str | None] = column.to_pylist()
    if not column.null_count:
        return texts  # type: ignore[return-value]
    kept: list[str] = []
    for row, text in enumerate(texts, start=first_row + 1):
        if text is None:
            reject(BadRecordError("text is null", path, row))
        else:
            kept.append(text)
    return kept


def _read_parquet(path: Path, text_field: str, reject: Reject) -> Iterator[TextBatch]:
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise PackcliError(f"cannot read as Parquet: {exc}", path) from exc
    _text_column(path, parquet.schema_arrow, text_field)
    rows = 0
    size = path.stat().st_size
    groups = parquet.metadata.num_row_groups
    for group in range(groups):
        table = parquet.read_row_group(group, columns=[text_field])
        column = table.column(0).combine_chunks()
        texts = _column_texts(path, column, rows, reject)
        rows += len(column)
        yield TextBatch(texts, size * (group + 1) // groups)


def _read_arrow(path: Path, text_field: str, reject: Reject) -> Iterator[TextBatch]:
    """Arrow IPC, stream format (as ``datasets`` writes it) or file format."""
    source = pa.memory_map(str(path))
    try:
        reader: Any = pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid as exc:
            raise PackcliError(f"cannot read as Arrow IPC: {exc}", path) from exc
    _text_column(path, reader.schema, text_field)
    index = reader.schema.get_field_index(text_field)
    batches = reader if isinstance(reader, pa.ipc.RecordBatchStreamReader) else (
        reader.get_batch(i) for i in range(reader.num_record_batches)
    )
    rows = 0
    size = path.stat().st_size
    for batch in batches:
        texts = _column_texts(path, batch.column(index), rows, reject)
        rows += batch.num_rows
        yield TextBatch(texts, min(size, source.tell()))
