"""``--to megatron``: Megatron-Core's indexed dataset, ``tokens.bin`` + ``tokens.idx`` (``MMIDIDX`` version 1).

``.bin``: every sequence's tokens back to back (uint16 when the vocabulary is below 65500, Megatron's own rule in
``DType.optimal_dtype``; else int32). ``.idx``: the 9-byte magic ``MMIDIDX\\0\\0``, version 1 (uint64), the dtype
code (uint8), the sequence count and the document-index count (uint64 each), then the sequence lengths (int32),
their byte offsets in ``.bin`` (int64) and the document index (int64: 0, then after each document the number of
sequences so far). One sequence per stored document (piece), its EOS included, in output order; a split
document's pieces are consecutive sequences of one document. Megatron's ``GPTDataset`` samples and concatenates
itself. Labels have no place here: a fine-tuning output is refused (see ``bridge``).

Memory: the lengths and document ends are spilled to temporary files while ``.bin`` is written, and the index is
assembled from them a block at a time.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.errors import UsageError
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
        self.ends = open(directory / f"{PREFIX}.ends.tmp", "wb")  # noqa: SIM115
        self.totals = ExportTotals()

    def write(self, batch: DocumentBatch) -> None:
        check_ids_fit(batch.tokens, self.dtype, "megatron", self.directory)
        write_array(self.bin, batch.tokens, self.dtype)
        write_array(self.lengths, batch.lengths, np.int32)
        ends = self.totals.sequences + 1 + np.nonzero(batch.ends)[0]
        write_array(self.ends, ends, np.int64)
        self.totals.sequences += len(batch.lengths)
        self.totals.documents += len(ends)
        self.totals.tokens += len(batch.tokens)

    def finish(self) -> ExportTotals:
        for handle in (self.bin, self.lengths, self.ends):
            handle.close()
        lengths_path = self.directory / f"{PREFIX}.lengths.tmp"
        ends_path = self.directory / f"{PREFIX}.ends.tmp"
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
            write_array(idx, np.zeros(1), np.int64)
            with open(ends_path, "rb") as ends:
                while chunk := ends.read(8 * BLOCK):
                    idx.write(chunk)
            del lengths
        lengths_path.unlink()
        ends_path.unlink()
        return self.totals
