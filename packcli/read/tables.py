"""Parquet and Arrow IPC inputs: the requested columns, checked, in record batches; errors name the 1-based row."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Columns, Converted, Field, FieldBatch, Reject, checked, width


def check_columns(path: Path, schema: pa.Schema, fields: Sequence[Field]) -> list[int]:
    """The column index of each field; string fields must be string columns."""
    indices = []
    for field in fields:
        if field.name not in schema.names:
            raise PackcliError(f"no column {field.name!r} (columns: {', '.join(schema.names)}); use {field.flag}", path)
        kind = schema.field(field.name).type
        if field.kind == "string" and not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise PackcliError(f"column {field.name!r} is {kind}, not a string", path)
        indices.append(schema.get_field_index(field.name))
    return indices


def table_records(
    path: Path, columns: list[pa.Array], fields: Sequence[Field], first_row: int, reject: Reject
) -> list[list[Any]]:
    """Column values as Python objects; a null or mistyped value is a bad record named by its 1-based row."""
    values = [_values(column) for column in columns]
    plain = all(field.kind == "string" and not isinstance(field, Converted) for field in fields)
    if plain and not any(column.null_count for column in columns):
        return values
    batch = Columns(width(fields))
    for row, record in enumerate(zip(*values), start=first_row + 1):
        try:
            batch.add(checked(list(record), fields))
        except BadRecordError as exc:
            exc.path, exc.line = str(path), row
            reject(exc)
    return batch.columns


def _values(column: pa.Array) -> list[Any]:
    """A column's values; a list of integers stays numpy per row (token ids: no Python int per token)."""
    kind = column.type
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_integer(kind.value_type):
        return list(column.to_numpy(zero_copy_only=False))
    return list(column.to_pylist())


def read_parquet(
    path: Path, fields: Sequence[Field], reject: Reject, span: tuple[int, int] | None = None
) -> Iterator[FieldBatch]:
    """A Parquet file, one row group at a time (only the row groups [start, end) of ``span``)."""
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise PackcliError(f"cannot read as Parquet: {exc}", path) from exc
    check_columns(path, parquet.schema_arrow, fields)
    groups = parquet.metadata.num_row_groups
    first, last = span or (0, groups)
    rows = sum(parquet.metadata.row_group(group).num_rows for group in range(first))
    size = path.stat().st_size
    for group in range(first, last):
        table = parquet.read_row_group(group, columns=[field.name for field in fields])
        columns = [table.column(field.name).combine_chunks() for field in fields]
        yield FieldBatch(table_records(path, columns, fields, rows, reject), size * (group + 1) // groups)
        rows += table.num_rows


def read_arrow(
    path: Path, fields: Sequence[Field], reject: Reject, span: tuple[int, int] | None = None
) -> Iterator[FieldBatch]:
    """Arrow IPC, stream format (as ``datasets`` writes it) or file format (only the record batches [start, end)
    of ``span``)."""
    source = pa.memory_map(str(path))
    try:
        reader: Any = pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid as exc:
            raise PackcliError(f"cannot read as Arrow IPC: {exc}", path) from exc
    indices = check_columns(path, reader.schema, fields)
    batches = (
        reader
        if isinstance(reader, pa.ipc.RecordBatchStreamReader)
        else (reader.get_batch(i) for i in range(reader.num_record_batches))
    )
    first, last = span or (0, None)
    rows = 0
    size = path.stat().st_size
    for number, batch in enumerate(batches):
        if last is not None and number >= last:
            break
        if number < first:  # memory-mapped: skipping a batch reads its header, not its data
            rows += batch.num_rows
            continue
        columns = [batch.column(index) for index in indices]
        yield FieldBatch(table_records(path, columns, fields, rows, reject), min(size, source.tell()))
        rows += batch.num_rows
