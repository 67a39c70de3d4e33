"""The alternative to the tokenizer's own threads: worker processes, one single-threaded tokenizer each, returning
flat numpy ids. Usage: floor_processes.py CORPUS [WORKERS]. Compared with floor.py by bench_pack.py."""

from __future__ import annotations

import os
import sys
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from packcli.encode.tokenizer import encode_texts, flatten, load_tokenizer
from packcli.read.fields import Field, ReadCounts
from packcli.read.inputs import read_records

_tokenizer = None


def _start() -> None:
    global _tokenizer
    _tokenizer = load_tokenizer().tokenizer


def _encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    assert _tokenizer is not None
    return flatten(encode_texts(_tokenizer, texts), 50256, None)


def main() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count() or 1
    records = read_records(Path(sys.argv[1]), [Field("text")], ReadCounts(), False, print)
    batches = ([text for text in batch.columns[0] if text] for batch in records)
    tokens = 0
    with get_context("spawn").Pool(workers, initializer=_start) as pool:
        for flat, _ in pool.imap(_encode, batches):
            tokens += len(flat)
    print(tokens)


if __name__ == "__main__":
    main()
