"""Argument checks of the loader's public functions: a wrong number is a ``ValueError`` that gives the range and
what the argument is, never a numpy or torch error from deep inside; a dataset split by rank under accelerate,
which splits the rows itself, is refused the same way."""

from __future__ import annotations

import operator
import sys
from types import FrameType

__all__ = ["at_least", "refuse_split_under_accelerate"]


def at_least(name: str, value: object, low: int, meaning: str) -> int:
    """``value`` as an int, if it is an integer >= ``low``.

    Raises:
        ValueError: e.g. ``batch_size must be an integer >= 1 (the DataLoader's rows per batch), not 0``.
    """
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or isinstance(value, bool) or number < low:
        raise ValueError(f"{name} must be an integer >= {low} ({meaning}), not {value!r}")
    return number


def refuse_split_under_accelerate(rank: int, world_size: int) -> None:
    """Refuse a dataset that keeps only its rank's rows (``world_size`` > 1) when accelerate is what calls it (the
    Hugging Face Trainer, ``accelerator.prepare``): accelerate hands the rows of an iterable dataset out among the
    processes itself, so each process would train on a part of its part, silently. It walks the caller's frames:
    the dataset asks once, at its first ``set_epoch`` or iteration.

    Raises:
        ValueError: naming the fix, ``rank=0, world_size=1``.
    """
    if world_size == 1:
        return
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("accelerate."):
            raise ValueError(
                f"this dataset keeps rank {rank}'s rows of {world_size} ranks, and accelerate (the Trainer, "
                "accelerator.prepare) hands rows out among the processes too: each would train on a part of its "
                "part; build it with rank=0, world_size=1 there (docs/loader.md)"
            )
        frame = frame.f_back
