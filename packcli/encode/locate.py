"""Find the line of an input that holds a given document, to name it in an error raised after reading (the
cross-check's mismatch): batches carry no line numbers, so the file (or the partition's slice of it) is read again,
record by record, until a record prepares into that document. Only ever run on the way to an error.

Invariant: the line is the one a bad record there would be named by (JSON Lines line, ``.json`` record or table
row, counted in the whole file); None when no record matches (the input changed meanwhile).
"""

from __future__ import annotations

from typing import Any

from packcli.encode.encoders import Encoder
from packcli.errors import BadRecordError
from packcli.read.fields import ReadCounts
from packcli.read.inputs import InputSlice, read_records

__all__ = ["locate_document"]


class _Found(BadRecordError):
    """Raised for the matching record, so that the reader attaches its line as it does to a bad record."""


def locate_document(item: InputSlice, encoder: Encoder, document: Any) -> int | None:
    """The line (or record, or row) of ``item`` whose record the encoder prepares into ``document``."""
    found: list[_Found] = []

    def probe(values: list[Any]) -> None:
        converted = encoder.convert(values) if encoder.convert is not None else None
        columns = [[converted]] if encoder.convert is not None else [[value] for value in values]
        if encoder.prepare(columns, ReadCounts())[0] == [document]:
            found.append(_Found("the document"))
            raise found[-1]

    records = read_records(item.path, encoder.fields, ReadCounts(), True, lambda message: None, probe, item.span)
    for _ in records:
        if found:
            break
    return found[0].line if found else None
