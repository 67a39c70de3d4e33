"""The shard schema and its rules: int32 list columns (:mod:`packcli.format.columns`), -100 at every document's
first token of ``labels``, and the metadata that makes a lone shard describe itself.

Example, two documents of lengths [3, 2] in one row: ``input_ids [5 6 7 8 9]``, ``position_ids [0 1 2 0 1]``,
``cu_seqlens [0 3 5]``, ``labels [-100 6 7 -100 9]``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from packcli.format.columns import FORMAT_VERSION, IGNORE_INDEX, column_names
from packcli.util.arrays import exclusive_cumsum

__all__ = [
    "SHARD_COLUMN_TYPE",
    "ignore_document_starts",
    "position_ids",
    "row_position_ids",
    "shard_metadata",
    "shard_schema",
]

SHARD_COLUMN_TYPE = pa.list_(pa.int32())  # every column of a shard


def shard_schema(metadata: dict[str, str], labels: bool = False, positions: bool = True) -> pa.Schema:
    """The shard schema: int32 list columns (``position_ids`` only with ``positions``); the metadata repeats format
    version, max_len, tokenizer hash."""
    return pa.schema([(name, SHARD_COLUMN_TYPE) for name in column_names(labels, positions)], metadata=metadata)


def shard_metadata(max_len: int, tokenizer_sha256: str | None, eos_id: int | None) -> dict[str, str]:
    """The schema metadata of every shard of an output, so a lone shard describes itself (``verify`` holds the
    manifest's EOS to ``packcli.eos_id``)."""
    return {
        "packcli.format_version": str(FORMAT_VERSION),
        "packcli.max_len": str(max_len),
        "packcli.tokenizer_sha256": tokenizer_sha256 or "",
        "packcli.eos_id": "" if eos_id is None else str(eos_id),
    }


def position_ids(lengths: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... restarting at 0 at each piece, int32 (a row is far below 2^31 tokens); the
    ``position_ids`` column, which restarts at every document."""
    bounds = exclusive_cumsum(lengths).astype(np.int32)
    positions = np.arange(int(bounds[-1]), dtype=np.int32)
    positions -= np.repeat(bounds[:-1], lengths)
    return positions


def row_position_ids(cu_seqlens: np.ndarray) -> np.ndarray:
    """A row's ``position_ids`` rebuilt from its ``cu_seqlens`` (an output packed with ``--no-position-ids`` stores
    none): token i's position is i minus the start of its document. ``[0 3 5]`` -> ``[0 1 2 0 1]``."""
    return position_ids(np.diff(cu_seqlens))


def ignore_document_starts(labels: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Set -100 at the first token of every document, in place, and return ``labels``.

    ``labels`` holds documents of ``lengths`` (each at least 1) back to back. Models shift labels by one (logit t
    is scored against label t + 1), so this is what keeps the last token of one document from being trained to
    predict the first token of the next. Example: lengths [3, 2], labels [5 6 7 8 9] -> [-100 6 7 -100 9].
    """
    labels[exclusive_cumsum(lengths)[:-1]] = IGNORE_INDEX
    return labels
