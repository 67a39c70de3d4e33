"""``--to olmo-core``: OLMo-core's numpy token files, ``tokens.npy`` (+ ``label_mask.npy`` for fine-tuning).

Raw arrays with no ``.npy`` header, as OLMo-core opens them (``np.memmap``): tokens as the smallest unsigned type
holding every id of the vocabulary (uint8 up to 256 ids, uint16 up to 65536, else uint32), the type OLMo-core's
dataset config assumes when it is given none; the label mask one bool byte per token (True: the token is a
target), the same length. Documents back to back in output order, each ending in its EOS (a split document's
pieces are consecutive, only its last piece ends in EOS), which is how OLMo-core finds documents
(``eos_token_id``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.export.base import ExportTotals, check_ids_fit, write_array
from packcli.export.reading import DocumentBatch, PackedOutput

__all__ = ["OlmoCoreExporter", "olmo_core_dtype"]


class OlmoCoreExporter:
    view: Literal["documents", "rows"] = "documents"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        self.directory = directory
        self.dtype = olmo_core_dtype(packed.vocab_size)
        self.tokens = open(directory / "tokens.npy", "wb")  # noqa: SIM115 (closed by finish)
        self.mask = open(directory / "label_mask.npy", "wb") if packed.labelled else None  # noqa: SIM115
        self.totals = ExportTotals()

    def write(self, batch: DocumentBatch) -> None:
        check_ids_fit(batch.tokens, self.dtype, "olmo-core", self.directory)
        write_array(self.tokens, batch.tokens, self.dtype)
        if self.mask is not None and batch.mask is not None:
            write_array(self.mask, batch.mask, np.bool_)
            self.totals.supervised_tokens += int(np.count_nonzero(batch.mask))
        documents = int(np.count_nonzero(batch.ends))  # a split document's pieces are one document here
        self.totals.sequences += documents
        self.totals.documents += documents
        self.totals.tokens += len(batch.tokens)

    def close(self) -> None:
        for handle in (self.tokens, self.mask):
            if handle is not None:
                handle.close()

    def finish(self) -> ExportTotals:
        self.close()
        return self.totals


def olmo_core_dtype(vocab_size: int | None) -> np.dtype[Any]:
    """The token type OLMo-core's dataset config assumes for a vocabulary (``get_dtype``, where it is given no dtype):
    the smallest unsigned type holding ``vocab_size - 1``; uint32 for an unknown vocabulary (ids packed without a
    tokenizer, which fit int32)."""
    if vocab_size is None:
        return np.dtype("uint32")
    return next(np.dtype(name) for name in ("uint8", "uint16", "uint32") if vocab_size - 1 <= np.iinfo(name).max)
