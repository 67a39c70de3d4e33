"""One local run, the same for every run and engine: read its inputs (a whole corpus, or a partition's slices),
tokenize (or take the tokens ``stats`` left in the cache), draw a mixture, apply overflow, pack, order the rows,
write its shards, then commit its part (:mod:`packcli.run.parts`): a small output whose manifest is written last.

A plain run is one such job in-process, its shards ``shard-NNNNN.arrow``; a partitioned run has one per partition,
``part-NNNNN-shard-MMMMM.arrow``, in worker processes or Ray actors: what crosses the engine is the job (inputs,
options, where its part goes: a directory, or a prefix in a store) and a small result; tokens only ever go from the
inputs to files. In a worker, a failure is
returned, not raised, as a :class:`Failure` naming file and line (exceptions lose their fields when pickled across
processes, and the other partitions' committed work must survive it).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from packcli.encode import cache
from packcli.encode.corpus import Tokenized, tokenize_corpus
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, document_tokenizer, use_threads
from packcli.errors import PackcliError
from packcli.format.schema import shard_metadata, shard_schema
from packcli.options import PackOptions
from packcli.packing.order import shuffle_rows
from packcli.packing.overflow import Pieces, apply_overflow
from packcli.read.inputs import InputSlice
from packcli.run.parts import PartsArea
from packcli.run.sources import Source, mixed_stream, source_entries
from packcli.strategies import empty_packing, run_strategy
from packcli.util.arrays import exclusive_cumsum
from packcli.util.progress import Reporter, SilentReporter
from packcli.write.provenance import write_sources
from packcli.write.rows import Supervision, write_rows
from packcli.write.splits import shard_entries, split_pieces

__all__ = [
    "Failure",
    "Job",
    "JobResult",
    "Packed",
    "ShippedTokenizer",
    "pack_tokens",
    "partition_seed",
    "run_job",
    "run_local",
    "start_worker",
]


class ShippedTokenizer:
    """A loaded tokenizer as the ``tokenizer.json`` text a worker rebuilds it from: the driver's tokenizer, never a
    worker's own file or hub lookup, so every partition encodes with exactly the same one (and its backend, chosen
    by the run's ``--tokenizer-backend`` from that same text). In the driver's own process (the in-process engine)
    :meth:`load` gives back the driver's tokenizer itself."""

    def __init__(self, loaded: LoadedTokenizer) -> None:
        self.json = loaded.source
        # the other fields of LoadedTokenizer: name, hashes, vocab size, EOS/BOS ids, config
        self.facts = {f.name: getattr(loaded, f.name) for f in fields(loaded) if f.name not in ("tokenizer", "source")}
        self._loaded: LoadedTokenizer | None = loaded

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loaded": None}  # only the text travels

    def load(self) -> LoadedTokenizer:
        """The tokenizer (built once per worker process or actor, whatever the number of its jobs)."""
        if self._loaded is None:
            self._loaded = LoadedTokenizer(tokenizer=document_tokenizer(self.json), source=self.json, **self.facts)
        return self._loaded


@dataclass(frozen=True)
class Job:
    """One local run (a few kilobytes, whatever the corpus size): what to read, how to pack, where to write."""

    partition: int
    inputs: tuple[Path | InputSlice, ...]
    options: PackOptions  # the seed is this job's (a partition's own, derived from the run's)
    staging: Path  # where the run's parts go: a directory every worker sees, or a prefix in a store
    facts: dict[str, Any]  # what every part of the run agrees on (see packcli.run.merge.run_facts)
    manifest: dict[str, Any]  # the part manifest's run-wide keys (format and packcli versions, options, tokenizer, ...)
    prefix: str = "shard"  # shard names: shard-NNNNN.arrow, or part-NNNNN-shard-MMMMM.arrow
    sources: tuple[Source, ...] | None = None  # a mixed run: its sources (one job reads the whole corpus)
    cache_key: str | None = None  # the tokenization cache's key, where the tokens `stats` left may be used
    chat_template: str | None = None  # the --chat-template file's text as the driver read it: no worker opens its path
    input_names: dict[str, str] = field(default_factory=dict)  # input path -> the name the manifest gives it

    def names(self) -> list[str]:
        """The name of each of the job's inputs (``<stdin>`` for standard input's spool), for its source index."""
        paths = [str(item.path if isinstance(item, InputSlice) else item) for item in self.inputs]
        return [self.input_names.get(path, path) for path in paths]


@dataclass(frozen=True)
class Failure:
    """Why a job failed: the error's message, file, line and exit code; for an I/O error, its errno (a full disk is
    the driver's to say, naming the output)."""

    message: str
    path: str | None
    line: int | None
    exit_code: int
    errno: int | None = None


@dataclass(frozen=True)
class JobResult:
    """A finished job: its totals (from its committed part), or its failure; warnings either way."""

    partition: int
    totals: dict[str, int] | None
    warnings: list[str]
    failure: Failure | None = None


def partition_seed(seed: int, partition: int) -> int:
    """The seed of one partition: a stable hash of (run seed, partition id), the same on every machine."""
    digest = hashlib.sha256(f"packcli-partition:{seed}:{partition}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


_worker_tokenizer: LoadedTokenizer | None = None  # a worker process's tokenizer (None: pre-tokenized records)
_worker_threads: int | None = None  # its tokenizer threads: its share of the cores, as its engine gave it


def start_worker(shipped: ShippedTokenizer | None, threads: int | None) -> None:
    """Start a worker process or actor (its engine calls this once): its thread count, the driver's tokenizer."""
    global _worker_tokenizer, _worker_threads
    _worker_threads = threads
    use_threads(threads)
    _worker_tokenizer = shipped.load() if shipped is not None else None


def run_job(job: Job) -> JobResult:
    """:func:`run_local` in a worker, with the tokenizer :func:`start_worker` loaded; a data or I/O error becomes a
    Failure (the job's own files removed by :func:`run_local`)."""
    warnings: list[str] = []
    try:
        totals = run_local(job, _worker_tokenizer, SilentReporter(), warnings.append, _worker_threads)
    except (PackcliError, OSError) as exc:
        failure = (
            Failure(exc.message, exc.path, exc.line, exc.exit_code)
            if isinstance(exc, PackcliError)
            else Failure(exc.strerror or str(exc), exc.filename, None, 1, exc.errno)
        )
        return JobResult(job.partition, None, warnings, failure)
    return JobResult(job.partition, totals, warnings)


def run_local(
    job: Job,
    tokenizer: LoadedTokenizer | None,
    reporter: Reporter,
    warn: Callable[[str], None],
    threads: int | None = None,
) -> dict[str, int]:
    """Run one job and commit its part; returns its totals. Errors propagate, the job's part and node-local scratch
    removed first (no run comes back for what a failed one left there). ``threads``: the tokenizer's (None: every
    core)."""
    area = PartsArea(job.staging)
    try:
        return _build_part(job, area, tokenizer, reporter, warn, threads)
    except BaseException:
        area.clear(job.partition)
        raise


_LEAST_BYTES_PER_TOKEN = 8  # input_ids and position_ids, int32 each; labels and cu_seqlens add to it


def _check_room_for_target(options: PackOptions, built: Path) -> None:
    """Refuse a ``--target-tokens`` whose shards cannot fit where they are written, before any record is read: a
    run would otherwise tokenize, draw and write until the disk is full.

    Raises:
        PackcliError: naming the target, the least the shards take and the room there is.
    """
    if options.target_tokens is None:
        return
    need = options.target_tokens * _LEAST_BYTES_PER_TOKEN
    free = shutil.disk_usage(built).free
    if need > free:
        raise PackcliError(
            f"--target-tokens {options.target_tokens:,} makes at least {need / 1e9:,.1f} GB of shards "
            f"({_LEAST_BYTES_PER_TOKEN} bytes a token), more than the {free / 1e9:,.1f} GB free where they are "
            f"written ({built.parent.parent}); ask for fewer tokens, or make room"
        )


def _build_part(
    job: Job,
    area: PartsArea,
    tokenizer: LoadedTokenizer | None,
    reporter: Reporter,
    warn: Callable[[str], None],
    threads: int | None,
) -> dict[str, int]:
    """Build and commit one job's part in ``area``; returns its totals."""
    k, options = job.partition, job.options
    area.clear(k)  # what an earlier, interrupted attempt left
    built = area.build_path(k)
    built.mkdir(parents=True)
    _check_room_for_target(options, built)
    area.work_path(k).parent.mkdir(parents=True, exist_ok=True)
    use_threads(threads)
    cached = cache.load(job.cache_key, options.tokenizer_backend) if job.cache_key is not None else None
    # its set-up warnings were the driver's to give, once. Tokens from the cache need no tokenizer run: the encoder
    # then wraps Hugging Face's, already built, and waits for no build.
    encoding = options if cached is None else replace(options, tokenizer_backend="hf")
    encoder = make_encoder(encoding, tokenizer, template_source=job.chat_template)
    tokenized = cached or tokenize_corpus(
        job.inputs, encoder, options.skip_bad_records, area.work_path(k), reporter, warn, threads
    )
    part = {**job.facts, "partition": k, "read_documents": len(tokenized.lengths), "from_cache": cached is not None}
    try:
        stream = None
        if job.sources is not None and len(tokenized.lengths):
            stream = mixed_stream(list(job.sources), tokenized.file_documents, tokenized.lengths, options)
        drawn = None if stream is None else stream.documents
        packed = pack_tokens(tokenized, options, tokenizer, encoder, built, reporter, drawn, job.prefix, job.names())
    finally:
        if cached is None:
            tokenized.store.remove()
        else:
            tokenized.store.close()
    # the backend that encoded (for tokens from the cache, the one that encoded them there): outside the fingerprint
    tokenizer_entry = {**job.manifest["tokenizer"], **tokenized.backend}
    manifest = {**job.manifest, "tokenizer": tokenizer_entry, "totals": packed.totals, "part": part}
    manifest["shards"] = packed.entries
    if job.sources is not None and stream is not None:
        manifest["sources"] = source_entries(
            list(job.sources), stream, tokenized.file_documents, tokenized.lengths, packed.pieces
        )
    area.commit(k, manifest)
    return packed.totals


@dataclass(frozen=True)
class Packed:
    """What one local run wrote: its manifest totals, its shards' manifest entries (with their sidecars, where the
    pieces of split documents landed: :mod:`packcli.write.splits`), and the pieces it packed."""

    totals: dict[str, int]
    entries: list[dict[str, Any]]
    pieces: Pieces


def pack_tokens(
    tokenized: Tokenized,
    options: PackOptions,
    tokenizer: LoadedTokenizer | None,
    encoder: Encoder,
    directory: Path,
    reporter: Reporter,
    drawn: np.ndarray | None = None,
    prefix: str = "shard",
    names: Sequence[str] = (),
) -> Packed:
    """Overflow -> pack -> shuffle rows -> write: one local run on a tokenized corpus, its shards written into
    ``directory`` and named ``{prefix}-NNNNN.arrow``. A single-process run calls it on the whole corpus (``drawn``:
    the documents a mixed run drew, in order), a partition on its slices (with the partition's seed). ``names``:
    each input file's name, for the shards' source index. No documents, no shards."""
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
    metadata = shard_metadata(options.max_len, tokenizer.sha256 if tokenizer is not None else None, encoder.eos_id)
    tokenized.store.finish()
    supervised = encoder.supervised
    schema = shard_schema(metadata, labels=supervised, positions=options.position_ids)
    supervision = Supervision() if supervised else None
    shards = []
    if len(packing):
        store, size = tokenized.store, options.shard_size
        shards = write_rows(directory, store, pieces, packing, schema, size, supervision, prefix)
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
    if options.messages_field is not None:
        totals["special_text_messages"] = tokenized.counts.special_text_messages
    entries = shard_entries(directory, shards, split_pieces(pieces, packing, shards), tokenized.store, pieces)
    write_sources(directory, entries, tokenized, names, pieces, packing, drawn)
    return Packed(totals, entries, pieces)
