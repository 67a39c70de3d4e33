"""Records read from inputs: which fields, what a valid value is, and how valid records are collected.

A bad record (a missing field, a value of the wrong kind, a message without a role) raises BadRecordError, which
the reader turns into an error naming file and line, or a counted skip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packcli.errors import BadRecordError

ROLES = ("system", "user", "assistant", "tool")
ID_LIMIT = 2**31  # shards store int32 ids
IGNORE_LABEL = -100


@dataclass
class ReadCounts:
    """Records that did not become documents, by reason (these go to the manifest)."""

    bad_records: int = 0
    empty_documents: int = 0


@dataclass(frozen=True)
class Field:
    """One record field to read: ``kind`` is "string", "messages" (a list of ``{role, content}``), "ids" (a list
    of token ids, each in [0, 2^31)) or "labels" (the same, or -100 where no loss is taken)."""

    name: str
    kind: str = "string"
    flag: str = "--text-field"  # the option that names it, for error messages


@dataclass(frozen=True)
class FieldBatch:
    """Valid records read from one file, as one list of values per field, and how far into the file (in bytes
    on disk) reading has come."""

    columns: list[list[Any]]
    position: int

    def __len__(self) -> int:
        return len(self.columns[0])


Reject = Callable[[BadRecordError], None]
Convert = Callable[[list[Any]], Any]


def check_value(value: Any, field: Field) -> Any:
    """``value`` if it is of the field's kind; else BadRecordError saying what is wrong."""
    if value is None:
        raise BadRecordError(f"field {field.name!r} is null")
    if field.kind == "string":
        if not isinstance(value, str):
            raise BadRecordError(f"field {field.name!r} is {type(value).__name__}, not a string")
        return value
    if field.kind in ("ids", "labels"):
        return _token_ids(value, field)
    if not isinstance(value, list):
        raise BadRecordError(f"field {field.name!r} is {type(value).__name__}, not a list of messages")
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRecordError(f"message {number} of {field.name!r} has no role")
        if message["role"] not in ROLES:
            raise BadRecordError(f"message {number} has unknown role {message['role']!r} (known: {', '.join(ROLES)})")
        if not isinstance(message.get("content"), str):
            raise BadRecordError(f"message {number} of {field.name!r} has no string content")
    return value


def _token_ids(value: Any, field: Field) -> np.ndarray:
    """A list of ints as an int32 array, every value in [0, 2^31) (labels: or -100); else BadRecordError."""
    if not isinstance(value, (list, np.ndarray)):  # an Arrow list column arrives as numpy arrays
        raise BadRecordError(f"field {field.name!r} is {type(value).__name__}, not a list of token ids")
    try:
        array = np.asarray(value) if len(value) else np.zeros(0, dtype=np.int64)
    except (ValueError, OverflowError):  # ragged nesting, or an int beyond 64 bits
        array = np.asarray(None)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise BadRecordError(f"field {field.name!r} is not a list of ints (token ids)")
    allowed = (array >= 0) & (array < ID_LIMIT)
    if field.kind == "labels":
        allowed |= array == IGNORE_LABEL
    if not allowed.all():
        position = int(np.argmin(allowed))
        what = "an id in [0, 2^31) or -100" if field.kind == "labels" else "token ids must be in [0, 2^31)"
        raise BadRecordError(f"field {field.name!r} holds {int(array[position])} at position {position}: {what}")
    return array.astype(np.int32)


@dataclass(frozen=True)
class Converted(Field):
    """A field whose record is converted after checking (see ``read_records``' ``convert``)."""

    convert: Convert | None = None


def checked(values: list[Any], fields: Sequence[Field]) -> list[Any]:
    """Check each value against its field, then convert the record when the fields ask for it."""
    values = [check_value(value, field) for value, field in zip(values, fields)]
    first = fields[0]
    if isinstance(first, Converted) and first.convert is not None:
        return [first.convert(values)]
    return values


def values_of(record: Any, fields: Sequence[Field]) -> list[Any]:
    """The checked (and converted) values of a JSON record's fields."""
    if not isinstance(record, dict):
        raise BadRecordError(f"record is a JSON {type(record).__name__}, not an object")
    for field in fields:
        if field.name not in record:
            raise BadRecordError(f"record has no field {field.name!r} (use {field.flag} to pick another)")
    return checked([record[field.name] for field in fields], fields)


def width(fields: Sequence[Field]) -> int:
    """Columns per batch: one per field, or one for converted records."""
    return 1 if fields and isinstance(fields[0], Converted) else len(fields)


class Columns:
    """Accumulates valid records column by column."""

    def __init__(self, width: int) -> None:
        self.columns: list[list[Any]] = [[] for _ in range(width)]

    def add(self, values: list[Any]) -> None:
        for column, value in zip(self.columns, values):
            column.append(value)

    def take(self, position: int) -> FieldBatch:
        batch = FieldBatch(self.columns, position)
        self.columns = [[] for _ in self.columns]
        return batch

    def __len__(self) -> int:
        return len(self.columns[0])
