"""``pack_corpus``: read -> tokenize -> overflow -> pack -> write shards -> manifest. The only module that knows the
stage order.

The output is built in a staging directory beside ``out`` and moved into place only once its manifest is written,
so an interrupted run never leaves an output that looks complete, and an existing output stays intact until then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packcli import __version__
from packcli.encode import cache
from packcli.encode.corpus import Tokenized, tokenize_corpus
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.errors import PackcliError
from packcli.identity import run_identity
from packcli.options import PackOptions
from packcli.plan.overflow import OverflowCounts, Pieces, apply_overflow
from packcli.read.inputs import find_inputs
from packcli.report.progress import Reporter, SilentReporter
from packcli.strategies import Packing, get_strategy, run_strategy
from packcli.write.manifest import FORMAT_VERSION, read_manifest, write_manifest
from packcli.write.publish import Publication
from packcli.write.rows import Supervision, write_rows
from packcli.write.shards import ShardInfo, shard_schema


@dataclass(frozen=True)
class Setup:
    """What ``pack`` and ``stats`` both start from: the resolved inputs, the tokenizer and the encoder."""

    files: list[Path]
    options: PackOptions
    tokenizer: LoadedTokenizer
    encoder: Encoder
    unread_files: int = 0  # files found beside the inputs that packcli does not read (named in a warning)

    def fingerprint(self) -> str:
        """The output's identity (see :mod:`packcli.identity`)."""
        return run_identity(self.files, self.tokenizer, self.encoder, self.options, "output")

    def cache_key(self) -> str:
        """The tokenization cache's key: the identity over what decides the tokens."""
        return run_identity(self.files, self.tokenizer, self.encoder, self.options, "tokens")[:32]


def set_up(inputs: list[str], options: PackOptions, warn: Callable[[str], None] = lambda message: None) -> Setup:
    """Resolve the inputs, check the strategy, load the tokenizer and build the encoder: every usage error that
    can be found before reading a record is raised here."""
    found = find_inputs(inputs, warn)
    get_strategy(options.strategy)
    tokenizer = load_tokenizer(options.tokenizer, options.eos_token)
    return Setup(found.files, options, tokenizer, make_encoder(options, tokenizer, warn), len(found.unread))


@dataclass(frozen=True)
class PackResult:
    """What ``pack_corpus`` did: ``status`` is "packed" or "up-to-date"."""

    out: Path
    status: str
    manifest: dict[str, Any]
    from_cache: bool = False  # the tokens came from the tokenization cache that `stats` left

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
    fingerprint = setup.fingerprint()
    with Publication(out, fingerprint, overwrite) as publication:
        if publication.up_to_date:
            return PackResult(out, "up-to-date", read_manifest(out))
        manifest, from_cache = _build(setup, publication.staging, fingerprint, reporter, warn)
        publication.commit()
    return PackResult(out, "packed", manifest, from_cache)


def _build(
    setup: Setup, staging: Path, fingerprint: str, reporter: Reporter, warn: Callable[[str], None]
) -> tuple[dict[str, Any], bool]:
    files, options, tokenizer, encoder = setup.files, setup.options, setup.tokenizer, setup.encoder
    key = setup.cache_key()
    cached = cache.load(key)  # left by `packcli stats` on the same corpus: no need to tokenize again
    tokenized = cached or tokenize_corpus(
        files, encoder, options.skip_bad_records, staging / "tokens.tmp", reporter, warn
    )
    supervision = Supervision() if encoder.supervised else None
    try:
        if len(tokenized.lengths) == 0:
            raise PackcliError(
                f"no documents: the input holds no usable record ({tokenized.counts.empty_documents} empty, "
                f"{tokenized.counts.bad_records} bad records)",
                files[0] if len(files) == 1 else None,
            )
        pieces, overflow = apply_overflow(tokenized.lengths, options.max_len, options.overflow_policy)
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
        schema = shard_schema(metadata, labels=encoder.supervised)
        shards = write_rows(staging, tokenized.store, pieces, packing, schema, options.shard_size, supervision)
    finally:
        if cached is None:
            tokenized.store.remove()
        else:
            tokenized.store.close()
    reporter.close()
    manifest = _manifest(files, options, tokenizer, fingerprint, tokenized, pieces, overflow, packing, shards)
    manifest["totals"]["unread_files"] = setup.unread_files
    if supervision is not None:
        manifest["totals"].update(asdict(supervision))
        manifest["columns"] = list(shard_schema({}, labels=True).names)
    write_manifest(staging, manifest)
    if cached is not None:
        cache.discard(key)
    return manifest, cached is not None


def _manifest(
    files: list[Path],
    options: PackOptions,
    tokenizer: LoadedTokenizer,
    fingerprint: str,
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
        "fingerprint": fingerprint,
        "options": options.to_json(),
        "inputs": [{"path": str(path), "bytes": path.stat().st_size} for path in files],
        "tokenizer": tokenizer.describe(),
        "max_len": options.max_len,
        "strategy": options.strategy,
        "columns": list(shard_schema({}).names),
        "totals": totals,
        "shards": [shard.to_json() for shard in shards],
    }
