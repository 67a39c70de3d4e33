"""One job on any engine, the same for every run: read its inputs (a whole corpus, or a partition's slices),
tokenize (or take the tokens ``stats`` left in the cache), draw a mixture, apply overflow, pack, order the rows,
write its shards, then commit its part (:mod:`packcli.run.parts`): a small output whose manifest is written last.

A plain run is one job, on the in-process engine, that writes its shards ``shard-NNNNN.arrow`` straight into the
output being staged (nothing to resume: its manifest goes back to the driver in its result); a partitioned run has
one per partition, ``part-NNNNN-shard-MMMMM.arrow``, in worker processes or Ray actors, each committing its part for
a rerun to reuse. What crosses the engine is the job (inputs, options, where its part goes: a directory, or a prefix
in a store) and a small result; tokens only ever go from the inputs to files. A job that fails raises, its own files
removed; its error carries the partition, and reaches the driver whole (a
:class:`~packcli.errors.PackcliError` keeps file, line and exit code through pickling).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from packcli.encode import cache
from packcli.encode.chat import chat_totals
from packcli.encode.corpus import Tokenized, tokenize_corpus
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, use_threads
from packcli.errors import PackcliError
from packcli.format.manifest import part_manifest
from packcli.format.schema import shard_metadata, shard_schema
from packcli.options import PackOptions
from packcli.packing.order import shuffle_rows
from packcli.packing.overflow import Pieces, apply_overflow
from packcli.read.inputs import InputSlice
from packcli.run.parts import PartsArea
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

__all__ = [
    "Job",
    "JobResult",
    "Packed",
    "Shipped",
    "Worker",
    "pack_tokens",
    "partition_seed",
    "run_job",
    "start_worker",
]


class Shipped:
    """What the driver gives each worker once: its tokenizer, as the ``tokenizer.json`` text a worker rebuilds it
    from (the driver's tokenizer, never a worker's own file or hub lookup, so every partition encodes with exactly
    the same one, and its backend, chosen by the run's ``--tokenizer-backend`` from that same text), the options
    and chat template its encoders are built from, and ``live``: the run's reporter and warnings, for a job in the
    driver's own process. Only the text and options travel: a worker's jobs report nothing and send their warnings
    back in their results."""

    def __init__(
        self,
        loaded: LoadedTokenizer | None,
        options: PackOptions,
        template: str | None = None,
        live: tuple[Reporter, Callable[[str], None]] | None = None,
    ) -> None:
        self.json = loaded.source if loaded is not None else None
        # the other fields of LoadedTokenizer: name, hashes, vocab size, EOS/BOS ids, config
        kept = [f.name for f in fields(LoadedTokenizer) if f.name != "source"]
        self.facts = {name: getattr(loaded, name) for name in kept} if loaded is not None else {}
        self.options, self.template, self.live = options, template, live
        self._loaded = loaded

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loaded": None, "live": None}  # the text travels; the process's own things stay

    def load(self) -> LoadedTokenizer | None:
        """The tokenizer (built once per worker process or actor, whatever the number of its jobs); None for
        pre-tokenized records."""
        if self._loaded is None and self.json is not None:
            self._loaded = LoadedTokenizer(source=self.json, **self.facts)
        return self._loaded


@dataclass(frozen=True)
class Job:
    """One job (a few kilobytes, whatever the corpus size): what to read, how to pack, where to write."""

    partition: int
    inputs: tuple[Path | InputSlice, ...]
    options: PackOptions  # the seed is this job's (a partition's own, derived from the run's)
    staging: Path  # where the run's parts go: a directory every worker sees, or a prefix in a store
    facts: dict[str, Any]  # what every part of the run agrees on (packcli.format.manifest.part_facts)
    manifest: dict[str, Any]  # the manifest keys the run's output and parts share (packcli.format.manifest.run_keys)
    prefix: str = "shard"  # shard names: shard-NNNNN.arrow, or part-NNNNN-shard-MMMMM.arrow
    sources: tuple[Source, ...] | None = None  # a mixed run: its sources (one job reads the whole corpus)
    cache_key: str | None = None  # the tokenization cache's key, where the tokens `stats` left may be used
    chat_template: str | None = None  # the --chat-template file's text as the driver read it: no worker opens its path
    input_names: dict[str, str] = field(default_factory=dict)  # input path -> the name the manifest gives it
    resumable: bool = True  # commit a part a rerun may reuse; else write the shards straight into ``staging``

    def names(self) -> list[str]:
        """The name of each of the job's inputs (``<stdin>`` for standard input's spool), for its source index."""
        paths = [str(item.path if isinstance(item, InputSlice) else item) for item in self.inputs]
        return [self.input_names.get(path, path) for path in paths]


@dataclass(frozen=True)
class JobResult:
    """A finished job: its part's manifest (committed, for a resumable job) and the warnings it sent back."""

    partition: int
    manifest: dict[str, Any]
    warnings: list[str]


def partition_seed(seed: int, partition: int) -> int:
    """The seed of one partition: a stable hash of (run seed, partition id), the same on every machine."""
    digest = hashlib.sha256(f"packcli-partition:{seed}:{partition}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class Worker:
    """A worker's state, made once by :func:`start_worker`: what it was shipped, its tokenizer, its threads (its
    share of the cores, as its engine gave it)."""

    shipped: Shipped
    tokenizer: LoadedTokenizer | None
    threads: int | None


def start_worker(shipped: Shipped, threads: int | None) -> Worker:
    """Start a worker process or actor (its engine calls this once): its thread count, and the driver's tokenizer
    with its encoder's backends built (the fast backend's build is cached per process), so that a worker forked
    from this one, and every job here, finds them built. In the driver's own process, nothing is built before a
    job asks for it (tokens from the cache need no fast backend)."""
    use_threads(threads)
    loaded = shipped.load()
    if shipped.live is None:
        make_encoder(shipped.options, loaded, template_source=shipped.template, built=True)
    return Worker(shipped, loaded, threads)


def run_job(worker: Worker, job: Job) -> JobResult:
    """Run one job with what :func:`start_worker` loaded; returns its part's manifest. A failure propagates, naming
    the job's partition, its part and node-local scratch removed first (no run comes back for what a failed one
    left there)."""
    warnings: list[str] = []
    reporter, warn = worker.shipped.live or (SilentReporter(), warnings.append)
    area = PartsArea(job.staging)
    try:
        manifest = _build_part(job, area, worker.tokenizer, reporter, warn, worker.threads)
    except BaseException as exc:
        area.clear(job.partition)
        if isinstance(exc, PackcliError):
            exc.partition = job.partition
        elif isinstance(exc, OSError):
            exc.partition = job.partition  # type: ignore[attr-defined]
        raise
    return JobResult(job.partition, manifest, warnings)


_LEAST_BYTES_PER_TOKEN = 8  # input_ids and position_ids, int32 each; labels and cu_seqlens add to it


def _check_room_for_target(options: PackOptions, built: Path, shown: Path) -> None:
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
            f"written ({shown}); ask for fewer tokens, or make room"
        )


def _build_part(
    job: Job,
    area: PartsArea,
    tokenizer: LoadedTokenizer | None,
    reporter: Reporter,
    warn: Callable[[str], None],
    threads: int | None,
) -> dict[str, Any]:
    """Build one job's part (committed in ``area`` when the job is resumable); returns its manifest."""
    k, options = job.partition, job.options
    area.clear(k)  # what an earlier, interrupted attempt left
    built = area.build_path(k) if job.resumable else job.staging
    built.mkdir(parents=True, exist_ok=not job.resumable)
    _check_room_for_target(options, built, area.build_path(k).parent.parent)
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
    sources = None
    if job.sources is not None and stream is not None:
        sources = source_entries(list(job.sources), stream, tokenized.file_documents, tokenized.lengths, packed.pieces)
    # the backend that encoded (for tokens from the cache, the one that encoded them there): outside the fingerprint
    manifest = part_manifest(job.manifest, part, tokenized.backend, packed.totals, packed.entries, sources)
    if job.resumable:
        area.commit(k, manifest)
    else:
        area.clear(k)  # its token store's directory and scratch: the shards are in place
    read: dict[str, Any] = json.loads(canonical_json(manifest))  # as a committed part's is read: keys in order
    return read


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
    # What tokenizing freed (its batches, the builds' leftovers) back to the system before the shards' buffers, the
    # run's peak, are taken: glibc keeps freed blocks of up to 32 MiB resident (gcide / Tekken: 339 MiB against 348)
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
    return Packed(totals, entries, pieces)
