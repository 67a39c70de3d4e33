"""One job on any engine, the same for every run: read its inputs (the whole corpus, or a partition's slices),
tokenize (or take the tokens ``stats`` cached), mix, apply overflow, pack, order the rows, write its shards and
commit its part (:mod:`packcli.run.parts`). Only the job and a small result cross the engine, never tokens; a job
that fails raises, its files removed, its error naming its partition.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from packcli.encode import cache
from packcli.encode.chat import chat_totals
from packcli.encode.corpus import Tokenized, tokenize_corpus
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, use_threads
from packcli.errors import PackcliError, option
from packcli.format.manifest import part_manifest
from packcli.format.schema import shard_metadata, shard_schema
from packcli.options import PackOptions
from packcli.packing.order import shuffle_rows
from packcli.packing.overflow import Pieces, apply_overflow
from packcli.read.inputs import InputSlice
from packcli.run.parts import PartsArea, part_name
from packcli.run.sources import Source, mixed_stream, source_entries
from packcli.strategies import empty_packing, run_strategy
from packcli.util.arrays import exclusive_cumsum
from packcli.util.files import canonical_json
from packcli.util.memory import release_free_memory
from packcli.util.progress import Reporter, SilentReporter
from packcli.write.layout import Rows
from packcli.write.provenance import write_sources
from packcli.write.rows import Supervision, write_rows
from packcli.write.splits import shard_entries

__all__ = ["Job", "Shipped", "partition_seed", "run_job", "start_worker"]


@dataclass
class Shipped:
    """What the driver gives each worker once: its tokenizer (the ``tokenizer.json`` text travels, so every partition
    encodes with the same one), options and chat template; ``live``, the run's reporter and warnings, only in the
    driver's process; ``threads``, the worker's share of the cores (:func:`start_worker`)."""

    tokenizer: LoadedTokenizer | None
    options: PackOptions
    template: str | None = None
    live: tuple[Reporter, Callable[[str], None]] | None = None
    threads: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "live": None}  # a worker's jobs send their warnings back in their results


@dataclass(frozen=True)
class Job:
    """One job (a few kilobytes, whatever the corpus size): what to read, how to pack, where to write."""

    partition: int
    inputs: tuple[InputSlice, ...]
    names: tuple[str, ...]  # each input's name in the manifest (``<stdin>`` for standard input's spool)
    staging: Path  # where the run's parts go: a directory every worker sees, or a prefix in a store
    facts: dict[str, Any]  # what every part of the run agrees on (packcli.format.manifest.part_facts)
    manifest: dict[str, Any]  # the manifest keys the run's output and parts share (packcli.format.manifest.run_keys)
    sources: list[Source] | None = None  # a mixed run: its sources (one job reads the whole corpus)
    cache_key: str | None = None  # the tokenization cache's key, where the tokens `stats` left may be used
    resumable: bool = True  # a partition: its own seed and shard names, committed for a rerun to reuse


def partition_seed(seed: int, partition: int) -> int:
    """The seed of one partition: a stable hash of (run seed, partition id), the same on every machine."""
    digest = hashlib.sha256(f"packcli-partition:{seed}:{partition}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def start_worker(shipped: Shipped, threads: int | None) -> Shipped:
    """Start a worker process or actor (once): its threads, and its encoder's backends built for every job and any
    worker forked from it (the driver's own process builds nothing: tokens from the cache need no fast backend)."""
    use_threads(threads)
    if shipped.live is None:
        make_encoder(shipped.options, shipped.tokenizer, template_source=shipped.template, built=True)
    return replace(shipped, threads=threads)


def run_job(worker: Shipped, job: Job) -> tuple[dict[str, Any], list[str]]:
    """Run one job on a started worker: its part's manifest and the warnings it sends back. A failure propagates
    naming the job's partition, its part and node-local scratch removed first."""
    warnings: list[str] = []
    reporter, warn = worker.live or (SilentReporter(), warnings.append)
    area = PartsArea(job.staging)
    try:
        manifest = _build_part(job, area, worker, reporter, warn)
    except BaseException as exc:
        area.clear(job.partition)
        if isinstance(exc, (PackcliError, OSError)):
            exc.partition = job.partition  # type: ignore[union-attr]
        raise
    return manifest, warnings


_LEAST_BYTES_PER_TOKEN = 8  # input_ids and position_ids, int32 each; labels and cu_seqlens add to it


def _check_room_for_target(options: PackOptions, built: Path, shown: Path) -> None:
    """Refuse a ``--target-tokens`` whose shards cannot fit where they are written, before a record is read.

    Raises:
        PackcliError: naming the target, the least the shards take and the room there is.
    """
    need = (options.target_tokens or 0) * _LEAST_BYTES_PER_TOKEN
    free = shutil.disk_usage(built).free
    if need > free:
        raise PackcliError(
            f"{option('target_tokens', f'{options.target_tokens:,}')} makes at least {_gigabytes(need)} GB of shards "
            f"({_LEAST_BYTES_PER_TOKEN} bytes a token), more than the {_gigabytes(free)} GB free where they are "
            f"written ({shown}); ask for fewer tokens, or make room"
        )


def _gigabytes(size: int) -> str:
    """``size`` bytes in GB to one decimal, rounded down and exact: a float's rounding showed 8 * 10**29 bytes as
    799,999,999,999,999,868,928.0 GB."""
    tenths = size // 10**8
    return f"{tenths // 10:,}.{tenths % 10}"


def _build_part(
    job: Job, area: PartsArea, worker: Shipped, reporter: Reporter, warn: Callable[[str], None]
) -> dict[str, Any]:
    """Build one job's part (committed in ``area`` when the job is resumable); returns its manifest."""
    k, options, tokenizer = job.partition, worker.options, worker.tokenizer
    if job.resumable:
        options = replace(options, seed=partition_seed(options.seed, k))
    area.clear(k)  # what an earlier, interrupted attempt left
    built = area.build_path(k) if job.resumable else job.staging
    built.mkdir(parents=True, exist_ok=not job.resumable)
    _check_room_for_target(options, built, area.build_path(k).parent.parent)
    area.work_path(k).parent.mkdir(parents=True, exist_ok=True)
    cached = cache.load(job.cache_key, options.tokenizer_backend) if job.cache_key is not None else None
    # Tokens from the cache need no tokenizer run: the encoder then wraps Hugging Face's, already built.
    encoding = options if cached is None else replace(options, tokenizer_backend="hf")
    encoder = make_encoder(encoding, tokenizer, template_source=worker.template)
    tokenized = cached or tokenize_corpus(
        job.inputs, encoder, options.skip_bad_records, area.work_path(k), reporter, warn, worker.threads
    )
    part = {**job.facts, "partition": k, "read_documents": len(tokenized.lengths), "from_cache": cached is not None}
    prefix = f"{part_name(k)}-shard" if job.resumable else "shard"  # part-00003-shard-00000.arrow
    try:
        stream = None
        if job.sources is not None and len(tokenized.lengths):
            stream = mixed_stream(job.sources, tokenized.file_documents, tokenized.lengths, options)
        drawn = None if stream is None else stream.documents
        totals, entries, pieces = pack_tokens(
            tokenized, options, tokenizer, encoder, built, reporter, drawn, prefix, job.names
        )
    finally:
        if cached is None:
            tokenized.store.remove()
        else:
            tokenized.store.close()
    sources = None
    if job.sources is not None and stream is not None:
        sources = source_entries(job.sources, stream, tokenized.file_documents, tokenized.lengths, pieces)
    # the backend that encoded (for tokens from the cache, the one that encoded them there): outside the fingerprint
    manifest = part_manifest(job.manifest, part, tokenized.backend, totals, entries, sources)
    if job.resumable:
        area.commit(k, manifest)
    else:
        area.clear(k)  # its token store's directory and scratch: the shards are in place
    read: dict[str, Any] = json.loads(canonical_json(manifest))  # as a committed part's is read: keys in order
    return read


def pack_tokens(
    tokenized: Tokenized,
    options: PackOptions,
    tokenizer: LoadedTokenizer | None,
    encoder: Encoder,
    directory: Path,
    reporter: Reporter,
    drawn: np.ndarray | None,
    prefix: str,
    names: Sequence[str],
) -> tuple[dict[str, int], list[dict[str, Any]], Pieces]:
    """Overflow -> pack -> shuffle rows -> write ``{prefix}-NNNNN.arrow`` into ``directory`` (``drawn``: a mixed
    run's documents, in order): the manifest's totals, its shard entries and the pieces packed."""
    lengths, starts = tokenized.lengths, None
    if drawn is not None:
        lengths, starts = lengths[drawn], exclusive_cumsum(lengths)[drawn]
    pieces, overflow = apply_overflow(lengths, options.max_len, options.overflow_policy, starts)
    reporter.stage("packing")
    packing = empty_packing()
    if len(pieces.length):
        packing = run_strategy(options.strategy, pieces.length, options.max_len, options.seed, options.window)
    if options.shuffle:
        packing = shuffle_rows(packing, options.seed)
    reporter.stage("writing")
    # What tokenizing freed goes back to the system before the shards' buffers, the run's peak, are taken: glibc
    # keeps freed blocks of up to 32 MiB resident (gcide / Tekken: 339 MiB against 348)
    release_free_memory()
    metadata = shard_metadata(options.max_len, tokenizer.sha256 if tokenizer is not None else None, encoder.eos_id)
    store = tokenized.store
    store.finish()
    supervised = encoder.supervised
    schema = shard_schema(metadata, labels=supervised, positions=options.position_ids)
    supervision = Supervision() if supervised else None
    rows = Rows.packed(pieces.start, pieces.length, pieces.document, packing.order, packing.offsets)
    mask = store.gather_mask if store.has_mask else None
    shards = []
    if len(packing):
        shards = write_rows(directory, store.gather, mask, rows, schema, options.shard_size, supervision, prefix)
    totals = {
        "documents": len(pieces.length),
        "tokens": int(pieces.length.sum()),
        "sequences": len(packing),
        "input_documents": len(lengths),
        "input_tokens": int(lengths.sum()),
        "bad_records": tokenized.counts.bad_records,
        "empty_documents": tokenized.counts.empty_documents,
        **overflow.to_json(),
    }
    if supervision is not None:
        totals.update(asdict(supervision))
    totals.update(chat_totals(tokenized.counts, options))
    entries = shard_entries(directory, shards, rows, store.gather, mask)
    write_sources(directory, entries, rows, names, tokenized.file_documents, tokenized.records, drawn)
    return totals, entries, pieces
