"""Mixing and row order: what the draw costs on lengths alone (no tokenizing), what the seeded row shuffle costs,
and `pack` with shuffled rows against `--no-shuffle` on a real corpus (the shuffle makes the writer's reads of the
token store less sequential)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import python, run_child, shared, table

from packcli.packing.mixing import interleave, mix
from packcli.packing.order import shuffle_rows
from packcli.strategies import run_strategy

ROUNDS = 3


def best(action: Callable[[], object], rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def pure_figures() -> list[list[str]]:
    rng = np.random.default_rng(0)
    # Three sources shaped like the developer corpora: many short documents, fewer long ones.
    sources = [
        rng.lognormal(4.0, 1.0, 4_000_000).astype(np.int64) + 1,
        rng.lognormal(6.0, 1.2, 500_000).astype(np.int64) + 1,
        rng.lognormal(5.0, 1.0, 1_000_000).astype(np.int64) + 1,
    ]
    documents = sum(len(source) for source in sources)
    budget = int(sum(int(source.sum()) for source in sources) * 1.3)
    rows = []
    draw_s = best(lambda: mix(sources, [0.5, 0.3, 0.2], budget, 0))
    draws = mix(sources, [0.5, 0.3, 0.2], budget, 0)
    counts = [len(draw.documents) for draw in draws]
    rows.append([f"mix: {documents:,} documents, 3 sources, 1.3x their tokens", f"{draw_s:.3f}"])
    rows.append([f"interleave {sum(counts):,} drawn documents", f"{best(lambda: interleave(counts)):.3f}"])
    lengths = np.minimum(np.concatenate(sources), 4096)
    packing = run_strategy("bfd", lengths, 4096)
    rows.append([f"shuffle_rows: {len(packing):,} rows", f"{best(lambda: shuffle_rows(packing, 0)):.3f}"])
    return rows


def pack_figures() -> list[list[str]]:
    corpus = shared("data/gcide.jsonl.gz")
    if corpus is None:
        return []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        for label, flags in (("shuffled rows (default)", []), ("--no-shuffle", ["--no-shuffle"])):
            seconds = []
            for _ in range(2):
                shutil.rmtree(out, ignore_errors=True)
                args = python("-m", "packcli", "pack", str(corpus), "--out", str(out), "--quiet", *flags)
                seconds.append(run_child(args)[0])
            rows.append([f"pack {corpus.name}, {label}", f"{min(seconds):.2f}"])
    return rows


def main() -> None:
    print("mixing and row order, seconds (best of several; provisional on a shared machine)")
    table(["what", "seconds"], pure_figures() + pack_figures())


if __name__ == "__main__":
    main()
