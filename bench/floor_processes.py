"""The alternative to the tokenizer's own threads: worker processes, one single-threaded tokenizer each, returning
flat numpy ids. Usage: floor_processes.py CORPUS [WORKERS]. Compared with floor.py by bench_pack.py."""

from __future__ import annotations

import os
import sys
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from packcli.encode.backends import HFBackend
from packcli.encode.documents import add_specials
from packcli.encode.tokenizer import load_tokenizer
from packcli.read.fields import Field, ReadCounts
from packcli.read.inputs import read_records

_backend: HFBackend | None = None


def _start() -> None:
    global _backend
    _backend = HFBackend(load_tokenizer().tokenizer)


def _encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    assert _backend is not None
    tokens, lengths, _ = add_specials(*_backend.ids(_backend.encode(texts)), None, None, 50256, None)
    return tokens, lengths


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
