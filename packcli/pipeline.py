"""``pack_corpus``: read -> tokenize -> overflow -> pack -> write shards -> manifest. The only module that knows the
stage order.

The output is built in a staging directory beside ``out`` and moved into place only once its manifest is written,
so an interrupted run never leaves an output that looks complete, and an existing output stays intact until then.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli import __version__
from packcli.errors import PackcliError
from packcli.layout import cu_seqlens, exclusive_cumsum, position_ids
from packcli.manifest import FORMAT_VERSION, fingerprint, read_manifest, shard_path, write_manifest
from packcli.options import PackOptions
from packcli.overflow import OverflowCounts, Pieces, apply_overflow
from packcli.progress import Reporter, SilentReporter
from packcli.shards import ShardInfo, ShardWriter, list_array, shard_schema
from packcli.sources import ReadCounts, find_inputs, read_texts
from packcli.store import TokenStore
from packcli.strategies import Packing, get_strategy, run_strategy
from packcli.tokenize import LoadedTokenizer, encode_texts, flatten, load_tokenizer, special_ids

# Rows are written in record batches of at most this many payload bytes (keeps int32 list offsets far from 2^31).
# Small enough that numpy's temporaries are recycled by the allocator instead of faulted in afresh.
BATCH_BYTES = 8 << 20


@dataclass(frozen=True)
class PackResult:
    """What ``pack_corpus`` did: ``status`` is "packed" or "up-to-date"."""

    out: Path
    status: str
    manifest: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object of ``packcli pack``."""
        return {
            "status": self.status,
            "out": str(self.out),
            "fingerprint": self.manifest["fingerprint"],
            "max_len": self.manifest["max_len"],
            "strategy": self.manifest["strategy"],
            "shards": len(self.manifest["shards"]),
            **self.manifest["totals"],
        }


@dataclass(frozen=True)
class Tokenized:
    """Every document's tokens in a store, plus per-document lengths and the read counts."""

    store: TokenStore
    lengths: np.ndarray
    counts: ReadCounts


def pack_corpus(
    inputs: list[str],
    options: PackOptions,
    out: Path,
    overwrite: bool = False,
    reporter: Reporter | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> PackResult:
    """Pack ``inputs`` into ``out`` (Arrow shards + manifest.json) under ``options``.

    An identical earlier run (same fingerprint, complete output) makes this a no-op with status "up-to-date".
    An existing output with another fingerprint is replaced only with ``overwrite``.
    """
    reporter = reporter or SilentReporter()
    files = find_inputs(inputs)
    get_strategy(options.strategy)  # an unknown strategy is a usage error before any work
    tokenizer = load_tokenizer(options.tokenizer, options.eos_token)
    special_ids(tokenizer, options.eos, options.bos)
    print_ = fingerprint(files, tokenizer.sha256, options.output_relevant())
    existing = _existing_output(out, print_)
    if existing == "same":
        return PackResult(out, "up-to-date", read_manifest(out))
    if existing == "other" and not overwrite:
        raise PackcliError("holds another output or other files; pass --overwrite to replace it", out)
    staging = out.parent / f".{out.name}.packcli-partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        manifest = _build(files, options, tokenizer, staging, print_, reporter, warn)
        _move_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return PackResult(out, "packed", manifest)


def _existing_output(out: Path, print_: str) -> str:
    """"absent" (nothing, or an empty directory), "same" (complete output, same fingerprint) or "other"."""
    if not out.exists():
        return "absent"
    if not out.is_dir():
        raise PackcliError("exists and is not a directory", out)
    if not any(out.iterdir()):
        return "absent"
    try:
        manifest = read_manifest(out)
    except PackcliError:
        return "other"
    if manifest.get("fingerprint") != print_:
        return "other"
    for shard in manifest.get("shards", []):
        path = shard_path(out, shard.get("file"))
        if not path.is_file() or path.stat().st_size != shard.get("bytes"):
            return "other"
    return "same"


def _move_into_place(staging: Path, out: Path) -> None:
    if out.exists():
        old = out.parent / f".{out.name}.packcli-old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old)
    else:
        os.replace(staging, out)


def tokenize_corpus(
    files: list[Path],
    options: PackOptions,
    tokenizer: LoadedTokenizer,
    store_path: Path,
    reporter: Reporter,
    warn: Callable[[str], None],
) -> Tokenized:
    """Tokenize every non-empty text of ``files`` into a token store, in input order.

    One batch is encoded in a helper thread (the tokenizer releases the GIL) while this thread reads the next
    and stores the previous, so reading and storing hide behind tokenization.
    """
    eos_id, bos_id = special_ids(tokenizer, options.eos, options.bos)
    store = TokenStore(store_path)
    lengths: list[np.ndarray] = []
    counts = ReadCounts()
    reporter.start(sum(path.stat().st_size for path in files))
    documents = 0

    def store_batch(encoded: Future[list[list[int]]], bytes_done: int) -> None:
        nonlocal documents
        tokens, batch_lengths = flatten(encoded.result(), eos_id, bos_id)
        store.append(tokens)
        lengths.append(batch_lengths)
        documents += len(batch_lengths)
        reporter.advance(bytes_done, documents, store.count)

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="packcli-encode") as encoder:
            in_flight: tuple[Future[list[list[int]]], int] | None = None
            for texts, bytes_done in _text_batches(files, options, counts, warn):
                encoded = encoder.submit(encode_texts, tokenizer.tokenizer, texts)
                if in_flight is not None:
                    store_batch(*in_flight)
                in_flight = (encoded, bytes_done)
            if in_flight is not None:
                store_batch(*in_flight)
    except BaseException:
        store.remove()
        raise
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return Tokenized(store, all_lengths, counts)


def _text_batches(
    files: list[Path], options: PackOptions, counts: ReadCounts, warn: Callable[[str], None]
) -> Iterator[tuple[list[str], int]]:
    """Non-empty text batches of every file in order, with the input bytes read so far."""
    bytes_before = 0
    for path in files:
        for batch in read_texts(path, options.text_field, counts, options.skip_bad_records, warn):
            if batch.texts:
                yield batch.texts, bytes_before + batch.position
        bytes_before += path.stat().st_size


def _build(
    files: list[Path],
    options: PackOptions,
    tokenizer: LoadedTokenizer,
    staging: Path,
    print_: str,
    reporter: Reporter,
    warn: Callable[[str], None],
) -> dict[str, Any]:
    tokenized = tokenize_corpus(files, options, tokenizer, staging / "tokens.tmp", reporter, warn)
    try:
        if len(tokenized.lengths) == 0:
            raise PackcliError(
                f"no documents: the input holds no non-empty {options.text_field!r} text "
                f"({tokenized.counts.empty_documents} empty, {tokenized.counts.bad_records} bad records)",
                files[0] if len(files) == 1 else None,
            )
        pieces, overflow = apply_overflow(tokenized.lengths, options.max_len, options.overflow)
        if len(pieces.length) == 0:
            raise PackcliError(f"every document is longer than --max-len {options.max_len} and --overflow drop")
        reporter.stage("packing")
        packing = run_strategy(options.strategy, pieces.length, options.max_len, options.seed, options.window)
        reporter.stage("writing")
        metadata = {
            "packcli.format_version": str(FORMAT_VERSION),
            "packcli.max_len": str(options.max_len),
            "packcli.tokenizer_sha256": tokenizer.sha256,
        }
        tokenized.store.finish()
        shards = write_shards(staging, tokenized.store, pieces, packing, shard_schema(metadata), options.shard_size)
    finally:
        tokenized.store.remove()
    reporter.close()
    manifest = _manifest(files, options, tokenizer, print_, tokenized, pieces, overflow, packing, shards)
    write_manifest(staging, manifest)
    return manifest


def write_shards(
    directory: Path, store: TokenStore, pieces: Pieces, packing: Packing, schema: pa.Schema, shard_size: int
) -> list[ShardInfo]:
    """Gather each row's tokens from the store and write the rows, in packing order, as rolling shards."""
    lengths = pieces.length[packing.order]
    starts = pieces.start[packing.order]
    row_tokens = np.diff(exclusive_cumsum(lengths)[packing.offsets])
    row_documents = np.diff(packing.offsets)
    row_bytes = 8 * row_tokens + 4 * (row_documents + 1) + 12
    # Batch k holds the rows whose bytes start in [k * budget, (k + 1) * budget): deterministic and vectorized.
    budget = min(shard_size, BATCH_BYTES)
    batch_of_row = (np.cumsum(row_bytes) - row_bytes) // budget
    cuts = np.concatenate(([0], np.nonzero(np.diff(batch_of_row))[0] + 1, [len(row_bytes)]))
    with ShardWriter(directory, schema, shard_size) as writer:
        for first, last in zip(cuts[:-1], cuts[1:]):
            row_offsets = packing.offsets[first : last + 1] - packing.offsets[first]
            docs = slice(packing.offsets[first], packing.offsets[last])
            batch = _row_batch(store, starts[docs], lengths[docs], row_offsets, schema)
            writer.write(batch, int(row_offsets[-1]), int(row_tokens[first:last].sum()), int(row_bytes[first:last].sum()))
    return writer.shards


def _row_batch(
    store: TokenStore, starts: np.ndarray, lengths: np.ndarray, row_offsets: np.ndarray, schema: pa.Schema
) -> pa.RecordBatch:
    """One record batch of rows whose pieces (start, length) are listed in row order."""
    token_offsets = exclusive_cumsum(lengths)[row_offsets]
    cu_values, cu_offsets = cu_seqlens(lengths, row_offsets)
    columns = [
        list_array(token_offsets, store.gather(starts, lengths)),
        list_array(token_offsets, position_ids(lengths)),
        list_array(cu_offsets, cu_values),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _manifest(
    files: list[Path],
    options: PackOptions,
    tokenizer: LoadedTokenizer,
    print_: str,
    tokenized: Tokenized,
    pieces: Pieces,
    overflow: OverflowCounts,
    packing: Packing,
    shards: list[ShardInfo],
) -> dict[str, Any]:
    totals = {
        "documents": len(pieces.length),
        "tokens": int(pieces.length.sum()),
        "sequences": len(packing),
        "input_documents": len(tokenized.lengths),
        "input_tokens": int(tokenized.lengths.sum()),
        "bad_records": tokenized.counts.bad_records,
        "empty_documents": tokenized.counts.empty_documents,
        **overflow.to_json(),
    }
    return {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "fingerprint": print_,
        "options": options.to_json(),
        "inputs": [{"path": str(path), "bytes": path.stat().st_size} for path in files],
        "tokenizer": tokenizer.describe(),
        "max_len": options.max_len,
        "strategy": options.strategy,
        "columns": list(shard_schema({}).names),
        "totals": totals,
        "shards": [shard.to_json() for shard in shards],
    }
