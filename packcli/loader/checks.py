"""Argument checks of the loader's public functions: a wrong number is a ``ValueError`` that gives the range and
what the argument is, never a numpy or torch error from deep inside."""

from __future__ import annotations

import operator

__all__ = ["at_least"]


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
