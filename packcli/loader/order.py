"""The order in which a rank delivers an epoch's rows: a pure function of (seed, epoch) and the dataset's options, the
same on every rank, so the ranks agree on it without communication.

Plain: the epoch's seeded order cut into one contiguous slice per rank. Balanced
(:mod:`packcli.loader.balance`): the same global batches (each optimizer step's ``world_size * batch_size *
grad_accum`` rows), each one's rows placed on (micro-step, rank) by cost, then this rank's plain tail (the rows past
its last whole global batch, unbalanced). Example, 2 ranks, 1 row a micro-batch, 2 micro-steps, 7 rows of cost
[1 9 2 | 8 5 6 | 3] in the seeded order: rank 0 holds rows 0-2, rank 1 rows 3-5 (row 6 is dropped); the global
batch is rows (0 3 | 1 4) by (micro-step | rank), costs (1 8 | 9 5), a step of 8 + 9 = 17; balanced it is
(1 3 | 4 0), costs (9 8 | 5 1), a step of 9 + 5 = 14: rank 0 delivers rows 1, 4 and its tail 2; rank 1 rows 3, 0
and its tail 5.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from packcli.loader.balance import balance_batches, global_batches, rank_rows, slot_costs

__all__ = ["RankOrder", "order_digest", "rank_order", "seeded_order"]


def seeded_order(num_rows: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """Every row of the output in epoch ``epoch``'s order, the same on every rank."""
    if not shuffle:
        return np.arange(num_rows)
    return np.random.default_rng([seed, epoch]).permutation(num_rows)


@dataclass(frozen=True)
class RankOrder:
    """One rank's epoch: ``rows`` in delivery order, and where known ``items``: for each, the supervised tokens of
    its whole global batch across ranks and micro-steps (of the tail's rows across ranks for the tail)."""

    rows: np.ndarray
    items: np.ndarray | None


def rank_order(
    order: np.ndarray,
    rank: int,
    world_size: int,
    rows_per_rank: int,
    per_step: tuple[int, int],
    costs: np.ndarray | None = None,
    supervised: np.ndarray | None = None,
    handed_out: int = 1,
) -> RankOrder:
    """Rank ``rank``'s rows of an epoch whose seeded order is ``order``.

    Args:
        rows_per_rank: every rank's rows of the epoch; rank r holds ``order[r * rows_per_rank:]`` of them.
        per_step: ``(batch_size, grad_accum)``: one micro-batch's rows and the micro-batches of an optimizer step.
        costs: every row's cost, by row index: balance each global batch by it (None: the plain order).
        supervised: every row's supervised tokens, by row index: fill ``items`` from it (None: no ``items``).
        handed_out: the processes that each micro-batch of ``world_size=1`` is handed out among after this, one
            ``batch_size`` of rows each in turn (accelerate under the Trainer): this rank delivers whole micro-steps
            of that many ranks, each global batch ``handed_out * batch_size * grad_accum`` rows balanced for them.
    """
    batch_size, grad_accum = per_step
    rank_major = order[: world_size * rows_per_rank]
    mine = rank_major[rank * rows_per_rank : (rank + 1) * rows_per_rank]
    if costs is None and supervised is None:  # the plain order needs no global batch
        return RankOrder(mine, None)
    micro_step = batch_size * handed_out  # this rank's rows of one micro-step
    slots = global_batches(rank_major, world_size, micro_step, grad_accum)
    if costs is not None:
        placement = balance_batches(slot_costs(costs, slots), world_size * handed_out, batch_size)
        slots = np.take_along_axis(slots, placement, 1)
    whole = rank_rows(slots, rank, world_size, micro_step)
    rows = np.concatenate([whole, mine[len(whole) :]])
    if supervised is None:
        return RankOrder(rows, None)
    tails = rank_major.reshape(world_size, rows_per_rank)[:, len(whole) :]
    items = np.empty(rows_per_rank, dtype=np.int64)
    items[: len(whole)] = np.repeat(supervised[slots].sum(axis=1), micro_step * grad_accum)
    items[len(whole) :] = supervised[tails].sum()
    return RankOrder(rows, items)


def order_digest(order: np.ndarray) -> str:
    """A short sha256 of an epoch's seeded order: a state carries it, so a resume where numpy shuffles otherwise
    (another version) is refused rather than serve rows twice."""
    return hashlib.sha256(np.asarray(order).astype("<i8").tobytes()).hexdigest()[:16]
