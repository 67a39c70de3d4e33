"""Where each packed document came from: each shard's ``sources`` sidecar (docs/format.md).

One row per document (``cu_seqlens`` segment) in row then segment order: ``input`` (into the sidecar's table of
input names), ``record`` (1-based, as an error there names it), ``piece`` and ``pieces``. Example: a row holding
``a.jsonl`` line 3 whole and the second of three pieces of line 9 -> inputs ``["a.jsonl"]``, rows ``(0, 3, 0, 1),
(0, 9, 1, 3)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.format.sidecars import SIDECARS, SOURCE_COLUMNS, SOURCES, SOURCES_INPUTS, integer_array, write_sidecar
from packcli.write.layout import Rows

__all__ = ["write_sources"]


def write_sources(
    directory: Path,
    entries: list[dict[str, Any]],
    rows: Rows,
    names: Sequence[str],
    file_documents: np.ndarray,
    records: np.ndarray,
    drawn: np.ndarray | None,
) -> None:
    """Write each shard's ``sources`` sidecar into ``directory`` and name it in the shard's ``entries``, from each
    input file's ``names`` and ``file_documents`` (in input order), each document's ``records``, and the documents a
    mixed run ``drawn`` in order (``rows.document`` indexes it; None: all, in order)."""
    document = rows.document if drawn is None else np.asarray(drawn, dtype=np.int64)[rows.document]
    files = np.repeat(np.arange(len(file_documents)), file_documents)
    table = sorted(set(names))
    position = {name: k for k, name in enumerate(table)}
    name_of_file = np.array([position[name] for name in names], dtype=np.int64)
    columns = (name_of_file[files[document]], records[document], rows.piece, rows.pieces)
    row_ends = np.cumsum([entry["rows"] for entry in entries], dtype=np.int64)
    bounds = rows.offsets[np.concatenate(([0], row_ends))]
    for entry, start, end in zip(entries, bounds[:-1].tolist(), bounds[1:].tolist()):
        used, local = np.unique(columns[0][start:end], return_inverse=True)
        values = [local, *(column[start:end] for column in columns[1:])]
        arrays = [integer_array(value, kind) for value, kind in zip(values, SOURCE_COLUMNS.values())]
        metadata = {SOURCES_INPUTS: json.dumps([table[k] for k in used.tolist()])}
        sidecar = pa.table(arrays, names=list(SOURCE_COLUMNS)).replace_schema_metadata(metadata)
        entry.setdefault(SIDECARS, {})[SOURCES] = write_sidecar(directory, entry["file"], SOURCES, sidecar)
