"""``pack_corpus``: read -> tokenize -> mix (with --weights) -> overflow -> pack -> shuffle rows -> write shards ->
manifest. The only module that knows the stage order.

The output is built in a staging directory beside ``out`` and moved into place only once its manifest is written,
so an interrupted run never leaves an output that looks complete, and an existing output stays intact until then.
A partitioned run (``--partitions``) runs the same stages, :func:`pack_tokens` included, once per partition and
merges the parts (:mod:`packcli.engines.driver`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcli import __version__
from packcli.encode import cache
from packcli.encode.corpus import Tokenized, tokenize_corpus
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.errors import PackcliError, UsageError, path_name
from packcli.identity import run_identity
from packcli.options import PackOptions
from packcli.plan.order import shuffle_rows
from packcli.plan.overflow import Pieces, apply_overflow
from packcli.plan.sources import Source, group_inputs, mixed_stream, source_entries
from packcli.read.inputs import find_inputs
from packcli.report.progress import Reporter, SilentReporter
from packcli.storage import UrlPath
from packcli.storage.publish import RemotePublication
from packcli.strategies import empty_packing, get_strategy, run_strategy
from packcli.write.layout import exclusive_cumsum
from packcli.write.manifest import FORMAT_VERSION, read_manifest, write_manifest
from packcli.write.publish import Publication
from packcli.write.rows import Supervision, write_rows
from packcli.write.shards import ShardInfo, shard_schema
from packcli.write.splits import shard_entries, split_pieces

__all__ = [
    "PackResult",
    "Setup",
    "base_manifest",
    "check_documents",
    "pack_corpus",
    "pack_tokens",
    "set_up",
    "tokenizer_entry",
]


@dataclass(frozen=True)
class Setup:
    """What ``pack`` and ``stats`` both start from: the resolved inputs, the tokenizer and the encoder."""

    files: list[Path]
    options: PackOptions
    tokenizer: LoadedTokenizer | None  # None: pre-tokenized records and no --tokenizer
    encoder: Encoder
    sources: list[Source] | None = None  # mixed runs: one source per INPUT, its files in ``files`` order
    unread_files: int = 0  # files found beside the inputs that packcli does not read (named in a warning)

    def fingerprint(self, plan_hash: str | None = None) -> str:
        """The output's identity (see :mod:`packcli.identity`); a mixed run's grouping of files is part of it, and
        a partitioned run's plan."""
        extra: dict[str, Any] = {}
        if self.sources is not None:
            extra["sources"] = [len(source.files) for source in self.sources]
        if plan_hash is not None:
            extra["partition_plan"] = plan_hash
        return run_identity(self.files, self.tokenizer, self.encoder, self.options, "output", extra)

    def cache_key(self) -> str:
        """The tokenization cache's key: the identity over what decides the tokens."""
        return run_identity(self.files, self.tokenizer, self.encoder, self.options, "tokens")[:32]


def set_up(inputs: list[str], options: PackOptions, warn: Callable[[str], None] = lambda message: None) -> Setup:
    """Resolve the inputs, check the strategy, load the tokenizer and build the encoder: every usage error that
    can be found before reading a record is raised here."""
    sources = group_inputs(inputs, options.weights, warn) if options.mixing else None
    if sources is not None:
        files = [path for source in sources for path in source.files]
        unread = sum(source.unread for source in sources)
    else:
        found = find_inputs(inputs, warn)
        files, unread = found.files, len(found.unread)
    get_strategy(options.strategy)
    pretokenized = options.ids_field is not None and options.tokenizer is None
    tokenizer = None if pretokenized else load_tokenizer(options.tokenizer, options.eos_token)
    return Setup(files, options, tokenizer, make_encoder(options, tokenizer, warn), sources, unread)


@dataclass(frozen=True)
class PackResult:
    """What ``pack_corpus`` did: ``status`` is "packed" or "up-to-date"."""

    out: Path
    status: str
    manifest: dict[str, Any]
    from_cache: bool = False  # the tokens came from the tokenization cache that `stats` left
    details: dict[str, Any] = field(default_factory=dict)  # a partitioned run's partition counts and packing gap

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object of ``packcli pack``."""
        return {
            "status": self.status,
            "out": str(self.out),
            "fingerprint": self.manifest["fingerprint"],
            "max_len": self.manifest["max_len"],
            "strategy": self.manifest["strategy"],
            "shards": len(self.manifest["shards"]),
            "tokenized_from_cache": self.from_cache,
            **self.manifest["totals"],
            **({"sources": self.manifest["sources"]} if "sources" in self.manifest else {}),
            **self.details,
        }


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
    setup = set_up(inputs, options, warn)
    read = [*setup.files, *(Path(spec) for spec in inputs if Path(spec).is_dir())]  # what the output may not cover
    if options.partitioned:
        if isinstance(out, UrlPath):
            raise UsageError("--partitions: an output URL takes a plain run for now; pack to a path, or drop it")
        from packcli.engines.driver import pack_partitioned  # the engines are loaded only when used

        return pack_partitioned(setup, out, overwrite, read, reporter, warn)
    fingerprint = setup.fingerprint()
    publishing = RemotePublication if isinstance(out, UrlPath) else Publication  # a URL: no rename (storage/)
    with publishing(out, fingerprint, overwrite, inputs=read) as publication:
        if publication.up_to_date:
            return PackResult(out, "up-to-date", read_manifest(out))
        manifest, from_cache = _build(setup, publication.staging, fingerprint, reporter, warn)
        publication.commit()
    return PackResult(out, "packed", manifest, from_cache)


def _build(
    setup: Setup, staging: Path, fingerprint: str, reporter: Reporter, warn: Callable[[str], None]
) -> tuple[dict[str, Any], bool]:
    files, options, encoder = setup.files, setup.options, setup.encoder
    key = setup.cache_key()
    cached = cache.load(key)  # left by `packcli stats` on the same corpus: no need to tokenize again
    tokenized = cached or tokenize_corpus(
        files, encoder, options.skip_bad_records, staging / "tokens.tmp", reporter, warn
    )
    stream = None
    try:
        if setup.sources is not None and len(tokenized.lengths):
            stream = mixed_stream(setup.sources, tokenized.file_documents, tokenized.lengths, options)
        drawn = None if stream is None else stream.documents
        packed = pack_tokens(tokenized, options, setup.tokenizer, encoder, staging, reporter, drawn)
    finally:
        if cached is None:
            tokenized.store.remove()
        else:
            tokenized.store.close()
    check_documents(len(tokenized.lengths), packed.totals, files, options)
    reporter.close()
    manifest = base_manifest(setup, fingerprint)
    manifest.update(totals=packed.totals, shards=packed.shard_entries())
    if setup.sources is not None and stream is not None:
        manifest["sources"] = source_entries(
            setup.sources, stream, tokenized.file_documents, tokenized.lengths, packed.pieces
        )
    manifest["totals"]["unread_files"] = setup.unread_files
    write_manifest(staging, manifest)
    if cached is not None:
        cache.discard(key)
    return manifest, cached is not None


@dataclass(frozen=True)
class Packed:
    """What one local run wrote: its manifest totals, its shards, the pieces it packed, and where the pieces of
    split documents landed (:mod:`packcli.write.splits`)."""

    totals: dict[str, int]
    shards: list[ShardInfo]
    pieces: Pieces
    split: list[list[list[int]]]

    def shard_entries(self) -> list[dict[str, Any]]:
        """The manifest's ``shards`` entries of this run."""
        return shard_entries(self.shards, self.split)


def pack_tokens(
    tokenized: Tokenized,
    options: PackOptions,
    tokenizer: LoadedTokenizer | None,
    encoder: Encoder,
    directory: Path,
    reporter: Reporter,
    drawn: np.ndarray | None = None,
    prefix: str = "shard",
) -> Packed:
    """Overflow -> pack -> shuffle rows -> write: one local run on a tokenized corpus, its shards written into
    ``directory`` and named ``{prefix}-NNNNN.arrow``. A single-process run calls it on the whole corpus (``drawn``:
    the documents a mixed run drew, in order), a partition on its slices (with the partition's seed). No
    documents, no shards."""
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
    metadata = {
        "packcli.format_version": str(FORMAT_VERSION),
        "packcli.max_len": str(options.max_len),
        "packcli.tokenizer_sha256": tokenizer.sha256 if tokenizer is not None else "",
        "packcli.eos_id": "" if encoder.eos_id is None else str(encoder.eos_id),
    }
    tokenized.store.finish()
    supervised = encoder.supervised
    schema = shard_schema(metadata, labels=supervised)
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
    return Packed(totals, shards, pieces, split_pieces(pieces, packing, shards))


def check_documents(read: int, totals: dict[str, int], files: list[Path], options: PackOptions) -> None:
    """Refuse a run that packed nothing, saying why; ``read``: the documents read (before a mixed run draws)."""
    if read == 0:
        raise PackcliError(
            f"no documents: the input holds no usable record ({totals['empty_documents']} empty, "
            f"{totals['bad_records']} bad records)",
            files[0] if len(files) == 1 else None,
        )
    if totals["documents"] == 0:
        raise PackcliError(
            f"no documents: --target-tokens {options.target_tokens} is less than any document"
            if options.target_tokens is not None and totals["input_documents"] == 0
            else f"every document is longer than --max-len {options.max_len} and --overflow drop"
        )


def base_manifest(setup: Setup, fingerprint: str) -> dict[str, Any]:
    """The manifest keys of every output, before its ``totals`` and ``shards``: format and packcli versions, the
    output-relevant options, inputs, tokenizer, ``max_len``, strategy, columns."""
    options = setup.options
    return {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "fingerprint": fingerprint,
        "options": options.output_relevant(),
        "inputs": [{"path": path_name(path), "bytes": path.stat().st_size} for path in setup.files],
        "tokenizer": tokenizer_entry(setup),
        "max_len": options.max_len,
        "strategy": options.strategy,
        "columns": list(shard_schema({}, labels=setup.encoder.supervised).names),
    }


def tokenizer_entry(setup: Setup) -> dict[str, Any]:
    """The manifest's ``tokenizer``: the tokenizer's description, ``ran`` (false for pre-tokenized records), and
    for pre-tokenized records the EOS/BOS ids actually appended."""
    if setup.tokenizer is None:
        entry: dict[str, Any] = dict.fromkeys(("name", "sha256", "config_sha256", "vocab_size"))
    else:
        entry = setup.tokenizer.describe()
    ran = setup.options.ids_field is None
    if not ran:
        entry.update(eos_id=setup.encoder.eos_id, bos_id=setup.encoder.bos_id)
    return {**entry, "ran": ran}
