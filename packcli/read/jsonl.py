"""JSON Lines inputs (``.jsonl``, ``.ndjson``, ``.json``; each also compressed) and ``.json`` files holding one array
of records: the chosen fields of each record, checked, in batches.

One semantics, whichever parser reads a line: a line holds one JSON object, as Python's ``json`` module parses it
(a UTF-8 BOM at the start of the file is not part of line 1; blank lines are skipped). Anything else on a line,
two objects included, is a bad record named by file and line.

The file is read in line-aligned pieces of about 1 MB. pyarrow's parser (fast) takes a piece only when its result
provably equals the line parser's (:func:`_agrees`); any other piece is parsed line by line, from its first line,
so a piece's records are exactly its lines' records whichever parser reads it: none lost, none read twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Columns, Convert, Field, FieldBatch, Reject, values_of
from packcli.read.streams import STREAM_ERRORS, Span, chunks, damaged, open_decompressed, read_named

__all__ = ["is_json_array", "read_json"]

_BLOCK_BYTES = 1 << 20  # measured: bigger tokenizer batches run slower (cache misses), smaller gain nothing
_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = b" \t\r\n"
_ESCAPE_PAIR = re.compile(rb"\\.", re.DOTALL)
# pyarrow takes no piece with a line holding more opening brackets than this: Python's parser stops near 1,000
# levels of nesting (a bad record there), pyarrow's does not.
_MAX_FAST_BRACKETS = 512
_SNIFF_BYTES = 1 << 16  # what the array sniff reads at a time: a JSON Lines file is told by its first byte
_LINE_ONE_BYTES = 16 << 20  # the most of a line 1 opening with [ that the sniff holds to tell an array from a line


def read_json(
    path: Path,
    fields: Sequence[Field],
    reject: Reject,
    convert: Convert | None = None,
    span: Span | None = None,
) -> Iterator[FieldBatch]:
    """The records of a JSON Lines file, or of a ``.json`` file holding one array of records.

    ``span`` (plain JSON Lines only): the lines that start in this byte range [start, end), where ``start`` is a
    line start (a partition plan cuts files this way); errors still name the line in the whole file.
    """
    if span is None and is_json_array(path):
        yield from _read_json_array(path, fields, reject, convert)
    else:
        yield from _read_jsonl(path, fields, reject, convert, span)


def is_json_array(path: Path) -> bool:
    """True when a JSON file holds one array of records rather than JSON Lines: its first value (after a BOM and any
    whitespace) opens with ``[``, and is not a whole line followed by more lines, which makes it line 1 of JSON Lines
    (a list there is a bad record, as on any other line). A first line of over _LINE_ONE_BYTES is taken as an array
    without being parsed (the sniff holds no more)."""
    try:
        with open_decompressed(path) as (stream, raw):
            pieces = chunks(stream, raw, path, _SNIFF_BYTES)
            rest = b""
            for number, chunk in enumerate(pieces):
                rest = (chunk.removeprefix(_BOM) if number == 0 else chunk).lstrip(_JSON_SPACE)
                if rest:
                    break
            if not rest.startswith(b"["):
                return False
            line, end = [rest], rest.find(b"\n")
            while end < 0 and sum(map(len, line)) <= _LINE_ONE_BYTES and (chunk := next(pieces, b"")):
                end = chunk.find(b"\n")
                line.append(chunk)
            if end < 0:
                return True  # the file is one line, or its first is too long to hold: an array either way
            after = line[-1][end + 1 :]
            while not after.strip(_JSON_SPACE) and (chunk := next(pieces, b"")):
                after = chunk
            if not after.strip(_JSON_SPACE):
                return True  # nothing but whitespace after line 1: the array is the whole file
            try:
                loads(b"".join([*line[:-1], line[-1][:end]]).decode("utf-8"))
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError too
                return True  # line 1 is no whole value: an array laid out over several lines
            return False
    except STREAM_ERRORS as exc:  # the stream's header, read on opening
        raise damaged(path, exc, lines_before=0, read=0) from None


def _read_jsonl(
    path: Path, fields: Sequence[Field], reject: Reject, convert: Convert | None, span: Span | None
) -> Iterator[FieldBatch]:
    fast = convert is None and all(field.kind == "string" for field in fields)
    parse = _parse_options(fields)
    # a span that starts inside the file numbers its lines (its records', its errors') after the lines before it
    lines_before = _count_lines(path, span[0]) if span is not None and span[0] > 0 else 0
    if lines_before:
        reject = _shifted(reject, lines_before)
    for piece, first_line, position in _pieces(path, span):
        parsed = _parse_fast(piece, fields, parse) if fast else None
        if parsed is None:
            columns, numbers = _parse_lines(piece, first_line, path, fields, reject, convert)
        else:
            columns, numbers = parsed[0], parsed[1] + first_line
        if columns[0]:
            yield FieldBatch(columns, position, numbers + lines_before)


def _shifted(reject: Reject, lines_before: int) -> Reject:
    """``reject`` for lines numbered from a span's start: it adds the lines before it."""

    def shifted(exc: BadRecordError) -> None:
        exc.line = (exc.line or 0) + lines_before
        reject(exc)

    return shifted


def _count_lines(path: Path, end: int) -> int:
    """The line ends in the first ``end`` bytes of a plain file."""
    count = 0
    with path.open("rb") as handle:  # a URL: its object, through the store
        while end > 0 and (block := handle.read(min(end, _BLOCK_BYTES))):
            count += block.count(b"\n")
            end -= len(block)
    return count


def _pieces(path: Path, span: Span | None) -> Iterator[tuple[bytes, int, int]]:
    """Decompressed data in pieces of about _BLOCK_BYTES that end at a line end (the last perhaps not), each with
    the number of its first line and the bytes of the file on disk read so far (for progress: a reader that reads
    ahead of what it parsed would overstate it). A BOM is dropped only as the file's first bytes: one at the start of
    a span that starts later is part of that line (a bad record, as when the whole file is read)."""
    lines_before = offset = 0
    rest = b""
    at_file_start = span is None or span[0] == 0
    with open_decompressed(path, span) as (stream, raw):
        while True:
            chunk = read_named(stream, raw, _BLOCK_BYTES, path, lines_before, offset)
            if not chunk:
                break
            offset += len(chunk)
            data = rest + chunk
            if at_file_start and lines_before == 0 and not rest:
                data = data.removeprefix(_BOM)
            end = data.rfind(b"\n") + 1
            rest = data[end:]
            if end:
                yield data[:end], lines_before + 1, raw.tell()
                lines_before += data.count(b"\n", 0, end)
        if rest:
            yield rest, lines_before + 1, raw.tell()


def _parse_options(fields: Sequence[Field]) -> pa_json.ParseOptions:
    """pyarrow reads the fields as strings and ignores the others."""
    schema = pa.schema([(field.name, pa.string()) for field in fields])
    return pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")


def _parse_fast(
    piece: bytes, fields: Sequence[Field], parse: pa_json.ParseOptions
) -> tuple[list[list[Any]], np.ndarray] | None:
    """The piece's columns by pyarrow's parser and each record's line in the piece (from 0), or None where it might
    differ from the line parser."""
    lines = _object_lines(piece)
    if lines is None or not _utf8(piece):  # checked first: pyarrow 26 crashes (SIGSEGV) on a piece that starts with
        return None  # `null`; and it never looks at the bytes of a field it does not read, which must be UTF-8 too
    read = pa_json.ReadOptions(block_size=len(piece) + 1, use_threads=False)  # one block: no record straddles two
    try:
        table = pa_json.read_json(pa.BufferReader(piece), read_options=read, parse_options=parse)
        if table.num_rows != len(lines) or any(column.null_count for column in table.columns):
            return None  # two objects on a line, or a missing field or null: the line parser names the line
        return [table.column(field.name).to_pylist() for field in fields], lines
    except (pa.ArrowInvalid, UnicodeDecodeError):  # invalid JSON or UTF-8 somewhere: the line parser finds where
        return None


def _utf8(piece: bytes) -> bool:
    """Whether ``piece`` is valid UTF-8 throughout, by Arrow's validation of it as one string (0.04 ms per MB of
    ASCII, 0.4 of CJK text; ``bytes.decode`` takes 0.06 and 1.0 and makes a copy)."""
    offsets = pa.py_buffer(np.array([0, len(piece)], dtype=np.int64))
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(piece)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _object_lines(piece: bytes) -> np.ndarray | None:
    """The non-blank lines (int64 numbers from 0) when each starts with ``{`` and ends with ``}`` (before an
    optional CR) and holds nothing pyarrow reads otherwise than Python's json module; else None.

    pyarrow reads a stream of whitespace-separated values, not lines: ``{..}{..}`` on one line is two records to
    it, and one object may span lines. When every non-blank line starts with ``{`` and ends with ``}``, and pyarrow
    reads as many records as there are such lines, each line holds exactly one object: a ``{`` right after a
    ``}`` can only open a new top-level value (inside an object or array a comma would come first), so no object
    crosses a line end, and the count leaves one object per line. What pyarrow accepts beyond Python's json
    module (deep nesting, ``Inf``, ``-NaN``) sends the piece to the line parser too.
    """
    if not piece.strip(_JSON_SPACE):
        return None  # blank lines only: nothing to parse
    data = np.frombuffer(piece, dtype=np.uint8)
    ends = np.flatnonzero(data == ord("\n"))
    if not piece.endswith(b"\n"):
        ends = np.append(ends, len(data))
    starts = np.concatenate(([0], ends[:-1] + 1))
    last = ends - 1
    last -= (last >= starts) & (data[np.maximum(last, 0)] == ord("\r"))
    filled = last >= starts
    lines = len(numbers := np.flatnonzero(filled))
    if not (np.all(data[starts[filled]] == ord("{")) and np.all(data[last[filled]] == ord("}"))):
        return None
    opening = np.flatnonzero((data == ord("{")) | (data == ord("[")))
    if len(opening) - lines >= _MAX_FAST_BRACKETS:  # else no line can hold that many
        per_line = np.bincount(np.searchsorted(ends, opening), minlength=len(ends))
        if int(per_line.max()) > _MAX_FAST_BRACKETS:
            return None
    if _non_json_number(piece):
        return None
    return numbers.astype(np.int64)


def _non_json_number(piece: bytes) -> bool:
    """Whether ``piece`` may hold a number that pyarrow reads and Python's json module refuses (it takes NaN,
    Infinity and -Infinity only): ``Inf`` or ``-Inf`` (not followed by ``inity``), or ``-NaN``, after ``:``, ``,`` or
    ``[`` and optional whitespace, outside a string (inside one it is text, :func:`_in_string`).

    Each occurrence of the word is found with ``bytes.find`` and only its left context is looked at: a regular
    expression that starts with the delimiters tries a match at every ``:`` and ``,`` (9 ms per MB of JSON Lines,
    against 2 ms). Each look back crosses one run of whitespace, never another's: linear in all.
    """
    for word in (b"Inf", b"-NaN"):
        at = piece.find(word)
        while at >= 0:
            if word == b"-NaN" or not piece.startswith(b"inity", at + 3):
                before = at - 1
                if word == b"Inf" and before >= 0 and piece[before] == ord("-"):
                    before -= 1
                while before >= 0 and piece[before] in _JSON_SPACE:
                    before -= 1
                if before >= 0 and piece[before] in b":,[" and not _in_string(piece, at):
                    return True
            at = piece.find(word, at + 1)
    return False


def _in_string(piece: bytes, at: int) -> bool:
    """Whether byte ``at`` of a JSON line lies inside a string: an odd number of quotes before it on its line, once
    the escape pairs (a backslash and the byte after it) are taken out. Exact on valid JSON; on a line that is not
    valid JSON pyarrow fails and the line parser names it anyway. Only asked of the rare words found above (a
    dictionary's ``[Informal]`` is text, not the number ``Inf``)."""
    start = piece.rfind(b"\n", 0, at) + 1
    return _ESCAPE_PAIR.sub(b"", piece[start:at]).count(b'"') % 2 == 1


def _parse_lines(
    piece: bytes,
    first_line: int,
    path: Path,
    fields: Sequence[Field],
    reject: Reject,
    convert: Convert | None,
) -> tuple[list[list[Any]], np.ndarray]:
    """The piece's columns and each record's line, line by line, naming the line of each bad record."""
    batch = Columns(fields, convert)
    for number, raw_line in enumerate(piece.split(b"\n"), start=first_line):
        if not raw_line.strip(_JSON_SPACE):
            continue
        try:
            batch.add(values_of(_parse_line(raw_line), fields), number)
        except BadRecordError as exc:
            exc.path, exc.line = str(path), number
            reject(exc)
    return batch.columns, np.array(batch.numbers, dtype=np.int64)


def _parse_line(raw_line: bytes) -> Any:
    try:
        line = raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:
        wide = " (the file is UTF-16)" if raw_line.startswith((b"\xff\xfe", b"\xfe\xff")) else ""  # its byte-order mark
        raise BadRecordError(f"invalid UTF-8 at byte {exc.start + 1} of the line{wide}") from None
    try:
        return loads(line)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise BadRecordError(
                f"more than one JSON value on the line (the second starts at column {exc.colno}); "
                "JSON Lines hold one object per line"
            ) from None
        at = "" if exc.msg.endswith(" at") else " at"  # "Unterminated string starting at" names its own place
        raise BadRecordError(f"invalid JSON ({exc.msg}{at} column {exc.colno})") from None
    except RecursionError:
        raise BadRecordError("JSON nested too deeply to read") from None


def loads(text: str) -> Any:
    """``json.loads``, reading an integer of more digits than Python converts (4,300: a bare ValueError) as a float,
    as pyarrow's parser does: a record is read alike whichever parser reads it (such a number is never a string or
    a token id, so the record stays bad where packcli reads the field). Only that number: the record's other ints
    (its token ids) stay ints."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # the int conversion's limit: only such a text pays for the second parse
        return json.loads(text, parse_int=_int_or_float)


def _int_or_float(digits: str) -> int | float:
    """The int of a JSON integer's ``digits``, or its float where they are too many for an int."""
    try:
        return int(digits)
    except ValueError:
        return float(digits)


def _read_json_array(
    path: Path, fields: Sequence[Field], reject: Reject, convert: Convert | None
) -> Iterator[FieldBatch]:
    """A ``.json`` file holding one array of records; errors name the 1-based record number."""
    try:
        with open_decompressed(path) as (stream, raw):
            records = loads(read_named(stream, raw, -1, path, lines_before=0, offset=0).decode("utf-8-sig"))
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
    except RecursionError:
        raise PackcliError("JSON nested too deeply to read", path) from None
    except STREAM_ERRORS as exc:  # the stream's header, read on opening
        raise damaged(path, exc, lines_before=0, read=0) from None
    if not isinstance(records, list):
        raise PackcliError("expected an array of records", path)
    batch = Columns(fields, convert)
    for number, record in enumerate(records, start=1):
        try:
            batch.add(values_of(record, fields), number)
        except BadRecordError as exc:
            exc.path, exc.message = str(path), f"record {number}: {exc.message}"
            reject(exc)
    yield batch.take(path.stat().st_size)
