"""The ``packcli`` command line: typer wiring only. Heavy modules are imported inside commands so ``--help`` is
instant. Every error becomes one ``error: ...`` line on stderr with exit 1 (data) or 2 (usage), mapped in one
place (:class:`OneLineErrors`); ``--debug`` anywhere on the command line shows the traceback instead.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from packcli.options import DEFAULT_MAX_LEN, Overflow

# click's exceptions, whether typer uses click itself or its vendored copy.
click_exceptions = sys.modules[typer.BadParameter.__module__]


class OneLineErrors(TyperGroup):
    """The one error mapper: usage errors exit 2, packcli and OS errors exit 1, each as one ``error: ...`` line on
    stderr; anything unforeseen is one line too, with a hint. ``--debug`` (anywhere) lets the traceback through."""

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        from packcli.errors import EXIT_DATA, PackcliError

        arguments = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in arguments
        arguments = [argument for argument in arguments if argument != "--debug"]
        kwargs["standalone_mode"] = False
        try:
            code = super().main(arguments, *rest, **kwargs)
        except click_exceptions.NoArgsIsHelpError as exc:
            print(exc.ctx.get_help() if exc.ctx else exc.format_message())
            sys.exit(2)
        except click_exceptions.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "packcli"
            _fail(f"{exc.format_message()} (see '{command} --help')", 2)
        except typer.Abort:
            _fail("aborted", EXIT_DATA)
        except KeyboardInterrupt:
            _fail("interrupted; no output was written", 130)
        except (PackcliError, OSError) as exc:
            if debug:
                raise
            _fail(str(exc), exc.exit_code if isinstance(exc, PackcliError) else EXIT_DATA)
        except Exception as exc:  # a bug or an unforeseen library error: still one line, exit 1
            if debug:
                raise
            _fail(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", EXIT_DATA)
        sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Tokenize a corpus and pack whole documents into fixed-length training sequences (Arrow shards). "
    "Errors are one line; --debug anywhere on the command line shows the traceback.",
)


def _print_version(value: bool) -> None:
    if value:
        from packcli import __version__

        print(f"packcli {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Options that come before the command."""


JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout and nothing else there.")]
MaxLenOption = Annotated[int, typer.Option("--max-len", min=1, help="Tokens per packed sequence.")]
TokenizerOption = Annotated[
    str | None,
    typer.Option(help="A tokenizer.json, a directory holding one, or a cached hub name. Default: bundled GPT-2."),
]
TextFieldOption = Annotated[str, typer.Option(help="The record field holding the text.")]
OverflowOption = Annotated[
    Overflow | None,
    typer.Option(
        help="What to do with documents longer than --max-len [default: split; drop for fine-tuning records]."
    ),
]
PromptFieldOption = Annotated[str | None, typer.Option(help="Fine-tuning: the prompt field (no loss taken on it).")]
ResponseFieldOption = Annotated[str | None, typer.Option(help="Fine-tuning: the response field (loss taken on it).")]
MessagesFieldOption = Annotated[
    str | None, typer.Option(help="Fine-tuning: the field holding a chat, a list of {role, content}.")
]
ChatTemplateOption = Annotated[
    str | None,
    typer.Option(help="A Jinja chat template file [default: the tokenizer directory's, else built-in ChatML]."),
]
LossOnOption = Annotated[str, typer.Option(help="Chats: 'assistant' turns only, or 'all' tokens.")]

MAX_WARNINGS = 20


class _Warnings:
    """Prints the first warnings to stderr and counts the rest."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.count = 0

    def __call__(self, message: str) -> None:
        self.count += 1
        if not self.quiet and self.count <= MAX_WARNINGS:
            print(f"warning: {message}", file=sys.stderr)

    def close(self) -> None:
        if not self.quiet and self.count > MAX_WARNINGS:
            print(f"warning: {self.count - MAX_WARNINGS} more warnings not shown", file=sys.stderr)


@app.command()
def pack(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Files (.jsonl, .ndjson, .json, each also .gz/.zst/.bz2/.xz; .parquet; .arrow), directories or globs."
        ),
    ],
    max_len: MaxLenOption = DEFAULT_MAX_LEN,
    tokenizer: TokenizerOption = None,
    strategy: Annotated[str, typer.Option(help="Packing strategy (see `packcli strategies`).")] = "bfd",
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("packed"),
    text_field: TextFieldOption = "text",
    overflow: OverflowOption = None,
    prompt_field: PromptFieldOption = None,
    response_field: ResponseFieldOption = None,
    messages_field: MessagesFieldOption = None,
    chat_template: ChatTemplateOption = None,
    loss_on: LossOnOption = "assistant",
    shard_size: Annotated[str, typer.Option(help="Bytes per shard, e.g. 512MiB, 64MB.")] = "512MiB",
    workers: Annotated[int | None, typer.Option(min=1, help="Tokenizer threads (default: all cores).")] = None,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of the row order, of mixing samples, and of strategies that take one.")
    ] = 0,
    no_shuffle: Annotated[
        bool, typer.Option("--no-shuffle", help="Write rows in packing order instead of a seeded random order.")
    ] = False,
    weights: Annotated[
        str | None, typer.Option(help="Mix the inputs by weight, one per INPUT (a directory or glob is one): 0.7,0.3")
    ] = None,
    target_tokens: Annotated[
        str | None,
        typer.Option(help="Mixing: output tokens, e.g. 3M [default: the most that repeats no input]."),
    ] = None,
    ids_field: Annotated[
        str | None, typer.Option(help="Pre-tokenized records: the field of token ids, packed as given.")
    ] = None,
    labels_field: Annotated[
        str | None, typer.Option(help="Pre-tokenized fine-tuning: the field of labels (-100: no loss).")
    ] = None,
    eos_id: Annotated[
        int | None, typer.Option(help="Pre-tokenized records: append this EOS id [default: the tokenizer's, if any].")
    ] = None,
    window: Annotated[
        int | None, typer.Option(min=1, help="Pack each window of N consecutive documents on its own.")
    ] = None,
    no_eos: Annotated[bool, typer.Option("--no-eos", help="Do not append EOS to each document.")] = False,
    bos: Annotated[bool, typer.Option("--bos", help="Prepend BOS to each document.")] = False,
    eos_token: Annotated[str | None, typer.Option(help="EOS token text, when the tokenizer's cannot be found.")] = None,
    skip_bad_records: Annotated[
        bool, typer.Option("--skip-bad-records", help="Count and skip bad records instead of failing.")
    ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing, different output.")] = False,
    json_output: JsonOption = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no warnings on stderr.")] = False,
) -> None:
    """Tokenize INPUTS and pack whole documents into sequences of at most --max-len tokens.

    Examples:

      packcli pack corpus.jsonl --max-len 4096

      packcli pack data/ --tokenizer tokenizer.json --strategy ffd --out packed-ffd

      packcli pack 'shards/*.parquet' --overflow drop --json

      packcli pack sft.jsonl --prompt-field prompt --response-field response --max-len 2048

      packcli pack web.jsonl code/ --weights 0.7,0.3 --target-tokens 3M

      packcli pack tokens.parquet --ids-field input_ids --eos-id 2
    """
    from packcli.options import PackOptions, parse_count, parse_size, parse_weights
    from packcli.pipeline import pack_corpus
    from packcli.report.progress import RichReporter, SilentReporter

    if workers is not None:
        os.environ["RAYON_NUM_THREADS"] = str(workers)  # read once, when the tokenizer's thread pool starts
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    options = PackOptions(
        max_len=max_len,
        tokenizer=tokenizer,
        strategy=strategy,
        text_field=text_field,
        overflow=overflow,
        prompt_field=prompt_field,
        response_field=response_field,
        messages_field=messages_field,
        chat_template=chat_template,
        loss_on=loss_on,
        shard_size=parse_size(shard_size),
        workers=workers,
        seed=seed,
        window=window,
        eos=not no_eos,
        bos=bos,
        eos_token=eos_token,
        skip_bad_records=skip_bad_records,
        ids_field=ids_field,
        labels_field=labels_field,
        eos_id=eos_id,
        weights=None if weights is None else parse_weights(weights),
        target_tokens=None if target_tokens is None else parse_count(target_tokens),
        shuffle=not no_shuffle,
    )
    reporter = RichReporter() if sys.stderr.isatty() and not quiet else SilentReporter()
    warnings = _Warnings(quiet)
    try:
        result = pack_corpus(inputs, options, out, overwrite=overwrite, reporter=reporter, warn=warnings)
    finally:
        reporter.close()
        warnings.close()
    summary = result.summary()
    if json_output:
        print(json.dumps(summary, sort_keys=True))
    elif result.status == "up-to-date":
        print(f"{out} is up to date (same inputs, tokenizer and options); nothing to do")
    else:
        capacity = summary["sequences"] * summary["max_len"]
        print(
            f"packed {summary['documents']:,} documents ({summary['tokens']:,} tokens) into "
            f"{summary['sequences']:,} sequences of max_len {summary['max_len']:,} "
            f"({summary['tokens'] / capacity:.2%} full), {summary['shards']} shard(s) in {out}"
        )
        keys = (
            "split_documents",
            "truncated_tokens",
            "dropped_documents",
            "bad_records",
            "empty_documents",
            "supervised_tokens",
            "unsupervised_sequences",
        )
        for key in keys:
            if summary.get(key):
                print(f"  {key.replace('_', ' ')}: {summary[key]:,}")
        for source in summary.get("sources", []):
            print(f"  {_source_line(source)}")


def _source_line(source: dict[str, Any]) -> str:
    """One mixed source in the summary, saying when it was repeated or sampled down."""
    used = source["repeats"]
    if used > 1:
        passes = f"{source['passes']} whole pass{'es' if source['passes'] > 1 else ''}"
        how = f"repeated: {used:.2f} times its tokens ({passes}, then a sample)"
    elif used < 1:
        how = f"sampled down to {used:.1%} of its tokens"
    else:
        how = "used once"
    return (
        f"source {source['path']}: {source['output_tokens']:,} tokens, {source['share']:.1%} of the output "
        f"(weight {source['weight']:.1%}); {how}"
    )


@app.command()
def strategies(json_output: JsonOption = False) -> None:
    """List the registered packing strategies, one line each.

    Example:

      packcli strategies
    """
    from packcli.strategies import available_strategies

    listing = available_strategies()
    if json_output:
        print(json.dumps(listing, sort_keys=True))
        return
    width = max(map(len, listing))
    for name, line in listing.items():
        print(f"{name:<{width}}  {line}")


@app.command()
def stats(
    paths: Annotated[
        list[str] | None, typer.Argument(help="A packed output (default ./packed), or raw corpus files.")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Documents per pad-to-longest batch; sequences per step.")] = 8,
    max_len: MaxLenOption = DEFAULT_MAX_LEN,
    tokenizer: TokenizerOption = None,
    text_field: TextFieldOption = "text",
    overflow: OverflowOption = None,
    prompt_field: PromptFieldOption = None,
    response_field: ResponseFieldOption = None,
    messages_field: MessagesFieldOption = None,
    chat_template: ChatTemplateOption = None,
    loss_on: LossOnOption = "assistant",
    json_output: JsonOption = False,
) -> None:
    """Report what packing bought: efficiency against padding, the lower bound, steps per epoch, overflow.

    On a raw corpus, tokenize it once and compare every registered strategy without writing shards.

    Examples:

      packcli stats packed/

      packcli stats packed/ --batch-size 32 --json

      packcli stats corpus.jsonl --max-len 2048 --tokenizer tokenizer.json
    """
    from packcli.report.render import print_stats, print_strategy_comparison
    from packcli.report.stats import corpus_stats, packed_stats
    from packcli.write.manifest import MANIFEST_NAME

    targets = paths or ["packed"]
    if len(targets) == 1 and (Path(targets[0]) / MANIFEST_NAME).is_file():
        figures = packed_stats(Path(targets[0]), batch_size)
        raw = False
    else:
        from packcli.options import PackOptions

        options = PackOptions(
            max_len=max_len,
            tokenizer=tokenizer,
            text_field=text_field,
            overflow=overflow,
            prompt_field=prompt_field,
            response_field=response_field,
            messages_field=messages_field,
            chat_template=chat_template,
            loss_on=loss_on,
        )
        figures = corpus_stats(targets, options, batch_size, _Warnings(quiet=False))
        raw = True
    if json_output:
        print(json.dumps(figures, sort_keys=True))
        return
    print_stats(figures, " ".join(targets))
    if raw:
        print_strategy_comparison(figures)
        print(f"the tokenized corpus is kept for the next `packcli pack` of it: {figures['tokenization_cache']}")


@app.command()
def verify(
    path: Annotated[Path, typer.Argument(help="A packed output directory.")] = Path("packed"),
    json_output: JsonOption = False,
) -> None:
    """Re-read a packed output and check every invariant and checksum; exit 0 only if all hold, else 1.

    Examples:

      packcli verify packed/

      packcli verify packed/ --json
    """
    from packcli.errors import EXIT_DATA
    from packcli.report.verify import MAX_LISTED, verify_output

    report = verify_output(path)
    if json_output:
        print(json.dumps(report.to_json(), sort_keys=True))
    elif report.ok:
        print(f"{path}: OK ({report.shards} shards, {report.rows:,} sequences, {report.tokens:,} tokens checked)")
    else:
        for problem in report.problems:
            print(f"problem: {problem}", file=sys.stderr)
        if report.count > MAX_LISTED:
            print(f"... and {report.count - MAX_LISTED} more problems", file=sys.stderr)
        print(f"error: {path}: {report.count} problem(s) found", file=sys.stderr)
    if not report.ok:
        raise typer.Exit(EXIT_DATA)


def main() -> None:
    """Console entry point."""
    app()
