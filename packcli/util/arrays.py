"""Array helpers on lengths that several stages share (the layout, the token store, the loader, verify)."""

from __future__ import annotations

import numpy as np

__all__ = ["exclusive_cumsum"]


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """[0, v0, v0+v1, ...] of length len(values) + 1, int64."""
    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=out[1:])
    return out
