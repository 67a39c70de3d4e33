"""The loader: packed shards -> training batches, varlen (FlashAttention) or padded layout. Needs torch.

Rows are numpy views into the memory-mapped shards (no copy, any number of record batches). Every rank gets the
same number of rows per epoch (the remainder is dropped and counted in ``dropped_rows``), DataLoader workers
take disjoint blocks of rows, and the order is a pure function of (seed, epoch).

Epochs advance by themselves: the dataset's position is (epoch, rows of it delivered), and delivering an
epoch's last row moves it to (epoch + 1, 0), so a second ``for`` loop runs the next epoch and ``state_dict()``
always names the next row to deliver. ``set_epoch(e)`` jumps to the start of epoch e, except that the current
epoch keeps its position (a resumed state survives the usual ``set_epoch`` call). Who counts delivered rows: the
dataset itself when iterated in the process, :func:`loader` when its DataLoader has workers, torchdata's
``StatefulDataLoader`` (it saves each worker's own position). A plain ``DataLoader`` with workers cannot report
what it delivered, so iterating in its workers is refused with an error that says what to use instead.

Labels are ``input_ids`` (or the shard's ``labels`` column) with -100 at the first token of every document and on
padding: with the usual shift inside the model, no token learns to predict across a document boundary.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError, requires_extra
from packcli.storage.mirror import readable_output
from packcli.write.manifest import read_manifest, shard_path

with requires_extra("torch", "packcli.torch"):
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from packcli.loader.collate import Row, collate_padded, collate_varlen, flash_attention_kwargs
from packcli.loader.masks import block_causal_mask, flex_block_mask
from packcli.loader.shard_rows import ShardRows

__all__ = [
    "PackedDataset",
    "PackedLoader",
    "block_causal_mask",
    "collate_padded",
    "collate_varlen",
    "flash_attention_kwargs",
    "flex_block_mask",
    "loader",
]

STATE_VERSION = 1
UNTRACKED_WORKERS = (
    "PackedDataset in a DataLoader with workers that do not report which rows they delivered: its epoch and "
    "state_dict() would be wrong. Use packcli.torch.loader(path, batch_size, num_workers=N), torchdata's "
    "StatefulDataLoader, or num_workers=0"
)


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
        cache_dir, cache_limit: for an output URL (``s3://...``), the local directory its shards are fetched into
            (each checked against the manifest's sha256) and the bytes that directory may hold.
    """

    def __init__(
        self,
        path: str | Path,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        batch_size: int = 1,
        cache_dir: str | Path | None = None,
        cache_limit: int | None = None,
    ) -> None:
        super().__init__()
        self.path = readable_output(path, cache_dir, cache_limit)
        manifest = read_manifest(self.path)
        self.max_len = int(manifest["max_len"])
        self.pad_id = manifest["tokenizer"].get("eos_id") or 0
        self.shard_files = [shard_path(self.path, shard["file"]) for shard in manifest["shards"]]
        self.num_rows = sum(int(shard["rows"]) for shard in manifest["shards"])
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
        self.consumed = 0  # rows of this rank's epoch already delivered
        self._worker_taken = 0  # in a worker: rows of its own share already yielded
        self._tracked = False  # in a worker: its loader records what it delivers (loader() or StatefulDataLoader)
        self._rows: ShardRows | None = None

    def __len__(self) -> int:
        return self.rows_per_rank

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of epoch ``epoch``; the current epoch keeps its position (see the module docstring)."""
        if epoch != self.epoch:
            self.epoch, self.consumed, self._worker_taken = epoch, 0, 0

    def advance(self, rows: int) -> None:
        """Count ``rows`` more rows delivered; the epoch's last row moves the position to the next epoch."""
        self.consumed += rows
        if self.rows_per_rank and self.consumed >= self.rows_per_rank:
            self.epoch, self.consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: the next row to deliver. In a DataLoader worker (torchdata's StatefulDataLoader
        saves each worker's state) it also names the worker and how much of its share it has yielded."""
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "world_size": self.world_size,
            "num_rows": self.num_rows,
        }
        info = get_worker_info()
        if info is not None:
            self._tracked = True
            state["worker"] = {"id": info.id, "num_workers": info.num_workers, "taken": self._worker_taken}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state taken with another seed, world size, output or worker."""
        for key in ("seed", "shuffle", "world_size", "num_rows"):
            if state.get(key) != getattr(self, key):
                raise PackcliError(
                    f"cannot resume: the state has {key}={state.get(key)!r}, this dataset {getattr(self, key)!r}"
                )
        self.epoch, self.consumed = int(state["epoch"]), 0
        worker, info = state.get("worker"), get_worker_info()
        here = None if info is None else {"id": info.id, "num_workers": info.num_workers}
        if (worker and {"id": worker["id"], "num_workers": worker["num_workers"]}) != here:
            raise PackcliError(f"cannot resume: the state is of DataLoader worker {worker}, this is worker {here}")
        self._worker_taken = int(worker["taken"]) if worker else 0
        self._tracked = self._tracked or worker is not None
        self.advance(int(state["consumed"]))

    def rank_rows(self) -> np.ndarray:
        """This rank's global row indices for the current epoch, in delivery order."""
        order = (
            np.random.default_rng([self.seed, self.epoch]).permutation(self.num_rows)
            if self.shuffle
            else np.arange(self.num_rows)
        )
        return order[self.rank * self.rows_per_rank : (self.rank + 1) * self.rows_per_rank]

    def row(self, index: int) -> Row:
        """One row by global index: numpy views into the memory-mapped shard."""
        if self._rows is None:  # opened lazily: each worker maps the shards itself
            self._rows = ShardRows(self.shard_files, self.num_rows)
        out: Row = {"row_index": index}
        out.update(self._rows.row(index))
        return out

    def __iter__(self) -> Iterator[Row]:
        info = get_worker_info()
        if info is None:
            for index in self.rank_rows()[self.consumed :].tolist():
                self.advance(1)
                yield self.row(index)
            return
        if not self._tracked:
            raise PackcliError(UNTRACKED_WORKERS)
        # Blocks of batch_size rows, dealt in turn from the resume point on: worker k's first block is the
        # (k+1)-th, which is the order in which the DataLoader asks its workers.
        rows = self.rank_rows()[self.consumed :]
        block = np.arange(len(rows)) // self.batch_size
        for index in rows[block % info.num_workers == info.id][self._worker_taken :].tolist():
            self._worker_taken += 1
            yield self.row(index)


def _track_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn`` of :func:`loader`: the main process counts what this worker delivers."""
    info = get_worker_info()
    assert info is not None and isinstance(info.dataset, PackedDataset)
    info.dataset._tracked = True


class PackedLoader:
    """A DataLoader over a :class:`PackedDataset` that moves batches to ``device`` and counts delivered rows, so
    the epoch and ``state_dict`` are exact with workers too."""

    def __init__(self, dataset: PackedDataset, data_loader: DataLoader[Any], device: torch.device) -> None:
        self.dataset = dataset
        self.data_loader = data_loader
        self.device = device

    def __len__(self) -> int:
        return len(self.data_loader)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.dataset.epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        non_blocking = self.device.type == "cuda"
        for batch in self.data_loader:
            if self.data_loader.num_workers:  # in-process iteration counts itself; workers cannot tell us
                self.dataset.advance(len(batch["row_index"]))
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
    cache_dir: str | Path | None = None,
    **collate_options: Any,
) -> PackedLoader:
    """Batches of ``batch_size`` rows from a packed output on ``device``: pinned host memory and non-blocking
    copies when the device is a GPU.

    Args:
        layout: "varlen" (:func:`collate_varlen`) or "padded" (:func:`collate_padded`, to max_len).
        cache_dir: for an output URL, where its shards are fetched (see :class:`PackedDataset`).
        collate_options: passed to the collate function (``pad_to_multiple_of``, ``cu_seqlens_length``).
    """
    dataset = PackedDataset(
        path, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size, batch_size=batch_size, cache_dir=cache_dir
    )
    target = torch.device(device)
    if layout == "varlen":
        collate = partial(collate_varlen, pad_id=dataset.pad_id, **collate_options)
    elif layout == "padded":
        collate = partial(collate_padded, max_len=dataset.max_len, pad_id=dataset.pad_id, **collate_options)
    else:
        raise PackcliError(f"unknown layout {layout!r}; use 'varlen' or 'padded'")
    data_loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=target.type == "cuda",
        worker_init_fn=_track_worker if num_workers else None,
        persistent_workers=False,
    )
    return PackedLoader(dataset, data_loader, target)
