"""The floor for `packcli pack`: read the JSONL with pyarrow's multi-threaded reader (the whole file at once, the
fastest way we know) and tokenize every text with the same tokenizer's batch call on all cores, taking each
document's ids; nothing else. Usage: floor.py CORPUS [TOKENIZER] [--backend gigatoken].

With ``--backend gigatoken``, the backend floor: the texts are encoded by gigatoken (packcli's default backend, built
as packcli builds it: special-token text kept as text) on all cores, after Hugging Face's build, which every run
with a fast backend pays for its cross-check; so the floor of a `pack` with the default backend, before it packs or
writes anything.

A batch is about 1 MB of text, grown until its longest document is at most 1/cores of it: the tokenizer encodes
each document on one thread, so a huge document in a small batch would leave the other cores idle and the floor
would be no floor on skewed corpora. (One batch of every text is no floor either: on the skewed corpus it took
twice the CPU time, 50 s against 23-25 s.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from io_floor import read_texts

from packcli.encode.gigatoken_backend import load_gigatoken
from packcli.encode.tokenizer import load_tokenizer

BATCH_TEXT_BYTES = 1 << 20
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main() -> None:
    arguments = sys.argv[1:]
    backend = arguments.pop(arguments.index("--backend") + 1) if "--backend" in arguments else "hf"
    arguments = [argument for argument in arguments if argument != "--backend"]
    loaded = load_tokenizer(arguments[1] if len(arguments) > 1 else None)
    tokenizer = loaded.tokenizer  # built in both modes: a fast backend's run builds it for the cross-check
    encode = encoder(tokenizer) if backend == "hf" else fast_encoder(load_gigatoken(loaded, False))
    texts = read_texts(arguments[0])
    tokens = 0
    batch: list[str] = []
    size = longest = 0
    for text in [*texts, None]:
        if text is None or (size >= BATCH_TEXT_BYTES and longest * CORES <= size):
            tokens += encode(batch)
            batch, size, longest = [], 0, 0
        if text is not None:
            batch.append(text)
            size += len(text)
            longest = max(longest, len(text))
    print(tokens)


def encoder(tokenizer: Any) -> Callable[[list[str]], int]:
    """Hugging Face's batch encode, taking each document's ids; returns the batch's token count."""

    def encode(batch: list[str]) -> int:
        return sum(len(encoding.ids) for encoding in tokenizer.encode_batch_fast(batch, add_special_tokens=False))

    return encode


def fast_encoder(tokenizer: Any) -> Callable[[list[str]], int]:
    """gigatoken's batch encode on its thread pool (one array of every id back); returns the batch's token count."""

    def encode(batch: list[str]) -> int:
        return len(tokenizer.encode_batch(batch, parallel=True).layout.content)

    return encode


if __name__ == "__main__":
    main()
