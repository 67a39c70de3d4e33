"""Encoding alone, the two backends side by side: every gcide text, in batches of about 1 MB as `pack` reads them,
through packcli's Hugging Face backend and its fastokens backend (the calls `pack` makes), with GPT-2 and Tekken.
No reading, packing or writing, and the tokenizers are built before the clock starts: this is the "faster at
encoding" figure of the README, docs/performance.md and docs/cli.md. Median of 3 interleaved rounds, wall and CPU seconds (user +
system of this process, all its threads)."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import fastokens
import tokenizers
from common import shared, table

from packcli.encode.backends import FastBackend, HFBackend

ROUNDS = 3
BATCH_CHARS = 1 << 20


def batches(corpus: Path) -> list[list[str]]:
    """The corpus' texts in batches of about BATCH_CHARS characters."""
    out: list[list[str]] = [[]]
    size = 0
    with gzip.open(corpus, "rt", encoding="utf-8") as lines:
        for line in lines:
            text = json.loads(line)["text"]
            out[-1].append(text)
            size += len(text)
            if size >= BATCH_CHARS:
                out.append([])
                size = 0
    return [batch for batch in out if batch]


def timed(encode: Callable[[list[str]], object], texts: list[list[str]]) -> tuple[float, float]:
    """Wall and CPU seconds of encoding every batch."""
    start, cpu = time.perf_counter(), os.times()
    for batch in texts:
        encode(batch)
    end = os.times()
    return time.perf_counter() - start, (end.user + end.system) - (cpu.user + cpu.system)


def main() -> None:
    gcide = shared("data/gcide.jsonl.gz")
    paths = [shared("tokenizers/gpt2/tokenizer.json"), shared("tokenizers/tekken/tokenizer.json")]
    if gcide is None or None in paths:
        return
    texts = batches(gcide)
    rows: list[list[object]] = []
    for path in paths:
        assert path is not None
        source = path.read_text(encoding="utf-8")
        reference = tokenizers.Tokenizer.from_str(source)
        fast_tokenizer = fastokens.Tokenizer.from_json_str(source)
        for tokenizer in (reference, fast_tokenizer):
            tokenizer.no_truncation()
            tokenizer.no_padding()
        hf, fast = HFBackend(reference), FastBackend(fast_tokenizer, specials_as_text=True)
        rounds = [(timed(hf.encode, texts), timed(fast.encode, texts)) for _ in range(ROUNDS)]
        hf_wall, hf_cpu = (statistics.median(r[0][i] for r in rounds) for i in (0, 1))
        fast_wall, fast_cpu = (statistics.median(r[1][i] for r in rounds) for i in (0, 1))
        rows.append(
            [
                f"gcide / {path.parent.name}",
                f"{hf_wall:.2f} | {hf_cpu:.2f}",
                f"{fast_wall:.2f} | {fast_cpu:.2f}",
                f"{hf_wall / fast_wall:.1f}x | {hf_cpu / fast_cpu:.1f}x",
            ]
        )
    print(f"encoding {sum(len(batch) for batch in texts):,} texts, wall s | CPU s, median of {ROUNDS}")
    table(["corpus / tokenizer", "hf", "fastokens", "hf / fastokens"], rows)


if __name__ == "__main__":
    main()
