"""``--to mds``: MosaicML streaming's MDS shards, as llm-foundry's text dataset reads them: ``index.json`` and
``shard.NNNNN.mds``, one packed row per sample in a single column ``tokens`` encoded ``ndarray:uint32`` (its
documents back to back, each ending in EOS).

Shard layout (``MDSWriter`` without compression): the sample count (uint32), the sample offsets from the start of
the file (uint32, count + 1), the writer's configuration as sorted JSON, then the samples. A sample: its column's
byte size (uint32), then the array: one byte ``ndim << 2 | shape dtype code`` (code 0-3: uint8-uint64, the
smallest holding the length), the length in that dtype, and the tokens as little-endian uint32. A shard closes
before a sample would take it past 64 MiB, counting 4 bytes per sample beside its bytes, as ``MDSWriter`` does.
Rows are the packed rows: a split document's pieces stay in their rows (MDS has no document index). Labels have
no column here: a fine-tuning output is refused. Memory: the open shard's samples are held as their headers and
views of the source's memory-mapped tokens (verified ids are >= 0, so their int32 bytes are the uint32 ones), and
written when the shard closes.
"""

from __future__ import annotations

import functools
import json
import struct
from pathlib import Path
from typing import Any, Literal

import numpy as np

from packcli.errors import UsageError
from packcli.export.base import ExportTotals
from packcli.export.reading import PackedOutput, RowBatch

__all__ = ["MdsExporter", "sample_header"]

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
WRITE_BUFFER = 1 << 23  # the samples (a header and a row of tokens each) reach the file in few large writes


class MdsExporter:
    view: Literal["documents", "rows"] = "rows"

    def __init__(self, directory: Path, packed: PackedOutput, options: dict[str, Any]) -> None:
        if packed.labelled:
            raise UsageError(
                "mds's text samples ('tokens') have no place for labels, and this is a fine-tuning output: export it "
                "--to bridge (packed SFT), olmo-core or nanotron (label masks)"
            )
        self.directory = directory
        self.samples: list[bytes | memoryview] = []  # the open shard's samples: each header, then its tokens
        self.sizes: list[int] = []  # each sample's bytes
        self.size = 8 + len(CONFIG_BYTES)  # the open shard's bytes as MDSWriter counts them
        self.shards: list[dict[str, Any]] = []
        self.totals = ExportTotals()

    def write(self, batch: RowBatch) -> None:
        # ids are >= 0 (verified), so their little-endian int32 bytes are their uint32 bytes: no copy
        body = np.ascontiguousarray(batch.tokens, dtype="<i4").view("<u4").data.cast("B")
        bounds = (batch.row_offsets * 4).tolist()
        for start, end in zip(bounds[:-1], bounds[1:]):
            header = sample_header((end - start) // 4)
            size = len(header) + end - start  # the sample's bytes, its column size included
            if self.sizes and self.size + size + 4 > SIZE_LIMIT:
                self._flush()
            self.samples += (header, body[start:end])
            self.sizes.append(size)
            self.size += size + 4
        self.totals.sequences += batch.rows
        self.totals.documents += len(batch.lengths)
        self.totals.tokens += len(batch.tokens)

    def _flush(self) -> None:
        name = f"shard.{len(self.shards):05d}.mds"
        sizes = np.array(self.sizes, dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes))) + 4 + 4 * (len(sizes) + 1) + len(CONFIG_BYTES)
        with open(self.directory / name, "wb", buffering=WRITE_BUFFER) as shard:
            shard.write(np.uint32(len(sizes)).tobytes())
            shard.write(offsets.astype("<u4").tobytes())
            shard.write(CONFIG_BYTES)
            shard.writelines(self.samples)
            size = shard.tell()
        raw = {"basename": name, "bytes": size, "hashes": {}}
        self.shards.append({"samples": len(sizes), "raw_data": raw, "zip_data": None, **CONFIG})
        self.samples, self.sizes, self.size = [], [], 8 + len(CONFIG_BYTES)

    def close(self) -> None:
        """Nothing is open between shards (each is written whole when it closes)."""

    def finish(self) -> ExportTotals:
        if self.sizes:
            self._flush()
        with open(self.directory / "index.json", "w", encoding="utf-8") as index:
            json.dump({"version": 2, "shards": self.shards}, index, sort_keys=True)
        return self.totals


@functools.lru_cache(maxsize=1 << 12)  # rows of one length are common (full rows): each header packed once
def sample_header(length: int) -> bytes:
    """What precedes a sample's ``length`` uint32 tokens: its column's byte size (uint32), then the ndarray header
    (1-D, the length in the smallest unsigned dtype that holds it)."""
    code = next(code for code in range(4) if length < 1 << (8 << code))
    return struct.pack(f"<IB{'BHIQ'[code]}", 1 + (1 << code) + 4 * length, (1 << 2) | code, length)
