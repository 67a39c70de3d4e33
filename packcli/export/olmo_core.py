"""``--to olmo-core``: OLMo-core's numpy token files, ``tokens.npy`` (+ ``label_mask.npy`` for fine-tuning).

Raw arrays with no ``.npy`` header, as OLMo-core opens them (``np.memmap``): tokens as uint16 when the vocabulary
is at most 65536 ids, else uint32; the label mask one bool byte per token (True: the token is a target), the same
length. Documents back to back in output order, each ending in its EOS (a split document's pieces are consecutive,
only its last piece ends in EOS), which is how OLMo-core finds documents (``eos_token_id``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.export.base import ExportTotals, check_ids_fit, token_dtype, write_array
from packcli.export.reading import DocumentBatch, PackedOutput

__all__ = ["OlmoCoreExporter"]


class OlmoCoreExporter:
    view: Literal["documents", "rows"] = "documents"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        self.directory = directory
        self.dtype = token_dtype(packed, "uint16", 65537, "uint32")
        self.tokens = open(directory / "tokens.npy", "wb")  # noqa: SIM115 (closed by finish)
        self.mask = open(directory / "label_mask.npy", "wb") if packed.labelled else None  # noqa: SIM115
        self.totals = ExportTotals()

    def write(self, batch: DocumentBatch) -> None:
        check_ids_fit(batch.tokens, self.dtype, "olmo-core", self.directory)
        write_array(self.tokens, batch.tokens, self.dtype)
        if self.mask is not None and batch.mask is not None:
            write_array(self.mask, batch.mask, np.bool_)
            self.totals.supervised_tokens += int(np.count_nonzero(batch.mask))
        documents = int(np.count_nonzero(batch.ends))  # a split document is stored whole: one sequence
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
