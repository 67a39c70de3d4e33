"""The option aliases several commands share (``Annotated`` types), so a flag reads the same in every ``--help``,
and the one builder from a command's flag values to :class:`~packcli.options.PackOptions` (pack and stats use it).

A flag's name, help text and default display are defined once here; a command's own options stay beside it. Typer
reads a command's options from its signature, so each command still spells out the ones it takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from packcli.options import Overflow
from packcli.storage.urls import is_url, location

if TYPE_CHECKING:
    from packcli.options import PackOptions

__all__ = [
    "INT64_MAX",
    "BosOption",
    "ChatTemplateOption",
    "EosTokenOption",
    "JsonOption",
    "LossOnOption",
    "MaxLenOption",
    "MessagesFieldOption",
    "NoEosOption",
    "OverflowOption",
    "PromptFieldOption",
    "QuietOption",
    "ResponseFieldOption",
    "SkipBadRecordsOption",
    "StrategyOption",
    "SummaryOption",
    "TextFieldOption",
    "TokenizerBackendOption",
    "TokenizerOption",
    "ToolsFieldOption",
    "WindowOption",
    "local_path",
    "pack_options",
]

INT64_MAX = 2**63 - 1  # the bound of a count that numpy and the columns take: a larger one is a usage error
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout and nothing else there.")]
MaxLenOption = Annotated[int, typer.Option("--max-len", min=1, help="Tokens per packed sequence.")]
TokenizerOption = Annotated[
    str | None,
    typer.Option(help="A tokenizer.json, a directory holding one, or a cached hub name.", show_default="bundled GPT-2"),
]
TokenizerBackendOption = Annotated[
    str,
    typer.Option(
        help="'auto': the fastest backend that encodes exactly as Hugging Face tokenizers for this tokenizer "
        "(gigatoken, then fastokens), else Hugging Face, saying why; 'hf': Hugging Face tokenizers. The tokens "
        "are the same.",
    ),
]
StrategyOption = Annotated[str, typer.Option(help="Packing strategy (see `packcli strategies`).")]
WindowOption = Annotated[
    int | None,
    typer.Option(min=1, help="Pack each window of N consecutive documents on its own.", show_default="no windows"),
]
TextFieldOption = Annotated[str, typer.Option(help="The record field holding the text.")]
OverflowOption = Annotated[
    Overflow | None,
    typer.Option(
        help="What to do with documents longer than --max-len.", show_default="split; drop for fine-tuning records"
    ),
]
PromptFieldOption = Annotated[str | None, typer.Option(help="Fine-tuning: the prompt field (no loss taken on it).")]
ResponseFieldOption = Annotated[str | None, typer.Option(help="Fine-tuning: the response field (loss taken on it).")]
MessagesFieldOption = Annotated[
    str | None, typer.Option(help="Fine-tuning: the field holding a chat, a list of {role, content}.")
]
ToolsFieldOption = Annotated[
    str,
    typer.Option(
        help="Chats: the field of a record's tool definitions (a list of JSON-schema function objects), passed to "
        "the chat template as `tools` where a record has it; '' for none."
    ),
]
ChatTemplateOption = Annotated[
    str | None,
    typer.Option(help="A Jinja chat template file.", show_default="the tokenizer directory's, else built-in ChatML"),
]
LossOnOption = Annotated[str, typer.Option(help="Chats: 'assistant' turns only, or 'all' tokens.")]
NoEosOption = Annotated[bool, typer.Option("--no-eos", help="Do not append EOS to each document.")]
BosOption = Annotated[bool, typer.Option("--bos", help="Prepend BOS to each document.")]
EosTokenOption = Annotated[
    str | None,
    typer.Option(help="EOS token text, when the tokenizer's cannot be found.", show_default="the tokenizer's"),
]
SkipBadRecordsOption = Annotated[
    bool, typer.Option("--skip-bad-records", help="Count and skip bad records instead of failing.")
]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress and no per-record warnings on stderr (a loss of over 1% of the tokens is still reported).",
    ),
]
ExportQuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help=(
            "No warnings on stderr (what the format does with split documents, with documents without EOS, or with "
            "ids of an unknown vocabulary)."
        ),
    ),
]


def local_path(value: str) -> Path:
    """The parser of an option or argument that only a local path can be: a store URL is refused before any work,
    never taken for the local path it folds to (``s3://b/k`` as ``./s3:/b/k``)."""
    if is_url(value):
        raise typer.BadParameter(f"{value} is a URL; this takes a local path (copy to or from the store yourself)")
    return location(value)


SummaryOption = Annotated[
    Path | None,
    typer.Option(
        "--summary",
        parser=local_path,
        help="Append a Markdown summary to this file (instead of $GITHUB_STEP_SUMMARY, where that is set).",
        show_default="none",
    ),
]

# The flags that describe the records of a raw corpus and how to pack them: a packed output has fixed them.
RECORD_FLAGS = (
    "max_len", "tokenizer", "tokenizer_backend", "strategy", "window", "text_field", "overflow", "prompt_field",
    "response_field", "messages_field", "tools_field", "chat_template", "loss_on", "no_eos", "bos", "eos_token",
    "skip_bad_records",
)  # fmt: skip
_NEGATED = {"no_eos": "eos", "no_shuffle": "shuffle", "no_position_ids": "position_ids"}  # --no-eos sets eos=False


def pack_options(flags: dict[str, Any]) -> PackOptions:
    """The options of a command's flag values (by parameter name; names that are no field are left out): each flag
    is the field of its name, ``--no-X`` is ``X=False``; :meth:`PackOptions.from_values` parses the rest."""
    import dataclasses

    from packcli.options import PackOptions

    fields = {field.name for field in dataclasses.fields(PackOptions)}
    values = {_NEGATED.get(name, name): value for name, value in flags.items()}
    values = {name: value for name, value in values.items() if name in fields}
    for name in _NEGATED.values():
        if name in values:
            values[name] = not values[name]
    return PackOptions.from_values(values)
