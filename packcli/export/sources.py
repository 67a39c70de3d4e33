"""``export --sources``: each exported sample's sources, from the packed output's source index (its ``sources``
sidecars, :mod:`packcli.format.sidecars`).

A sample's sources are a JSON list of the packed documents (``cu_seqlens`` segments) it holds, in order, each
``{"input": NAME, "record": N, "piece": K, "pieces": N}`` (as ``packcli show --json`` and the loader's
``sources=True`` give them), written as ``json.dumps`` writes it. ``mds`` carries the list in a ``sources`` column of
each sample (one sample per packed row). The other formats have no place a reader reads, so the list goes into
``sources.jsonl`` beside the export, one line per sample in export order: per packed row for ``bridge``, per
document for ``megatron``, ``olmo-core`` and ``nanotron`` (a split document joined whole lists its pieces 0..n-1).
Example: a row holding ``a.jsonl`` line 3 whole, then piece 2 of line 9 (cut in three) ->
``[{"input": "a.jsonl", "record": 3, "piece": 0, "pieces": 1}, {"input": "a.jsonl", "record": 9, "piece": 1,
"pieces": 3}]``. Memory: one shard's source index (20 bytes a document).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import UsageError
from packcli.export.reading import DocumentBatch, PackedOutput, RowBatch
from packcli.format.sidecars import SIDECARS, SOURCES, read_sources

__all__ = ["SOURCES_FILE", "ShardSources", "SourcesFile", "require_sources", "sources_record"]

SOURCES_FILE = "sources.jsonl"


def require_sources(packed: PackedOutput) -> None:
    """Refuse ``--sources`` for an output without a source index on every shard (packed before one was kept)."""
    if not all(SOURCES in (shard.get(SIDECARS) or {}) for shard in packed.manifest["shards"]):
        raise UsageError(
            "--sources: this output has no source index (packed before packcli kept one): pack it again to export "
            "its sources"
        )


class ShardSources:
    """The documents' sources of one shard at a time, as JSON text: :meth:`entry` is document ``k``'s."""

    def __init__(self, packed: PackedOutput) -> None:
        self.packed = packed
        self.shard = -1
        self.names: list[str] = []
        self.columns: list[list[int]] = [[], [], [], []]  # input, record, piece, pieces

    def load(self, shard: int) -> None:
        """Read shard number ``shard``'s source index (once while its documents are asked for)."""
        if shard == self.shard:
            return
        sources = read_sources(self.packed.path, self.packed.manifest["shards"][shard])
        if sources is None:  # require_sources ran first: a shard without one was added meanwhile
            raise UsageError("--sources: a shard of this output has no source index: pack it again")
        self.names = [json.dumps(name) for name in sources.inputs]
        self.columns = [column.tolist() for column in (sources.input, sources.record, sources.piece, sources.pieces)]
        self.shard = shard

    def entry(self, k: int, piece: int | None = None) -> str:
        """Document ``k``'s source as ``json.dumps`` writes ``{"input", "record", "piece", "pieces"}`` (``piece``:
        another piece of the same document)."""
        name, record, stored, pieces = (column[k] for column in self.columns)
        return (
            f'{{"input": {self.names[name]}, "record": {record}, "piece": {stored if piece is None else piece}, '
            f'"pieces": {pieces}}}'
        )

    def listed(self, start: int, stop: int) -> str:
        """Documents ``start`` to ``stop`` (exclusive) as one JSON list."""
        return "[" + ", ".join(self.entry(k) for k in range(start, stop)) + "]"

    def whole(self, k: int) -> str:
        """The JSON list of every piece of document ``k``'s record, in order (a split document joined whole)."""
        return "[" + ", ".join(self.entry(k, piece) for piece in range(self.columns[3][k])) + "]"


class SourcesFile:
    """``sources.jsonl``: one line per exported sample, written as the batches come (in export order)."""

    def __init__(self, directory: Path, packed: PackedOutput) -> None:
        self.sources = ShardSources(packed)
        self.handle = open(directory / SOURCES_FILE, "w", encoding="utf-8")  # noqa: SIM115 (closed by close)
        self.shard = -1
        self.before = 0  # documents of the shard in the batches before this one

    def rows(self, batch: RowBatch) -> None:
        """A line per packed row: the sources of its documents."""
        base = self._base(batch)
        bounds = (base + batch.row_documents).tolist()
        self.handle.writelines(self.sources.listed(start, stop) + "\n" for start, stop in zip(bounds, bounds[1:]))

    def documents(self, batch: RowBatch, documents: DocumentBatch) -> None:
        """A line per exported document: its sources, every piece of a split document joined whole."""
        base = self._base(batch)
        ends = documents.ends
        firsts = np.flatnonzero(np.concatenate(([True], ends[:-1]))) if len(ends) else np.zeros(0, dtype=np.int64)
        counts = np.diff(np.append(firsts, len(ends)))
        lines = (
            (self.sources.whole(k) if count > 1 else self.sources.listed(k, k + 1)) + "\n"
            for k, count in zip((base + documents.origins[firsts]).tolist(), counts.tolist())
        )
        self.handle.writelines(lines)

    def _base(self, batch: RowBatch) -> int:
        """The shard's number of the batch's first document (batches of a shard come in order)."""
        if batch.shard != self.shard:
            self.sources.load(batch.shard)
            self.shard, self.before = batch.shard, 0
        base = self.before
        self.before += len(batch.lengths)
        return base

    def close(self) -> None:
        self.handle.close()


def sources_record(fmt: str) -> dict[str, Any]:
    """Where an export with ``--sources`` keeps them, for ``export.json``."""
    return {"column": "sources"} if fmt == "mds" else {"file": SOURCES_FILE}
