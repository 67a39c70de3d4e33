"""The result of a packing strategy, in CSR form, and the check every packing passes before it is written.

Example: lengths [3, 1, 2, 2], max_len 4, best-fit decreasing ->
order [0, 1, 2, 3], offsets [0, 2, 4]: sequence 0 holds documents 0 and 1 (3 + 1 tokens), sequence 1 holds 2, 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from packcli.errors import PackcliError, UsageError


@dataclass(frozen=True)
class Packing:
    """Which documents go to which sequence.

    Attributes:
        order: int64 document indices in output order, a permutation of ``range(len(lengths))``.
        offsets: int64, ``len = n_sequences + 1``; sequence ``k`` holds ``order[offsets[k]:offsets[k + 1]]``.
    """

    order: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1


class Strategy(Protocol):
    """A pure, deterministic function of the length array; may assume ``1 <= lengths <= max_len``."""

    def __call__(self, lengths: np.ndarray, max_len: int) -> Packing: ...


def check_lengths(lengths: np.ndarray, max_len: int) -> np.ndarray:
    """``lengths`` as a 1-D int64 array, or UsageError unless every value is in ``1..max_len``: what a strategy may
    assume. (A document of no tokens has no place in a sequence; a longer one never fits: the overflow policy
    and the empty-document count deal with both before packing.)"""
    if max_len < 1:
        raise UsageError(f"max_len must be at least 1, got {max_len}")
    array = np.asarray(lengths)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise UsageError(f"lengths must be a 1-D integer array, got shape {array.shape} of {array.dtype}")
    array = array.astype(np.int64, copy=False)
    if array.size:
        low, high = int(array.min()), int(array.max())
        if low < 1 or high > max_len:
            bad = int(np.argmax((array < 1) | (array > max_len)))
            raise UsageError(
                f"lengths[{bad}] is {int(array[bad])}: a strategy packs lengths in 1..max_len ({max_len}); "
                "count empty documents and apply an overflow policy first"
            )
    return array


def check_packing(packing: Packing, lengths: np.ndarray, max_len: int, name: str = "strategy") -> None:
    """Raise PackcliError unless ``packing`` is a :class:`Packing` of integer arrays that places every document
    exactly once in sequences within max_len."""
    if not isinstance(packing, Packing):
        raise PackcliError(f"packing from {name!r} is invalid: returned {type(packing).__name__}, not a Packing")
    order = np.asarray(packing.order)
    offsets = np.asarray(packing.offsets)
    n = len(lengths)
    problem = None
    if order.ndim != 1 or offsets.ndim != 1 or len(offsets) < 1:
        problem = "order and offsets must be 1-D arrays"
    elif (order.size and not np.issubdtype(order.dtype, np.integer)) or not np.issubdtype(offsets.dtype, np.integer):
        problem = f"order and offsets must be integer arrays, got {order.dtype} and {offsets.dtype}"
    elif len(order) != n or not np.array_equal(np.sort(order), np.arange(n)):
        problem = "order is not a permutation of the documents"
    elif offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) <= 0):
        problem = "offsets must start at 0, rise strictly, and end at the document count"
    else:
        fill = np.add.reduceat(np.asarray(lengths, dtype=np.int64)[order], offsets[:-1]) if n else np.zeros(0)
        if np.any(fill > max_len):
            problem = f"sequence {int(np.argmax(fill > max_len))} holds {int(fill.max())} tokens > max_len {max_len}"
    if problem is not None:
        raise PackcliError(f"packing from {name!r} is invalid: {problem}")


def empty_packing() -> Packing:
    """The packing of no documents."""
    return Packing(order=np.zeros(0, dtype=np.int64), offsets=np.zeros(1, dtype=np.int64))
