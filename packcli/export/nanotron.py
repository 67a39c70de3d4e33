"""``--to nanotron``: datatrove's tokenized files, as nanotron's ``DatatroveFolderDataset`` reads them.

``packcli.ds``: tokens back to back (uint16 when the vocabulary has at most 65536 ids, the rule by which datatrove's
tokenizer and nanotron's Nanoset choose their ``token_size``; else uint32). ``packcli.ds.index``: uint64 token
offsets of each document's end. ``packcli.ds.loss`` (fine-tuning): one bool byte per token, True where loss is
taken. ``packcli.ds.metadata``: three lines, the tokenizer name and token size (``NAME|2``), the token count, and
the count in datatrove's short form (``1.23 MT``).
Documents in output order; a split document's pieces are consecutive and end at one index entry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.export.base import ExportTotals, check_ids_fit, token_dtype, write_array
from packcli.export.reading import DocumentBatch, PackedOutput

__all__ = ["NanotronExporter", "short_count"]

NAME = "packcli.ds"


class NanotronExporter:
    view: Literal["documents", "rows"] = "documents"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        self.directory = directory
        self.dtype = token_dtype(packed, "uint16", 65537, "uint32")
        # datatrove's merger splits the first metadata line at its one bar: a name holds none, nor a line break
        name = str(packed.manifest["tokenizer"].get("name") or "Unknown Tokenizer").replace("|", "/")
        self.name = " ".join(name.splitlines())
        self.tokens = open(directory / NAME, "wb")  # noqa: SIM115 (closed by finish)
        self.index = open(directory / f"{NAME}.index", "wb")  # noqa: SIM115
        self.loss = open(directory / f"{NAME}.loss", "wb") if packed.labelled else None  # noqa: SIM115
        self.totals = ExportTotals()

    def write(self, batch: DocumentBatch) -> None:
        check_ids_fit(batch.tokens, self.dtype, "nanotron", self.directory)
        write_array(self.tokens, batch.tokens, self.dtype)
        ends = self.totals.tokens + np.cumsum(batch.lengths)[batch.ends]
        write_array(self.index, ends, np.uint64)
        if self.loss is not None and batch.mask is not None:
            write_array(self.loss, batch.mask, np.bool_)
            self.totals.supervised_tokens += int(np.count_nonzero(batch.mask))
        self.totals.sequences += len(ends)  # one per index entry: a split document's pieces are one document here
        self.totals.documents += len(ends)
        self.totals.tokens += len(batch.tokens)

    def close(self) -> None:
        for handle in (self.tokens, self.index, self.loss):
            if handle is not None:
                handle.close()

    def finish(self) -> ExportTotals:
        self.close()
        lines = [f"{self.name}|{self.dtype.itemsize}", str(self.totals.tokens), short_count(self.totals.tokens, "T")]
        (self.directory / f"{NAME}.metadata").write_text("\n".join(lines), encoding="utf-8")
        return self.totals


def short_count(value: int, unit: str) -> str:
    """A count with an SI prefix and three significant digits, as datatrove writes it (``humanize.metric``):
    999 -> ``999 T``, 1234 -> ``1.23 kT``, 1_000_000 -> ``1.00 MT``, 0 -> ``0.00 T``."""
    exponent = math.floor(math.log10(value)) if value else 0
    bucket = exponent // 3 * 3
    scaled = value / 10**bucket
    digits = max(0, 3 - exponent % 3 - 1)
    if round(scaled, digits) >= 10 ** (exponent % 3 + 1):  # 999.6 -> 1.00 k: the carry moves to the next prefix
        exponent += 1
        scaled /= 10 ** (exponent // 3 * 3 - bucket)
        digits = max(0, 3 - exponent % 3 - 1)
    prefix = "kMGTPEZYRQ"[exponent // 3 - 1] if exponent >= 3 else ""
    return f"{scaled:.{digits}f} {prefix}{unit}"
