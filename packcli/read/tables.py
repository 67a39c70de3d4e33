"""Parquet and Arrow IPC inputs: the requested columns, checked, in record batches; errors name the 1-based row.

A string field's column may hold its text in any of Arrow's string layouts (``string``, ``large_string``,
``string_view`` as polars writes it, ``dictionary<string>`` as a pandas Categorical comes back from Parquet): each is
read as the plain string column of the same values. Plain string fields without nulls are taken whole (Arrow strings
are UTF-8, which cannot hold a lone surrogate); anything else, and a column with a string that is not valid UTF-8, is
checked row by row like a JSON record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Columns, Convert, Field, FieldBatch, Reject
from packcli.read.streams import Span
from packcli.storage.sources import arrow_source, parquet_source

__all__ = ["check_columns", "read_arrow", "read_parquet", "table_records", "unmarked_batches"]


def present(schema: pa.Schema, fields: Sequence[Field]) -> list[Field]:
    """``fields`` less the optional ones the table has no column for (their values are None: the converter is
    given only the values before them)."""
    return [field for field in fields if not field.optional or field.name in schema.names]


def check_columns(path: Path, schema: pa.Schema, fields: Sequence[Field]) -> list[int]:
    """The column index of each field; string fields must be string columns."""
    indices = []
    for field in fields:
        if field.name not in schema.names:
            raise PackcliError(f"no column {field.name!r} (columns: {', '.join(schema.names)}); use {field.flag}", path)
        kind = schema.field(field.name).type
        if field.kind == "string" and not _holds_text(kind):
            raise PackcliError(f"column {field.name!r} is {kind}, not a string", path)
        indices.append(schema.get_field_index(field.name))
    return indices


def _holds_text(kind: pa.DataType) -> bool:
    """Whether a column of ``kind`` holds strings, in one of Arrow's layouts (a dictionary's in its values)."""
    if pa.types.is_dictionary(kind):
        return _holds_text(kind.value_type)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))


def _plain_strings(column: pa.Array) -> pa.Array:
    """A string column in the plain ``string`` layout (``large_string`` kept: its offsets may not fit 32 bits), the
    same values; any other column as it is."""
    if pa.types.is_dictionary(column.type) and _holds_text(column.type):
        column = column.dictionary_decode()
    return column.cast(pa.string()) if pa.types.is_string_view(column.type) else column


def table_records(
    path: Path,
    columns: list[pa.Array],
    fields: Sequence[Field],
    first_row: int,
    reject: Reject,
    convert: Convert | None = None,
) -> tuple[list[list[Any]], np.ndarray]:
    """Column values as Python objects (each record converted with ``convert``, if given), and each valid record's
    1-based row; a null, mistyped or undecodable value is a bad record named by its 1-based row."""
    values: list[list[Any]] | None
    try:
        values = [_values(column) for column in columns]
    except UnicodeDecodeError:  # a string that is not UTF-8 (not every Arrow writer checks): find its row below
        values = None
    plain = convert is None and all(field.kind == "string" for field in fields)
    if values is not None and plain and not any(column.null_count for column in columns):
        return values, np.arange(first_row + 1, first_row + 1 + len(values[0]) if values else 0, dtype=np.int64)
    batch = Columns(fields, convert)
    for index in range(len(columns[0]) if columns else 0):
        try:
            batch.add(_record(columns, values, index), first_row + index + 1)
        except BadRecordError as exc:
            exc.path, exc.line = str(path), first_row + index + 1
            reject(exc)
    return batch.columns, np.array(batch.numbers, dtype=np.int64)


def _record(columns: list[pa.Array], values: list[list[Any]] | None, index: int) -> list[Any]:
    if values is not None:
        return [column[index] for column in values]
    try:
        return [column[index].as_py() for column in columns]
    except UnicodeDecodeError as exc:
        raise BadRecordError(f"invalid UTF-8 at byte {exc.start + 1} of a value") from None


def _values(column: pa.Array) -> list[Any]:
    """A column's values; a list of integers stays numpy per row (token ids: no Python int per token)."""
    kind = column.type
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_integer(kind.value_type):
        return list(column.to_numpy(zero_copy_only=False))
    return list(column.to_pylist())


def read_parquet(
    path: Path,
    fields: Sequence[Field],
    reject: Reject,
    convert: Convert | None = None,
    span: Span | None = None,
) -> Iterator[FieldBatch]:
    """A Parquet file, one row group at a time (only the row groups [start, end) of ``span``)."""
    import pyarrow.parquet as pq  # here: a JSON Lines run need not load Parquet (30 ms)

    try:
        parquet = pq.ParquetFile(parquet_source(path))
    except (OSError, pa.ArrowException) as exc:
        raise PackcliError(f"cannot read as Parquet: {exc}", path) from exc
    fields = present(parquet.schema_arrow, fields)
    check_columns(path, parquet.schema_arrow, fields)
    groups = parquet.metadata.num_row_groups
    first, last = span or (0, groups)
    rows = sum(parquet.metadata.row_group(group).num_rows for group in range(first))
    size = path.stat().st_size
    for group in range(first, last):
        table = parquet.read_row_group(group, columns=[field.name for field in fields])
        columns = [_plain_strings(table.column(field.name).combine_chunks()) for field in fields]
        records, numbers = table_records(path, columns, fields, rows, reject, convert)
        yield FieldBatch(records, size * (group + 1) // groups, numbers)
        rows += table.num_rows


def read_arrow(
    path: Path,
    fields: Sequence[Field],
    reject: Reject,
    convert: Convert | None = None,
    span: Span | None = None,
) -> Iterator[FieldBatch]:
    """Arrow IPC, stream format (as ``datasets`` writes it) or file format (only the record batches [start, end)
    of ``span``)."""
    source = arrow_source(path)
    try:
        reader: Any = pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid as exc:
            raise PackcliError(f"cannot read as Arrow IPC: {exc}", path) from exc
    fields = present(reader.schema, fields)
    indices = check_columns(path, reader.schema, fields)
    batches = (
        reader
        if isinstance(reader, pa.ipc.RecordBatchStreamReader)
        else (reader.get_batch(i) for i in range(reader.num_record_batches))
    )
    first, last = span or (0, None)
    rows = 0
    size = path.stat().st_size
    for number, batch in enumerate(_named_failures(path, batches)):
        if last is not None and number >= last:
            break
        if number < first:  # memory-mapped: skipping a batch reads its header, not its data
            rows += batch.num_rows
            continue
        columns = [_plain_strings(batch.column(index)) for index in indices]
        records, numbers = table_records(path, columns, fields, rows, reject, convert)
        yield FieldBatch(records, min(size, source.tell()), numbers)
        rows += batch.num_rows


def unmarked_batches(path: Path) -> int | None:
    """For an Arrow IPC stream on a local disk that ends without its end-of-stream marker, the record batches it
    holds; else None (a stream that has it, the file format, a file :func:`read_arrow` refuses). The format lets a
    stream end without the marker, but pyarrow's writers (``datasets``' ``save_to_disk`` among them) always write it:
    a stream without it is most likely cut short, and one cut at a record batch's end reads as whole. Only the
    messages' headers are read (memory-mapped: the batches' data is not touched)."""
    try:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.MessageReader.open_stream(source)
            messages = batches = end = 0
            while True:
                try:
                    message = reader.read_next_message()
                except StopIteration:  # at the marker (read past it) or at the end of the file (nothing read)
                    break
                messages, batches, end = messages + 1, batches + (message.type == "record batch"), source.tell()
            return batches if messages and source.tell() == end else None
    except (OSError, pa.ArrowException):
        return None


def _named_failures(path: Path, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, with a damaged or cut-short file named where reading it stopped."""
    iterator = iter(batches)
    count = 0
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as exc:
            raise PackcliError(
                f"the Arrow data is damaged or cut short after {count} record batch(es): {exc}", path
            ) from None
        count += 1
        yield batch
