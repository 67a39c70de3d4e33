"""Records read from inputs: which fields, what a valid value is, and how valid records are collected.

A bad record (a missing field, a value of the wrong kind, a message without a role, text that is not valid Unicode)
raises BadRecordError, which the reader turns into an error naming file and line, or a counted skip. Every value
that reaches a batch has passed :func:`check_value`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packcli.errors import BadRecordError, option
from packcli.format.columns import IGNORE_INDEX, INT32_MAX

__all__ = [
    "ROLES",
    "Columns",
    "Convert",
    "Field",
    "FieldBatch",
    "ReadCounts",
    "Reject",
    "check_value",
    "json_kind",
    "values_of",
]

ROLES = ("system", "user", "assistant", "tool")


@dataclass
class ReadCounts:
    """Records that did not become documents, by reason (these go to the manifest)."""

    bad_records: int = 0
    empty_documents: int = 0
    special_text_messages: int = 0  # chat messages whose content the template turns into special tokens
    records_with_tools: int = 0  # chat records whose tools field held tool definitions

    def add(self, other: ReadCounts) -> None:
        """Add ``other``'s counts to these (another reader's: a reading thread's, once it has ended)."""
        for item in dataclasses.fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))


@dataclass(frozen=True)
class Field:
    """One record field to read: ``kind`` is "string", "messages" (a list of ``{role, content}``), "tools" (a
    list of tool definitions, each an object), "ids" (a list of token ids, each in [0, 2^31)) or "labels" (the
    same, or -100 where no loss is taken). An ``optional`` field may be missing or null: its value is then None."""

    name: str
    kind: str = "string"
    flag: str = dataclasses.field(
        default_factory=lambda: option("text_field")
    )  # the option naming it, as messages say it
    optional: bool = False


@dataclass(frozen=True)
class FieldBatch:
    """Valid records read from one file, as one list of values per column, how far into the file (in bytes on disk)
    reading has come, and each record's number as an error there would name it (its JSON Lines line, ``.json``
    record or table row, 1-based, counted in the whole file): where each document came from."""

    columns: list[list[Any]]
    position: int
    records: np.ndarray  # int64, one per record

    def __len__(self) -> int:
        return len(self.columns[0])


Reject = Callable[[BadRecordError], None]
_JSON_KINDS = {
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    list: "an array",
    dict: "an object",
}


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words: "an array", "a string", "null"."""
    return "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)


Convert = Callable[[list[Any]], Any]


def check_value(value: Any, field: Field) -> Any:
    """``value`` if it is of the field's kind; else BadRecordError saying what is wrong."""
    if value is None:
        if field.optional:
            return None
        raise BadRecordError(f"field {field.name!r} is null")
    if field.kind == "tools":
        if not isinstance(value, list) or not all(isinstance(tool, dict) for tool in value):
            raise BadRecordError(
                f"field {field.name!r} is {_kinds(value)}, not a list of tool definitions (JSON objects); name "
                f"another field with {field.flag}, or none with {option('tools_field', repr(''))}"
            )
        return value
    if field.kind == "string":
        if not isinstance(value, str):
            raise BadRecordError(f"field {field.name!r} is {json_kind(value)}, not a string")
        _check_text(value, f"field {field.name!r}")
        return value
    if field.kind in ("ids", "labels"):
        return _token_ids(value, field)
    if not isinstance(value, list):
        raise BadRecordError(f"field {field.name!r} is {json_kind(value)}, not a list of messages")
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRecordError(f"message {number} of {field.name!r} has no role")
        if message["role"] not in ROLES:
            raise BadRecordError(f"message {number} has unknown role {message['role']!r} (known: {', '.join(ROLES)})")
        if message.get("content") is None and "content" in message:
            _check_null_content(message, number, field)
            continue  # a tool-call message (OpenAI style): the template gets None, as apply_chat_template gives it
        if not isinstance(message.get("content"), str):
            raise BadRecordError(f"message {number} of {field.name!r} has no string content")
        _check_text(message["content"], f"message {number} of {field.name!r}")
    return value


def _check_null_content(message: dict[str, Any], number: int, field: Field) -> None:
    """Null content is an OpenAI-style tool call's (an assistant message carrying tool_calls): anywhere else a Jinja
    template would render the text ``None``, and supervise it on an assistant turn."""
    calls = message.get("tool_calls")
    if message["role"] != "assistant" or not isinstance(calls, list) or not calls:
        raise BadRecordError(
            f"message {number} of {field.name!r} ({message['role']}) has null content, which only an assistant "
            "message carrying tool_calls may have"
        )


def _kinds(value: Any) -> str:
    """What a value that should be a list of objects is: "a string", or "an array holding a string"."""
    if not isinstance(value, list):
        return json_kind(value)
    return f"an array holding {json_kind(next(item for item in value if not isinstance(item, dict)))}"


def _check_text(text: str, what: str) -> None:
    """A JSON ``\\ud800`` escape decodes to a lone surrogate, which no tokenizer (and no UTF-8 file) can hold."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRecordError(
            f"{what} holds a lone surrogate (\\u{ord(text[exc.start]):04x} at character {exc.start + 1}), "
            "which is not Unicode text"
        ) from None


def _token_ids(value: Any, field: Field) -> np.ndarray:
    """A list of ints as an int32 array, every value in [0, 2^31) (labels: or -100); else BadRecordError. A JSON
    ``true`` or ``false`` is no id, even among numbers."""
    if not isinstance(value, (list, np.ndarray)):  # an Arrow list column arrives as numpy arrays
        raise BadRecordError(f"field {field.name!r} is {json_kind(value)}, not a list of token ids")
    if isinstance(value, list) and bool in map(type, value):  # numpy would read false as 0 and true as 1
        position = [type(item) for item in value].index(bool)
        raise BadRecordError(
            f"field {field.name!r} holds {json.dumps(value[position])} at position {position}: a token id is a "
            "number, not true or false"
        )
    try:
        array = np.asarray(value) if len(value) else np.zeros(0, dtype=np.int64)
    except (ValueError, OverflowError):  # ragged nesting, or an int beyond 64 bits
        array = np.asarray(None)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise BadRecordError(f"field {field.name!r} is not a list of ints (token ids)")
    allowed = (array >= 0) & (array <= INT32_MAX)
    if field.kind == "labels":
        allowed |= array == IGNORE_INDEX
    if not allowed.all():
        position = int(np.argmin(allowed))
        what = "an id in [0, 2^31) or -100" if field.kind == "labels" else "token ids must be in [0, 2^31)"
        raise BadRecordError(f"field {field.name!r} holds {int(array[position])} at position {position}: {what}")
    return array.astype(np.int32)


def values_of(record: Any, fields: Sequence[Field]) -> list[Any]:
    """The values of a JSON record's fields, in field order (checked when they are added to :class:`Columns`)."""
    if not isinstance(record, dict):
        raise BadRecordError(f"record is {json_kind(record)}, not an object")
    for field in fields:
        if field.name not in record and not field.optional:
            raise BadRecordError(f"record has no field {field.name!r} (use {field.flag} to pick another)")
    return [record.get(field.name) for field in fields]


class Columns:
    """Accumulates valid records column by column.

    Each record's values are checked against their fields. With ``convert``, the checked values of a record become
    one value (the batch then has one column), converted here, while reading, so that its errors name the line.
    """

    def __init__(self, fields: Sequence[Field], convert: Convert | None = None) -> None:
        self.fields = list(fields)
        self.convert = convert
        self.columns: list[list[Any]] = self._empty()
        self.numbers: list[int] = []

    def _empty(self) -> list[list[Any]]:
        return [[] for _ in range(1 if self.convert is not None else len(self.fields))]

    def add(self, values: Sequence[Any], number: int) -> None:
        """Check one record's values and append them with the record's ``number`` (its line or row);
        BadRecordError leaves the columns as they were."""
        checked = [check_value(value, field) for value, field in zip(values, self.fields)]
        if self.convert is not None:
            checked = [self.convert(checked)]
        for column, value in zip(self.columns, checked):
            column.append(value)
        self.numbers.append(number)

    def take(self, position: int) -> FieldBatch:
        """The records so far as a batch; the columns start empty again."""
        batch = FieldBatch(self.columns, position, np.array(self.numbers, dtype=np.int64))
        self.columns, self.numbers = self._empty(), []
        return batch

    def __len__(self) -> int:
        return len(self.columns[0])
