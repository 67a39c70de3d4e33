"""``--to mds``: MosaicML streaming's MDS shards, as llm-foundry's text dataset reads them: ``index.json`` and
``shard.NNNNN.mds``, one packed row per sample in a single column ``tokens`` encoded ``ndarray:uint32`` (its
documents back to back, each ending in EOS).

Shard layout (``MDSWriter`` without compression): the sample count (uint32), the sample offsets from the start of
the file (uint32, count + 1), the writer's configuration as sorted JSON, then the samples. A sample: its column's
byte size (uint32), then the array: one byte ``ndim << 2 | shape dtype code`` (code 0-3: uint8-uint64, the
smallest holding the length), the length in that dtype, and the tokens as little-endian uint32. A shard closes
before a sample would take it past 64 MiB, counting 4 bytes per sample beside its bytes, as ``MDSWriter`` does.
Rows are the packed rows: a split document's pieces stay in their rows (MDS has no document index). Labels have
no column here: a fine-tuning output is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.errors import UsageError
from packcli.export.base import ExportTotals
from packcli.export.reading import PackedOutput, RowBatch

__all__ = ["MdsExporter"]

SIZE_LIMIT = 1 << 26
CONFIG = {
    "column_encodings": ["ndarray:uint32"],
    "column_names": ["tokens"],
    "column_sizes": [None],
    "compression": None,
    "format": "mds",
    "hashes": [],
    "size_limit": SIZE_LIMIT,
    "version": 2,
}
CONFIG_BYTES = json.dumps(CONFIG, sort_keys=True).encode()


class MdsExporter:
    view: Literal["documents", "rows"] = "rows"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        if packed.labelled:
            raise UsageError(
                "mds's text samples ('tokens') have no place for labels, and this is a fine-tuning output: export it "
                "--to bridge (packed SFT), olmo-core or nanotron (label masks)"
            )
        self.directory = directory
        self.samples: list[np.ndarray] = []  # the open shard's encoded samples
        self.size = 8 + len(CONFIG_BYTES)  # the open shard's bytes as MDSWriter counts them
        self.shards: list[dict[str, Any]] = []
        self.totals = ExportTotals()

    def write(self, batch: RowBatch) -> None:
        for row in range(batch.rows):
            sample = encode_tokens(batch.tokens[batch.row_offsets[row] : batch.row_offsets[row + 1]])
            if self.samples and self.size + len(sample) + 4 > SIZE_LIMIT:
                self._flush()
            self.samples.append(sample)
            self.size += len(sample) + 4
        self.totals.sequences += batch.rows
        self.totals.documents += len(batch.lengths)
        self.totals.tokens += len(batch.tokens)

    def _flush(self) -> None:
        name = f"shard.{len(self.shards):05d}.mds"
        sizes = np.array([len(sample) for sample in self.samples], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes))) + 4 + 4 * (len(sizes) + 1) + len(CONFIG_BYTES)
        with open(self.directory / name, "wb") as shard:
            shard.write(np.uint32(len(sizes)).tobytes())
            shard.write(offsets.astype("<u4").tobytes())
            shard.write(CONFIG_BYTES)
            for sample in self.samples:
                shard.write(sample.data)
            size = shard.tell()
        raw = {"basename": name, "bytes": size, "hashes": {}}
        self.shards.append({"samples": len(sizes), "raw_data": raw, "zip_data": None, **CONFIG})
        self.samples, self.size = [], 8 + len(CONFIG_BYTES)

    def finish(self) -> ExportTotals:
        if self.samples:
            self._flush()
        with open(self.directory / "index.json", "w", encoding="utf-8") as index:
            json.dump({"version": 2, "shards": self.shards}, index, sort_keys=True)
        return self.totals


def encode_tokens(tokens: np.ndarray) -> np.ndarray:
    """One sample's bytes: column size, ndarray header (1-D, length in the smallest unsigned dtype), uint32 tokens."""
    length = len(tokens)
    code, shape_dtype = next(
        (code, dtype) for code, dtype in enumerate(["<u1", "<u2", "<u4", "<u8"]) if length < 1 << (8 << code)
    )
    header = np.array([(1 << 2) | code], dtype=np.uint8).tobytes() + np.array([length], dtype=shape_dtype).tobytes()
    body = tokens.astype("<u4").tobytes()
    size = np.array([len(header) + len(body)], dtype="<u4").tobytes()
    return np.frombuffer(size + header + body, dtype=np.uint8)
