"""The option aliases several commands share (``Annotated`` types), so a flag reads the same in every ``--help``.

A flag's name, help text and default display are defined once here; a command's own options stay beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from packcli.options import Overflow

__all__ = [
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
    "TokenizerOption",
    "WindowOption",
]

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout and nothing else there.")]
MaxLenOption = Annotated[int, typer.Option("--max-len", min=1, help="Tokens per packed sequence.")]
TokenizerOption = Annotated[
    str | None,
    typer.Option(help="A tokenizer.json, a directory holding one, or a cached hub name.", show_default="bundled GPT-2"),
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
SummaryOption = Annotated[
    Path | None,
    typer.Option(
        "--summary",
        help="Append a Markdown summary to this file (also to $GITHUB_STEP_SUMMARY where that is set).",
        show_default="none",
    ),
]
