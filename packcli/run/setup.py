"""The set-up that ``pack`` and ``stats`` share: resolve the inputs, check the strategy, load the tokenizer, build
the encoder (every usage error found before a record is read); and the manifest keys every output has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packcli.encode.backends import takes_tokens
from packcli.encode.chat import JinjaTemplate
from packcli.encode.encoders import Encoder, make_encoder
from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.errors import PackcliError, option
from packcli.format.columns import FORMAT_VERSION, column_names
from packcli.format.manifest import read_manifest
from packcli.options import PackOptions
from packcli.read.inputs import InputFile, Spool, describe_inputs, find_inputs
from packcli.run.identity import run_identity
from packcli.run.plan import Plan, partition_count, plan_partitions
from packcli.run.sources import Source, group_inputs
from packcli.strategies import get_strategy
from packcli.version import __version__

__all__ = [
    "PackResult",
    "Setup",
    "base_manifest",
    "check_documents",
    "set_up",
    "takes_output",
    "tokenizer_entry",
]


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

    def fingerprint(self, plan_hash: str | None = None) -> str:
        """The output's identity (see :mod:`packcli.run.identity`); a mixed run's grouping of files is part of it, and
        a partitioned run's plan."""
        extra: dict[str, Any] = {}
        if self.sources is not None:
            extra["sources"] = [len(source.files) for source in self.sources]
        if plan_hash is not None:
            extra["partition_plan"] = plan_hash
        return run_identity(self.inputs, self.tokenizer, self.encoder, self.options, "output", extra)

    def plan(self) -> tuple[Plan, str]:
        """The run's plan and the fingerprint it gives the output (``--dry-run`` prints them): a partitioned run's
        from the inputs alone, else the one job of a plain run (:meth:`Plan.whole`)."""
        options, files = self.options, self.files
        if not options.partitioned:
            return Plan.whole(files, sum(item.size for item in self.inputs)), self.fingerprint()
        plan = plan_partitions(files, partition_count(files, options.partitions, options.partition_size))
        return plan, self.fingerprint(plan.digest)

    def cache_key(self) -> str:
        """The tokenization cache's key: the identity over what decides the tokens."""
        return run_identity(self.inputs, self.tokenizer, self.encoder, self.options, "tokens")[:32]

    def template_source(self) -> str | None:
        """The ``--chat-template`` file's text as set-up read it (its sha256 is in the fingerprint): an encoder built
        later (a job's, a worker's on a node without the driver's disk) takes it rather than the path."""
        template = getattr(self.encoder, "template", None)
        return template.source if isinstance(template, JinjaTemplate) and self.options.chat_template else None

    def encoder_that_encodes(self) -> Encoder:
        """The encoder a set-up made with ``encodes=False`` would have made: with the backend the options ask for
        (its fast backend built now). Set-up gave the warnings already."""
        return make_encoder(self.options, self.tokenizer, template_source=self.template_source())


def set_up(
    inputs: list[str],
    options: PackOptions,
    warn: Callable[[str], None] = lambda message: None,
    stdin: Spool | None = None,
    encodes: bool = True,
) -> Setup:
    """Resolve the inputs, check the strategy, load the tokenizer and build the encoder: every usage error that
    can be found before reading a record is raised here. ``stdin``: the spool of standard input among ``inputs``,
    which names it and gives its identity. ``encodes``: this process encodes records with the encoder; when it
    does not (a run's driver, whose jobs each build their own encoder; a dry run), the encoder wraps the Hugging
    Face tokenizer already loaded, rather than building the fast backend's (about a second and 200 MiB for
    Tekken): a run found up to date then builds none."""
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
            f"no documents: {option('target_tokens', options.target_tokens)} is less than any document"
            if options.target_tokens is not None and totals["input_documents"] == 0
            else f"every document is longer than {option('max_len', options.max_len)} and {option('overflow')} drop"
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
        "inputs": [{"path": item.name, "bytes": item.size} for item in setup.inputs],
        "tokenizer": tokenizer_entry(setup),
        "max_len": options.max_len,
        "strategy": options.strategy,
        "columns": column_names(setup.encoder.supervised, options.position_ids),
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


def takes_output(requested: str) -> Callable[[Path], bool]:
    """Whether an output of the run's fingerprint holds tokens a run of ``--tokenizer-backend requested`` takes
    (:func:`~packcli.encode.backends.takes_tokens`): the backend is outside the fingerprint, so an explicit ``hf``
    reads the manifest, and repacks an output another backend encoded (``pack``, and what ``--dry-run`` says)."""
    if requested != "hf":
        return lambda out: True  # any backend's tokens: no manifest to read
    return lambda out: takes_tokens(requested, read_manifest(out)["tokenizer"].get("backend"))
