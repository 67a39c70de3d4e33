"""Per-shard sidecars: what grows with the number of documents lives in small Arrow files beside each shard, so that
``manifest.json`` stays O(shards) (every rank, worker, ``stats`` and up-to-date check reads it whole).

A shard entry names its sidecars under ``sidecars``, each with its size and sha256 like the shard itself::

    {"file": "shard-00003.arrow", ..., "sidecars": {"split_pieces": {"file": "shard-00003.arrow.split_pieces",
                                                                     "bytes": 1234, "sha256": "..."}}}

Each sidecar is an Arrow IPC stream (uncompressed) of integer columns, one row per entry. ``split_pieces``: one row
per piece of a split document the shard holds, ``row`` and ``index`` (where: the row in the shard and the segment
in its ``cu_seqlens``), ``document`` (a number shared by the pieces of one document, unique within a partition),
``piece`` (0, 1, ... in source order) and ``digest`` (:func:`piece_digest`: binds the piece's number to its tokens,
so ``verify`` proves the pieces are in order and contiguous in the source); for an output with labels, also
``first_supervised`` (int8: 1 where the piece's first token is supervised in the whole document, which the shards
cannot say: each piece starts with -100 there; 0 for a document's first piece), so ``export`` joins the pieces with
the whole document's supervision. Only ``verify`` and ``export`` read it; sidecars written before
``first_supervised`` lack it.
Outputs packed before sidecars existed list the pieces inline, ``split_pieces: [[row, index, document, piece]]``;
:func:`read_split_pieces` reads either. A sidecar is opened as a shard is
(:func:`~packcli.format.shards.open_file`): memory-mapped on disk, streamed from its object in an output at a URL.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.format.manifest import SPLIT_PIECES, shard_path
from packcli.format.shards import open_file

__all__ = [
    "DIGEST_COLUMN",
    "FIRST_SUPERVISED_COLUMN",
    "PIECE_COLUMNS",
    "SIDECARS",
    "SIDECAR_FILE",
    "SOURCES",
    "SOURCES_INPUTS",
    "SOURCE_COLUMNS",
    "Sources",
    "SplitPieces",
    "entry_files",
    "integer_array",
    "lists_split_pieces",
    "piece_digest",
    "read_sources",
    "read_split_pieces",
    "sidecar_name",
    "write_sidecar",
]

SIDECARS = "sidecars"  # a shard entry's key: {kind: {"file", "bytes", "sha256"}}
# the names packcli gives sidecars: never ``*.arrow``, so a glob for an output's shards never takes one
SIDECAR_FILE = re.compile(r"(part-\d+-)?shard-\d+\.arrow\.(split_pieces|sources)")
PIECE_COLUMNS = {"row": pa.int32(), "index": pa.int32(), "document": pa.int64(), "piece": pa.int32()}
DIGEST_COLUMN = "digest"
FIRST_SUPERVISED_COLUMN = "first_supervised"  # int8, outputs with labels only (see the module's docstring)
SOURCES = "sources"  # the per-document source index (packcli.write.sources)
SOURCE_COLUMNS = {"input": pa.int32(), "record": pa.int64(), "piece": pa.int32(), "pieces": pa.int32()}
SOURCES_INPUTS = "packcli.inputs"  # the sources sidecar's metadata key: its table of input names (JSON list)


def sidecar_name(shard_file: str, kind: str) -> str:
    """``shard-00003.arrow`` -> ``shard-00003.arrow.split_pieces``: a sidecar is named after its shard and kind, and
    not ``*.arrow`` (``datasets.load_dataset("arrow", data_files="packed/*.arrow")`` takes the shards alone)."""
    return f"{shard_file}.{kind}"


def piece_digest(document: int, piece: int, tokens: np.ndarray) -> int:
    """The first 8 bytes of sha256 over (document, piece, the piece's int32 tokens), as a signed little-endian
    int64: what pack cut as piece ``piece`` of ``document``, checked by verify against what the shards hold there."""
    head = np.array([document, piece], dtype="<i8").tobytes()
    value = hashlib.sha256(head + np.ascontiguousarray(tokens, dtype="<i4").tobytes()).digest()[:8]
    return int.from_bytes(value, "little", signed=True)


def integer_array(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A zero-copy Arrow integer array of ``kind`` over numpy values (``pa.array`` would first import pandas)."""
    values = np.ascontiguousarray(values, dtype=kind.to_pandas_dtype())
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def write_sidecar(directory: Path, shard_file: str, kind: str, table: pa.Table) -> dict[str, Any]:
    """Write ``table`` as the ``kind`` sidecar of ``shard_file`` in ``directory`` (``NAME.tmp``, fsync, rename);
    returns its entry: file, bytes, sha256."""
    name = sidecar_name(shard_file, kind)
    tmp = directory / f"{name}.tmp"
    sink = pa.BufferOutputStream()  # a sidecar is small; Python's open takes a path in any bytes, pyarrow's UTF-8
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def entry_files(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The files of one shard entry, each as ``{"file", "bytes", "sha256"}``: the shard, then its sidecars (what
    publication moves, uploads and lists as the output's)."""
    sidecars = entry.get(SIDECARS)
    listed = [sidecars[kind] for kind in sorted(sidecars)] if isinstance(sidecars, dict) else []
    return [entry, *(item for item in listed if isinstance(item, dict) and isinstance(item.get("file"), str))]


def lists_split_pieces(entry: dict[str, Any]) -> bool:
    """Whether a shard entry lists pieces of split documents: a ``split_pieces`` sidecar, or an inline list."""
    sidecars = entry.get(SIDECARS)
    return SPLIT_PIECES in entry or (isinstance(sidecars, dict) and SPLIT_PIECES in sidecars)


@dataclass(frozen=True)
class SplitPieces:
    """One shard's pieces of split documents: ``entries`` (k, 4) int64 rows of [row, index, document, piece], by
    row; ``digests`` (k,) int64, or None for an output that lists its pieces inline (packed before sidecars);
    ``first_supervised`` (k,) int64 0 or 1, or None where not recorded (no labels, or packed before it)."""

    entries: np.ndarray
    digests: np.ndarray | None
    first_supervised: np.ndarray | None = None


def read_split_pieces(directory: Path, entry: dict[str, Any]) -> SplitPieces | None:
    """A shard's pieces of split documents, from its sidecar or (older outputs) its inline list; None when the
    entry lists none. The sidecar's bytes are not checked against the entry here (``verify`` does).

    Raises:
        PackcliError: the sidecar is missing, unreadable, or lacks a column (naming the file); an inline list is
            not lists of four integers >= 0 (naming the manifest key); a ``first_supervised`` other than 0 or 1.
    """
    sidecar = (entry.get(SIDECARS) or {}).get(SPLIT_PIECES)
    if sidecar is None:
        if SPLIT_PIECES not in entry:
            return None
        inline = entry[SPLIT_PIECES]
        if not (isinstance(inline, list) and all(_four_counts(value) for value in inline)):
            raise PackcliError(f"manifest key 'split_pieces' of {entry['file']} is not lists of four integers >= 0")
        return SplitPieces(np.array(inline, dtype=np.int64).reshape(-1, 4), None)
    path = shard_path(directory, sidecar.get("file"))
    try:
        table = pa.ipc.open_stream(open_file(path)).read_all()  # memory-mapped, or streamed from a URL
        recorded = [FIRST_SUPERVISED_COLUMN] if FIRST_SUPERVISED_COLUMN in table.column_names else []
        names = [*PIECE_COLUMNS, DIGEST_COLUMN, *recorded]
        columns = [table.column(name).to_numpy().astype(np.int64) for name in names]
    except (PackcliError, pa.ArrowException, OSError, KeyError, ValueError) as exc:
        reason = _reason(exc)
        raise PackcliError(f"unreadable split_pieces sidecar ({reason}): run packcli verify, or repack", path) from None
    entries = np.stack(columns[:4], axis=1) if len(columns[0]) else np.zeros((0, 4), dtype=np.int64)
    if (entries < 0).any():
        raise PackcliError("split_pieces sidecar holds a negative row, index, document or piece", path)
    first_supervised = columns[5] if len(columns) > 5 else None
    if first_supervised is not None and ((first_supervised < 0) | (first_supervised > 1)).any():
        raise PackcliError("split_pieces sidecar holds a first_supervised other than 0 or 1", path)
    return SplitPieces(entries, columns[4], first_supervised)


@dataclass(frozen=True)
class Sources:
    """One shard's source index, one entry per document (``cu_seqlens`` segment) in row then segment order: the
    input's name (``inputs[input[k]]``), its record (line or row, 1-based) and piece ``piece[k]`` of ``pieces[k]``."""

    inputs: list[str]
    input: np.ndarray  # int64
    record: np.ndarray  # int64
    piece: np.ndarray  # int64
    pieces: np.ndarray  # int64

    def describe(self, k: int) -> str:
        """Document ``k``'s source in words: ``manpages.jsonl:638`` or ``manpages.jsonl:638, piece 2 of 9``."""
        where = f"{self.inputs[int(self.input[k])]}:{int(self.record[k])}"
        return where if self.pieces[k] == 1 else f"{where}, piece {int(self.piece[k]) + 1} of {int(self.pieces[k])}"


def read_sources(directory: Path, entry: dict[str, Any]) -> Sources | None:
    """A shard's source index (where each of its documents came from), or None when the shard has none (packed
    before sources were kept). For readers that ask (``show``, ``export``, a training loop): only they pay for it.

    Raises:
        PackcliError: the sidecar is missing or unreadable, lacks a column or its table of input names, or names
            an input outside that table (naming the file).
    """
    sidecar = (entry.get(SIDECARS) or {}).get(SOURCES)
    if not isinstance(sidecar, dict):
        return None
    path = shard_path(directory, sidecar.get("file"))
    try:
        table = pa.ipc.open_stream(open_file(path)).read_all()  # memory-mapped, or streamed from a URL
        inputs = json.loads((table.schema.metadata or {})[SOURCES_INPUTS.encode()])
        columns = [table.column(name).to_numpy().astype(np.int64) for name in SOURCE_COLUMNS]
    except (PackcliError, pa.ArrowException, OSError, KeyError, ValueError) as exc:
        reason = _reason(exc)
        raise PackcliError(f"unreadable sources sidecar ({reason}): run packcli verify, or repack", path) from None
    sources = Sources([str(name) for name in inputs], *columns)
    if len(sources.input) and (sources.input.min() < 0 or sources.input.max() >= len(inputs)):
        raise PackcliError(f"sources sidecar names an input outside its {len(inputs)} input name(s)", path)
    return sources


def _reason(exc: Exception) -> object:
    """Why a sidecar could not be read, in a few words: the system's (``No such file or directory``), the store's
    (``cannot read: no such object or prefix``, of a sidecar at a URL), or Arrow's."""
    if isinstance(exc, PackcliError):
        return exc.message
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else exc


def _four_counts(value: object) -> bool:
    return isinstance(value, list) and len(value) == 4 and all(type(v) is int and v >= 0 for v in value)
