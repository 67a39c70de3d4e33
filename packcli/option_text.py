"""Option values written as text (the command line's, or "512MiB" in Python): byte sizes, token counts and mixing
weights, each read exactly as written and refused in one line naming the option where it cannot be used."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import SupportsFloat

from packcli.errors import UsageError, option

__all__ = ["format_weights", "parse_count", "parse_size", "parse_weights", "read_weight"]

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    **{prefix + "B": 1000**power for power, prefix in enumerate("KMGT", start=1)},
    **{prefix + "IB": 1024**power for power, prefix in enumerate("KMGT", start=1)},
}


def parse_size(text: str) -> int:
    """Parse a byte size such as ``512MiB``, ``64MB``, ``0.5GB``, ``1TB`` or ``1000000`` into bytes (rounded down)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise UsageError(f"cannot read size {text!r}: use bytes or a unit such as 256MiB, 1GB, 0.5GB, 2TB")
    return int(Decimal(match.group(1)) * _SIZE_UNITS[unit])


_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12}


def parse_count(text: str, name: str = "target_tokens") -> int:
    """Parse a token count such as ``3M``, ``1.5B``, ``500k`` or ``3000000`` (decimal units; B is billion) given
    to the option ``name``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]?)\s*", text.replace("_", ""))
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _COUNT_UNITS:
        raise UsageError(f"{option(name)} {text!r} is not a size: use a token count such as 3000000, 3M or 1.5B")
    count = Fraction(match.group(1)) * _COUNT_UNITS[unit]  # exact: a float loses digits beyond 2**53
    if count.denominator != 1:
        near = " or ".join(f"{whole:,}" for whole in (int(count), int(count) + 1) if whole >= 1)
        raise UsageError(f"{option(name)} {text!r} is not a whole number of tokens: give one such as {near}")
    return int(count)


# A weight as written: ASCII digits, a point, an exponent (float() alone also takes 1_0 as 10, and other scripts'
# digits); inf and nan are read so that read_weight names them as they are.
_WEIGHT = re.compile(r"\s*(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan))\s*", re.ASCII | re.I)


def parse_weights(text: str, name: str = "weights") -> tuple[float, ...]:
    """Parse ``--weights 0.7,0.3`` into one float per input (checked further by :class:`PackOptions`)."""
    parts = text.split(",")
    if not all(_WEIGHT.fullmatch(part) for part in parts):
        message = f"cannot read {option(name)} {text!r}: give one number per input, such as 0.7,0.3"
        raise UsageError(message)
    return tuple(read_weight(Decimal(part), repr(part.strip()), name) for part in parts)  # Decimal: as written


def read_weight(weight: SupportsFloat, written: str, name: str = "weights") -> float:
    """``weight`` as a float, refused where the float is not the number given: infinite or nan (1e400 was
    accepted as inf, or refused naming "inf", a weight the user never wrote), or 0 for a weight given non-zero
    (1e-400 left its input out without a word). ``written`` names it as given: the text, or the Python value.

    Raises:
        UsageError: the weight is not a number or not finite once read, or reads as 0 without being 0.
    """
    try:
        read = float(weight)
    except OverflowError:  # an int or a Fraction past a float's range
        read = math.inf
    value = read + 0.0  # + 0.0: -0 is 0
    if math.isnan(value):
        raise UsageError(f"{option(name)} {written} is not a number: {_EXAMPLE}")
    if math.isinf(value):
        raise UsageError(f"{option(name)} {written} is beyond what a float holds (at most about 1.797e308): {_EXAMPLE}")
    if value == 0 and weight != 0 and math.copysign(1.0, read) < 0:  # -1e-400: negative, as written
        raise UsageError(f"{option(name)} must not be negative, got {written}")
    if value == 0 and weight != 0:
        raise UsageError(
            f"{option(name)} {written} reads as 0, which would leave its input out: write 0 for that, or a weight "
            "of at least 5e-324"
        )
    return value


_EXAMPLE = "give weights such as 0.7,0.3"


def format_weights(weights: tuple[float, ...]) -> str:
    """Weights as the command line spells them: ``0.7,0.3``."""
    return ",".join(f"{weight:g}" for weight in weights)
