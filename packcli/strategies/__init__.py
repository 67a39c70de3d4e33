"""The registry of packing strategies: built-ins, ``register_strategy``, and the ``packcli.strategies`` entry points.

A strategy maps a length array to a :class:`Packing`; see ``docs/strategies.md``. Invariant: whoever wrote the
strategy, :func:`run_strategy` hands it the lengths read-only and returns only a packing that :func:`check_packing`
accepts (each window's too); anything else, a strategy's own exception included, is a one-line PackcliError
naming it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib.metadata import entry_points

import numpy as np

from packcli.errors import PackcliError, UsageError
from packcli.strategies._packing import Packing, Strategy, check_lengths, check_packing, empty_packing
from packcli.strategies.bfd import bfd
from packcli.strategies.ffd import ffd
from packcli.strategies.greedy import greedy

__all__ = [
    "Packing",
    "Strategy",
    "available_strategies",
    "check_lengths",
    "check_packing",
    "empty_packing",
    "get_strategy",
    "register_strategy",
    "run_strategy",
]

ENTRY_POINT_GROUP = "packcli.strategies"
_BUILT_IN: dict[str, Strategy] = {"bfd": bfd, "ffd": ffd, "greedy": greedy}
_REGISTRY: dict[str, Strategy] = dict(_BUILT_IN)
_entry_points_loaded = False
_SHAPE = "a strategy is a function (lengths, max_len) -> Packing (docs/strategies.md)"  # the fix a refusal names


def register_strategy(name: str, strategy: Strategy) -> None:
    """Make ``strategy`` available as ``--strategy name``; a built-in name cannot be replaced."""
    if name in _BUILT_IN and _BUILT_IN[name] is not strategy:
        raise UsageError(f"strategy name {name!r} is built in; register under another name")
    if not callable(strategy):
        raise UsageError(f"strategy {name!r} is not callable: got {type(strategy).__name__}; {_SHAPE}")
    _REGISTRY[name] = strategy


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _REGISTRY:
            continue
        try:
            loaded = point.load()
        except Exception as exc:
            raise PackcliError(f"cannot load strategy {point.name!r} from entry point {point.value}: {exc}") from exc
        if not callable(loaded):
            raise PackcliError(
                f"strategy {point.name!r} from entry point {point.value} is not callable: got {type(loaded).__name__}; "
                f"{_SHAPE}"
            )
        _REGISTRY[point.name] = loaded


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; a usage error listing the available ones otherwise. A built-in name
    needs no entry-point scan (no entry point can replace it), which spares every default run that scan."""
    if name not in _BUILT_IN:
        _load_entry_points()
    if name not in _REGISTRY:
        raise UsageError(
            f"unknown strategy {name!r}; available: {', '.join(sorted(_REGISTRY))} (a strategy of your own: register "
            f"it in Python, or for the command line as an entry point in the {ENTRY_POINT_GROUP!r} group "
            "(docs/strategies.md))"
        )
    return _REGISTRY[name]


def available_strategies() -> dict[str, str]:
    """Registered strategy names, sorted, with the first line of each one's docstring."""
    _load_entry_points()
    return {name: (inspect.getdoc(_REGISTRY[name]) or "").split("\n")[0] for name in sorted(_REGISTRY)}


def run_strategy(name: str, lengths: np.ndarray, max_len: int, seed: int = 0, window: int | None = None) -> Packing:
    """Pack ``lengths`` with strategy ``name``, window by window if ``window`` is set, and check the result.

    ``seed`` is passed to strategies that take a ``seed`` keyword. Windows of ``window`` consecutive documents are
    packed on their own and their sequences concatenated in window order.

    Raises:
        UsageError: a length outside ``1..max_len`` (checked before any strategy runs), or an unknown strategy.
        PackcliError: the strategy returned an invalid packing (for a window too), or raised (named with its
            exception's type and message; writing to the read-only lengths raises ValueError).
    """
    lengths = check_lengths(lengths, max_len)
    strategy = get_strategy(name)
    # The strategy sees the lengths read-only: the writer gathers tokens by these very lengths after packing. A view
    # can be made writable again, so one from outside gets a copy of its own (a built-in, none: it never writes).
    readonly = (lengths if strategy is _BUILT_IN.get(name) else lengths.copy()).view()
    readonly.flags.writeable = False
    call: Callable[[np.ndarray], Packing] = (
        (lambda part: strategy(part, max_len, seed=seed))  # type: ignore[call-arg]
        if "seed" in inspect.signature(strategy).parameters
        else (lambda part: strategy(part, max_len))
    )
    try:
        if window is None or window >= len(lengths):
            packing = call(readonly)
        else:
            packing = _concat(
                [_checked(call, readonly[i : i + window], max_len, name) for i in range(0, len(lengths), window)],
                window,
            )
    except PackcliError:
        raise
    except Exception as exc:
        raise PackcliError(f"strategy {name!r} failed: {type(exc).__name__}: {exc}") from exc
    check_packing(packing, lengths, max_len, name)
    return packing


def _checked(call: Callable[[np.ndarray], Packing], part: np.ndarray, max_len: int, name: str) -> Packing:
    """One window's packing, checked on its own before the windows are joined."""
    packing = call(part)
    check_packing(packing, part, max_len, name)
    return packing


def _concat(parts: list[Packing], window: int) -> Packing:
    """Join per-window packings; window w's document indices shift by w * window."""
    orders = [np.asarray(part.order, dtype=np.int64) + w * window for w, part in enumerate(parts)]
    shifts = np.cumsum([0] + [len(order) for order in orders[:-1]])
    offsets = [np.asarray(part.offsets[1:], dtype=np.int64) + shift for part, shift in zip(parts, shifts)]
    return Packing(order=np.concatenate(orders), offsets=np.concatenate([[0], *offsets]).astype(np.int64))
