"""The partition plan: which part of which input each partition reads, from the inputs alone (never the cluster or
the worker count), so the same inputs and count give the same plan, hash and bytes on any engine. JSON Lines are cut
by byte ranges (a partition reads the lines that start in its own), Parquet by row groups, Arrow by record batches;
a compressed file or a JSON array is one piece. The pieces go to the least-loaded partitions, largest files first, so
every partition mixes the whole corpus (one source per partition packs up to 25% worse). Example, 2 partitions over
``a.jsonl`` (100 bytes, lines at 0, 40, 70) and ``b.jsonl.gz`` (30 bytes): ``a`` is cut at byte 50, snapped to 70;
partition 0 reads ``a[0:70)``, partition 1 ``a[70:100)`` and ``b`` (to the lighter partition: 30 bytes against 70).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from packcli.errors import PackcliError, UsageError, option
from packcli.read.inputs import InputSlice, input_format
from packcli.read.jsonl import is_json_array
from packcli.read.streams import COMPRESSIONS, Span
from packcli.storage.sources import arrow_source, parquet_source

__all__ = ["Plan", "plan_partitions"]

SLICES_PER_PARTITION = 16  # pieces a partition reads on average: more mixing, against more files opened
MIN_RECORD_BYTES = 3  # no record takes fewer bytes ("{}" and its line end): no file holds more records than this allows
_SCAN_BYTES = 1 << 16

Piece = tuple[Span | None, int]  # (span in the file's unit, or None for the whole file; bytes on disk)


@dataclass(frozen=True)
class Plan:
    """What each partition reads, in partition order; ``digest`` identifies the plan (it joins the fingerprint)."""

    partitions: tuple[tuple[InputSlice, ...], ...]
    weights: tuple[int, ...]  # bytes on disk each partition reads (compressed files count their compressed size)
    digest: str | None  # None: a plain run's plan (see whole)

    @classmethod
    def whole(cls, files: Sequence[Path], size: int) -> Plan:
        """A plain run's plan: one partition that reads every input whole (``size`` bytes), with no digest: a plain
        run's fingerprint names no plan."""
        return cls((tuple(InputSlice(path) for path in files),), (size,), None)

    @property
    def partitioned(self) -> bool:
        """A partitioned run's plan (``--partitions``, ``--partition-size``), even of one partition."""
        return self.digest is not None

    def __len__(self) -> int:
        return len(self.partitions)

    def describe(self) -> dict[str, object]:
        """The manifest's ``partitions`` block."""
        return {"count": len(self.partitions), "plan_hash": self.digest}


def plan_partitions(files: Sequence[Path], partitions: int, partition_size: int | None = None) -> Plan:
    """Cut ``files`` into ``partitions`` mixtures of the whole corpus (a count ``--partition-size`` made, where
    ``partition_size`` is given: a refusal then names that option).

    Raises:
        UsageError: some partition would hold no input: the files cannot be cut that finely.
    """
    sizes = [path.stat().st_size for path in files]
    most = sum(max(1, size // MIN_RECORD_BYTES) for size in sizes)
    total = sum(sizes)
    if partition_size is None:
        asked = f"{partitions:,} partitions are more than these inputs can be cut into"
        held, larger = f"their {total:,} bytes", ""
    else:  # the count is the size's: say so, and that a larger size is the way out
        size = option("partition_size")
        asked = (
            f"{size} {partition_size:,} cuts these inputs' {total:,} bytes into {partitions:,} partitions, more than "
            "they can be cut into"
        )
        held, larger = "their bytes", f"a larger {size}"
    if partitions > most:  # refused before any work in proportion to the count (a typo of many zeros)
        fewer = larger or "fewer partitions"  # no size named: the bound is no size that works (3-byte records)
        raise UsageError(f"{asked}: {held} hold at most {most:,} record(s); ask for {fewer}")
    pieces = _file_pieces(files, sizes, partitions)
    if sum(map(len, pieces)) < partitions:  # the heap below fills every partition exactly when there are enough pieces
        accepted = option("partitions", _accepted_count(files, sizes, partitions))
        raise UsageError(
            f"{asked}: ask for {larger + ', or ' if larger else ''}{accepted}, which they can (a compressed file or "
            "JSON array is one piece; plain JSON Lines are cut only at line starts, Parquet at row groups, Arrow at "
            "record batches)"
        )
    chosen: list[list[tuple[int, Span | None]]] = [[] for _ in range(partitions)]
    loads = [(0, 0, k) for k in range(partitions)]  # (bytes, pieces, partition): a heap, least loaded first
    for f in sorted(range(len(files)), key=lambda f: (-sizes[f], f)):
        picked = sorted((heapq.heappop(loads) for _ in pieces[f]), key=lambda entry: entry[2])  # at most P pieces
        for (load, count, k), (span, weight) in zip(picked, pieces[f]):
            chosen[k].append((f, span))
            heapq.heappush(loads, (load + weight, count + 1, k))
    weights = {(f, span): weight for f in range(len(files)) for span, weight in pieces[f]}
    ordered = [sorted(slices, key=lambda s: (s[0], s[1] or (0, 0))) for slices in chosen]
    planned = {"files": [[str(path), size] for path, size in zip(files, sizes)], "partitions": ordered}
    return Plan(
        partitions=tuple(tuple(InputSlice(files[f], span) for f, span in slices) for slices in ordered),
        weights=tuple(sum(weights[entry] for entry in slices) for slices in ordered),
        digest=hashlib.sha256(json.dumps(planned, sort_keys=True).encode()).hexdigest(),  # tuples as JSON arrays
    )


def _file_pieces(files: Sequence[Path], sizes: Sequence[int], partitions: int) -> list[list[Piece]]:
    """Each file's pieces for a plan of ``partitions``: as many as its share of the corpus asks, at most one each."""
    total = max(1, sum(sizes))
    return [
        _pieces(path, min(partitions, max(1, math.ceil(partitions * SLICES_PER_PARTITION * size / total))))
        for path, size in zip(files, sizes)
    ]


def _accepted_count(files: Sequence[Path], sizes: Sequence[int], refused: int) -> int:
    """A partition count below ``refused`` that the planner accepts: the pieces ``refused`` gives, then the pieces
    that count gives, until a count has enough (the cuts of one count are not a smaller one's, so the first count
    short of pieces may fail too); one partition always works."""
    count = refused
    while (pieces := sum(map(len, _file_pieces(files, sizes, count)))) < count:
        count = pieces
    return count


def _pieces(path: Path, wanted: int) -> list[Piece]:
    """Up to ``wanted`` non-empty contiguous pieces of one file, in file order, at least one: a file with no unit to
    cut (no byte, no row group, no batch) is one piece, the whole file, so one partition takes any input."""
    kind = input_format(path)
    cut: list[Piece] = []
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq  # here: a JSON Lines run need not load Parquet (as in packcli.read.tables)

            metadata = pq.ParquetFile(parquet_source(path)).metadata
            groups = map(metadata.row_group, range(metadata.num_row_groups))
            sizes = [sum(group.column(c).total_compressed_size for c in range(group.num_columns)) for group in groups]
            cut = _cut_units(sizes, wanted)
        elif kind == "arrow":
            cut = _cut_units(_batch_sizes(path), wanted)
    except (OSError, pa.ArrowException) as exc:
        raise PackcliError(f"cannot read to plan partitions: {exc}", path) from exc
    if kind == "json" and path.suffix.lower() not in COMPRESSIONS and not is_json_array(path):
        cut = _cut_lines(path, wanted)
    return cut or [(None, path.stat().st_size)]


def _batch_sizes(path: Path) -> list[int]:
    """The bytes of each record batch of an Arrow IPC file (stream or file format), memory-mapped: no data read."""
    source = arrow_source(path)
    try:
        stream = pa.ipc.open_stream(source)
        return [batch.nbytes for batch in stream]
    except pa.ArrowInvalid:
        reader = pa.ipc.open_file(source)
        return [reader.get_batch(i).nbytes for i in range(reader.num_record_batches)]


def _cut_units(sizes: list[int], wanted: int) -> list[Piece]:
    """Group consecutive units (row groups, batches) into at most ``wanted`` pieces: each unit goes to the piece its
    first byte falls in when the file's bytes are cut into ``wanted`` equal ranges."""
    total = sum(sizes)
    firsts: list[int] = []  # the first unit of each piece
    weights: list[int] = []
    before, current = 0, -1
    for unit, size in enumerate(sizes):
        piece = before * wanted // total if total else 0
        if piece != current:
            firsts.append(unit)
            weights.append(0)
            current = piece
        weights[-1] += size
        before += size
    return [((first, end), weight) for first, end, weight in zip(firsts, [*firsts[1:], len(sizes)], weights)]


def _cut_lines(path: Path, wanted: int) -> list[Piece]:
    """Byte ranges of a plain JSON Lines file, cut into ``wanted`` equal parts, each cut moved forward to the next
    line start (ranges left empty are dropped). The cuts that land on a line start just found are skipped, so a
    count far above the file's lines costs no scan per partition."""
    size = path.stat().st_size
    bounds = [0]
    with path.open("rb") as handle:
        k = 1
        while k < wanted:
            bounds.append(_line_start_at(handle, k * size // wanted, size))
            k = max(k + 1, -(-(bounds[-1] + 1) * wanted // size))  # the first cut past it: k * size // wanted > it
    bounds.append(size)
    return [((start, end), end - start) for start, end in zip(bounds, bounds[1:]) if end > start]


def _line_start_at(handle: BinaryIO, position: int, size: int) -> int:
    """The first line start at or after ``position``: just past the first newline at or after ``position - 1``."""
    if position == 0:
        return 0
    handle.seek(position - 1)
    offset = position - 1
    while block := handle.read(_SCAN_BYTES):
        newline = block.find(b"\n")
        if newline >= 0:
            return offset + newline + 1
        offset += len(block)
    return size
