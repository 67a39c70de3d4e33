"""Loader throughput: tokens per second from shards to varlen batches of 8 rows of 4096 tokens, with 0 and 2
DataLoader workers (pinned memory only where CUDA exists; this machine has none)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from common import REPO, shared, table

from packcli.options import PackOptions
from packcli.pipeline import pack_corpus
from packcli.torch import loader

EPOCHS = 3


def main() -> None:
    corpus = shared("data/cpython_stdlib.jsonl") or REPO / "examples" / "sample.jsonl.gz"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        pack_corpus([str(corpus)], PackOptions(max_len=4096), out)
        rows = []
        for workers in (0, 2):
            batches = loader(out, batch_size=8, num_workers=workers, layout="varlen")
            tokens = 0
            start = time.perf_counter()
            for epoch in range(EPOCHS):
                batches.set_epoch(epoch)
                for batch in batches:
                    tokens += batch["input_ids"].shape[1]
            seconds = time.perf_counter() - start
            rows.append([workers, tokens, f"{seconds:.2f}", f"{tokens / seconds / 1e6:.1f}"])
        print(
            f"varlen batches of 8 x 4096-token rows from {corpus.name}, {EPOCHS} epochs, "
            f"pinned memory: {torch.cuda.is_available()}"
        )
        table(["workers", "tokens", "seconds", "M tokens/s"], rows)


if __name__ == "__main__":
    main()
