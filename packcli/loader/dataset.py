"""The dataset of the loader: the rows of a packed output, split across ranks and workers, epoch by epoch, resumable.
Needs torch.

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

Balanced steps (``grad_accum=A, balance=RowCost``): each global batch of ``world_size * batch_size * A`` rows is the
one of the plain order, its rows placed on (micro-step, rank) by cost (:mod:`packcli.loader.order`); rows then
carry ``num_items_in_batch``, the supervised tokens of their whole global batch (with ``grad_accum`` alone too).
Under accelerate (``rank=0, world_size=1``), ``balance_ranks=W`` balances for the W processes it hands batches to.

Sources (``sources=True``): each row also carries ``sources``, where each of its documents came from (input name,
record, piece k of n), read from each shard's source index the first time one of its rows is asked for, in each
worker process; off by default, as it costs a Python dict per document.

Labels are ``input_ids`` (or the shard's ``labels`` column) with -100 at the first token of every document and on
padding: with the usual shift inside the model, no token learns to predict across a document boundary.
"""

from __future__ import annotations

import dataclasses
import operator
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError, requires_extra
from packcli.format.manifest import read_manifest
from packcli.loader.local_copy import readable_output

with requires_extra("torch", "packcli.torch"):
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

from packcli.loader.balance import RowCost
from packcli.loader.checks import at_least, refuse_split_under_accelerate
from packcli.loader.collate import Row
from packcli.loader.order import RankOrder, order_digest, rank_order, seeded_order
from packcli.loader.row_figures import row_costs, supervised_tokens
from packcli.loader.shard_rows import ShardRows, check_sources
from packcli.loader.state import check_state, dataset_state

__all__ = ["PackedDataset"]

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
            above 1 is refused there, when accelerate first sets the epoch or iterates).
        batch_size: rows per batch of the DataLoader that iterates this dataset. Workers take turns by blocks of
            this many rows, so the DataLoader delivers rows in exactly this rank's order (needed for exact
            resume with workers; :func:`loader` sets it).
        drop_last: end each rank's epoch at its last full batch of ``batch_size`` rows; the rest of its rows are
            left out of that epoch and counted in ``dropped_rows``.
        cache_dir, cache_limit: for an output URL (``s3://...``), the local directory its shards are fetched into
            (each checked against the manifest's sha256) and the bytes that directory may hold.
        grad_accum: micro-batches per optimizer step; given, every row carries ``num_items_in_batch``.
        balance: a :class:`RowCost`: place each global batch's rows on (micro-step, rank) so that the slowest rank
            of each micro-step costs as little as it can (the rows past the last whole global batch come plain).
        balance_ranks: under the Hugging Face Trainer or accelerate (``rank=0, world_size=1``), the processes that
            accelerate hands this dataset's batches out among in turn: each global batch is then that many
            processes' (``balance_ranks * batch_size * grad_accum`` rows), balanced for them.
        sources: each row also carries ``sources``, its documents' sources in row order, each
            ``{"input", "record", "piece", "pieces"}`` (as ``packcli show --json`` gives them); off by default.

    Raises:
        ValueError: a rank, world size, seed, batch size, grad_accum or balance_ranks out of its range (the message
            gives the range), a balance that is not a RowCost, balance_ranks with world_size > 1, or options that
            leave a rank no row in an epoch.
        PackcliError: a damaged output, or a manifest that does not match its shards (naming the key or file);
            ``sources=True`` on an output packed before packcli kept a source index (saying to repack it).
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
        grad_accum: int | None = None,
        balance: RowCost | None = None,
        balance_ranks: int | None = None,
        sources: bool = False,
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
        accumulate = 1 if grad_accum is None else at_least("grad_accum", grad_accum, 1, "micro-batches per step")
        if balance is not None and not isinstance(balance, RowCost):
            raise ValueError(f"balance must be a packcli.torch.RowCost (RowCost.from_config(path)), not {balance!r}")
        ranks_after = "the processes accelerate hands batches to"
        handed_out = 1 if balance_ranks is None else at_least("balance_ranks", balance_ranks, 1, ranks_after)
        if handed_out > 1 and world_size > 1:
            raise ValueError(
                f"balance_ranks={handed_out} is for a dataset that accelerate hands out (rank=0, world_size=1), not "
                f"one split by rank (world_size={world_size}): pass one or the other"
            )
        self.path, in_use = readable_output(path, cache_dir, cache_limit, sidecars=bool(sources))
        if in_use is not None:  # the cached copy stays in the cache while this dataset may read it
            self._in_use = weakref.finalize(self, in_use.release)
        manifest = read_manifest(self.path)
        self.output = manifest["fingerprint"]  # names the output in a state
        self.max_len = int(manifest["max_len"])
        self.pad_id = manifest["tokenizer"].get("eos_id") or 0
        self.num_rows = int(manifest["totals"]["sequences"])
        self._rows: ShardRows | None = ShardRows(self.path, manifest)  # checks the listing now, in this process
        self.sources = bool(sources)
        if self.sources:
            check_sources(self.path, manifest)
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.batch_size, self.drop_last = bool(shuffle), seed, batch_size, bool(drop_last)
        self.rows_per_rank = self._rows_per_rank()
        self.dropped_rows = self.num_rows - self.rows_per_rank * world_size
        self.grad_accum, self.balance, self.balance_ranks = accumulate, balance, handed_out
        self.balance_state = None if balance is None else dataclasses.asdict(balance)
        wanted = grad_accum is not None or balance is not None  # num_items_in_batch: only where asked for
        self._figures = (  # every row's cost and supervised tokens, computed once
            None if balance is None else row_costs(self._rows, balance),
            supervised_tokens(self._rows) if wanted else None,
        )
        self.epoch = 0
        self.consumed = 0  # rows of this rank's epoch already delivered
        self._caller_checked = world_size == 1  # a split dataset asks once who drives it (_check_caller)
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
        self._rank_order: tuple[int | None, RankOrder | None] = (None, None)

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
        return {**self.__dict__, "_rows": None, "_in_use": None, "_rank_order": (None, None)}

    def __len__(self) -> int:
        return self.rows_per_rank

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of epoch ``epoch``; the current epoch keeps its position (see the module docstring)."""
        epoch = at_least("epoch", epoch, 0, "epochs count from 0")
        self._check_caller()  # the Trainer sets every epoch, 0 too
        if epoch != self.epoch:
            self.epoch, self.consumed, self._worker_taken = epoch, 0, 0
            self._epoch_set_seen = int(self._epoch_set[0]) + 1
            self._epoch_set[0], self._epoch_set[1] = self._epoch_set_seen, epoch

    def _check_caller(self) -> None:
        """At the first ``set_epoch`` or iteration, refuse a dataset split by rank that accelerate drives; the
        answer is kept, since the caller that starts the epochs is the one that drives them."""
        if not self._caller_checked:
            refuse_split_under_accelerate(self.rank, self.world_size)
            self._caller_checked = True

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
        state = dataset_state(self)
        if info is not None:
            self._tracked = True
            state["worker"] = {"id": info.id, "num_workers": info.num_workers, "taken": self._worker_taken}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; refuses a state of another output, seed, world size, ``drop_last``,
        balance or worker, and of another batch size or grad_accum where its count of rows depends on it (a
        worker's, with drop_last, with balance). A refused state changes nothing."""
        info = get_worker_info()
        self._refuse_untracked(info)
        worker = check_state(self, state, info)
        self.epoch, self.consumed = operator.index(state["epoch"]), 0
        self._worker_taken = operator.index(worker["taken"]) if worker else 0
        self._worker_resumes = worker is not None
        self._tracked = self._tracked or worker is not None
        self.advance(operator.index(state["consumed"]))

    def _refuse_untracked(self, info: Any) -> None:
        if info is None and self._untracked[0]:
            raise PackcliError(UNTRACKED_WORKERS)

    def rank_rows(self) -> np.ndarray:
        """This rank's global row indices for the current epoch, in delivery order."""
        return self._epoch_rows(self.epoch).rows

    def _epoch_rows(self, epoch: int) -> RankOrder:
        """This rank's rows of epoch ``epoch`` (computed once per epoch)."""
        known, mine = self._rank_order
        if known != epoch or mine is None:
            order = seeded_order(self.num_rows, self.shuffle, self.seed, epoch)
            per_step = (self.batch_size, self.grad_accum)
            mine = rank_order(
                order, self.rank, self.world_size, self.rows_per_rank, per_step, *self._figures, self.balance_ranks
            )
            self._rank_order = (epoch, mine)
        return mine

    def order_digest(self, epoch: int) -> str:
        """The digest of epoch ``epoch``'s seeded order that a state carries (computed once per epoch)."""
        if self._digest[0] != epoch:
            self._digest = (epoch, order_digest(seeded_order(self.num_rows, self.shuffle, self.seed, epoch)))
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
        if self.sources:
            out["sources"] = self._rows.row_sources(index)
        return out

    def __iter__(self) -> Iterator[Row]:
        info = get_worker_info()
        if info is None:
            self._check_caller()
            for position in range(self.consumed, self.rows_per_rank):
                row = self._delivered(position)
                self.advance(1)
                yield row
            return
        if not self._tracked:  # a plain DataLoader: every row once all the same, but no state can be exact
            self._untracked[0] = 1
        self._start_worker_pass()
        # Blocks of batch_size rows, dealt in turn from the resume point on: worker k's first block is the
        # (k+1)-th, which is the order in which the DataLoader asks its workers.
        positions = np.arange(self.consumed, self.rows_per_rank)
        block = (positions - self.consumed) // self.batch_size
        for position in positions[block % info.num_workers == info.id][self._worker_taken :].tolist():
            self._worker_taken += 1
            yield self._delivered(position)

    def _delivered(self, position: int) -> Row:
        """The row at ``position`` of this rank's epoch, with ``num_items_in_batch`` where it is wanted."""
        order = self._epoch_rows(self.epoch)
        row = self.row(int(order.rows[position]))
        if order.items is not None:
            row["num_items_in_batch"] = int(order.items[position])
        return row

    def _start_worker_pass(self) -> None:
        """In a worker, at the start of a pass: its share from the start, unless a state was just loaded; a
        persistent worker also takes the epoch the main process set since its copy was made."""
        changes, epoch = (int(value) for value in self._epoch_set.tolist())
        if changes != self._epoch_set_seen:
            self._epoch_set_seen, self.epoch, self.consumed, self._worker_resumes = changes, epoch, 0, False
        if not self._worker_resumes:
            self._worker_taken = 0
        self._worker_resumes = False
