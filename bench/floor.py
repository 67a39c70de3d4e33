"""The floor for `packcli pack`: read the JSONL with pyarrow's multi-threaded reader (the whole file at once, the
fastest way we know) and tokenize every text with the same tokenizer's batch call on all cores, taking each
document's ids; nothing else. Usage: floor.py CORPUS [TOKENIZER].

A batch is about 1 MB of text, grown until its longest document is at most 1/cores of it: the tokenizer encodes
each document on one thread, so a huge document in a small batch would leave the other cores idle and the floor
would be no floor on skewed corpora. (One batch of every text is no floor either: on the skewed corpus it took
twice the CPU time, 50 s against 23-25 s.)
"""

from __future__ import annotations

import os
import sys

from io_floor import read_texts

from packcli.encode.tokenizer import load_tokenizer

BATCH_TEXT_BYTES = 1 << 20
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main() -> None:
    path = sys.argv[1]
    tokenizer = load_tokenizer(sys.argv[2] if len(sys.argv) > 2 else None).tokenizer
    texts = read_texts(path)
    tokens = 0
    batch: list[str] = []
    size = longest = 0
    for text in [*texts, None]:
        if text is None or (size >= BATCH_TEXT_BYTES and longest * CORES <= size):
            encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
            tokens += sum(len(encoding.ids) for encoding in encodings)
            batch, size, longest = [], 0, 0
        if text is not None:
            batch.append(text)
            size += len(text)
            longest = max(longest, len(text))
    print(tokens)


if __name__ == "__main__":
    main()
