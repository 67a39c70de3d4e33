"""Encoding alone, the backends side by side: every gcide text, in batches of about 1 MB as `pack` reads them,
through packcli's Hugging Face backend and its two fast backends, gigatoken (the default) and fastokens (the calls
`pack` makes), with GPT-2 and Tekken: each backend's two steps, encode and the ids as flat arrays. No reading,
packing or writing, and the tokenizers are built before the clock starts: this is the "faster at encoding" figure
of the README, docs/performance.md and docs/cli.md. Median of 3 interleaved rounds, wall and CPU seconds (user +
system of this process, all its threads)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from common import batches, shared, table, texts_of

from packcli.encode.backends import FAST_BACKENDS, Backend, HFBackend
from packcli.encode.tokenizer import load_tokenizer

ROUNDS = 3
FAST_NAMES = ("gigatoken", "fastokens")


def timed(encode: Callable[[list[str]], object], texts: list[list[str]]) -> tuple[float, float]:
    """Wall and CPU seconds of encoding every batch."""
    start, cpu = time.perf_counter(), os.times()
    for batch in texts:
        encode(batch)
    end = os.times()
    return time.perf_counter() - start, (end.user + end.system) - (cpu.user + cpu.system)


def both_steps(backend: Backend) -> Callable[[list[str]], object]:
    """A backend's two steps, as a pack makes them: encode, then the ids as flat arrays."""
    return lambda batch: backend.ids(backend.encode(batch))


def main() -> None:
    gcide = shared("data/gcide.jsonl.gz")
    paths = [shared("tokenizers/gpt2/tokenizer.json"), shared("tokenizers/tekken/tokenizer.json")]
    if gcide is None or None in paths:
        return
    texts = batches(texts_of(gcide))
    rows: list[list[object]] = []
    for path in paths:
        assert path is not None
        loaded = load_tokenizer(str(path))
        backends = [HFBackend(loaded.tokenizer)] + [FAST_BACKENDS[name](loaded, False)[0] for name in FAST_NAMES]
        rounds = [[timed(both_steps(backend), texts) for backend in backends] for _ in range(ROUNDS)]
        walls = [statistics.median(r[k][0] for r in rounds) for k in range(len(backends))]
        cpus = [statistics.median(r[k][1] for r in rounds) for k in range(len(backends))]
        row: list[object] = [f"gcide / {path.parent.name}"]
        row += [f"{wall:.2f} | {cpu:.2f}" for wall, cpu in zip(walls, cpus)]
        row += [f"{walls[0] / wall:.1f}x | {cpus[0] / cpu:.1f}x" for wall, cpu in zip(walls[1:], cpus[1:])]
        rows.append(row)
    print(f"encoding {sum(len(batch) for batch in texts):,} texts, wall s | CPU s, median of {ROUNDS}")
    table(["corpus / tokenizer", "hf", *FAST_NAMES, *(f"hf / {name}" for name in FAST_NAMES)], rows)


if __name__ == "__main__":
    main()
