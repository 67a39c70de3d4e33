"""The loader: packed shards -> training batches, varlen (FlashAttention) or padded layout. Needs torch.

Rows are numpy views into the memory-mapped shards (no copy, any number of record batches). Every rank gets the
same number of rows per epoch, at least one (the remainder is dropped and counted in ``dropped_rows``; with
``drop_last``, down to whole batches), DataLoader workers take disjoint blocks of rows (a persistent worker takes
each pass's epoch from memory shared with the main process), and the order is a pure function of (seed, epoch).

Epochs advance by themselves: the dataset's position is (epoch, rows of it delivered), and delivering an
epoch's last row moves it to (epoch + 1, 0), so a second ``for`` loop runs the next epoch and ``state_dict()``
always names the next row to deliver. ``set_epoch(e)`` jumps to the start of epoch e, except that the current
epoch keeps its position (a resumed state survives the usual ``set_epoch`` call). Who counts delivered rows: the
dataset itself when iterated in the process, :func:`loader` when its DataLoader has workers, torchdata's
``StatefulDataLoader`` (it saves each worker's own position). A plain ``DataLoader`` with workers iterates every
row of the epoch once (the epoch it is given by ``set_epoch``, as the Hugging Face Trainer does), but cannot report
what it delivered: after such a pass ``state_dict()`` and ``load_state_dict()`` raise, saying what to use instead.
A state names its output (the manifest's fingerprint) and is refused by any other.

Labels are ``input_ids`` (or the shard's ``labels`` column) with -100 at the first token of every document and on
padding: with the usual shift inside the model, no token learns to predict across a document boundary.
"""

from __future__ import annotations

import hashlib
import operator
import weakref
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError, requires_extra
from packcli.format.manifest import read_manifest
from packcli.storage.mirror import readable_output

with requires_extra("torch", "packcli.torch"):
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from packcli.loader.checks import at_least, refuse_split_under_accelerate
from packcli.loader.collate import Row, check_cp_options, collate_padded, collate_varlen, flash_attention_kwargs
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

STATE_VERSION = 2  # 2: the state names its output
COLLATE_OPTIONS = {"varlen": ("pad_to_multiple_of", "cu_seqlens_length"), "padded": ()}  # what loader() passes on
UNTRACKED_WORKERS = (
    "this PackedDataset was iterated by a DataLoader whose workers do not report which rows they delivered, so "
    "no state can say where it is: for exact resume use packcli.torch.loader(path, batch_size, num_workers=N), "
    "torchdata's StatefulDataLoader, or num_workers=0"
)


class PackedDataset(IterableDataset[Row]):
    """An iterable over the rows of a packed output, split across DDP ranks and DataLoader workers.

    Args:
        path: the packed output directory.
        shuffle: shuffle rows each epoch (deterministically from ``seed`` and the epoch).
        seed: the shuffle seed; the same on every rank.
        rank, world_size: this process' place in data-parallel training, both or neither; default from
            ``torch.distributed`` when it is initialized, else 0 and 1. Under the Hugging Face Trainer or
            accelerate's ``prepare()``, which hand the rows out among processes themselves: 0 and 1 (a world size
            above 1 is refused there, when accelerate sets the epoch or iterates).
        batch_size: rows per batch of the DataLoader that iterates this dataset. Workers take turns by blocks of
            this many rows, so the DataLoader delivers rows in exactly this rank's order (needed for exact
            resume with workers; :func:`loader` sets it).
        drop_last: end each rank's epoch at its last full batch of ``batch_size`` rows; the rest of its rows are
            left out of that epoch and counted in ``dropped_rows``.
        cache_dir, cache_limit: for an output URL (``s3://...``), the local directory its shards are fetched into
            (each checked against the manifest's sha256) and the bytes that directory may hold.

    Raises:
        ValueError: a rank, world size, seed or batch size out of its range (the message gives the range), or
            options that leave a rank no row in an epoch.
        PackcliError: a damaged output, or a manifest that does not match its shards (naming the key or file).
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
        drop_last: bool = False,
    ) -> None:
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError(
                f"pass both rank= and world_size= (got rank={rank}, world_size={world_size}), or neither to take "
                "them from torch.distributed"
            )
        if rank is None or world_size is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = torch.distributed.get_rank() if distributed else 0
            world_size = torch.distributed.get_world_size() if distributed else 1
        world_size = at_least("world_size", world_size, 1, "the number of data-parallel ranks")
        rank = at_least("rank", rank, 0, "this process' data-parallel rank")
        if not rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}: pass a rank below world_size={world_size}")
        seed = at_least("seed", seed, 0, "any integer >= 0 gives its own order")  # plain ints: a state is JSON
        batch_size = at_least("batch_size", batch_size, 1, "the DataLoader's rows per batch")
        self.path, in_use = readable_output(path, cache_dir, cache_limit)
        if in_use is not None:  # the cached copy stays in the cache while this dataset may read it
            self._in_use = weakref.finalize(self, in_use.release)
        manifest = read_manifest(self.path)
        self.output = manifest["fingerprint"]  # names the output in a state
        self.max_len = int(manifest["max_len"])
        self.pad_id = manifest["tokenizer"].get("eos_id") or 0
        self.num_rows = int(manifest["totals"]["sequences"])
        self._rows: ShardRows | None = ShardRows(self.path, manifest)  # checks the listing now, in this process
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.batch_size, self.drop_last = bool(shuffle), seed, batch_size, bool(drop_last)
        self.rows_per_rank = self._rows_per_rank()
        self.dropped_rows = self.num_rows - self.rows_per_rank * world_size
        self.epoch = 0
        self.consumed = 0  # rows of this rank's epoch already delivered
        self._worker_taken = 0  # in a worker: rows of its own share already yielded
        self._worker_resumes = False  # in a worker: load_state_dict gave it the rows of its share already yielded
        self._tracked = False  # in a worker: its loader records what it delivers (loader() or StatefulDataLoader)
        # Set by a worker whose DataLoader does not record what it delivers (a plain DataLoader): shared memory, so
        # that this process learns it and refuses a state it cannot know.
        self._untracked = torch.zeros(1, dtype=torch.int8).share_memory_()  # type: ignore[no-untyped-call]
        # How many times set_epoch changed the epoch, and to what, in shared memory too: a persistent worker (the
        # same process every pass, its copy of this dataset made once) learns there the epoch to serve.
        self._epoch_set = torch.zeros(2, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._epoch_set_seen = 0
        self._digest: tuple[int | None, str] = (None, "")

    def _rows_per_rank(self) -> int:
        """Every rank's rows per epoch, the same on each.

        Raises:
            ValueError: these options leave a rank no row (it would run epochs of no step, silently).
        """
        rows = self.num_rows // self.world_size
        if rows == 0:
            raise ValueError(
                f"world_size={self.world_size} ranks leave each rank no row: the output has {self.num_rows} rows; "
                "use fewer ranks or pack more data"
            )
        if self.drop_last:
            rows -= rows % self.batch_size
            if rows == 0:
                raise ValueError(
                    f"drop_last leaves each rank no full batch: batch_size={self.batch_size} is more than the "
                    f"{self.num_rows // self.world_size} rows of a rank; use a smaller batch or drop_last=False"
                )
        return rows

    def __getstate__(self) -> dict[str, Any]:
        """A copy (a spawned DataLoader worker) maps the shards itself: views of this process' map are not sent."""
        return {**self.__dict__, "_rows": None, "_in_use": None}

    def __len__(self) -> int:
        return self.rows_per_rank

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of epoch ``epoch``; the current epoch keeps its position (see the module docstring)."""
        epoch = at_least("epoch", epoch, 0, "epochs count from 0")
        refuse_split_under_accelerate(self.rank, self.world_size)  # the Trainer sets every epoch, 0 too
        if epoch != self.epoch:
            self.epoch, self.consumed, self._worker_taken = epoch, 0, 0
            self._epoch_set_seen = int(self._epoch_set[0]) + 1
            self._epoch_set[0], self._epoch_set[1] = self._epoch_set_seen, epoch

    def advance(self, rows: int) -> None:
        """Count ``rows`` more rows delivered; the epoch's last row moves the position to the next epoch."""
        self.consumed += rows
        if self.rows_per_rank and self.consumed >= self.rows_per_rank:
            self.epoch, self.consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: the output (its fingerprint) and the next row to deliver. In a DataLoader worker
        (torchdata's StatefulDataLoader saves each worker's state) it also names the worker and how much of its
        share it has yielded.

        Raises:
            PackcliError: a plain DataLoader's workers iterated this dataset (it cannot know what they delivered).
        """
        info = get_worker_info()
        self._refuse_untracked(info)
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "output": self.output,
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "world_size": self.world_size,
            "num_rows": self.num_rows,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "order": self._order_digest(self.epoch),
        }
        if info is not None:
            self._tracked = True
            state["worker"] = {"id": info.id, "num_workers": info.num_workers, "taken": self._worker_taken}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state of another output, seed, world size, ``drop_last`` or
        worker, and of another batch size where its count of rows depends on it (a worker's, or with drop_last).
        A refused state changes nothing."""
        info = get_worker_info()
        self._refuse_untracked(info)
        worker = self._check_state(state, info)
        self.epoch, self.consumed = operator.index(state["epoch"]), 0
        self._worker_taken = operator.index(worker["taken"]) if worker else 0
        self._worker_resumes = worker is not None
        self._tracked = self._tracked or worker is not None
        self.advance(operator.index(state["consumed"]))

    def _check_state(self, state: dict[str, Any], info: Any) -> dict[str, Any] | None:
        """The state's worker block, once every key of the state is found to fit this dataset.

        Raises:
            PackcliError: the first key that does not, in one line starting ``cannot resume:``.
        """
        if state.get("output") != self.output:
            raise PackcliError(
                f"cannot resume: the state is of output {state.get('output')!r}, this dataset reads output "
                f"{self.output!r} (a state resumes only the output it was taken on)",
                self.path,
            )
        # A count of rows means the same rows at another batch size, except for a worker's count (its blocks are
        # of batch_size rows) and under drop_last (the epoch's length depends on it). A state before these keys
        # counted rows in the main process without drop_last.
        keys = ["seed", "shuffle", "world_size", "num_rows", "drop_last"]
        if state.get("worker") or self.drop_last:
            keys.append("batch_size")
        known = {"drop_last": False, **state}
        for key in keys:
            if known.get(key) != getattr(self, key):
                raise PackcliError(
                    f"cannot resume: the state has {key}={known.get(key)!r}, this dataset {getattr(self, key)!r}"
                )
        epoch, consumed = _integer(state.get("epoch")), _integer(state.get("consumed"))
        if epoch is None or epoch < 0:
            raise PackcliError(f"cannot resume: the state's epoch={state.get('epoch')!r} is not an integer >= 0")
        if consumed is None or not 0 <= consumed < self.rows_per_rank:
            raise PackcliError(
                f"cannot resume: the state's consumed={state.get('consumed')!r} is not in 0..{self.rows_per_rank - 1}, "
                "the rows of an epoch of this rank"
            )
        if "order" in state and state["order"] != self._order_digest(epoch):  # states before it had none
            raise PackcliError(
                f"cannot resume: the rows of epoch {epoch} come in another order here than where the state was "
                f"taken (numpy {np.__version__} shuffles otherwise): resuming would serve rows twice and miss others"
            )
        worker = state.get("worker")
        here = None if info is None else {"id": info.id, "num_workers": info.num_workers}
        if (worker and {"id": worker["id"], "num_workers": worker["num_workers"]}) != here:
            raise PackcliError(f"cannot resume: the state is of DataLoader worker {worker}, this is worker {here}")
        if worker:
            taken = _integer(worker.get("taken"))
            if taken is None or taken < 0:
                raise PackcliError(f"cannot resume: the worker's taken={worker.get('taken')!r} is not an int >= 0")
        return worker

    def _refuse_untracked(self, info: Any) -> None:
        if info is None and self._untracked[0]:
            raise PackcliError(UNTRACKED_WORKERS)

    def rank_rows(self) -> np.ndarray:
        """This rank's global row indices for the current epoch, in delivery order."""
        return self._order(self.epoch)[self.rank * self.rows_per_rank : (self.rank + 1) * self.rows_per_rank]

    def _order(self, epoch: int) -> np.ndarray:
        """Every row of the output in epoch ``epoch``'s order, the same on every rank."""
        if not self.shuffle:
            return np.arange(self.num_rows)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)

    def _order_digest(self, epoch: int) -> str:
        """A short sha256 of epoch ``epoch``'s order (computed once per epoch): a state carries it, so a resume
        where numpy shuffles otherwise (another version) is refused rather than serve rows twice."""
        if self._digest[0] != epoch:
            self._digest = (epoch, hashlib.sha256(self._order(epoch).astype("<i8").tobytes()).hexdigest()[:16])
        return self._digest[1]

    def row(self, index: int) -> Row:
        """One row by global index: numpy views into the memory-mapped shard."""
        if self._rows is None:  # a spawned worker maps the shards itself: those of the output this dataset read
            manifest = read_manifest(self.path)
            if (manifest["fingerprint"], manifest["totals"]["sequences"]) != (self.output, self.num_rows):
                raise PackcliError(
                    f"the output changed since this dataset was built (output {self.output!r}, "
                    f"now {manifest['fingerprint']!r}): a worker would read other rows; build the dataset again",
                    self.path,
                )
            self._rows = ShardRows(self.path, manifest)
        out: Row = {"row_index": index}
        out.update(self._rows.row(index))
        return out

    def __iter__(self) -> Iterator[Row]:
        info = get_worker_info()
        if info is None:
            refuse_split_under_accelerate(self.rank, self.world_size)
            for index in self.rank_rows()[self.consumed :].tolist():
                self.advance(1)
                yield self.row(index)
            return
        if not self._tracked:  # a plain DataLoader: every row once all the same, but no state can be exact
            self._untracked[0] = 1
        self._start_worker_pass()
        # Blocks of batch_size rows, dealt in turn from the resume point on: worker k's first block is the
        # (k+1)-th, which is the order in which the DataLoader asks its workers.
        rows = self.rank_rows()[self.consumed :]
        block = np.arange(len(rows)) // self.batch_size
        for index in rows[block % info.num_workers == info.id][self._worker_taken :].tolist():
            self._worker_taken += 1
            yield self.row(index)

    def _start_worker_pass(self) -> None:
        """In a worker, at the start of a pass: its share from the start, unless a state was just loaded; a
        persistent worker also takes the epoch the main process set since its copy was made."""
        changes, epoch = (int(value) for value in self._epoch_set.tolist())
        if changes != self._epoch_set_seen:
            self._epoch_set_seen, self.epoch, self.consumed, self._worker_resumes = changes, epoch, 0, False
        if not self._worker_resumes:
            self._worker_taken = 0
        self._worker_resumes = False


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an integer (a numpy one too), else None."""
    try:
        return None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


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
    cache_limit: int | None = None,
    cp_size: int = 1,
    cp_rank: int = 0,
    drop_last: bool = False,
    **collate_options: Any,
) -> PackedLoader:
    """Batches of ``batch_size`` rows from a packed output on ``device``: pinned host memory and non-blocking
    copies when the device is a GPU.

    Args:
        layout: "varlen" (:func:`collate_varlen`) or "padded" (:func:`collate_padded`, to max_len).
        cache_dir, cache_limit: for an output URL, where its shards are fetched and the bytes that directory may
            hold (see :class:`PackedDataset`).
        rank, world_size: the data-parallel rank and size (with context parallelism, not the global rank: every
            rank of a context-parallel group reads the same rows).
        cp_size, cp_rank: context parallelism (varlen only): each batch is this rank's share of the sequence.
        drop_last: every batch full: each rank's epoch ends at its last full batch (see :class:`PackedDataset`).
        collate_options: passed to the varlen collate function (``pad_to_multiple_of``, ``cu_seqlens_length``).

    Raises:
        ValueError: an argument out of its range, or context parallelism without an explicit data-parallel rank.
        TypeError: an option the layout's collate function does not take.
    """
    if layout not in COLLATE_OPTIONS:
        raise PackcliError(f"unknown layout {layout!r}; use 'varlen' or 'padded'")
    for option in collate_options:
        if option not in COLLATE_OPTIONS[layout]:
            raise TypeError(
                f"loader() got an unknown option {option!r} for layout={layout!r}; its options are: "
                + (", ".join(COLLATE_OPTIONS[layout]) or "none")
            )
    if check_cp_options(cp_size, cp_rank, collate_options.get("pad_to_multiple_of")) and (
        rank is None or world_size is None
    ):
        raise ValueError(
            "with cp_size > 1 pass rank= and world_size= as the data-parallel rank and size: the ranks of one "
            "context-parallel group must read the same rows, which torch.distributed's global rank would not give"
        )
    if cp_size != 1 and layout != "varlen":
        raise ValueError(f"context parallelism (cp_size={cp_size}) needs layout='varlen', not {layout!r}")
    target = torch.device(device)  # every argument is checked before the output is opened (or fetched)
    dataset = PackedDataset(
        path,
        shuffle=shuffle,
        seed=seed,
        rank=rank,
        world_size=world_size,
        batch_size=batch_size,
        cache_dir=cache_dir,
        cache_limit=cache_limit,
        drop_last=drop_last,
    )
    if layout == "varlen":
        collate = partial(collate_varlen, pad_id=dataset.pad_id, cp_size=cp_size, cp_rank=cp_rank, **collate_options)
    else:
        collate = partial(collate_padded, max_len=dataset.max_len, pad_id=dataset.pad_id, **collate_options)
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
