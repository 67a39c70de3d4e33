"""The set-up that ``pack`` and ``stats`` share: resolve the inputs, check the strategy, load the tokenizer, build
the encoder (every usage error found before a record is read); the run's identity and manifest keys follow from it.

The identity is one hash over the resolved facts that decide the output bytes; the output fingerprint and the
tokenization-cache key are the same hash over two scopes, so they cannot drift apart. Facts, not spellings: inputs by
resolved path, size and mtime; the tokenizer by the sha256 of its file and config (``--tokenizer tok`` and
``./tok/tokenizer.json`` are one identity); the EOS/BOS ids and chat template actually used; packcli's version.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packcli.encode.backends import takes_tokens
from packcli.encode.chat import JinjaTemplate
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer, with_chat_template
from packcli.errors import PackcliError, option
from packcli.format.columns import FORMAT_VERSION
from packcli.format.manifest import part_facts, read_manifest, recorded_name, run_keys, tokenizer_entry
from packcli.options import PackOptions
from packcli.read.inputs import InputFile, Spool, describe_inputs, find_inputs
from packcli.run.plan import Plan, plan_partitions
from packcli.run.sources import Source, group_inputs
from packcli.storage import UrlPath, location
from packcli.strategies import get_strategy
from packcli.version import __version__

__all__ = ["PackResult", "Setup", "check_documents", "kept_out_of_output", "set_up", "takes_output"]

# The options that decide each document's tokens (the cache key's scope); every output-relevant option decides the
# output (the fingerprint's scope).
TOKENIZATION_OPTIONS = (
    "text_field",
    "eos",
    "bos",
    "eos_token",
    "skip_bad_records",
    "prompt_field",
    "response_field",
    "messages_field",
    "tools_field",
    "loss_on",
    "ids_field",
    "labels_field",
    "eos_id",
)


@dataclass(frozen=True)
class Setup:
    """What ``pack`` and ``stats`` both start from: the resolved inputs, the tokenizer and the encoder."""

    files: list[Path]
    inputs: list[InputFile]  # ``files`` as values, each stat-ed once (at set-up)
    options: PackOptions
    tokenizer: LoadedTokenizer | None  # None: pre-tokenized records and no --tokenizer
    encoder: Encoder
    sources: list[Source] | None = None  # mixed runs: one source per INPUT, its files in ``files`` order
    unread_files: int = 0  # files found beside the inputs that packcli does not read (named in a warning)

    def identity(self, scope: Literal["output", "tokens"], extra: dict[str, Any] | None = None) -> str:
        """The sha256 (hex) of the facts that decide the output (``scope="output"``) or only the tokens ("tokens");
        ``extra``: further facts that decide the output."""
        relevant, tokenizer = resolved_options(self.options), self.tokenizer
        tokens = {name: relevant[name] for name in TOKENIZATION_OPTIONS if name in relevant}
        facts = {
            "scope": scope,
            "packcli_version": __version__,
            "format_version": FORMAT_VERSION,
            "inputs": [_describe_input(item) for item in self.inputs],
            "tokenizer": {
                "sha256": tokenizer.sha256 if tokenizer is not None else None,
                "config_sha256": tokenizer.config_sha256 if tokenizer is not None else None,
                "eos_id": self.encoder.eos_id,
                "bos_id": self.encoder.bos_id,
                "chat_template_sha256": self.encoder.template_sha256,
            },
            "options": relevant if scope == "output" else tokens,
            "extra": extra or {},
        }
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()

    def fingerprint(self, plan_hash: str | None = None) -> str:
        """The output's identity, with a mixed run's grouping of files and a partitioned run's plan."""
        extra: dict[str, Any] = {}
        if self.sources is not None:
            extra["sources"] = [len(source.files) for source in self.sources]
        if plan_hash is not None:
            extra["partition_plan"] = plan_hash
        return self.identity("output", extra)

    def plan(self) -> tuple[Plan, str]:
        """The run's plan (a plain run's is :meth:`Plan.whole`) and the fingerprint it gives the output."""
        options, files = self.options, self.files
        if not options.partitioned:
            return Plan.whole(files, sum(item.size for item in self.inputs)), self.fingerprint()
        count, size = options.partitions, options.partition_size
        if count is None:  # as many as --partition-size bytes (on disk) each take
            assert size is not None  # the run is partitioned
            count = max(1, math.ceil(sum(path.stat().st_size for path in files) / size))
        plan = plan_partitions(files, count, size if options.partitions is None else None)
        return plan, self.fingerprint(plan.digest)

    def cache_key(self) -> str:
        """The tokenization cache's key: the identity over what decides the tokens."""
        return self.identity("tokens")[:32]

    def template_source(self) -> str | None:
        """The ``--chat-template`` file's text as set-up read it: a job's encoder takes it, on any node."""
        template = getattr(self.encoder, "template", None)
        return template.source if isinstance(template, JinjaTemplate) and self.options.chat_template else None

    def tokenizer_entry(self) -> dict[str, Any]:
        """The manifest's ``tokenizer``."""
        described = self.tokenizer.describe() if self.tokenizer is not None else None
        ran = self.options.ids_field is None
        return tokenizer_entry(described, ran, self.encoder.eos_id, self.encoder.bos_id)

    def run_keys(self, fingerprint: str, plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
        """The manifest keys the output and its parts share, and the facts every part records."""
        options = self.options
        partitions = plan.describe() if plan.partitioned else None
        relevant, supervised, positions = options.output_relevant(), self.encoder.supervised, options.position_ids
        keys = run_keys(fingerprint, relevant, self.tokenizer_entry(), supervised, positions, partitions)
        return keys, part_facts(keys, plan.digest, len(plan), resolved_options(options))


def set_up(
    inputs: list[str],
    options: PackOptions,
    warn: Callable[[str], None] = lambda message: None,
    stdin: Spool | None = None,
    encodes: bool = True,
) -> Setup:
    """Resolve the inputs, check the strategy, load the tokenizer and build the encoder, raising every usage error
    found before a record is read. ``encodes``: False where this process encodes nothing (a driver, a dry run): the
    encoder then wraps Hugging Face's tokenizer rather than build a fast backend (a second and 200 MiB for Tekken)."""
    sources = group_inputs(inputs, options.weights, warn) if options.mixing else None
    if sources is not None:
        if stdin is not None:
            sources = [replace(source, name=stdin.named(source.spec)) for source in sources]
        files = [path for source in sources for path in source.files]
        unread = sum(source.unread for source in sources)
    else:
        found = find_inputs(inputs, warn)
        files, unread = found.files, len(found.unread)
    get_strategy(options.strategy)
    pretokenized = options.ids_field is not None and options.tokenizer is None
    tokenizer = None if pretokenized else load_tokenizer(options.tokenizer, options.eos_token)
    if tokenizer is not None and options.messages_field is not None and options.chat_template is None:
        tokenizer = with_chat_template(tokenizer)  # read here, where a chat run sets up: the jobs get its text
    described = describe_inputs(files, stdin)
    encoding = options if encodes else replace(options, tokenizer_backend="hf")
    return Setup(files, described, options, tokenizer, make_encoder(encoding, tokenizer, warn), sources, unread)


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
            "out": recorded_name(str(self.out)),
            "fingerprint": self.manifest["fingerprint"],
            "max_len": self.manifest["max_len"],
            "strategy": self.manifest["strategy"],
            "shards": len(self.manifest["shards"]),
            "tokenized_from_cache": self.from_cache,
            **self.manifest["totals"],
            **({"sources": self.manifest["sources"]} if "sources" in self.manifest else {}),
            **self.details,
        }


def kept_out_of_output(inputs: list[str], files: list[Path]) -> list[Path]:
    """What an output directory may not cover (``check_target``): every file read, and each input directory."""
    local = [path for path in map(location, inputs) if not isinstance(path, UrlPath)]
    return [*files, *(path for path in local if path.is_dir())]


def check_documents(read: int, totals: dict[str, Any], files: list[Path], options: PackOptions) -> None:
    """Refuse a run that packed nothing, saying why; ``read``: the documents read (before a mixed run draws)."""
    if read == 0:
        raise PackcliError(
            f"no documents: the input holds no usable record ({totals['empty_documents']} empty, "
            f"{totals['bad_records']} bad records)",
            files[0] if len(files) == 1 else None,
        )
    if totals["documents"] == 0:
        raise PackcliError(
            f"no documents: {option('target_tokens', options.target_tokens)} is less than any document"
            if options.target_tokens is not None and totals["input_documents"] == 0
            else f"every document is longer than {option('max_len', options.max_len)} and {option('overflow')} drop"
        )


def takes_output(requested: str) -> Callable[[Path], bool]:
    """Whether an output of the run's fingerprint holds tokens ``--tokenizer-backend requested`` takes: the backend
    is outside the fingerprint, so an explicit ``hf`` reads the manifest and repacks what another backend encoded."""
    return lambda out: requested != "hf" or takes_tokens(requested, read_manifest(out)["tokenizer"].get("backend"))


def resolved_options(options: PackOptions) -> dict[str, Any]:
    """The output-relevant options less the paths (``--tokenizer``, ``--chat-template``), which the identity
    replaces by the hashes they resolve to."""
    return {k: v for k, v in options.output_relevant().items() if k not in ("tokenizer", "chat_template")}


def _describe_input(item: InputFile) -> list[Any]:
    """A file by resolved path, size and mtime (an object's ETag); standard input's spool by its bytes' sha256."""
    if item.digest is not None:
        return [item.name, item.size, item.digest]
    return [str(item.path.resolve()), item.size, item.version]
