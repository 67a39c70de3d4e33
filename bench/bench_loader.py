"""Loader figures on the CPython corpus packed at 4096 tokens (shards of several record batches):
- throughput: tokens per second from shards to varlen batches of 8 rows, with 0 and 2 DataLoader workers (pinned
  memory only where CUDA exists);
- memory: peak anonymous memory each reading process adds over one epoch (the process itself with 0 workers, each
  worker with 2), sampled from /proc once a batch: rows are views of the memory map, so this stays small;
- the first batch in a fresh process (what every DataLoader worker started by spawn pays): seconds and anonymous
  memory from ``import packcli.torch`` to one collated batch, and whether pandas got imported on the way;
- the cost of a dense 4D mask at 8 x 4096 (why batches carry document_ids instead)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from common import REPO, shared, table
from torch.utils.data import DataLoader

from packcli.options import PackOptions
from packcli.pipeline import pack_corpus
from packcli.torch import PackedDataset, block_causal_mask, collate_varlen, loader
from packcli.write.manifest import read_manifest

EPOCHS = 3
BATCH = 8
MIB = 1 << 20


def anonymous_bytes(pid: int | str = "self") -> int:
    """RssAnon of a process: its private memory, not the page cache the memory map reads through."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))


def children() -> list[int]:
    """The DataLoader worker processes of this process."""
    pids = []
    for task in Path("/proc/self/task").iterdir():
        pids += [int(pid) for pid in (task / "children").read_text().split()]
    return pids


def throughput(out: Path) -> list[list[object]]:
    """Tokens per second through loader() with 0 and 2 workers, and through a plain DataLoader with 2 workers
    (epochs moved by set_epoch, as the Hugging Face Trainer does)."""
    rows = []
    for name, workers in (("loader()", 0), ("loader()", 2), ("plain DataLoader", 2)):
        if name == "loader()":
            batches: Any = loader(out, batch_size=BATCH, num_workers=workers, layout="varlen")
        else:
            dataset = PackedDataset(out, batch_size=BATCH)
            collate = partial(collate_varlen, pad_id=dataset.pad_id)
            batches = DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=collate)
        tokens = 0
        start = time.perf_counter()
        for epoch in range(EPOCHS):  # a loader() pass is the next epoch by itself
            if name != "loader()":
                dataset.set_epoch(epoch)
            for batch in batches:
                tokens += batch["input_ids"].shape[1]
        seconds = time.perf_counter() - start
        rows.append([name, workers, tokens, f"{seconds:.2f}", f"{tokens / seconds / 1e6:.1f}"])
    return rows


def peak_growth(out: Path, workers: int) -> list[int]:
    """One epoch in this process: the peak anonymous memory each reading process adds (run in a fresh process,
    so that no allocator pool left by an earlier run hides a copy)."""
    batches = loader(out, batch_size=BATCH, num_workers=workers, layout="varlen")
    base = anonymous_bytes()  # a forked worker starts with the parent's pages
    peaks: dict[int, int] = {}
    for _ in batches:
        for pid in children() if workers else [os.getpid()]:
            try:
                peaks[pid] = max(peaks.get(pid, 0), anonymous_bytes(pid))
            except (FileNotFoundError, StopIteration):  # a worker that has just exited
                continue
    return [peak - base for peak in peaks.values()]


def memory(out: Path) -> list[list[object]]:
    rows = []
    for workers in (0, 2):
        child = subprocess.run(
            [sys.executable, __file__, "--peak-growth", str(out), str(workers)],
            capture_output=True,
            text=True,
            check=True,
        )
        growth = json.loads(child.stdout)
        rows.append([workers, len(growth), f"{max(growth) / MIB:.1f}"])
    return rows


def first_batch(out: Path) -> dict[str, object]:
    """In this (fresh) process: from the loader's import to one collated batch, seconds and anonymous memory."""
    before, start = anonymous_bytes(), time.perf_counter()
    dataset = PackedDataset(out)
    collate_varlen([dataset.row(index) for index in range(BATCH)], pad_id=dataset.pad_id)
    return {
        "seconds": time.perf_counter() - start,
        "growth": anonymous_bytes() - before,
        "pandas": "pandas" in sys.modules,
    }


def fresh_process(out: Path) -> list[list[object]]:
    rows = []
    for _ in range(3):
        child = subprocess.run(
            [sys.executable, __file__, "--first-batch", str(out)], capture_output=True, text=True, check=True
        )
        measured = json.loads(child.stdout)
        rows.append([f"{measured['seconds'] * 1e3:.0f}", f"{measured['growth'] / MIB:.1f}", measured["pandas"]])
    return rows


def dense_masks(out: Path) -> list[list[object]]:
    document_ids = next(iter(loader(out, batch_size=BATCH, shuffle=False, layout="padded")))["document_ids"]
    rows = []
    for name, dtype in (("bool (sdpa)", None), ("float32 (eager)", torch.float32), ("bfloat16", torch.bfloat16)):
        start = time.perf_counter()
        mask = block_causal_mask(document_ids, dtype=dtype)
        seconds = time.perf_counter() - start
        rows.append(
            [
                name,
                "x".join(map(str, mask.shape)),
                f"{mask.numel() * mask.element_size() / MIB:.0f}",
                f"{seconds * 1e3:.0f}",
            ]
        )
        del mask
    return rows


def main() -> None:
    corpus = shared("data/cpython_stdlib.jsonl") or REPO / "examples" / "sample.jsonl.gz"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        pack_corpus([str(corpus)], PackOptions(max_len=4096), out)
        shard_bytes = sum(shard["bytes"] for shard in read_manifest(out)["shards"])
        print(
            f"varlen batches of {BATCH} x 4096-token rows from {corpus.name}, {EPOCHS} epochs, "
            f"pinned memory: {torch.cuda.is_available()}"
        )
        table(["iterated by", "workers", "tokens", "seconds", "M tokens/s"], throughput(out))
        print(f"peak anonymous memory added per reading process over one epoch ({shard_bytes / MIB:.0f} MiB of shards)")
        table(["workers", "processes", "MiB"], memory(out))
        print(f"the first batch of {BATCH} rows in a fresh process, 3 runs")
        table(["ms", "anonymous MiB", "pandas imported"], fresh_process(out))
        print(f"a dense 4D mask for one padded batch of {BATCH} x 4096")
        table(["mask", "shape", "MiB", "ms to build"], dense_masks(out))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peak-growth"]:
        print(json.dumps(peak_growth(Path(sys.argv[2]), int(sys.argv[3]))))
    elif sys.argv[1:2] == ["--first-batch"]:
        print(json.dumps(first_batch(Path(sys.argv[2]))))
    else:
        main()
