"""The run identity: one hash over the resolved facts that decide the output bytes; the output fingerprint and the
tokenization-cache key are the same function over two scopes, so they cannot drift apart. Facts, not spellings:
inputs by resolved path, size and mtime; the tokenizer by the sha256 of its file and config (``--tokenizer tok`` and
``./tok/tokenizer.json`` are one identity); the EOS/BOS ids and chat template actually used; packcli's version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from packcli.encode.encoders import Encoder
from packcli.encode.tokenizer import LoadedTokenizer
from packcli.format.columns import FORMAT_VERSION
from packcli.options import PackOptions
from packcli.read.inputs import InputFile
from packcli.version import __version__

__all__ = ["TOKENIZATION_OPTIONS", "Scope", "resolved_options", "run_identity"]

Scope = Literal["output", "tokens"]

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
_PATH_OPTIONS = ("tokenizer", "chat_template")


def resolved_options(options: PackOptions) -> dict[str, Any]:
    """The output-relevant options less the paths (``--tokenizer``, ``--chat-template``), which the identity
    replaces by the hashes they resolve to."""
    return {name: value for name, value in options.output_relevant().items() if name not in _PATH_OPTIONS}


def run_identity(
    inputs: list[InputFile],
    tokenizer: LoadedTokenizer | None,
    encoder: Encoder,
    options: PackOptions,
    scope: Scope,
    extra: dict[str, Any] | None = None,
) -> str:
    """The sha256 (hex) of the facts that decide the output (``scope="output"``, the manifest's fingerprint) or
    only the tokens ("tokens", the cache key); ``extra``: further facts, such as a partition plan's hash."""
    relevant = resolved_options(options)
    tokens = {name: relevant[name] for name in TOKENIZATION_OPTIONS if name in relevant}
    chosen = relevant if scope == "output" else tokens
    facts = {
        "scope": scope,
        "packcli_version": __version__,
        "format_version": FORMAT_VERSION,
        "inputs": [_describe_input(item) for item in inputs],
        "tokenizer": {
            "sha256": tokenizer.sha256 if tokenizer is not None else None,
            "config_sha256": tokenizer.config_sha256 if tokenizer is not None else None,
            "eos_id": encoder.eos_id,
            "bos_id": encoder.bos_id,
            "chat_template_sha256": encoder.template_sha256,
        },
        "options": chosen,
        "extra": extra or {},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _describe_input(item: InputFile) -> list[Any]:
    """A file by resolved path, size and mtime (an object's ETag); standard input's spool by its bytes' sha256."""
    if item.digest is not None:
        return [item.name, item.size, item.digest]
    return [str(item.path.resolve()), item.size, item.version]
