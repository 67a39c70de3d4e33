"""One partition = one local run: read the partition's slices, tokenize, apply overflow, pack with the partition's
own seed, write shards ``part-NNNNN-shard-MMMMM.arrow`` into the run's staging directory, then write the
completion record, last and atomically. It runs in a worker process or a Ray actor: what crosses the engine is the
job (slices, options, paths) and a small result; tokens only ever go from the inputs to files.

A failure is returned, not raised, as a :class:`Failure` naming the partition, file and line: exceptions lose their
fields when pickled across processes, and the other partitions' committed work must survive it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from packcli.encode.corpus import tokenize_corpus
from packcli.encode.encoders import make_encoder
from packcli.encode.tokenizer import LoadedTokenizer
from packcli.engines.parts import PartsArea, part_prefix
from packcli.errors import PackcliError
from packcli.options import PackOptions
from packcli.pipeline import pack_tokens
from packcli.read.inputs import InputSlice
from packcli.report.progress import SilentReporter

__all__ = ["PartitionJob", "PartitionResult", "ShippedTokenizer", "run_partition"]


@dataclass(frozen=True)
class ShippedTokenizer:
    """A loaded tokenizer as the bytes a worker rebuilds it from: the driver's tokenizer, never a worker's own
    file or hub lookup, so every partition encodes with exactly the same one."""

    json: str
    encode_special_tokens: bool
    facts: dict[str, Any]  # the other fields of LoadedTokenizer: name, hashes, vocab size, EOS/BOS ids, config

    @classmethod
    def of(cls, loaded: LoadedTokenizer) -> ShippedTokenizer:
        """Ship the driver's tokenizer."""
        facts = {field.name: getattr(loaded, field.name) for field in fields(loaded) if field.name != "tokenizer"}
        return cls(loaded.tokenizer.to_str(), loaded.tokenizer.encode_special_tokens, facts)

    def load(self) -> LoadedTokenizer:
        """Rebuild the tokenizer (once per worker process or actor)."""
        tokenizer = Tokenizer.from_str(self.json)
        tokenizer.encode_special_tokens = self.encode_special_tokens  # not part of the serialized form
        return LoadedTokenizer(tokenizer=tokenizer, **self.facts)


@dataclass(frozen=True)
class PartitionJob:
    """What a worker needs to run one partition (a few kilobytes, whatever the partition's size)."""

    partition: int
    slices: tuple[InputSlice, ...]
    options: PackOptions  # the run's options; the partition derives its seed from them
    staging: Path  # the run's staging directory, on storage every worker sees
    facts: dict[str, Any]  # what every part of the run agrees on (see packcli.engines.merge.run_facts)


@dataclass(frozen=True)
class Failure:
    """Why a partition failed: the error's message, file, line and exit code."""

    message: str
    path: str | None
    line: int | None
    exit_code: int


@dataclass(frozen=True)
class PartitionResult:
    """A finished partition: its totals (from its committed record), or its failure; warnings either way."""

    partition: int
    totals: dict[str, int] | None
    warnings: list[str]
    failure: Failure | None = None


def partition_seed(seed: int, partition: int) -> int:
    """The seed of one partition: a stable hash of (run seed, partition id), the same on every machine."""
    digest = hashlib.sha256(f"packcli-partition:{seed}:{partition}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def run_partition(job: PartitionJob, tokenizer: LoadedTokenizer | None) -> PartitionResult:
    """Run one partition into the staging directory and commit it; a data or I/O error becomes a Failure (the
    partition's own files removed)."""
    area = PartsArea(job.staging)
    warnings: list[str] = []
    k = job.partition
    try:
        area.clear(k)  # what an earlier, interrupted attempt left
        options = replace(job.options, seed=partition_seed(job.options.seed, k))
        encoder = make_encoder(options, tokenizer)  # its set-up warnings were the driver's to give, once
        tokenized = tokenize_corpus(
            job.slices, encoder, options.skip_bad_records, area.work_path(k), SilentReporter(), warnings.append
        )
        try:
            packed = pack_tokens(
                tokenized, options, tokenizer, encoder, job.staging, SilentReporter(), prefix=part_prefix(k)
            )
        finally:
            tokenized.store.remove()
        area.commit(k, {**job.facts, "partition": k, "totals": packed.totals, "shards": packed.shard_entries()})
    except (PackcliError, OSError) as exc:
        area.clear(k)
        failure = (
            Failure(exc.message, exc.path, exc.line, exc.exit_code)
            if isinstance(exc, PackcliError)
            else Failure(str(exc), None, None, 1)
        )
        return PartitionResult(k, None, warnings, failure)
    return PartitionResult(k, packed.totals, warnings)
