"""What a trainer computes without packing: the padding baselines packing is measured against. Pure numpy, O(n)
(O(n log n) for the sorted one); a layout's *slots* are the token positions it computes, real or padding.

Worked example, documents of 6, 1, 5 and 2 tokens, ``max_len`` 8, batches of 2:

- ``pad_to_max_len``: every document alone in a row of 8: 4 x 8 = 32 slots for 14 tokens (43.75%).
- ``pad_to_longest`` (random batches): the documents in a seeded random order, in batches of 2, each batch padded
  to its longest. Seed 1 draws the order 6, 1, 5, 2: [6, 1] -> 2 x 6 and [5, 2] -> 2 x 5: 22 slots (63.6%).
- ``length_grouped``: the same batches after sorting by length, [6, 5] -> 12 and [2, 1] -> 4: 16 slots (87.5%),
  the best any length-grouping sampler can do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["baseline_batches", "baselines", "batch_shapes", "padded"]


def padded(tokens: int, slots: int) -> dict[str, Any]:
    """``efficiency`` (real tokens over slots) and ``padding_tokens`` (slots minus tokens) of one layout."""
    return {"efficiency": tokens / slots if slots else 1.0, "padding_tokens": slots - tokens}


def batch_shapes(lengths: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(longest, rows) of each batch: ``lengths`` taken in order, in batches of ``batch_size``, each padded to its
    longest (the last batch may be smaller). A batch computes ``rows`` rows of ``longest`` slots."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.arange(0, len(lengths), batch_size)
    if len(lengths) == 0:
        return starts, starts
    return np.maximum.reduceat(lengths, starts), np.minimum(batch_size, len(lengths) - starts)


def baseline_batches(
    lengths: np.ndarray, max_len: int, batch_size: int, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each baseline's padded batches as :func:`batch_shapes` gives them, keyed as in ``stats --json``: every
    document alone in a row of ``max_len``; random batches (``lengths`` in a seeded random order); and the same
    batches of documents sorted longest first (what Hugging Face's ``group_by_length`` approaches)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return {
        "pad_to_max_len": (np.array([max_len], dtype=np.int64), np.array([len(lengths)], dtype=np.int64)),
        "pad_to_longest": batch_shapes(lengths[np.random.default_rng(seed).permutation(len(lengths))], batch_size),
        "length_grouped": batch_shapes(np.sort(lengths)[::-1], batch_size),
    }


def baselines(lengths: np.ndarray, max_len: int, batch_size: int, seed: int) -> dict[str, dict[str, Any]]:
    """The three baselines of ``lengths`` (the documents packing packs), keyed as in ``stats --json``."""
    tokens = int(np.sum(lengths))
    slots = {
        name: int((longest * rows).sum())
        for name, (longest, rows) in baseline_batches(lengths, max_len, batch_size, seed).items()
    }
    return {
        "pad_to_max_len": padded(tokens, slots["pad_to_max_len"]),
        "pad_to_longest": {"batch_size": batch_size, "seed": seed, **padded(tokens, slots["pad_to_longest"])},
        "length_grouped": {"batch_size": batch_size, **padded(tokens, slots["length_grouped"])},
    }
