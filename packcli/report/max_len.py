"""Choosing ``--max-len``: document length percentiles and, for a few candidate ``max_len`` values, what each
overflow policy would cost. Lengths are in tokens before overflow (EOS/BOS included); O(n) per candidate plus one
packing with the chosen strategy.

Example, lengths [3, 5, 9, 20], candidate 8: truncate loses 1 + 12 = 13 tokens of 37; drop loses the 9 and the 20
(29 tokens, 2 documents); split keeps every token in 3 + 5 + (8, 1) + (8, 8, 4) = 7 pieces, packed into sequences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from packcli.options import Overflow
from packcli.packing.overflow import apply_overflow
from packcli.report.padding import padded
from packcli.strategies import run_strategy

__all__ = ["RowFigures", "candidate_max_lens", "length_percentiles", "max_len_candidates", "overflow_costs"]

PERCENTILES = (50, 90, 99)
# More figures of a packing, from its document lengths in row order, the documents of each row and max_len
RowFigures = Callable[[np.ndarray, np.ndarray, int], dict[str, Any]]


def length_percentiles(lengths: np.ndarray) -> dict[str, Any]:
    """``p50``, ``p90``, ``p99`` (each the shortest length that at least that share of documents does not exceed:
    numpy's ``inverted_cdf``, always a real document's length), ``max``, ``mean``, ``documents`` and ``tokens``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    figures: dict[str, Any] = {"documents": len(lengths), "tokens": int(lengths.sum())}
    if len(lengths) == 0:
        return {**figures, **{f"p{q}": 0 for q in PERCENTILES}, "max": 0, "mean": 0.0}
    for q in PERCENTILES:
        figures[f"p{q}"] = int(np.percentile(lengths, q, method="inverted_cdf"))
    return {**figures, "max": int(lengths.max()), "mean": float(lengths.mean())}


def candidate_max_lens(p99: int, given: int) -> list[int]:
    """The power of two at or above ``p99``, a quarter and half of it, its double, and the ``--max-len`` given."""
    above = 1 << max(int(p99) - 1, 0).bit_length()
    return sorted({max(above // 4, 1), max(above // 2, 1), above, above * 2, given})


def overflow_costs(
    lengths: np.ndarray, max_len: int, strategy: str, seed: int = 0, row_figures: RowFigures | None = None
) -> dict[str, Any]:
    """What each overflow policy does to ``lengths`` at ``max_len``: tokens truncate and drop would lose (count and
    share of all tokens), and the pieces and packed sequences split would make (with ``row_figures``, also its
    figures of that packing, as ``split.model_cost``)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    tokens = int(lengths.sum())
    long = lengths > max_len
    truncated = int((lengths[long] - max_len).sum())
    dropped = int(lengths[long].sum())
    pieces, _ = apply_overflow(lengths, max_len, Overflow.split)
    packing = run_strategy(strategy, pieces.length, max_len, seed)
    split = {
        "pieces": len(pieces.length),
        "sequences": len(packing),
        "efficiency": padded(tokens, len(packing) * max_len)["efficiency"],
    }
    if row_figures is not None:
        split["model_cost"] = row_figures(pieces.length[packing.order], np.diff(packing.offsets), max_len)
    return {
        "max_len": max_len,
        "documents_over": int(long.sum()),
        "truncate": {"tokens_lost": truncated, "fraction_lost": truncated / tokens if tokens else 0.0},
        "drop": {"tokens_lost": dropped, "fraction_lost": dropped / tokens if tokens else 0.0},
        "split": split,
    }


def max_len_candidates(
    lengths: np.ndarray, given: int, strategy: str, seed: int = 0, row_figures: RowFigures | None = None
) -> list[dict[str, Any]]:
    """:func:`overflow_costs` for each of :func:`candidate_max_lens`."""
    p99 = length_percentiles(lengths)["p99"]
    return [overflow_costs(lengths, max_len, strategy, seed, row_figures) for max_len in candidate_max_lens(p99, given)]
