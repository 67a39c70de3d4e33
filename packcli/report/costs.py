"""What a model computes for each layout of the documents, in FLOPs with attention counted, and how long its
data-parallel steps wait on their slowest rank: the ``model_cost`` figures of ``stats --model-config``. Pure numpy;
the cost model and the balanced placement are the loader's (:mod:`packcli.loader.balance`), the padded batches the
baselines' (:mod:`packcli.report.padding`).

Packed rows are varlen (FlashAttention, flattened rows): ``per_token`` per real token, ``per_square`` per document's
squared length. Padded slots count in full: a padded row of ``L`` slots costs ``per_token * L`` in the linear layers
and ``per_square * L**2`` in attention, as SDPA without varlen computes it (padding is masked, not skipped).

Example, documents of 6, 1, 5 and 2 tokens packed as [6 1] [5 2] at max_len 8, batches of 2, per_token 1,
per_square 1: packing 14 + (36 + 1 + 25 + 4) = 80 FLOPs; every document alone in a row of 8: 4 x (8 + 64) = 288;
random batches (seed 1: 6, 1, 5, 2) [6 1] -> 2 x (6 + 36), [5 2] -> 2 x (5 + 25): 144; sorted, [6 5] -> 2 x (6 + 36),
[2 1] -> 2 x (2 + 4): 96.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packcli.loader.balance import RowCost, balance_batches, global_batches, slot_costs, step_imbalance
from packcli.report.padding import baseline_batches
from packcli.report.stats import DEFAULT_BATCH_SIZE, HISTOGRAM_BINS, histogram

__all__ = ["DEFAULT_GRAD_ACCUM", "DEFAULT_WORLD_SIZE", "ModelCost", "row_cost_distribution", "step_imbalances"]

DEFAULT_WORLD_SIZE = 8
DEFAULT_GRAD_ACCUM = 1
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class ModelCost:
    """A model's cost per row and the shape of its data-parallel step.

    Args:
        cost: FLOPs per token and per squared document length.
        world_size: data-parallel ranks.
        batch_size: rows per rank and micro-step (documents per batch of the padding baselines).
        grad_accum: micro-steps per optimizer step.
        seed: the loader's seed (its order of epoch 0) and the random baseline's.
    """

    cost: RowCost
    world_size: int = DEFAULT_WORLD_SIZE
    batch_size: int = DEFAULT_BATCH_SIZE
    grad_accum: int = DEFAULT_GRAD_ACCUM
    seed: int = 0

    def figures(self, lengths: np.ndarray, documents_per_row: np.ndarray, max_len: int) -> dict[str, Any]:
        """The ``model_cost`` object of one packing: ``lengths`` of its documents in row order,
        ``documents_per_row`` of each row."""
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(documents_per_row, dtype=np.int64)])
        costs = self.cost.row_costs(lengths, offsets)
        layouts = {"packing": _layout(float(costs.sum()), self.cost.per_square * float(np.sum(np.square(lengths))))}
        for name, (longest, rows) in baseline_batches(lengths, max_len, self.batch_size, self.seed).items():
            longest, rows = longest.astype(np.float64), rows.astype(np.float64)
            attention = self.cost.per_square * float(np.sum(rows * longest * longest))
            layouts[name] = _layout(self.cost.per_token * float(np.sum(rows * longest)) + attention, attention)
        packed = layouts["packing"]["flops"]
        return {
            "per_token": self.cost.per_token,
            "per_square": self.cost.per_square,
            **layouts,
            "compute_saved": {
                f"vs_{name}": figures["flops"] / packed if packed else 1.0
                for name, figures in layouts.items()
                if name != "packing"
            },
            "row_cost": row_cost_distribution(costs),
            **step_imbalances(costs, self.world_size, self.batch_size, self.grad_accum, self.seed),
        }


def _layout(flops: float, attention: float) -> dict[str, float]:
    return {"flops": flops, "attention_share": attention / flops if flops else 0.0}


def row_cost_distribution(costs: np.ndarray) -> dict[str, Any]:
    """``p50``, ``p90``, ``p99`` (numpy's ``inverted_cdf``: a real row's cost), ``min``, ``max``, ``mean`` and a
    ``histogram`` (16 bins over ``min..max``; over ``0..max`` where every row costs the same) of the rows' costs in
    FLOPs."""
    costs = np.asarray(costs, dtype=np.float64)
    if len(costs) == 0:
        empty: dict[str, list[float]] = {"edges": [], "counts": []}
        return {**{f"p{q}": 0.0 for q in PERCENTILES}, "min": 0.0, "max": 0.0, "mean": 0.0, "histogram": empty}
    low, high = float(costs.min()), float(costs.max())
    return {
        **{f"p{q}": float(np.percentile(costs, q, method="inverted_cdf")) for q in PERCENTILES},
        "min": low,
        "max": high,
        "mean": float(costs.mean()),
        "histogram": histogram(costs, np.linspace(low if high > low else 0.0, high, HISTOGRAM_BINS + 1)),
    }


def _plain_slots(rows: int, world_size: int, batch_size: int, grad_accum: int, seed: int) -> np.ndarray:
    """The loader's plain order of epoch 0 as global batches, by slot: rows in ``default_rng([seed, 0])``'s
    permutation, rank ``r`` taking the ``r``-th of ``world_size`` equal slices (rows beyond them, and beyond the
    last whole global batch, are left out)."""
    order = np.random.default_rng([seed, 0]).permutation(rows)
    return global_batches(order[: rows // world_size * world_size], world_size, batch_size, grad_accum)


def step_imbalances(
    costs: np.ndarray, world_size: int, batch_size: int, grad_accum: int, seed: int = 0
) -> dict[str, Any]:
    """How far the slowest rank of each micro-step is above the mean, summed over the epoch's steps, in the plain
    order and in the balanced one (``None`` where the rows are fewer than one global batch), and the step-time ratio
    the cost model predicts from them (``balanced_speedup``)."""
    slots = _plain_slots(len(costs), world_size, batch_size, grad_accum, seed)
    figures: dict[str, Any] = {
        "world_size": world_size,
        "batch_size": batch_size,
        "grad_accum": grad_accum,
        "global_batches": len(slots),
        "rows_left_out": len(costs) - slots.size,
        "plain_imbalance": None,
        "balanced_imbalance": None,
        "balanced_speedup": None,
    }
    if len(slots) == 0:
        return figures
    plain = slot_costs(costs, slots)
    balanced = slot_costs(costs, np.take_along_axis(slots, balance_batches(plain, world_size, batch_size), 1))
    figures["plain_imbalance"] = step_imbalance(plain, world_size, batch_size)
    figures["balanced_imbalance"] = step_imbalance(balanced, world_size, batch_size)
    figures["balanced_speedup"] = (1 + figures["plain_imbalance"]) / (1 + figures["balanced_imbalance"])
    return figures
