"""Read and tokenize a corpus into a token store: every document's tokens in input order, its length, and (for
fine-tuning records) which tokens are supervised. Memory: O(documents) plus two batches in flight."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.encode.encoders import Encoder
from packcli.encode.store import TokenStore
from packcli.read.fields import ReadCounts
from packcli.read.inputs import InputSlice, read_records
from packcli.report.progress import Reporter

# Batches encoded at once in helper threads; more only contend for the cores (measured: 2 was slower).
IN_FLIGHT = 1


@dataclass(frozen=True)
class Tokenized:
    """Every document's tokens in a store, plus per-document lengths, documents per input file, and the read
    counts."""

    store: TokenStore
    lengths: np.ndarray
    counts: ReadCounts
    file_documents: np.ndarray  # int64, one per input file (or slice): the documents it gave, in order


def tokenize_corpus(
    files: Sequence[Path | InputSlice],
    encoder: Encoder,
    skip_bad_records: bool,
    store_path: Path,
    reporter: Reporter,
    warn: Callable[[str], None],
) -> Tokenized:
    """Tokenize every record of ``files`` (whole files, or the slices a partition plan cut) into a token store, in
    input order.

    Batches are encoded in helper threads (the tokenizer releases the GIL) while this thread reads the next and
    stores finished ones in order, so reading and storing hide behind tokenization.
    """
    store = TokenStore(store_path, with_mask=encoder.supervised)
    lengths: list[np.ndarray] = []
    counts = ReadCounts()
    slices = [item if isinstance(item, InputSlice) else InputSlice(item) for item in files]
    file_documents = np.zeros(len(slices), dtype=np.int64)
    reporter.start(sum(item.path.stat().st_size for item in slices))
    documents = 0

    def store_batch(encoded: Future[Any], bytes_done: int, file: int) -> None:
        nonlocal documents
        tokens, batch_lengths, mask = encoder.flatten(encoded.result(), counts)
        store.append(tokens, mask)
        lengths.append(batch_lengths)
        documents += len(batch_lengths)
        file_documents[file] += len(batch_lengths)
        reporter.advance(bytes_done, documents, store.count)

    def batches() -> Iterator[tuple[Any, int, int]]:
        bytes_before = 0
        for file, item in enumerate(slices):
            path = item.path
            for batch in read_records(path, encoder.fields, counts, skip_bad_records, warn, encoder.convert, item.span):
                prepared = encoder.prepare(batch.columns, counts)
                if prepared:
                    yield prepared, bytes_before + batch.position, file
            bytes_before += path.stat().st_size

    try:
        with ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="packcli-encode") as pool:
            in_flight: deque[tuple[Future[Any], int, int]] = deque()
            for prepared, bytes_done, file in batches():
                in_flight.append((pool.submit(encoder.encode, prepared), bytes_done, file))
                if len(in_flight) > IN_FLIGHT:
                    store_batch(*in_flight.popleft())
            while in_flight:
                store_batch(*in_flight.popleft())
    except BaseException:
        store.remove()
        raise
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return Tokenized(store, all_lengths, counts, file_documents)
