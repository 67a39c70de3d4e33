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

__all__ = ["baselines", "padded"]


def padded(tokens: int, slots: int) -> dict[str, Any]:
    """``efficiency`` (real tokens over slots) and ``padding_tokens`` (slots minus tokens) of one layout."""
    return {"efficiency": tokens / slots if slots else 1.0, "padding_tokens": slots - tokens}


def batch_slots(lengths: np.ndarray, batch_size: int) -> int:
    """Slots of ``lengths`` taken in order, in batches of ``batch_size``, each padded to its longest (the last
    batch may be smaller)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        return 0
    starts = np.arange(0, len(lengths), batch_size)
    longest = np.maximum.reduceat(lengths, starts)
    rows = np.minimum(batch_size, len(lengths) - starts)
    return int((longest * rows).sum())


def random_batch_slots(lengths: np.ndarray, batch_size: int, seed: int) -> int:
    """Slots of one epoch of random batches: ``lengths`` in a seeded random order, padded batch by batch."""
    order = np.random.default_rng(seed).permutation(len(lengths))
    return batch_slots(np.asarray(lengths)[order], batch_size)


def length_grouped_slots(lengths: np.ndarray, batch_size: int) -> int:
    """Slots of batches of documents sorted longest first (what Hugging Face's ``group_by_length`` approaches)."""
    return batch_slots(np.sort(np.asarray(lengths, dtype=np.int64))[::-1], batch_size)


def baselines(lengths: np.ndarray, max_len: int, batch_size: int, seed: int) -> dict[str, dict[str, Any]]:
    """The three baselines of ``lengths`` (the documents packing packs), keyed as in ``stats --json``."""
    tokens = int(np.sum(lengths))
    return {
        "pad_to_max_len": padded(tokens, len(lengths) * max_len),
        "pad_to_longest": {
            "batch_size": batch_size,
            "seed": seed,
            **padded(tokens, random_batch_slots(lengths, batch_size, seed)),
        },
        "length_grouped": {"batch_size": batch_size, **padded(tokens, length_grouped_slots(lengths, batch_size))},
    }
