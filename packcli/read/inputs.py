"""Find input files (files, directories, globs) and stream the chosen fields of their records in batches, counting
(or rejecting) bad records. Every reader yields the same ``FieldBatch`` whatever the format.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Convert, Converted, Field, FieldBatch, ReadCounts
from packcli.read.jsonl import read_json
from packcli.read.tables import read_arrow, read_parquet

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
SUPPORTED_SUFFIXES = (*JSONL_SUFFIXES, ".parquet", ".arrow")

Warn = Callable[[str], None]
Span = tuple[int, int]


@dataclass(frozen=True)
class InputSlice:
    """Part of one input file, as a partition plan cuts it: ``span`` is [start, end) in the file's own unit (bytes
    of a plain JSON Lines file, whose lines that start in the range belong to it; row groups of a Parquet file;
    record batches of an Arrow file); None is the whole file."""

    path: Path
    span: Span | None = None


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


def read_records(
    path: Path,
    fields: Sequence[Field],
    counts: ReadCounts,
    skip_bad_records: bool,
    warn: Warn,
    convert: Convert | None = None,
    span: Span | None = None,
) -> Iterator[FieldBatch]:
    """Yield the valid records of one input file (or of the ``span`` of it, see :class:`InputSlice`) in batches.

    Args:
        path: an input file of a supported format.
        fields: the fields to read; a record missing one, or with a value of the wrong kind, is bad.
        counts: updated with bad records as they are met.
        skip_bad_records: count and warn about a bad record instead of raising.
        warn: called with a one-line message for each skipped record.
        convert: applied to each record's values while reading (so its errors name the line); the batch then
            has one column of its results.
        span: only this part of the file; errors still name the line (or row) in the whole file.
    """

    def reject(exc: BadRecordError) -> None:
        if not skip_bad_records:
            raise exc
        counts.bad_records += 1
        warn(f"skipped bad record: {exc}")

    if convert is not None:
        fields = [Converted(field.name, field.kind, field.flag, convert) for field in fields]

    name = path.name
    if name.endswith(".parquet"):
        yield from read_parquet(path, fields, reject, span)
    elif name.endswith(".arrow"):
        yield from read_arrow(path, fields, reject, span)
    else:
        yield from read_json(path, fields, reject, span)
