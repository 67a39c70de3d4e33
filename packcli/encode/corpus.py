"""Read and tokenize a corpus into a token store: every document's tokens in input order, its length, and (for
fine-tuning records) which tokens are supervised. Memory: O(documents) plus READ_AHEAD + 3 batches in flight (read
ahead, being read, being encoded, being stored; about 1 MB each, up to MAX_BATCH_CHARS when joined).

The tokenizer spreads a batch's documents over its threads but encodes each document on one thread, so a batch
whose largest document holds more than 1/threads of its text leaves threads idle while that document is encoded
(a 1.4 MB source file takes about a second). Read batches are therefore joined until the largest document is at
most 1/threads of the batch: the other threads encode the rest beside it. Batching never changes a token: every
document is encoded whole and on its own, and stored in input order.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcli.encode.ahead import ReadAhead
from packcli.encode.crosscheck import TokenizerMismatch
from packcli.encode.documents import without_empty
from packcli.encode.encoders import Encoder
from packcli.encode.locate import locate_document
from packcli.encode.store import TokenStore
from packcli.read.fields import ReadCounts
from packcli.read.inputs import InputSlice, read_records
from packcli.util.progress import Reporter

__all__ = ["Tokenized", "balanced", "tokenize_corpus"]

# Batches encoded at once in helper threads; more only contend for the cores (measured: 2 was slower on short
# documents). Skewed batches are joined instead (balanced below).
IN_FLIGHT = 1
# Batches read and prepared ahead of the encoding, in a reading thread of its own (:mod:`packcli.encode.ahead`).
READ_AHEAD = 2
# A joined batch stops growing at this much text, so memory stays bounded whatever one document's size: a document
# over MAX_BATCH_CHARS / threads then leaves some threads idle for part of its encoding.
MAX_BATCH_CHARS = 8 << 20

# prepared documents, how far (bytes on disk) reading has come, their file, and each one's record (line or row)
Batch = tuple[list[Any], int, int, np.ndarray]


@dataclass(frozen=True)
class Tokenized:
    """Every document's tokens in a store, plus per-document lengths, documents per input file, the read counts,
    and each document's record in its file (its line or row, as an error there would name it)."""

    store: TokenStore
    lengths: np.ndarray
    counts: ReadCounts
    file_documents: np.ndarray  # int64, one per input file (or slice): the documents it gave, in order
    records: np.ndarray  # int64, one per document: its line (JSON Lines), record (.json) or row (tables), 1-based
    backend: dict[str, str] = field(default_factory=dict)  # the tokenizer backend that encoded (Backends.describe)


def tokenize_corpus(
    files: Sequence[Path | InputSlice],
    encoder: Encoder,
    skip_bad_records: bool,
    store_path: Path,
    reporter: Reporter,
    warn: Callable[[str], None],
    threads: int | None = None,
) -> Tokenized:
    """Tokenize every record of ``files`` (whole files, or the slices a partition plan cut) into a token store, in
    input order.

    A reading thread reads, parses and prepares batches ahead (:class:`~packcli.encode.ahead.ReadAhead`); batches
    are encoded in helper threads (the tokenizer releases the GIL) while this thread stores finished ones in order,
    so reading, encoding and storing overlap. An error while reading is raised here, as it was.
    """
    store = TokenStore(store_path, with_mask=encoder.supervised)
    lengths: list[np.ndarray] = []
    records: list[np.ndarray] = []
    counts = ReadCounts()
    read_counts = ReadCounts()  # the reading thread's own: merged into counts once it has ended
    slices = [item if isinstance(item, InputSlice) else InputSlice(item) for item in files]
    file_documents = np.zeros(len(slices), dtype=np.int64)
    reporter.start(sum(item.path.stat().st_size for item in slices))
    documents = 0

    def store_batch(encoded: Future[Any], bytes_done: int, file: int, numbers: np.ndarray) -> None:
        nonlocal documents
        try:
            result = encoded.result()
        except TokenizerMismatch as exc:  # name the document: its file, and its line found by reading it again
            exc.path, exc.line = slices[file].path, locate_document(slices[file], encoder, exc.document)
            raise
        (tokens, batch_lengths, mask), kept = without_empty(encoder.flatten(result, counts), counts)
        store.append(tokens, mask)
        lengths.append(batch_lengths)
        records.append(numbers[kept])
        documents += len(batch_lengths)
        file_documents[file] += len(batch_lengths)
        reporter.advance(bytes_done, documents, store.count)

    def batches() -> Iterator[Batch]:
        bytes_before = 0
        for file, item in enumerate(slices):
            path = item.path
            wanted, convert = encoder.fields, encoder.convert
            for batch in read_records(path, wanted, read_counts, skip_bad_records, warn, convert, item.span):
                prepared, kept = encoder.prepare(batch.columns, read_counts)
                if prepared:
                    yield prepared, bytes_before + batch.position, file, batch.records[kept]
            bytes_before += path.stat().st_size

    def joined() -> Iterator[Batch]:
        return balanced(batches(), encoder.sizes, threads or available_cores())

    try:
        with (
            ReadAhead(joined, READ_AHEAD, "packcli-read") as read,
            ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="packcli-encode") as pool,
        ):
            in_flight: deque[tuple[Future[Any], int, int, np.ndarray]] = deque()
            for prepared, bytes_done, file, numbers in read:
                in_flight.append((pool.submit(encoder.encode, prepared), bytes_done, file, numbers))
                if len(in_flight) > IN_FLIGHT:
                    store_batch(*in_flight.popleft())
            while in_flight:
                store_batch(*in_flight.popleft())
    except BaseException:
        store.remove()
        raise
    counts.add(read_counts)
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    all_records = np.concatenate(records) if records else np.zeros(0, dtype=np.int64)
    return Tokenized(store, all_lengths, counts, file_documents, all_records, encoder.backend)


def available_cores() -> int:
    """The cores this process may run on, as the tokenizer's thread pool counts them (its size without a thread
    count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def balanced(
    batches: Iterable[Batch], sizes: Callable[[Any], list[int]], threads: int, limit: int = MAX_BATCH_CHARS
) -> Iterator[Batch]:
    """Join consecutive batches of one file, in order, until the largest document holds at most 1/``threads`` of
    the batch's characters (or the batch reaches ``limit``, or the file ends), so every thread has work while the
    largest is encoded. A batch never spans two files: the documents each file gave are counted per batch.

    With ``threads`` 2 and document sizes [1, 1] [6, 1] [2] [3]: [1, 1] goes alone, [6, 1] + [2] + [3] go as one
    (12 characters, the 6 is half). Batches of short documents, the usual case, go as they come.

    Args:
        batches: prepared documents (never empty), how far reading has come (a joined batch has the last one's),
            the index of their file, and each document's record number (joined with them).
        sizes: each prepared document's size in characters.
        threads: the tokenizer's threads.
        limit: characters at which a batch goes whatever its balance.
    """
    held: list[Any] = []
    numbers: list[np.ndarray] = []
    total = largest = position = held_file = 0
    for prepared, batch_position, file, records in batches:
        if held and file != held_file:
            yield held, position, held_file, np.concatenate(numbers)
            held, numbers, total, largest = [], [], 0, 0
        lengths = sizes(prepared)
        held = held + prepared if held else prepared
        numbers.append(records)
        total += sum(lengths)
        largest = max(largest, max(lengths))
        position, held_file = batch_position, file
        if largest * threads <= total or total >= limit:
            yield held, position, held_file, np.concatenate(numbers)
            held, numbers, total, largest = [], [], 0, 0
    if held:
        yield held, position, held_file, np.concatenate(numbers)
