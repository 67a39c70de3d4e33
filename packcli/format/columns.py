"""The columns of a shard and the values they may hold: names, the label that takes no loss (-100), the int32 bound,
the format version. Plain constants, importable without numpy or pyarrow (the options and the CLI check against them).
"""

from __future__ import annotations

__all__ = [
    "FORMAT_VERSION",
    "IGNORE_INDEX",
    "INT32_MAX",
    "LABELS_COLUMN",
    "POSITIONS_COLUMN",
    "TOKEN_COLUMNS",
    "column_names",
]

FORMAT_VERSION = 1  # readers refuse a newer major version, naming both
TOKEN_COLUMNS = ("input_ids", "position_ids", "cu_seqlens")
LABELS_COLUMN = "labels"
POSITIONS_COLUMN = "position_ids"  # left out with --no-position-ids: readers rebuild it from cu_seqlens
IGNORE_INDEX = -100  # a label that takes no loss (PyTorch's cross-entropy default ignore_index)
INT32_MAX = 2**31 - 1  # every column is int32: the largest token id, row length and cu_seqlens value


def column_names(labels: bool, positions: bool = True) -> list[str]:
    """The columns of a shard: the token columns (less ``position_ids`` without ``positions``), and ``labels`` for
    fine-tuning."""
    names = [name for name in TOKEN_COLUMNS if positions or name != POSITIONS_COLUMN]
    return [*names, LABELS_COLUMN] if labels else names
