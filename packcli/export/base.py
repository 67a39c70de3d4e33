"""What every export format shares: the exporter interface, the totals it keeps, and the token dtype rule.

An exporter takes either the document view or the row view of the output (:mod:`packcli.export.reading`), one
batch at a time, and writes its files into the staging directory it was given; :meth:`Exporter.finish` closes
them and returns the totals for ``export.json``. Invariant: the totals count what the files hold.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

import numpy as np

from packcli.errors import PackcliError
from packcli.export.reading import PackedOutput

__all__ = ["ExportTotals", "Exporter", "check_ids_fit", "token_dtype", "write_array"]


@dataclass
class ExportTotals:
    """What an export's files hold: documents and sequences (megatron, olmo-core, nanotron: one sequence per
    document, a split document once; bridge, mds: the packed rows, each piece of a split document a document of its
    own), tokens (with padding), padding tokens, supervised tokens (fine-tuning exports)."""

    documents: int = 0
    sequences: int = 0
    tokens: int = 0
    padding_tokens: int = 0
    supervised_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)


class Exporter(Protocol):
    """One format's writer. ``view`` says which batches it takes."""

    view: Literal["documents", "rows"]

    def write(self, batch: Any) -> None: ...

    def finish(self) -> ExportTotals: ...

    def close(self) -> None:
        """Close every file it holds open, finished or not (the export failed: its staging is removed)."""


def token_dtype(packed: PackedOutput, small: str, limit: int, wide: str) -> np.dtype[Any]:
    """``small`` when the output's vocabulary is known and below ``limit``, else ``wide`` (numpy dtype names)."""
    vocab = packed.vocab_size
    return np.dtype(small if vocab is not None and vocab < limit else wide)


def check_ids_fit(tokens: np.ndarray, dtype: np.dtype[Any], fmt: str, path: Path) -> None:
    """Refuse a token id that ``dtype`` cannot hold (an output whose ids exceed its recorded vocabulary).

    Raises:
        PackcliError: naming the id, the dtype and the format.
    """
    if not len(tokens):
        return
    info = np.iinfo(dtype)
    low, high = int(tokens.min()), int(tokens.max())
    if low < info.min or high > info.max:
        raise PackcliError(
            f"token id {high if high > info.max else low} does not fit {fmt}'s {np.dtype(dtype).name} tokens "
            "(the output's vocabulary is larger than it records); nothing was exported",
            path,
        )


def write_array(handle: BinaryIO, values: np.ndarray, dtype: Any) -> None:
    """Append ``values`` as raw little-endian ``dtype``."""
    handle.write(np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<")).data)
