"""Balanced steps on a long-context output: the step imbalance (the sum over micro-steps of the slowest rank's cost
over the ranks' mean, minus 1) of the plain order and of the balanced placement, and the placement's time.

The output: CPython's standard library (long code files) and the GCIDE dictionary's articles joined into long prose
documents (sizes log-uniform from 2 KB to 256 KB of text, about 600 to 80,000 tokens), packed by ``packcli pack``
at ``--max-len 32768`` with the Tekken tokenizer (longer documents split). Costs: :class:`RowCost` of a
Llama-3-8B-sized model (hidden 4096, intermediate 14336, 32 heads, 8 key-value heads, 32 layers, vocabulary
128256). Imbalance over ``EPOCHS`` seeded epochs of 8 ranks; the placement's CPU time on one core for an epoch of a
million rows whose costs are drawn from the output's (each rank computes the whole epoch's placement).

``--rows FILE`` also writes every row's document lengths for ``gpu_row_times.py`` (run where CUDA is), and
``--times FILE`` reads the times it measured: how well the cost model predicts them, and the step imbalance of the
plain order and of the balanced placement (placed by the model) in measured GPU seconds."""

from __future__ import annotations

import argparse
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
from packcli.loader.balance import (
    TRAINING_PASSES,
    RowCost,
    balance_batches,
    global_batches,
    row_document_lengths,
    slot_costs,
    step_imbalance,
)
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


def imbalances(costs: np.ndarray, batch_size: int, grad_accum: int, placed_by: np.ndarray | None) -> float:
    """The step imbalance of ``costs`` over EPOCHS seeded epochs (every rank's whole global batches, one figure):
    in the plain order, or balanced by the costs ``placed_by`` (None: the plain order)."""
    by_slot = []
    per_rank = len(costs) // WORLD_SIZE
    for epoch in range(EPOCHS):
        order = seeded_order(len(costs), True, 0, epoch)[: WORLD_SIZE * per_rank]
        slots = global_batches(order, WORLD_SIZE, batch_size, grad_accum)
        if placed_by is not None:
            slots = np.take_along_axis(slots, balance_batches(slot_costs(placed_by, slots), WORLD_SIZE, batch_size), 1)
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


def document_lengths(rows: ShardRows) -> list[list[int]]:
    """Every row's document lengths, by global row index."""
    found: list[list[int]] = []
    for columns in rows.batches:
        values, offsets = columns["cu_seqlens"]
        lengths, starts = row_document_lengths(values[offsets[0] : offsets[-1]], offsets - offsets[0])
        found += [lengths[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]
    return found


def stack_cost(layers: int) -> RowCost:
    """The cost model of what gpu_row_times.py times: ``layers`` decoder layers of LLAMA_3_8B, no output head."""
    full = RowCost.from_config({**LLAMA_3_8B, "num_hidden_layers": layers})
    head = TRAINING_PASSES * 2 * LLAMA_3_8B["hidden_size"] * LLAMA_3_8B["vocab_size"]
    return RowCost(per_token=full.per_token - head, per_square=full.per_square)


def measured(times: Path, documents: list[list[int]]) -> None:
    """How well the cost model predicts gpu_row_times.py's times, and the step imbalance in measured seconds."""
    record = json.loads(times.read_text())
    seconds = np.asarray(record["seconds"], dtype=np.float64)
    if len(seconds) != len(documents) or record.get("tokens") != sum(map(sum, documents)):
        raise SystemExit(f"{times} was measured on other rows than this output's")
    lengths = np.concatenate([np.asarray(row, dtype=np.float64) for row in documents])
    offsets = np.concatenate([[0], np.cumsum([len(row) for row in documents])]).astype(np.int64)
    cost = stack_cost(record["layers"])
    model = cost.row_costs(lengths, offsets)
    tokens = np.add.reduceat(lengths, offsets[:-1])
    squares = np.add.reduceat(lengths * lengths, offsets[:-1])
    (per_token, per_square, fixed), *_ = np.linalg.lstsq(
        np.column_stack([tokens, squares, np.ones_like(tokens)]), seconds
    )
    scale = float(model @ seconds / (model @ model))  # the one factor that best turns FLOPs into seconds
    error = np.abs(scale * model - seconds) / seconds
    print(
        f"\nmeasured on {record['device']} (torch {record['torch']}, {record['attention']}), {record['layers']} "
        f"decoder layer(s) of that model, forward and backward, best of {record['repeats']} per row: "
        f"{seconds.min() * 1e3:.1f}-{seconds.max() * 1e3:.1f} ms a row, {model.sum() / seconds.sum() / 1e12:.0f} "
        f"TFLOP/s by the cost model's count\n"
        f"cost model against the times: correlation {np.corrcoef(model, seconds)[0, 1]:.4f}; times off the model "
        f"times one factor by {np.median(error):.1%} (median), {error.max():.1%} (worst row)\n"
        f"a fit of the times, seconds = a * tokens + b * sum(l^2) + c: b / a = {per_square / per_token:.3g} "
        f"against the model's {cost.per_square / cost.per_token:.3g}; c = {fixed * 1e3:.2f} ms"
    )
    imbalance_table(f"{record['layers']} decoder layer(s)", model, seconds)
    if "head" in record:  # the whole model: every layer as the measured ones, and the output head per token
        (head_per_token, head_fixed), *_ = np.linalg.lstsq(
            np.column_stack([[t for t, _ in record["head"]], np.ones(len(record["head"]))]),
            np.array([s for _, s in record["head"]]),
        )
        whole = LLAMA_3_8B["num_hidden_layers"] / record["layers"] * seconds + head_per_token * tokens + head_fixed
        print(f"\nthe output head: {head_per_token * MAX_LEN * 1e3:.1f} ms for {MAX_LEN:,} tokens")
        imbalance_table("the whole model (measured layers times 32, plus the head)", full_model(documents), whole)


def full_model(documents: list[list[int]]) -> np.ndarray:
    """The cost model's figure of every row for the whole LLAMA_3_8B model."""
    lengths = np.concatenate([np.asarray(row, dtype=np.float64) for row in documents])
    offsets = np.concatenate([[0], np.cumsum([len(row) for row in documents])]).astype(np.int64)
    return RowCost.from_config(LLAMA_3_8B).row_costs(lengths, offsets)


def imbalance_table(what: str, model: np.ndarray, seconds: np.ndarray) -> None:
    """The step imbalance the cost model predicts (plain, balanced) and the one measured in ``seconds`` (plain,
    balanced by the model, balanced by the seconds themselves)."""
    rows = []
    for batch_size, grad_accum in SHAPES:
        predicted = [imbalances(model, batch_size, grad_accum, placed) for placed in (None, model)]
        figures = [imbalances(seconds, batch_size, grad_accum, placed) for placed in (None, model, seconds)]
        rows.append([f"B={batch_size}, A={grad_accum}", *(f"{figure:.1%}" for figure in predicted + figures)])
    print(f"\nstep imbalance of {what}, {WORLD_SIZE} ranks, {EPOCHS} seeded epochs: the cost model's, then measured")
    header = [
        "micro-batch, steps",
        "model: plain",
        "model: balanced",
        "plain order",
        "balanced (model)",
        "balanced (times)",
    ]
    table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, help="write every row's document lengths here (for gpu_row_times.py)")
    parser.add_argument("--times", type=Path, help="the times gpu_row_times.py measured on these rows")
    arguments = parser.parse_args()
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
        documents = document_lengths(ShardRows(out, manifest))
    if arguments.rows is not None:
        arguments.rows.write_text(json.dumps({"max_len": MAX_LEN, "rows": documents}))
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
        plain = imbalances(costs, batch_size, grad_accum, None)
        balanced = imbalances(costs, batch_size, grad_accum, costs)
        seconds = placement_seconds(costs, batch_size, grad_accum)
        rows.append([f"B={batch_size}, A={grad_accum}", f"{plain:.1%}", f"{balanced:.1%}", f"{seconds:.3f}"])
    print(f"\nstep imbalance, {WORLD_SIZE} ranks, {EPOCHS} seeded epochs; placing {PLACED_ROWS:,} rows on one core")
    table(["micro-batch, steps", "plain order", "balanced", "placement, CPU s / 1M rows"], rows)
    if arguments.times is not None:
        measured(arguments.times, documents)


if __name__ == "__main__":
    main()
