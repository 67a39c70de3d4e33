"""The loader: packed shards -> training batches, varlen (FlashAttention) or padded (SDPA) layout. Needs torch.

Rows are read zero-copy from memory-mapped shards. Every rank gets the same number of rows per epoch (the
remainder is dropped and counted in ``dropped_rows``), DataLoader workers take disjoint blocks of rows, and the
order is a pure function of (seed, epoch), so ``state_dict``/``load_state_dict`` resume mid-epoch exactly.

Labels are ``input_ids`` (or the shard's ``labels`` column) with -100 at the first token of every document and on
padding: with the usual shift inside the model, no token learns to predict across a document boundary.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError
from packcli.extras import requires_extra
from packcli.write.manifest import read_manifest, shard_path
from packcli.write.shards import IGNORE_INDEX, LABELS_COLUMN, TOKEN_COLUMNS, flat_list_column, read_shard

with requires_extra("torch", "packcli.torch"):
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

Row = dict[str, Any]
STATE_VERSION = 1


class PackedDataset(IterableDataset[Row]):
    """An iterable over the rows of a packed output, split across DDP ranks and DataLoader workers.

    Args:
        path: the packed output directory.
        shuffle: shuffle rows each epoch (deterministically from ``seed`` and the epoch).
        seed: the shuffle seed; the same on every rank.
        rank, world_size: this process' place in data-parallel training; default from ``torch.distributed``
            when it is initialized, else 0 and 1.
        batch_size: rows per batch of the DataLoader that iterates this dataset. Workers take turns by blocks of
            this many rows, so the DataLoader delivers rows in exactly this rank's order (needed for exact
            resume with workers; :func:`loader` sets it).
    """

    def __init__(
        self,
        path: str | Path,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        batch_size: int = 1,
    ) -> None:
        super().__init__()
        self.path = Path(path)
        manifest = read_manifest(self.path)
        self.max_len = int(manifest["max_len"])
        self.pad_id = manifest["tokenizer"].get("eos_id") or 0
        self.shard_files = [shard_path(self.path, shard["file"]) for shard in manifest["shards"]]
        shard_rows = np.array([shard["rows"] for shard in manifest["shards"]], dtype=np.int64)
        self.shard_starts = np.concatenate(([0], np.cumsum(shard_rows)))
        self.num_rows = int(self.shard_starts[-1])
        if rank is None or world_size is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = torch.distributed.get_rank() if distributed else 0
            world_size = torch.distributed.get_world_size() if distributed else 1
        if not 0 <= rank < world_size:
            raise PackcliError(f"rank {rank} is not in 0..{world_size - 1}")
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.batch_size = shuffle, seed, batch_size
        self.rows_per_rank = self.num_rows // world_size
        self.dropped_rows = self.num_rows - self.rows_per_rank * world_size
        self.epoch = 0
        self.consumed = 0  # rows of this rank's epoch already delivered (counted where batches arrive)
        self._columns: list[dict[str, tuple[np.ndarray, np.ndarray]]] | None = None

    def __len__(self) -> int:
        return self.rows_per_rank

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: a new deterministic order of the same rows."""
        self.epoch = epoch
        self.consumed = 0

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: enough to resume mid-epoch exactly."""
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "world_size": self.world_size,
            "num_rows": self.num_rows,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state taken with another seed, world size or output."""
        for key in ("seed", "shuffle", "world_size", "num_rows"):
            if state.get(key) != getattr(self, key):
                raise PackcliError(
                    f"cannot resume: the state has {key}={state.get(key)!r}, this dataset {getattr(self, key)!r}"
                )
        self.epoch = int(state["epoch"])
        self.consumed = int(state["consumed"])

    def rank_rows(self) -> np.ndarray:
        """This rank's global row indices for the current epoch, in delivery order."""
        order = (
            np.random.default_rng([self.seed, self.epoch]).permutation(self.num_rows)
            if self.shuffle
            else np.arange(self.num_rows)
        )
        return order[self.rank * self.rows_per_rank : (self.rank + 1) * self.rows_per_rank]

    def _worker_rows(self) -> np.ndarray:
        """The rows this worker yields: blocks of ``batch_size`` dealt in turn, from the resume point on."""
        rows: np.ndarray = self.rank_rows()[self.consumed :]
        info = get_worker_info()
        if info is None:
            return rows
        block = np.arange(len(rows)) // self.batch_size
        mine: np.ndarray = rows[block % info.num_workers == info.id]
        return mine

    def _load_columns(self) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
        if self._columns is None:  # opened lazily: each worker maps the shards itself
            self._columns = []
            for path in self.shard_files:
                table = read_shard(path)
                names = [*TOKEN_COLUMNS, *([LABELS_COLUMN] if LABELS_COLUMN in table.column_names else [])]
                self._columns.append({name: flat_list_column(table.column(name)) for name in names})
        return self._columns

    def row(self, index: int) -> Row:
        """One row by global index: numpy views into the memory-mapped shard."""
        columns = self._load_columns()
        shard = int(np.searchsorted(self.shard_starts, index, side="right")) - 1
        local = index - int(self.shard_starts[shard])
        out: Row = {"row_index": index}
        for name, (values, offsets) in columns[shard].items():
            out[name] = values[offsets[local] : offsets[local + 1]]
        return out

    def __iter__(self) -> Iterator[Row]:
        in_process = get_worker_info() is None
        for index in self._worker_rows().tolist():
            if in_process:
                self.consumed += 1
            yield self.row(index)


def _document_lengths(rows: Sequence[Row]) -> np.ndarray:
    return np.concatenate([np.diff(row["cu_seqlens"]) for row in rows]).astype(np.int64)


def _labels(row: Row) -> np.ndarray:
    """The row's labels with -100 at the first token of every document."""
    labels = np.array(row[LABELS_COLUMN] if LABELS_COLUMN in row else row["input_ids"], dtype=np.int64)
    labels[row["cu_seqlens"][:-1]] = IGNORE_INDEX
    return labels


def collate_varlen(
    rows: Sequence[Row],
    pad_to_multiple_of: int | None = None,
    cu_seqlens_length: int | None = None,
    pad_id: int = 0,
) -> dict[str, Any]:
    """Flatten a batch of rows into one row, FlashAttention varlen style.

    Returns ``input_ids``, ``position_ids``, ``labels`` ([1, T] int64), ``cu_seqlens`` (int32 [documents + 1]),
    ``max_seqlen`` (int), ``document_ids`` and ``seq_idx`` (int32 [1, T], the document of each token), and
    ``row_index`` ([B]).

    Args:
        pad_to_multiple_of: pad T up to a multiple (8 suits tensor cores); the padding is one extra document with
            labels -100.
        cu_seqlens_length: repeat the last offset up to this length, so shapes stay static (CUDA graphs,
            torch.compile); a zero-length document attends to nothing.
        pad_id: the token id of padding.
    """
    lengths = _document_lengths(rows)
    total = int(lengths.sum())
    pad = -total % pad_to_multiple_of if pad_to_multiple_of else 0
    # One buffer for the three token tensors, one for the int32 ones: fewer transfers from DataLoader workers.
    tokens = np.empty((3, total + pad), dtype=np.int64)
    input_ids, position_ids, labels = tokens
    np.concatenate([row["input_ids"] for row in rows], out=input_ids[:total])
    np.concatenate([row["position_ids"] for row in rows], out=position_ids[:total])
    if LABELS_COLUMN in rows[0]:
        np.concatenate([row[LABELS_COLUMN] for row in rows], out=labels[:total])
    else:
        labels[:total] = input_ids[:total]
    labels[np.cumsum(lengths) - lengths] = IGNORE_INDEX  # the first token of every document
    if pad:
        input_ids[total:] = pad_id
        position_ids[total:] = np.arange(pad)
        labels[total:] = IGNORE_INDEX
        lengths = np.append(lengths, pad)
    boundaries = max(cu_seqlens_length or 0, len(lengths) + 1)
    if cu_seqlens_length is not None and cu_seqlens_length < len(lengths) + 1:
        raise PackcliError(f"cu_seqlens_length {cu_seqlens_length} < {len(lengths) + 1} boundaries in this batch")
    small = np.empty(total + pad + boundaries, dtype=np.int32)
    document_ids, cu_seqlens = small[: total + pad], small[total + pad :]
    document_ids[:] = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    cu_seqlens[0] = 0
    np.cumsum(lengths, out=cu_seqlens[1 : len(lengths) + 1])
    cu_seqlens[len(lengths) + 1 :] = total + pad  # repeated last offset: empty documents keep shapes static
    token_tensors, small_tensors = torch.from_numpy(tokens), torch.from_numpy(small)
    document_tensor = small_tensors[: total + pad][None]
    return {
        "input_ids": token_tensors[0:1],
        "position_ids": token_tensors[1:2],
        "labels": token_tensors[2:3],
        "cu_seqlens": small_tensors[total + pad :],
        "max_seqlen": int(lengths.max(initial=0)),
        "document_ids": document_tensor,
        "seq_idx": document_tensor,
        "row_index": torch.tensor([row["row_index"] for row in rows], dtype=torch.int64),
    }


def collate_padded(rows: Sequence[Row], max_len: int | None = None, pad_id: int = 0) -> dict[str, Any]:
    """Stack a batch of rows into [B, L] tensors padded with ``pad_id`` (L = ``max_len``, else the longest row).

    Returns ``input_ids``, ``position_ids`` (0 on padding), ``labels`` (-100 on padding and at document starts),
    ``document_ids`` (int32, numbered from 0 in each row, -1 on padding), ``attention_mask`` (1 real, 0 padding)
    and ``row_index``; :func:`block_causal_mask` turns ``document_ids`` into the SDPA mask.
    """
    width = max_len or max(len(row["input_ids"]) for row in rows)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    position_ids = np.zeros((len(rows), width), dtype=np.int64)
    labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64)
    document_ids = np.full((len(rows), width), -1, dtype=np.int32)
    for k, row in enumerate(rows):
        n = len(row["input_ids"])
        if n > width:
            raise PackcliError(f"row of {n} tokens does not fit max_len {width}")
        input_ids[k, :n] = row["input_ids"]
        position_ids[k, :n] = row["position_ids"]
        labels[k, :n] = _labels(row)
        document_ids[k, :n] = np.repeat(
            np.arange(len(row["cu_seqlens"]) - 1, dtype=np.int32), np.diff(row["cu_seqlens"])
        )
    return {
        "input_ids": torch.from_numpy(input_ids),
        "position_ids": torch.from_numpy(position_ids),
        "labels": torch.from_numpy(labels),
        "document_ids": torch.from_numpy(document_ids),
        "attention_mask": torch.from_numpy((document_ids >= 0).astype(np.int64)),
        "row_index": torch.tensor([row["row_index"] for row in rows], dtype=torch.int64),
    }


def block_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """The boolean [B, 1, T, T] SDPA mask: a token sees earlier tokens of its own document only.

    Padding (-1) sees earlier padding, so no query row is empty (SDPA would give NaN there); real tokens never
    see padding. Pure tensor comparisons on the input's device: no loop, no host sync.
    """
    length = document_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=document_ids.device).tril()
    same_document = document_ids[:, :, None] == document_ids[:, None, :]
    return (same_document & causal)[:, None]


class PackedLoader:
    """A DataLoader over a :class:`PackedDataset` that moves batches to ``device`` and counts delivered rows, so
    ``state_dict`` is exact with workers too."""

    def __init__(self, dataset: PackedDataset, data_loader: DataLoader[Any], device: torch.device) -> None:
        self.dataset = dataset
        self.data_loader = data_loader
        self.device = device

    def __len__(self) -> int:
        return len(self.data_loader)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        non_blocking = self.device.type == "cuda"
        for batch in self.data_loader:
            if self.data_loader.num_workers:  # in-process iteration counts itself; workers cannot tell us
                self.dataset.consumed += len(batch["row_index"])
            yield {
                key: value.to(self.device, non_blocking=non_blocking) if isinstance(value, torch.Tensor) else value
                for key, value in batch.items()
            }

    def set_epoch(self, epoch: int) -> None:
        """See :meth:`PackedDataset.set_epoch`."""
        self.dataset.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """See :meth:`PackedDataset.state_dict`: the rows delivered so far, counted here."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """See :meth:`PackedDataset.load_state_dict`."""
        self.dataset.load_state_dict(state)


def loader(
    path: str | Path,
    batch_size: int,
    device: str | torch.device = "cpu",
    num_workers: int = 0,
    layout: str = "varlen",
    shuffle: bool = True,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    **collate_options: Any,
) -> PackedLoader:
    """Batches of ``batch_size`` rows from a packed output on ``device``: pinned host memory and non-blocking
    copies when the device is a GPU.

    Args:
        layout: "varlen" (:func:`collate_varlen`) or "padded" (:func:`collate_padded`, to max_len).
        collate_options: passed to the collate function (``pad_to_multiple_of``, ``cu_seqlens_length``).
    """
    dataset = PackedDataset(path, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size, batch_size=batch_size)
    target = torch.device(device)
    if layout == "varlen":
        options = {"pad_id": dataset.pad_id, **collate_options}
        collate = _Collate(collate_varlen, options)
    elif layout == "padded":
        collate = _Collate(collate_padded, {"max_len": dataset.max_len, "pad_id": dataset.pad_id, **collate_options})
    else:
        raise PackcliError(f"unknown layout {layout!r}; use 'varlen' or 'padded'")
    data_loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=target.type == "cuda",
        persistent_workers=False,
    )
    return PackedLoader(dataset, data_loader, target)


class _Collate:
    """A picklable collate function with bound options (DataLoader workers need to pickle it)."""

    def __init__(self, function: Any, options: dict[str, Any]) -> None:
        self.function, self.options = function, options

    def __call__(self, rows: Sequence[Row]) -> dict[str, Any]:
        return dict(self.function(rows, **self.options))
