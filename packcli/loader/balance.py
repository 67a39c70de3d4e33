"""Balanced steps: what a packed row costs a model in FLOPs, and where each global batch's rows go on (micro-step,
rank) so that the ranks of a micro-step wait on each other as little as possible. Pure numpy, no torch.

Rows are about equally full of tokens, so they cost the same in the linear layers, but not in attention: a row of
one 4,096-token document costs 4,096² there, a row of 64 short documents 1/64 of that. In data-parallel training
every micro-step waits for its slowest rank, so a step costs the sum over its micro-steps of the slowest rank's
cost. A global batch is the ``world_size * batch_size * grad_accum`` rows of one optimizer step; balancing moves
rows only inside it, so every step's update sees the rows it sees without balance.

Slots: a global batch's rows are laid out micro-step major, then rank, then row of the micro-batch, slot
``(a * world_size + r) * batch_size + b``. Example, world_size=2, batch_size=1, grad_accum=2, costs [1 9 2 8] in
the plain order: micro-steps (1 | 9) and (2 | 8) cost 9 + 8 = 17; sorted and dealt, (9 | 8) and (2 | 1) cost 9 + 2 =
11, against a mean of (1 + 9 + 2 + 8) / 2 = 10.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "RowCost",
    "balance_batches",
    "global_batches",
    "rank_rows",
    "row_document_lengths",
    "slot_costs",
    "step_imbalance",
]

TRAINING_PASSES = 3  # forward plus backward: the backward pass costs about twice the forward, linear and attention
_REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size")


@dataclass(frozen=True)
class RowCost:
    """The training FLOPs of a row from its documents' lengths: ``per_token`` for every token (the linear layers)
    plus ``per_square`` for every document's squared length (causal attention within the document).

    :meth:`from_config` counts, per token and layer, the q, k, v and o projections and a gated (SwiGLU) MLP, plus the
    output head once per token; per document and layer, causal attention's two matrix products (QK^T and the
    weighted sum of V, each over half of the l x l scores): ``2 * l**2 * heads * head_dim``. Both times 3 for the
    forward and backward passes. Left out: embeddings (a lookup), norms, rotary embeddings, softmax, activations,
    the loss, mixture-of-experts routing, FlashAttention's recomputation in the backward pass, communication, and
    the kernels' own efficiency (a FLOP of attention and one of a projection are taken to cost the same time).

    Args:
        per_token: FLOPs per token.
        per_square: FLOPs per squared document length.
    """

    per_token: float
    per_square: float

    def __post_init__(self) -> None:
        for name in ("per_token", "per_square"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            try:
                finite = number and bool(np.isfinite(float(value)))
            except OverflowError:  # an int past float64's range
                finite = False
            if not finite or value < 0:
                raise ValueError(f"RowCost {name}={value!r}: pass a finite number >= 0 (FLOPs) within float64's range")

    @classmethod
    def from_config(cls, config: str | Path | Mapping[str, Any]) -> RowCost:
        """The cost of a decoder-only transformer from its transformers ``config.json`` (a path, a directory
        holding one, or the dict): hidden, intermediate and vocabulary sizes, attention heads, key-value heads
        (default: the attention heads), head dim (default: hidden size / heads) and layers.

        Raises:
            ValueError: the file cannot be read as JSON, or a field is missing or not a positive integer (named).
        """
        source = "the config"
        if not isinstance(config, Mapping):
            path = Path(config)
            path = path / "config.json" if path.is_dir() else path
            source = str(path)
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise ValueError(f"{path}: cannot read a model config.json ({error})") from None
            if not isinstance(config, Mapping):
                raise ValueError(f"{path}: a model config.json holds a JSON object, not {type(config).__name__}")
        fields = {name: _positive(config, name, source) for name in _REQUIRED}
        heads = fields["num_attention_heads"]
        kv_heads = _positive(config, "num_key_value_heads", source, default=heads)
        head_dim = _positive(config, "head_dim", source, default=fields["hidden_size"] // heads)
        hidden, layers = fields["hidden_size"], fields["num_hidden_layers"]
        projections = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * fields["intermediate_size"]
        per_token = 2 * (layers * projections + hidden * fields["vocab_size"])
        per_square = 2 * layers * heads * head_dim
        try:
            return cls(per_token=float(TRAINING_PASSES * per_token), per_square=float(TRAINING_PASSES * per_square))
        except (OverflowError, ValueError):
            raise ValueError(f"{source}: the model's FLOPs per token exceed float64's range; check its sizes") from None

    def row_costs(self, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Every row's cost (float64): row ``k`` holds documents ``lengths[offsets[k]:offsets[k + 1]]``."""
        lengths = np.asarray(lengths, dtype=np.float64)
        tokens = np.concatenate([[0.0], np.cumsum(lengths)])
        squares = np.concatenate([[0.0], np.cumsum(lengths * lengths)])
        offsets = np.asarray(offsets, dtype=np.int64)
        starts, ends = offsets[:-1], offsets[1:]
        with np.errstate(over="ignore"):  # an overflow is refused below, in one line
            costs: np.ndarray = self.per_token * (tokens[ends] - tokens[starts])
            costs += self.per_square * (squares[ends] - squares[starts])
        if not np.isfinite(costs).all():
            raise ValueError(
                f"row costs exceed float64's range with per_token={self.per_token!r}, per_square={self.per_square!r}: "
                "scale the coefficients down (only their ratio places rows)"
            )
        return costs


def _positive(config: Mapping[str, Any], name: str, source: str, default: int | None = None) -> int:
    """``config[name]`` as a positive int; ``default`` where the field is absent or null, if there is one."""
    value = config.get(name)
    if value is None and default is not None:
        return default
    if value is None:
        raise ValueError(f"{source} has no {name!r}: RowCost.from_config needs {', '.join(_REQUIRED)}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{source}: {name}={value!r} is not a positive integer")
    return value


def row_document_lengths(cu_values: np.ndarray, cu_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Document lengths and their per-row offsets from a ``cu_seqlens`` list column's flat values and offsets.

    Example: rows [0 3 5] and [0 2] (values [0 3 5 0 2], offsets [0 3 5]) give lengths [3 2 2], offsets [0 2 3].
    """
    cu_values = np.asarray(cu_values, dtype=np.int64)
    cu_offsets = np.asarray(cu_offsets, dtype=np.int64)
    steps = np.diff(cu_values)
    keep = np.ones(len(steps), dtype=bool)
    keep[cu_offsets[1:-1] - 1] = False  # the step from one row's last boundary to the next row's 0
    counts = np.diff(cu_offsets) - 1
    return steps[keep], np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def global_batches(rank_major: np.ndarray, world_size: int, batch_size: int, grad_accum: int) -> np.ndarray:
    """The epoch's whole global batches, in slots: ``rank_major`` is every rank's rows of the epoch back to back
    (rank 0's, then rank 1's, ...: the plain order), and rank ``r``'s rows of micro-step ``a`` of step ``g`` are
    its rows ``(g * grad_accum + a) * batch_size`` onward. Rows past the last whole global batch are left out, and
    so are the last ``len(rank_major) % world_size`` rows (no rank holds them).

    Returns:
        int64 [steps, world_size * batch_size * grad_accum]: the rows of each global batch, by slot.
    """
    per_rank = len(rank_major) // world_size
    steps = per_rank // (batch_size * grad_accum)
    if steps == 0:  # fewer rows than one global batch: none, whatever the sizes (no array of world_size rows)
        size = world_size * batch_size * grad_accum
        return np.zeros((0, size if size <= np.iinfo(np.intp).max else 0), dtype=np.int64)
    ranks = np.asarray(rank_major, dtype=np.int64)[: world_size * per_rank].reshape(world_size, per_rank)
    taken = ranks[:, : steps * batch_size * grad_accum]
    slots = taken.reshape(world_size, steps, grad_accum, batch_size).transpose(1, 2, 0, 3)
    return slots.reshape(steps, grad_accum * world_size * batch_size)


def balance_batches(costs: np.ndarray, world_size: int, batch_size: int) -> np.ndarray:
    """For each global batch (a row of ``costs``, by slot), the slot each balanced slot takes its row from.

    Rows are sorted by cost (descending; equal costs keep their slot order) and micro-step ``a`` takes the
    ``a``-th run of ``world_size * batch_size`` of them; inside a micro-step each row, largest first, goes to the
    rank with the least cost so far that still has room (ties: the lowest rank). With ``batch_size=1`` this is the
    optimum of the sum over micro-steps of the slowest rank. A pure function of the costs: every rank computes it.

    Returns:
        int64 array shaped like ``costs``: balanced slot ``s`` of batch ``g`` holds the row of slot ``[g, s]``.
    """
    costs = np.asarray(costs, dtype=np.float64)
    if not np.isfinite(costs).all() or (costs < 0).any():
        raise ValueError("row costs must be finite numbers >= 0")
    # Each global batch scaled to its dearest row: a sum of rows then stays finite, so a full rank's +inf is its own.
    top = costs.max(axis=1, keepdims=True) if costs.size else costs[:, :1]
    costs = costs / np.where(top > 0, top, 1.0)
    steps, size = costs.shape
    per_step = world_size * batch_size
    ranked = np.argsort(-costs, axis=1, kind="stable")  # [steps, size]: slots, dearest first
    groups = ranked.reshape(steps * (size // per_step), per_step)  # one micro-step a line
    if batch_size == 1:  # each rank takes one row: the k-th dearest goes to rank k
        return ranked
    # Columns made contiguous, and (line, rank) as one flat index: each round is a few passes over whole arrays.
    columns = np.ascontiguousarray(groups.T)
    column_costs = np.ascontiguousarray(np.take_along_axis(costs, ranked, axis=1).reshape(groups.shape).T)
    placed = np.empty(groups.size, dtype=np.int64)
    loads = np.zeros(len(groups) * world_size)  # +inf once a rank's micro-batch is full: argmin skips it
    filled = np.zeros(len(groups) * world_size, dtype=np.int64)
    line_starts = np.arange(len(groups)) * world_size
    for column in range(per_step):  # per_step rounds, each over every micro-step of the epoch at once
        flat = line_starts + np.argmin(loads.reshape(len(groups), world_size), axis=1)
        placed[flat * batch_size + filled[flat]] = columns[column]  # rank r's rows at r * batch_size of its line
        loads[flat] += column_costs[column]
        filled[flat] += 1
        loads[flat[filled[flat] == batch_size]] = np.inf
    return placed.reshape(steps, size)


def rank_rows(slots: np.ndarray, rank: int, world_size: int, batch_size: int) -> np.ndarray:
    """Rank ``rank``'s rows of these global batches, in delivery order (step, micro-step, row)."""
    steps, size = slots.shape
    grad_accum = size // (world_size * batch_size)
    return np.asarray(slots).reshape(steps, grad_accum, world_size, batch_size)[:, :, rank, :].reshape(-1)


def slot_costs(costs: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The cost of the row in each slot: ``costs`` by row index, ``slots`` as :func:`global_batches` gives them."""
    by_slot: np.ndarray = np.asarray(costs, dtype=np.float64)[np.asarray(slots)]
    return by_slot


def step_imbalance(costs: np.ndarray, world_size: int, batch_size: int) -> float:
    """How much longer the steps take than if every rank cost the mean: the sum over micro-steps of the slowest
    rank's cost over the sum of the ranks' mean cost, minus 1 (0.05: 5% above the mean). ``costs`` by slot."""
    costs = np.asarray(costs, dtype=np.float64)
    if costs.size == 0:
        return 0.0
    per_rank = costs.reshape(-1, world_size, batch_size).sum(axis=2)  # [micro-steps, ranks]
    mean = float(per_rank.mean(axis=1).sum())
    return float(per_rank.max(axis=1).sum()) / mean - 1.0 if mean > 0 else 0.0
