"""Packing strategies on synthetic length distributions: sequences against the lower bound, seconds, memory,
and the speed-up over a fair plain-Python BFD (buckets by room, ``bench/baselines.py``) that computes the identical
packing, measured in the same run.

Seconds are CPU seconds of this process (``time.process_time``): every timed step runs on one thread, and on a
shared machine wall-clock time mostly measures the other users."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from baselines import room_bfd
from common import table

from packcli.options import Overflow
from packcli.plan.overflow import apply_overflow
from packcli.strategies import get_strategy

MAX_LEN = 4096


def lognormal(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(np.log(300), 1.0, size=n)), 1, MAX_LEN).astype(np.int64)


def pretraining_mix(n: int, rng: np.random.Generator) -> np.ndarray:
    """Web-like short documents with a tail of long ones (code, books), split into pieces of at most max_len."""
    short = rng.lognormal(np.log(400), 1.2, size=int(n * 0.8))
    long = rng.lognormal(np.log(6000), 1.0, size=n - len(short))
    lengths = np.maximum(np.round(np.concatenate([short, long])), 1).astype(np.int64)
    rng.shuffle(lengths)
    return apply_overflow(lengths, MAX_LEN, Overflow.split)[0].length


def timed(function: Callable[[], object], repeats: int = 3) -> tuple[object, float, float]:
    """Result, first-call seconds, best seconds."""
    times = []
    result: object = None
    for _ in range(repeats):
        start = time.process_time()
        result = function()
        times.append(time.process_time() - start)
    return result, times[0], min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    cases = {
        "lognormal 1M": lognormal(1_000_000, rng),
        "lognormal 10M": lognormal(10_000_000, rng),
        "uniform 1..4096 1M": rng.integers(1, MAX_LEN + 1, size=1_000_000),
        "pretraining mix 1M docs, split": pretraining_mix(1_000_000, rng),
    }
    rows = []
    for name, lengths in cases.items():
        bound = -(-int(lengths.sum()) // MAX_LEN)
        for strategy in ("bfd", "ffd", "greedy"):
            packing, first, best = timed(lambda: get_strategy(strategy)(lengths, MAX_LEN))  # noqa: B023
            sequences = len(packing)  # type: ignore[arg-type]
            efficiency = int(lengths.sum()) / (sequences * MAX_LEN)
            rows.append(
                [
                    name,
                    f"{len(lengths):,}",
                    strategy,
                    sequences,
                    bound,
                    f"{efficiency:.4%}",
                    f"{first:.3f}",
                    f"{best:.3f}",
                ]
            )
    print(f"Strategies, max_len {MAX_LEN} (CPU seconds: first call, best of 3)")
    table(["lengths", "n", "strategy", "sequences", "lower bound", "efficiency", "first s", "best s"], rows)

    lengths = lognormal(2_000_000, rng)
    start = time.process_time()
    rows = room_bfd(lengths, MAX_LEN)
    baseline_s = time.process_time() - start
    _, _, fast_s = timed(lambda: get_strategy("bfd")(lengths, MAX_LEN))
    packing = get_strategy("bfd")(lengths, MAX_LEN)
    same = np.array_equal(packing.order, np.concatenate(rows)) and np.array_equal(
        np.diff(packing.offsets), [len(row) for row in rows]
    )
    assert same, "bfd and the plain-Python baseline pack differently"
    print(
        f"\nbfd vs a plain-Python BFD (buckets by room) on 2M lognormal lengths: {baseline_s:.3f} s / "
        f"{fast_s:.3f} s = {baseline_s / fast_s:.1f}x faster, the identical packing ({len(rows):,} sequences)"
    )

    lengths = cases["lognormal 10M"]
    tracemalloc.start()
    get_strategy("bfd")(lengths, MAX_LEN)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"bfd on 10M lengths: peak extra memory {peak / 2**20:.0f} MiB (tracemalloc; the result itself, "
        f"order + offsets, is {(8 * len(lengths)) / 2**20:.0f} MiB of it)"
    )


if __name__ == "__main__":
    main()
