"""Weighted mixing to a token budget: which documents of each source the output holds, repeats included.

Pure and seeded: per-source document lengths in, per-source document indices out; it sees lengths only, so it
costs no tokenizing pass. Source i gets the quota ``q_i = w_i / sum(w) * budget`` tokens, made of
``q_i // T_i`` whole passes over its ``T_i`` tokens (documents in input order), then a sample of whole documents
for the remainder: its documents in a seeded random order, each taken while it still fits in what is left. So a
source never goes over its quota, and falls short of it by less than one of its documents.

The default budget is the largest that needs no repetition: the source with the least tokens per unit of weight
is used exactly once, the others are sampled down to their share.

Example, weights 0.5/0.5, budget 10, lengths a = [3, 3] (6 tokens), b = [2, 2, 2, 2, 2, 2, 2] (14 tokens):
    a: quota 5 = 0 passes + remainder 5 -> one document of 3 (the other no longer fits): [1]   (3 tokens)
    b: quota 5 = 0 passes + remainder 5 -> two documents of 2, e.g. [4, 0]                     (4 tokens)
with budget 30: a quota 15 = 2 passes [0, 1, 0, 1] + remainder 3 -> [0, 1, 0, 1, 0]           (15 tokens)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Draw", "interleave", "mix", "normalised", "quotas", "sample_to_budget"]

_STREAM = 0x6D6978  # "mix": keeps these draws apart from other uses of the same --seed


@dataclass(frozen=True)
class Draw:
    """What one source contributes.

    Attributes:
        documents: int64 indices into the source's lengths, with repeats, in draw order (passes, then the sample).
        passes: whole passes over the source.
        quota: the tokens the source was asked for.
        tokens: the tokens drawn (``quota`` minus less than one document).
        total: the source's tokens (one pass).
    """

    documents: np.ndarray
    passes: int
    quota: int
    tokens: int
    total: int


def mix(lengths: Sequence[np.ndarray], weights: Sequence[float], budget: int | None, seed: int) -> list[Draw]:
    """Draw each source's documents for its weight's share of ``budget`` tokens.

    Args:
        lengths: per source, the tokens each document puts into the output (0: never drawn).
        weights: one non-negative weight per source, not all zero (normalised here).
        budget: output tokens; None for the largest budget that repeats no source.
        seed: seeds the remainder samples (each source draws from its own stream).

    Raises:
        ValueError: a source with a positive weight has no tokens, or the weights are unusable.
    """
    totals = [int(np.asarray(source, dtype=np.int64).sum()) for source in lengths]
    draws = []
    for index, (source, quota) in enumerate(zip(lengths, quotas(totals, weights, budget))):
        draws.append(_draw(np.asarray(source, dtype=np.int64), quota, np.random.default_rng((_STREAM, seed, index))))
    return draws


def quotas(totals: Sequence[int], weights: Sequence[float], budget: int | None) -> list[int]:
    """Each source's quota in tokens; with no budget, the source with the fewest tokens per unit of weight gets
    exactly its total and the others proportionally less than theirs."""
    if len(totals) != len(weights) or min(weights, default=-1.0) < 0 or not any(weights):
        raise ValueError(f"need one non-negative weight per source, not all zero; got {list(weights)}")
    empty = [index for index, (total, weight) in enumerate(zip(totals, weights)) if weight > 0 and total == 0]
    if empty:
        raise ValueError(f"source {empty[0]} has a positive weight but no tokens")
    if budget is not None:
        return [round(share * budget) for share in normalised(weights)]
    # On the normalised weights: a total divided by a subnormal weight is infinite, and ties of infinities would
    # pick a limit that is not the least. The largest weight normalises to itself and never underflows.
    shares = normalised(weights)
    limit = min((index for index, share in enumerate(shares) if share > 0), key=lambda i: totals[i] / shares[i])
    # Divide by the limiting weight itself so that the limiting source's quota is its total exactly.
    return [
        totals[limit] if index == limit else round(totals[limit] * (share / shares[limit]))
        for index, share in enumerate(shares)
    ]


def normalised(weights: Sequence[float]) -> list[float]:
    """The weights as shares summing to 1 (non-negative, not all zero), without overflow: each is divided by the
    largest first, so ``1e308,1e308`` is ``0.5,0.5`` where their sum would be infinite."""
    largest = max(weights)
    scaled = [weight / largest for weight in weights]
    total = sum(scaled)
    return [weight / total for weight in scaled]


def _draw(lengths: np.ndarray, quota: int, rng: np.random.Generator) -> Draw:
    total = int(lengths.sum())
    passes, remainder = divmod(quota, total) if total else (0, 0)
    whole = np.tile(np.flatnonzero(lengths), passes)
    sample = sample_to_budget(lengths, remainder, rng) if remainder else whole[:0]
    tokens = passes * total + int(lengths[sample].sum())
    return Draw(np.concatenate([whole, sample]).astype(np.int64), passes, quota, tokens, total)


def sample_to_budget(lengths: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    """Documents in a seeded random order, each taken while it fits in what is left of ``budget``.

    Vectorized in rounds: a round takes the longest run of candidates whose sum fits; the candidate after that run
    no longer fits, and neither does any document longer than what is left, so the next round walks on from there
    among the shorter ones. The result is exactly that of the one-by-one walk, and the candidates shrink fast.
    """
    candidates = rng.permutation(np.flatnonzero(lengths))
    taken = []
    left = budget
    while len(candidates):
        candidates = candidates[lengths[candidates] <= left]
        if not len(candidates):
            break
        sums = np.cumsum(lengths[candidates])
        count = int(np.searchsorted(sums, left, side="right"))  # at least 1: the first candidate fits
        taken.append(candidates[:count])
        left -= int(sums[count - 1])
        candidates = candidates[count + 1 :]
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


def interleave(counts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """An order for the drawn documents that spreads every source evenly over the stream (so a ``--window`` or a
    ``greedy`` packing sees the mixture everywhere): draw k of a source with m draws sits at (k + 1/2) / m.

    Returns:
        (source of each position, index into that source's draws), both int64; ties go to the lower source.
    """
    sources = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    index = np.concatenate([np.arange(count, dtype=np.int64) for count in counts]) if counts else sources
    sizes = np.repeat(np.asarray(counts, dtype=np.float64), counts)
    place = np.lexsort((sources, (index + 0.5) / np.maximum(sizes, 1)))
    return sources[place], index[place]
