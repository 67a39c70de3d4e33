"""Read a packcli output for export: its rows, or its documents with split documents whole again, streaming.

The record batches come from ``packcli verify`` as it checks them (:func:`packcli.report.verify.verify_output`
with a consumer), in the output's order (shards as the manifest lists them, rows in each), so the export reads
the shards once. Two views of them:

- :func:`row_batch`: the packed rows as written, a record batch (about 8 MiB) at a time.
- :class:`DocumentView`: the documents, each piece a sequence; the pieces of a document cut by ``--overflow
  split`` come out together and in order, where its first piece (in output order) stood, found through the
  shards' ``split_pieces`` sidecars (:mod:`packcli.write.splits`, checked by verify); its other pieces are not
  repeated.

Invariant: every stored token comes out exactly once in either view, with its supervision (``labels != -100``).
A split document's later pieces start with -100 in the shards (each piece is a document there); joined, that token
takes the supervision it has in the whole document, which pack records in the sidecar (``first_supervised``).
Example: a prompt P P and response R R R EOS cut after three tokens stores ``P P R | R R EOS`` with the masks
``0 0 1 | 0 1 1`` and records 1 for the second piece; joined, ``0 0 1 1 1 1``, the whole document's.
An output packed before ``first_supervised`` existed does not record it: the token then takes that of its neighbours
in the whole document (the token before it, the last of the piece before, and the one after it), where they agree,
as they do inside every span of supervised or unsupervised tokens packcli's encoders write (spans of two or more
tokens: a prompt, a response and its EOS, a chat turn with its end marker). Where they differ (a span starts or ends
at the cut), or the labels were given as such (``--labels-field``: spans of any length), it stays unsupervised,
counted in ``DocumentView.unsure`` for the export to say.
Memory: one record batch, plus the split pieces' coordinates (a few numbers per piece of a split document); the
pages of the shards the pieces are read from are let go after each batch (:mod:`packcli.format.mapped`).
From an output URL the rows stream in; a shard holding a piece read out of order is fetched once into a temporary
directory (removed at ``close``) and memory-mapped there: from the store, each miss of the cache of a few shards
would fetch a whole shard again.
"""

from __future__ import annotations

import bisect
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.format.columns import IGNORE_INDEX, LABELS_COLUMN
from packcli.format.manifest import read_manifest, shard_path
from packcli.format.mapped import ReleasableMap
from packcli.format.shards import flat_list_column
from packcli.format.sidecars import read_split_pieces
from packcli.storage.objects import fetch_checked
from packcli.storage.urls import UrlPath

__all__ = ["DocumentBatch", "DocumentView", "PackedOutput", "RowBatch", "open_packed", "row_batch"]

UNRECORDED = -1  # a split piece's first_supervised, where its sidecar has none (packed before it)


@dataclass(frozen=True)
class PackedOutput:
    """A packcli output to export: its directory and manifest, and whether its rows carry labels."""

    path: Path
    manifest: dict[str, Any]

    @property
    def labelled(self) -> bool:
        return LABELS_COLUMN in (self.manifest.get("columns") or []) or "supervised_tokens" in self.manifest["totals"]

    @property
    def vocab_size(self) -> int | None:
        vocab: int | None = self.manifest["tokenizer"]["vocab_size"]
        return vocab

    @property
    def eos_id(self) -> int | None:
        eos: int | None = self.manifest["tokenizer"].get("eos_id") if self.manifest["options"].get("eos") else None
        return eos

    def shard_paths(self) -> list[Path]:
        return [shard_path(self.path, shard["file"]) for shard in self.manifest["shards"]]


def open_packed(path: Path) -> PackedOutput:
    """Read an output's manifest (validated)."""
    return PackedOutput(path, read_manifest(path))


@dataclass(frozen=True)
class RowBatch:
    """Consecutive rows of one shard: tokens, row token offsets, document lengths, row document offsets, and the
    supervision mask (None for an output without labels)."""

    shard: int
    first_row: int
    tokens: np.ndarray  # int32
    row_offsets: np.ndarray  # int64, rows + 1
    lengths: np.ndarray  # int64, one per document (piece)
    row_documents: np.ndarray  # int64, rows + 1: each row's first document in ``lengths``
    mask: np.ndarray | None  # bool per token

    @property
    def rows(self) -> int:
        return len(self.row_offsets) - 1


def row_batch(shard: int, first_row: int, batch: pa.RecordBatch) -> RowBatch:
    """The rows of one record batch of shard number ``shard`` (a verified batch: its columns are ``list<int32>``)."""
    tokens, row_offsets = flat_list_column(pa.chunked_array([batch.column("input_ids")]))
    cu, cu_offsets = flat_list_column(pa.chunked_array([batch.column("cu_seqlens")]))
    within = np.ones(len(cu), dtype=bool)  # False at each row's leading 0
    within[cu_offsets[:-1]] = False
    lengths = np.diff(cu.astype(np.int64))[within[1:]]
    mask = None
    if LABELS_COLUMN in batch.schema.names:
        labels, _ = flat_list_column(pa.chunked_array([batch.column(LABELS_COLUMN)]))
        mask = labels != IGNORE_INDEX
    row_documents = cu_offsets - np.arange(len(cu_offsets))
    return RowBatch(shard, first_row, tokens, row_offsets, lengths, row_documents, mask)


@dataclass(frozen=True)
class DocumentBatch:
    """Pieces in export order: tokens, each piece's length, whether it ends its document, the supervision mask."""

    tokens: np.ndarray
    lengths: np.ndarray  # int64
    ends: np.ndarray  # bool, one per piece: False only for a split document's pieces before its last
    mask: np.ndarray | None
    origins: np.ndarray  # int64, one per piece: the row batch's piece at whose place it came out


class _Splits:
    """The split documents' pieces: their coordinates by shard, and each document's pieces in order."""

    def __init__(self, packed: PackedOutput) -> None:
        self.packed = packed
        self.by_shard: list[np.ndarray] = []  # per shard: rows [row, index, group]
        # group -> its pieces' (shard, row, index, first_supervised: 0, 1, or UNRECORDED) in order
        self.groups: list[list[tuple[int, int, int, int]]] = []
        keys: dict[tuple[str, int], int] = {}
        pieces: list[list[tuple[int, int, int, int, int]]] = []
        for shard_index, shard in enumerate(packed.manifest["shards"]):
            partition = str(shard["file"]).rsplit("shard-", 1)[0]
            found = []
            listed = read_split_pieces(packed.path, shard)
            entries = [] if listed is None else listed.entries.tolist()
            recorded = [UNRECORDED] * len(entries)
            if listed is not None and listed.first_supervised is not None:
                recorded = listed.first_supervised.tolist()
            for (row, index, document, piece), first in zip(entries, recorded):
                group = keys.setdefault((partition, document), len(keys))
                if group == len(pieces):
                    pieces.append([])
                pieces[group].append((piece, shard_index, row, index, first))
                found.append((row, index, group))
            self.by_shard.append(np.array(found, dtype=np.int64).reshape(-1, 3))
        for group_pieces in pieces:  # numbered 0, 1, ... (verify checks it)
            self.groups.append([(shard, row, index, first) for _, shard, row, index, first in sorted(group_pieces)])
        self.emitted = np.zeros(len(self.groups), dtype=bool)
        self._batches: dict[int, list[RowBatch]] = {}  # a few shards' batches, views of their memory maps
        self._maps: dict[int, ReleasableMap] = {}  # those maps, their pages let go after each batch's pieces
        self._fetched: Path | None = None  # an output URL's shards the pieces are read from, each fetched once
        self.given_labels = packed.manifest["options"].get("labels_field") is not None
        self.unsure = 0  # joins whose token's supervision the neighbours do not tell (left unsupervised)

    def joined(self, group: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """The pieces of split document ``group`` in order, tokens and mask, each later piece's first token with
        the supervision it has in the whole document: as recorded, or where its neighbours tell it (see the module's
        docstring)."""
        places = self.groups[group]
        pieces = [self.piece(shard, row, index) for shard, row, index, _ in places]
        joined = pieces[:1]
        for (tokens, mask), (*_, recorded) in zip(pieces[1:], places[1:]):
            before = joined[-1][1]
            if mask is not None and before is not None and len(mask) and len(before):
                mask = mask.copy()  # a view of a cached batch: left as stored
                after = mask[1] if len(mask) > 1 else before[-1]
                if recorded != UNRECORDED:
                    mask[0] = bool(recorded)
                elif before[-1] == after and not self.given_labels:
                    mask[0] = after
                else:
                    self.unsure += 1
            joined.append((tokens, mask))
        return joined

    def piece(self, shard: int, row: int, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """One stored piece's tokens and mask, read from its memory-mapped shard."""
        if shard not in self._batches:
            if len(self._batches) >= 4:
                evicted = next(iter(self._batches))
                self._batches.pop(evicted)
                self._maps.pop(evicted)
            self._maps[shard] = ReleasableMap(self._local_shard(shard))
            self._batches[shard] = list(_shard_batches(shard, self._maps[shard].buffer))
        batches = self._batches[shard]
        batch = batches[bisect.bisect_right([batch.first_row for batch in batches], row) - 1]
        local = row - batch.first_row
        first_document = int(batch.row_documents[local])
        start = int(batch.row_offsets[local] + batch.lengths[first_document : first_document + index].sum())
        span = slice(start, start + int(batch.lengths[first_document + index]))
        return batch.tokens[span], None if batch.mask is None else batch.mask[span]

    def _local_shard(self, shard: int) -> Path:
        """The shard's file: itself, or for an output URL a copy fetched once into a temporary directory (read out
        of order, a piece from the store would fetch its whole shard again on each miss of the cache above)."""
        path = self.packed.shard_paths()[shard]
        if not isinstance(path, UrlPath):
            return path
        if self._fetched is None:
            self._fetched = Path(tempfile.mkdtemp(prefix="packcli-pieces-"))
        local = self._fetched / f"{shard}.arrow"
        if not local.exists():
            fetch_checked(path, local, self.packed.manifest["shards"][shard]["sha256"])
        return local

    def release(self) -> None:
        """Let go of the pages the pieces were read from (copied out by then): read out of order, each piece would
        otherwise keep the pages the kernel mapped around it (tens of KiB) resident until its shard left the cache."""
        for mapped in self._maps.values():
            mapped.release()

    def close(self) -> None:
        """Remove the shards fetched for their pieces."""
        self._batches.clear()
        self._maps.clear()
        if self._fetched is not None:
            shutil.rmtree(self._fetched, ignore_errors=True)


def _shard_batches(shard: int, data: pa.Buffer) -> Iterator[RowBatch]:
    first_row = 0
    for batch in pa.ipc.open_stream(data).read_all().to_batches():
        yield row_batch(shard, first_row, batch)
        first_row += batch.num_rows


class DocumentView:
    """The documents of the output's rows, given batch by batch in output order: a split document's pieces together
    where its first piece stood."""

    def __init__(self, packed: PackedOutput) -> None:
        self.splits = _Splits(packed)

    @property
    def unsure(self) -> int:
        """The joins of split documents whose first token was left unsupervised, its supervision not told."""
        return self.splits.unsure

    def close(self) -> None:
        """Let go of what the pieces were read from (an output URL's shards fetched for them)."""
        self.splits.close()

    def documents(self, batch: RowBatch) -> DocumentBatch:
        entries = self.splits.by_shard[batch.shard]
        inside = (entries[:, 0] >= batch.first_row) & (entries[:, 0] < batch.first_row + batch.rows)
        if not inside.any():
            count = len(batch.lengths)
            return DocumentBatch(batch.tokens, batch.lengths, np.ones(count, dtype=bool), batch.mask, np.arange(count))
        here = entries[inside]
        positions = batch.row_documents[here[:, 0] - batch.first_row] + here[:, 1]
        spliced = _spliced(batch, positions, here[:, 2], self.splits)  # the pieces copied into it
        self.splits.release()
        return spliced


def _spliced(batch: RowBatch, positions: np.ndarray, groups: np.ndarray, splits: _Splits) -> DocumentBatch:
    """``batch``'s pieces with each split piece replaced by its whole document (first time) or left out (after)."""
    token_starts = np.concatenate(([0], np.cumsum(batch.lengths)))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]] = []
    done = 0  # pieces of the batch already taken
    for position, group in sorted(zip(positions.tolist(), groups.tolist())):
        if position > done:
            span = slice(int(token_starts[done]), int(token_starts[position]))
            mask = None if batch.mask is None else batch.mask[span]
            count = position - done
            kept = (batch.tokens[span], batch.lengths[done:position], np.ones(count, dtype=bool), mask)
            parts.append((*kept, np.arange(done, position)))
        done = position + 1
        if splits.emitted[group]:
            continue
        splits.emitted[group] = True
        pieces = splits.joined(group)
        for number, (tokens, mask) in enumerate(pieces):
            last = number == len(pieces) - 1
            parts.append(
                (tokens, np.array([len(tokens)], dtype=np.int64), np.array([last]), mask, np.array([position]))
            )
    if done < len(batch.lengths):
        span = slice(int(token_starts[done]), None)
        mask = None if batch.mask is None else batch.mask[span]
        rest = len(batch.lengths) - done
        kept = (batch.tokens[span], batch.lengths[done:], np.ones(rest, dtype=bool), mask)
        parts.append((*kept, np.arange(done, len(batch.lengths))))
    if not parts:
        nothing = np.zeros(0, dtype=np.int64)
        return DocumentBatch(batch.tokens[:0], batch.lengths[:0], nothing.astype(bool), _empty(batch.mask), nothing)
    masks = [part[3] for part in parts]
    return DocumentBatch(
        np.concatenate([part[0] for part in parts]),
        np.concatenate([part[1] for part in parts]),
        np.concatenate([part[2] for part in parts]),
        None if batch.mask is None else np.concatenate([mask for mask in masks if mask is not None]),
        np.concatenate([part[4] for part in parts]),
    )


def _empty(mask: np.ndarray | None) -> np.ndarray | None:
    return None if mask is None else mask[:0]
