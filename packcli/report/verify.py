"""Re-read a packed output and check every invariant of the format and every checksum of the manifest.

Checks, per shard: listed once, inside the output directory, present, size and sha256 as listed, schema and
self-describing metadata, row/document/token counts; per row: 1..max_len tokens, ``position_ids`` as long as
``input_ids`` and restarting exactly at ``cu_seqlens``, ``cu_seqlens`` from 0 strictly rising to the row length,
ids in ``[0, vocab_size)``, labels (where present) -100 or the input id; and the totals against the sums.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.write.manifest import FORMAT_VERSION, read_manifest, shard_path
from packcli.write.shards import IGNORE_INDEX, LABELS_COLUMN, TOKEN_COLUMNS, flat_list_column, read_shard

MAX_LISTED = 20


@dataclass
class Report:
    """Problems found (all of them counted, the first ones kept) and what was checked."""

    problems: list[str] = field(default_factory=list)
    count: int = 0
    shards: int = 0
    rows: int = 0
    tokens: int = 0

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)

    @property
    def ok(self) -> bool:
        return self.count == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problem_count": self.count,
            "problems": self.problems,
            "shards": self.shards,
            "rows": self.rows,
            "tokens": self.tokens,
        }


def verify_output(out: Path) -> Report:
    """Check a packed output; the report lists what is wrong (nothing when it is intact)."""
    report = Report()
    manifest = read_manifest(out)
    max_len = int(manifest["max_len"])
    vocab_size = int(manifest["tokenizer"]["vocab_size"] or 2**31)  # pre-tokenized without a tokenizer: int32
    sums = {"sequences": 0, "documents": 0, "tokens": 0}
    seen: set[str] = set()
    for entry in manifest["shards"]:
        try:
            path = shard_path(out, entry.get("file"))
        except PackcliError as exc:
            report.add(exc.message)
            continue
        if path.name in seen:
            report.add(f"{path.name}: listed twice in the manifest")
            continue
        seen.add(path.name)
        counted = _check_shard(path, entry, manifest, max_len, vocab_size, report)
        if counted is not None:
            for key, value in zip(("sequences", "documents", "tokens"), counted):
                sums[key] += value
    for stray in sorted(set(p.name for p in out.glob("shard-*.arrow")) - seen):
        report.add(f"{stray}: shard file not listed in the manifest")
    for key, value in sums.items():
        if manifest["totals"].get(key) != value:
            report.add(f"manifest totals.{key} is {manifest['totals'].get(key)}, the shards hold {value}")
    report.shards = len(seen)
    return report


def _check_shard(
    path: Path, entry: dict[str, Any], manifest: dict[str, Any], max_len: int, vocab_size: int, report: Report
) -> tuple[int, int, int] | None:
    """Check one shard against its manifest entry and the format; returns its (rows, documents, tokens)."""
    name = path.name
    if not path.is_file():
        report.add(f"{name}: missing")
        return None
    size = path.stat().st_size
    if size != entry.get("bytes"):
        report.add(f"{name}: {size} bytes, the manifest says {entry.get('bytes')}")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    if digest.hexdigest() != entry.get("sha256"):
        report.add(f"{name}: sha256 differs from the manifest (the file was changed or damaged)")
    try:
        table = read_shard(path)
    except (pa.ArrowException, OSError) as exc:
        report.add(f"{name}: unreadable as an Arrow IPC stream ({exc})")
        return None
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    expected = {
        "packcli.format_version": str(FORMAT_VERSION),
        "packcli.max_len": str(max_len),
        "packcli.tokenizer_sha256": manifest["tokenizer"]["sha256"] or "",
    }
    for key, value in expected.items():
        if metadata.get(key) != value:
            report.add(f"{name}: schema metadata {key} is {metadata.get(key)!r}, expected {value!r}")
    missing = [column for column in TOKEN_COLUMNS if column not in table.column_names]
    if missing:
        report.add(f"{name}: missing column(s) {', '.join(missing)}")
        return None
    rows, documents, tokens = _check_rows(name, table, max_len, vocab_size, report)
    for key, value in (("rows", rows), ("documents", documents), ("tokens", tokens)):
        if entry.get(key) != value:
            report.add(f"{name}: holds {value} {key}, the manifest says {entry.get(key)}")
    report.rows += rows
    report.tokens += tokens
    return rows, documents, tokens


def _check_rows(name: str, table: pa.Table, max_len: int, vocab_size: int, report: Report) -> tuple[int, int, int]:
    """Vectorized row checks; returns (rows, documents, tokens)."""
    ids, offsets = flat_list_column(table.column("input_ids"))
    positions, position_offsets = flat_list_column(table.column("position_ids"))
    cu, cu_offsets = flat_list_column(table.column("cu_seqlens"))
    row_lengths = np.diff(offsets)
    _first(report, name, "row", (row_lengths < 1) | (row_lengths > max_len), f"not within 1..{max_len} tokens")
    if not np.array_equal(position_offsets, offsets):
        report.add(f"{name}: position_ids and input_ids differ in length")
        return len(row_lengths), 0, len(ids)
    bad_ids = (ids < 0) | (ids >= vocab_size)
    _first(report, name, "token", bad_ids, f"id outside the vocabulary [0, {vocab_size})")
    # cu_seqlens: starts at 0, rises strictly, ends at the row length.
    per_row = np.diff(cu_offsets)
    if np.any(per_row < 2):
        report.add(f"{name}: a row has fewer than two cu_seqlens entries")
        return len(row_lengths), 0, len(ids)
    first, last = cu[cu_offsets[:-1]], cu[cu_offsets[1:] - 1]
    steps = np.diff(cu)
    inside = np.ones(len(steps), dtype=bool)
    inside[cu_offsets[1:-1] - 1] = False
    bad_cu = (first != 0) | (last != row_lengths)
    bad_cu[np.searchsorted(cu_offsets, np.flatnonzero(inside & (steps <= 0)), side="right") - 1] = True
    _first(report, name, "row", bad_cu, "cu_seqlens does not start at 0, rise strictly and end at the row length")
    documents = int(len(cu) - len(row_lengths))
    if not bad_cu.any():
        # Positions must be 0, 1, ... from each document start: one arange less the repeated starts.
        starts = cu[:-1][inside] + np.repeat(offsets[:-1], per_row - 1)
        expected = np.arange(len(ids)) - np.repeat(starts, steps[inside])
        _first(report, name, "token", positions != expected, "position_ids do not restart exactly at cu_seqlens")
    if LABELS_COLUMN in table.column_names:
        labels, label_offsets = flat_list_column(table.column(LABELS_COLUMN))
        if not np.array_equal(label_offsets, offsets):
            report.add(f"{name}: labels and input_ids differ in length")
        else:
            _first(
                report,
                name,
                "token",
                (labels != IGNORE_INDEX) & (labels != ids),
                "label neither -100 nor the input id",
            )
    return len(row_lengths), documents, len(ids)


def _first(report: Report, name: str, unit: str, bad: np.ndarray, what: str) -> None:
    """Report how many ``unit``s are ``bad``, naming the first."""
    count = int(np.count_nonzero(bad))
    if count:
        report.add(f"{name}: {count} {unit}(s) {what} (first: {unit} {int(np.argmax(bad))})")
