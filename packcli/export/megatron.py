"""``--to megatron``: Megatron-Core's indexed dataset, ``tokens.bin`` + ``tokens.idx`` (``MMIDIDX`` version 1).

``.bin``: every sequence's tokens back to back (uint16 when the vocabulary is below 65500, Megatron's own rule in
``DType.optimal_dtype``; else int32). ``.idx``: the 9-byte magic ``MMIDIDX\\0\\0``, version 1 (uint64), the dtype
code (uint8), the sequence count and the document-index count (uint64 each), then the sequence lengths (int32),
their byte offsets in ``.bin`` (int64) and the document index (int64: 0, 1, ..., one sequence per document). One
sequence per document, its EOS included, in output order; Megatron's ``GPTDataset`` samples and concatenates
itself. A document split by ``--overflow split`` is one sequence again, its pieces joined in order: ``GPTDataset``
shuffles sequences, not documents (its ``numel_low_level_dataset`` counts sequences), so pieces kept as sequences
of one document would still be trained apart, each merged with whatever it is shuffled next to. Labels have no
place here: a fine-tuning output is refused (see ``bridge``).

Memory: the lengths are spilled to a temporary file while ``.bin`` is written, and the index is assembled from it a
block at a time.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.errors import PackcliError, UsageError
from packcli.export.base import ExportTotals, check_ids_fit, token_dtype, write_array
from packcli.export.reading import DocumentBatch, PackedOutput

__all__ = ["MegatronExporter"]

MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES = {"uint16": 8, "int32": 4}  # Megatron-Core's DType enum
BLOCK = 1 << 22  # sequences per block when the index is assembled
PREFIX = "tokens"


class MegatronExporter:
    view: Literal["documents", "rows"] = "documents"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        if packed.labelled:
            raise UsageError(
                "megatron's indexed dataset has no place for labels, and this is a fine-tuning output: export it "
                "--to bridge (packed SFT), olmo-core or nanotron (label masks)"
            )
        self.directory = directory
        self.dtype = token_dtype(packed, "uint16", 65500, "int32")
        self.bin = open(directory / f"{PREFIX}.bin", "wb")  # noqa: SIM115 (closed by finish)
        self.lengths = open(directory / f"{PREFIX}.lengths.tmp", "wb")  # noqa: SIM115
        self.totals = ExportTotals()

    def write(self, batch: DocumentBatch) -> None:
        check_ids_fit(batch.tokens, self.dtype, "megatron", self.directory)
        write_array(self.bin, batch.tokens, self.dtype)
        document_ends = np.cumsum(batch.lengths)[batch.ends]  # a batch ends with a document's end
        lengths = np.diff(document_ends, prepend=0)
        if len(lengths) and int(lengths.max()) > np.iinfo(np.int32).max:
            raise PackcliError("a document of over 2**31 tokens does not fit megatron's int32 sequence lengths")
        write_array(self.lengths, lengths, np.int32)
        self.totals.sequences += len(lengths)
        self.totals.documents += len(lengths)
        self.totals.tokens += len(batch.tokens)

    def close(self) -> None:
        for handle in (self.bin, self.lengths):
            handle.close()

    def finish(self) -> ExportTotals:
        self.close()
        lengths_path = self.directory / f"{PREFIX}.lengths.tmp"
        count = self.totals.sequences
        with open(self.directory / f"{PREFIX}.idx", "wb") as idx:
            idx.write(MAGIC)
            idx.write(struct.pack("<Q", 1))
            idx.write(struct.pack("<B", DTYPE_CODES[self.dtype.name]))
            idx.write(struct.pack("<Q", count))
            idx.write(struct.pack("<Q", self.totals.documents + 1))
            lengths = np.memmap(lengths_path, dtype=np.int32, mode="r") if count else np.zeros(0, np.int32)
            for start in range(0, count, BLOCK):
                write_array(idx, lengths[start : start + BLOCK], np.int32)
            offset = 0
            for start in range(0, count, BLOCK):
                block = lengths[start : start + BLOCK].astype(np.int64) * self.dtype.itemsize
                write_array(idx, offset + np.cumsum(block) - block, np.int64)
                offset += int(block.sum())
            for start in range(0, count + 1, BLOCK):
                write_array(idx, np.arange(start, min(start + BLOCK, count + 1)), np.int64)
            del lengths
        lengths_path.unlink()
        return self.totals
