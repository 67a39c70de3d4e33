"""JSON Lines (plain, .gz, .zst) and JSON-array inputs: the chosen fields of each record, checked, in batches.

JSON Lines are parsed by pyarrow (fast) in line-aligned pieces of about 1 MB. When pyarrow rejects a piece, or a
record lacks a field, the file is re-read from that record on by a line-by-line parser that names the line at fault.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.json as pa_json

from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Columns, Converted, Field, FieldBatch, Reject, values_of, width

_BLOCK_BYTES = 1 << 20  # measured: bigger tokenizer batches run slower (cache misses), smaller gain nothing
_SLOW_BATCH_RECORDS = 4096


def read_json(
    path: Path, fields: Sequence[Field], reject: Reject, span: tuple[int, int] | None = None
) -> Iterator[FieldBatch]:
    """The records of a JSON Lines file, or of a ``.json`` file holding one array of records.

    ``span`` (plain JSON Lines only): the lines that start in this byte range [start, end), where ``start`` is a
    line start (a partition plan cuts files this way); errors still name the line in the whole file.
    """
    if span is None and is_json_array(path):
        yield from _read_json_array(path, fields, reject)
    else:
        yield from _read_jsonl(path, fields, reject, span)


def _codec(path: Path) -> str | None:
    if path.name.endswith(".gz"):
        return "gzip"
    if path.name.endswith(".zst"):
        return "zstd"
    return None


class _ByteRange(io.RawIOBase):
    """The bytes [start, end) of an open file, as a stream of their own."""

    def __init__(self, raw: IO[bytes], start: int, end: int) -> None:
        raw.seek(start)
        self.raw = raw
        self.left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")[: self.left]
        count = self.raw.readinto(view) or 0  # type: ignore[attr-defined]
        self.left -= count
        return count


@contextmanager
def _decompressed(path: Path, span: tuple[int, int] | None = None) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """(decompressed stream, raw file): the raw file's position is how far into the file on disk reading is."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed below, after the stream on top of it)
    except OSError as exc:
        raise PackcliError(f"cannot read: {exc}", path) from exc
    with raw:
        codec = _codec(path)
        if span is not None:
            assert codec is None, "a compressed file is read whole"
            yield cast(IO[bytes], io.BufferedReader(_ByteRange(raw, *span))), raw
        elif codec == "gzip":
            yield cast(IO[bytes], gzip.GzipFile(fileobj=raw)), raw
        elif codec == "zstd":
            yield (
                cast(IO[bytes], io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd"))),
                raw,
            )
        else:
            yield raw, raw


def is_json_array(path: Path) -> bool:
    """True when a JSON file holds one array of records rather than JSON Lines."""
    try:
        with _decompressed(path) as (stream, _):
            head = stream.read(4096).lstrip()
    except (OSError, EOFError) as exc:
        raise PackcliError(f"cannot read: {exc}", path) from exc
    return head.startswith(b"[")


class _SlowPathNeeded(Exception):
    """pyarrow could not take the file past ``records_done`` records; re-read from there line by line."""

    def __init__(self, records_done: int) -> None:
        super().__init__(records_done)
        self.records_done = records_done


def _read_jsonl(
    path: Path, fields: Sequence[Field], reject: Reject, span: tuple[int, int] | None
) -> Iterator[FieldBatch]:
    try:
        if any(field.kind != "string" or isinstance(field, Converted) for field in fields):
            raise _SlowPathNeeded(0)  # nested values: the line parser checks them record by record
        yield from _read_jsonl_fast(path, fields, span)
    except _SlowPathNeeded as slow:
        yield from _read_jsonl_lines(path, fields, slow.records_done, reject, span)


def _line_chunks(path: Path, span: tuple[int, int] | None) -> Iterator[tuple[bytes, int]]:
    """Decompressed data in pieces of about _BLOCK_BYTES that end at a line end, each with the bytes of the file
    on disk read so far (for progress: a reader that reads ahead of what it parsed would overstate it)."""
    with _decompressed(path, span) as (stream, raw):
        rest = b""
        while chunk := stream.read(_BLOCK_BYTES):
            data = rest + chunk
            end = data.rfind(b"\n") + 1
            rest = data[end:]
            if end:
                yield data[:end], raw.tell()
        if rest.strip():
            yield rest, raw.tell()


def _read_jsonl_fast(path: Path, fields: Sequence[Field], span: tuple[int, int] | None) -> Iterator[FieldBatch]:
    """pyarrow's JSON parser, a piece at a time; raises _SlowPathNeeded at the first piece it cannot take whole."""
    schema = pa.schema([(field.name, pa.string()) for field in fields])
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    records = 0
    try:
        for piece, position in _line_chunks(path, span):
            read = pa_json.ReadOptions(block_size=len(piece) + 1, use_threads=False)  # no record straddles blocks
            table = pa_json.read_json(pa.BufferReader(piece), read_options=read, parse_options=parse)
            if any(column.null_count for column in table.columns):
                raise _SlowPathNeeded(records)
            columns = [table.column(field.name).to_pylist() for field in fields]
            records += table.num_rows
            yield FieldBatch(columns, position)
    except (pa.ArrowInvalid, UnicodeDecodeError, OSError, EOFError, gzip.BadGzipFile) as exc:
        raise _SlowPathNeeded(records) from exc


def _read_jsonl_lines(
    path: Path, fields: Sequence[Field], records_done: int, reject: Reject, span: tuple[int, int] | None
) -> Iterator[FieldBatch]:
    """Parse line by line from record ``records_done`` on, naming the line of each bad record."""
    batch = Columns(width(fields))
    records = line_number = 0
    lines_before: int | None = None  # lines ahead of the span, counted only when an error needs them
    with _decompressed(path, span) as (stream, raw):
        lines = enumerate(stream, start=1)
        while True:
            try:
                line_number, raw_line = next(lines)
            except StopIteration:
                break
            except (OSError, EOFError, pa.ArrowInvalid) as exc:  # a damaged compressed stream
                raise PackcliError(f"cannot read past line {line_number}: {exc}", path) from None
            if not raw_line.strip():
                continue
            records += 1
            if records <= records_done:
                continue
            try:
                batch.add(values_of(_parse_line(raw_line), fields))
            except BadRecordError as exc:
                if lines_before is None:
                    lines_before = _count_lines(path, span[0]) if span else 0
                exc.path, exc.line = str(path), lines_before + line_number
                reject(exc)
            if len(batch) >= _SLOW_BATCH_RECORDS:
                yield batch.take(raw.tell())
    yield batch.take(path.stat().st_size)


def _count_lines(path: Path, end: int) -> int:
    """The line ends in the first ``end`` bytes of a plain file."""
    count = 0
    with open(path, "rb") as handle:
        while end > 0 and (block := handle.read(min(end, _BLOCK_BYTES))):
            count += block.count(b"\n")
            end -= len(block)
    return count


def _parse_line(raw_line: bytes) -> Any:
    try:
        line = raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRecordError(f"invalid UTF-8 at byte {exc.start} of the line") from None
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRecordError(f"invalid JSON ({exc.msg} at column {exc.colno})") from None


def _read_json_array(path: Path, fields: Sequence[Field], reject: Reject) -> Iterator[FieldBatch]:
    """A ``.json`` file holding one array of records; errors name the 1-based record number."""
    try:
        with _decompressed(path) as (stream, _):
            records = json.loads(stream.read().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PackcliError(f"invalid UTF-8 at byte {exc.start}", path) from None
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON Lines whose first line is a list: name the line, not the parser's state
            raise PackcliError(
                "line 1 is a JSON list, not an object: JSON Lines need one object per line "
                "(a .json file may also hold one array of objects)",
                path,
            ) from None
        raise PackcliError(f"invalid JSON ({exc.msg})", path, exc.lineno) from None
    except (OSError, EOFError) as exc:
        raise PackcliError(f"cannot read: {exc}", path) from None
    if not isinstance(records, list):
        raise PackcliError("expected an array of records", path)
    batch = Columns(width(fields))
    for number, record in enumerate(records, start=1):
        try:
            batch.add(values_of(record, fields))
        except BadRecordError as exc:
            exc.path, exc.message = str(path), f"record {number}: {exc.message}"
            reject(exc)
    yield batch.take(path.stat().st_size)
