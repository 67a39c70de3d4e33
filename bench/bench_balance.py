"""Balanced steps on a long-context output: the step imbalance (the sum over micro-steps of the slowest rank's cost
over the ranks' mean, minus 1) of the plain order and of the balanced placement, and the placement's time.

The output: CPython's standard library (long code files) and the GCIDE dictionary's articles joined into long prose
documents (sizes log-uniform from 2 KB to 256 KB of text, about 600 to 80,000 tokens), packed by ``packcli pack``
at ``--max-len 32768`` with the Tekken tokenizer (longer documents split). Costs: :class:`RowCost` of a
Llama-3-8B-sized model (hidden 4096, intermediate 14336, 32 heads, 8 key-value heads, 32 layers, vocabulary
128256). Imbalance over ``EPOCHS`` seeded epochs of 8 ranks; the placement's CPU time on one core for an epoch of a
million rows whose costs are drawn from the output's (each rank computes the whole epoch's placement)."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import shared, table

from packcli.format.manifest import read_manifest
from packcli.loader.balance import RowCost, balance_batches, global_batches, slot_costs, step_imbalance
from packcli.loader.order import seeded_order
from packcli.loader.row_figures import row_costs
from packcli.loader.shard_rows import ShardRows

MAX_LEN = 32_768
WORLD_SIZE = 8
SHAPES = [(1, 4), (2, 4)]  # (batch_size, grad_accum)
EPOCHS = 200
PLACED_ROWS = 1_000_000
LLAMA_3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
}


def long_documents(cpython: Path, gcide: Path, out: Path) -> Path:
    """The corpus: every CPython module, and GCIDE's articles joined in their order into documents of log-uniform
    sizes (seeded)."""
    sizes = random.Random(0)
    with out.open("w", encoding="utf-8") as sink:
        with cpython.open(encoding="utf-8") as source:
            for line in source:
                sink.write(json.dumps({"text": json.loads(line)["text"]}) + "\n")
        parts: list[str] = []
        held, target = 0, int(2 ** sizes.uniform(11, 18))
        with gzip.open(gcide, "rt", encoding="utf-8") as source:
            for line in source:
                parts.append(json.loads(line)["text"])
                held += len(parts[-1])
                if held >= target:
                    sink.write(json.dumps({"text": "\n\n".join(parts)}) + "\n")
                    parts, held, target = [], 0, int(2 ** sizes.uniform(11, 18))
        if parts:
            sink.write(json.dumps({"text": "\n\n".join(parts)}) + "\n")
    return out


def imbalances(costs: np.ndarray, batch_size: int, grad_accum: int, balanced: bool) -> float:
    """The step imbalance over EPOCHS seeded epochs (every rank's whole global batches, one figure)."""
    by_slot = []
    per_rank = len(costs) // WORLD_SIZE
    for epoch in range(EPOCHS):
        order = seeded_order(len(costs), True, 0, epoch)[: WORLD_SIZE * per_rank]
        slots = global_batches(order, WORLD_SIZE, batch_size, grad_accum)
        if balanced:
            slots = np.take_along_axis(slots, balance_batches(slot_costs(costs, slots), WORLD_SIZE, batch_size), 1)
        by_slot.append(slot_costs(costs, slots))
    return step_imbalance(np.concatenate(by_slot), WORLD_SIZE, batch_size)


def placement_seconds(costs: np.ndarray, batch_size: int, grad_accum: int) -> float:
    """CPU seconds to place an epoch of PLACED_ROWS rows (costs drawn from ``costs``), best of 3: CPU time, steadier
    than wall time on a shared machine."""
    drawn = np.random.default_rng(0).choice(costs, PLACED_ROWS)
    order = seeded_order(PLACED_ROWS, True, 0, 0)
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        slots = global_batches(order, WORLD_SIZE, batch_size, grad_accum)
        np.take_along_axis(slots, balance_batches(slot_costs(drawn, slots), WORLD_SIZE, batch_size), 1)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    cpython, gcide = shared("data/cpython_stdlib.jsonl"), shared("data/gcide.jsonl.gz")
    tokenizer = shared("tokenizers/tekken/tokenizer.json")
    if cpython is None or gcide is None or tokenizer is None:
        return
    with tempfile.TemporaryDirectory() as scratch:
        corpus = long_documents(cpython, gcide, Path(scratch) / "long.jsonl")
        out = Path(scratch) / "packed"
        start = time.perf_counter()
        pack = [sys.executable, "-m", "packcli", "pack", str(corpus), "--tokenizer", str(tokenizer)]
        pack += ["--max-len", str(MAX_LEN), "--overflow", "split", "--out", str(out), "--quiet"]
        subprocess.run(pack, check=True, stdout=subprocess.DEVNULL)
        packed_seconds = time.perf_counter() - start
        manifest = read_manifest(out)
        costs = row_costs(ShardRows(out, manifest), RowCost.from_config(LLAMA_3_8B))
    cost = RowCost.from_config(LLAMA_3_8B)
    attention = 1 - cost.per_token * manifest["totals"]["tokens"] / costs.sum()
    print(
        f"\n{manifest['totals']['sequences']:,} rows of up to {MAX_LEN:,} tokens ({manifest['totals']['tokens']:,} tokens, "
        f"packed in {packed_seconds:.0f} s); Llama-3-8B-sized costs: attention {attention:.1%} of the FLOPs, "
        f"row cost max/min {costs.max() / costs.min():.2f}"
    )
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the placement's time on one core
    rows = []
    for batch_size, grad_accum in SHAPES:
        plain = imbalances(costs, batch_size, grad_accum, balanced=False)
        balanced = imbalances(costs, batch_size, grad_accum, balanced=True)
        seconds = placement_seconds(costs, batch_size, grad_accum)
        rows.append([f"B={batch_size}, A={grad_accum}", f"{plain:.1%}", f"{balanced:.1%}", f"{seconds:.3f}"])
    print(f"\nstep imbalance, {WORLD_SIZE} ranks, {EPOCHS} seeded epochs; placing {PLACED_ROWS:,} rows on one core")
    table(["micro-batch, steps", "plain order", "balanced", "placement, CPU s / 1M rows"], rows)


if __name__ == "__main__":
    main()
