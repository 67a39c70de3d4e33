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
from typer.core import TyperCommand, TyperGroup

from packcli.options import DEFAULT_MAX_LEN, Overflow

# click's exceptions, whether typer uses click itself or its vendored copy.
click_exceptions = sys.modules[typer.BadParameter.__module__]


def _untyped_flags(params: list[Any]) -> list[Any]:
    """A flag takes no value: no ``<bool>`` beside it in ``--help``."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """A packcli command: its ``--help`` shows flags without a value type."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


class OneLineErrors(TyperGroup):
    """The one error mapper: usage errors exit 2, packcli and OS errors exit 1, each as one ``error: ...`` line on
    stderr; anything unforeseen is one line too, with a hint. ``--debug`` (anywhere) lets the traceback through.
    Bare ``packcli`` prints the help and exits 0."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))

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
            sys.exit(0)
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


@app.command(cls=Command)
def pack(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Files (.jsonl, .ndjson, .json, each also .gz/.zst/.bz2/.xz; .parquet; .arrow), directories or globs."
        ),
    ],
    max_len: MaxLenOption = DEFAULT_MAX_LEN,
    tokenizer: TokenizerOption = None,
    strategy: StrategyOption = "bfd",
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("packed"),
    text_field: TextFieldOption = "text",
    overflow: OverflowOption = None,
    prompt_field: PromptFieldOption = None,
    response_field: ResponseFieldOption = None,
    messages_field: MessagesFieldOption = None,
    chat_template: ChatTemplateOption = None,
    loss_on: LossOnOption = "assistant",
    shard_size: Annotated[str, typer.Option(help="Bytes per shard, e.g. 512MiB, 64MB, 0.5GB, 1TB.")] = "512MiB",
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Tokenizer threads; with partitions, worker processes (or Ray actors), each with its share of the "
            "cores.",
            show_default="all cores",
        ),
    ] = None,
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
        typer.Option(help="Mixing: output tokens, e.g. 3M.", show_default="the most that repeats no input"),
    ] = None,
    ids_field: Annotated[
        str | None, typer.Option(help="Pre-tokenized records: the field of token ids, packed as given.")
    ] = None,
    labels_field: Annotated[
        str | None, typer.Option(help="Pre-tokenized fine-tuning: the field of labels (-100: no loss).")
    ] = None,
    eos_id: Annotated[
        int | None,
        typer.Option(help="Pre-tokenized records: append this EOS id.", show_default="the tokenizer's, if any"),
    ] = None,
    window: WindowOption = None,
    no_eos: NoEosOption = False,
    bos: BosOption = False,
    eos_token: EosTokenOption = None,
    skip_bad_records: SkipBadRecordsOption = False,
    partitions: Annotated[
        int | None,
        typer.Option(min=1, help="Pack as this many partitions (mixtures of the whole corpus), then merge."),
    ] = None,
    partition_size: Annotated[
        str | None, typer.Option(help="Or as many partitions as it takes at about this many input bytes each.")
    ] = None,
    engine: Annotated[
        str, typer.Option(help="What runs the partitions: 'local' (worker processes) or 'ray' (packcli[ray]).")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="The Ray cluster for --engine ray [default: RAY_ADDRESS, else a local Ray].")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing, different output.")] = False,
    json_output: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Tokenize INPUTS and pack whole documents into sequences of at most --max-len tokens.

    Examples:

      packcli pack corpus.jsonl --max-len 4096

      packcli pack data/ --tokenizer tokenizer.json --strategy ffd --out packed-ffd

      packcli pack 'shards/*.parquet' --overflow drop --json

      packcli pack sft.jsonl --prompt-field prompt --response-field response --max-len 2048

      packcli pack web.jsonl code/ --weights 0.7,0.3 --target-tokens 3M

      packcli pack tokens.parquet --ids-field input_ids --eos-id 2

      packcli pack corpus/ --partitions 64 --engine ray --ray-address head:6379
    """
    from packcli.options import PackOptions, parse_count, parse_size, parse_weights
    from packcli.pipeline import pack_corpus
    from packcli.report.progress import make_reporter
    from packcli.report.render import loss_warning, pack_summary

    if workers is not None and partitions is None and partition_size is None:
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
        partitions=partitions,
        partition_size=None if partition_size is None else parse_size(partition_size),
        engine=engine,
        ray_address=ray_address,
    )
    reporter = make_reporter(quiet)
    warnings = _Warnings(quiet)
    try:
        result = pack_corpus(inputs, options, out, overwrite=overwrite, reporter=reporter, warn=warnings)
    finally:
        reporter.close()
        warnings.close()
    summary = result.summary()
    _warn_loss(loss_warning(summary, summary["max_len"]))
    if json_output:
        print(json.dumps(summary, sort_keys=True))
    elif result.status == "up-to-date":
        print(f"{out} is up to date (same inputs, tokenizer and options); nothing to do")
    else:
        print("\n".join(pack_summary(summary, out)))


def _warn_loss(message: str | None) -> None:
    """The loss warning is printed even with --quiet: nothing is lost silently."""
    if message is not None:
        print(f"warning: {message}", file=sys.stderr)


@app.command(cls=Command)
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


@app.command(cls=Command)
def stats(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None,
        typer.Argument(help="A packed output, or raw corpus files (as for pack).", show_default="packed"),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Documents per batch of the padding baselines; sequences per step.")
    ] = 8,
    seed: Annotated[int, typer.Option(help="Seed of the random batches (and of strategies that take one).")] = 0,
    plot: Annotated[
        Path | None, typer.Option(help="Also draw the figures into this .png, .svg or .pdf (needs packcli\\[plot]).")
    ] = None,
    max_len: MaxLenOption = DEFAULT_MAX_LEN,
    tokenizer: TokenizerOption = None,
    strategy: StrategyOption = "bfd",
    window: WindowOption = None,
    text_field: TextFieldOption = "text",
    overflow: OverflowOption = None,
    prompt_field: PromptFieldOption = None,
    response_field: ResponseFieldOption = None,
    messages_field: MessagesFieldOption = None,
    chat_template: ChatTemplateOption = None,
    loss_on: LossOnOption = "assistant",
    no_eos: NoEosOption = False,
    bos: BosOption = False,
    eos_token: EosTokenOption = None,
    skip_bad_records: SkipBadRecordsOption = False,
    json_output: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Report what packing bought: compute against random padded batches, the lower bound, steps per epoch, overflow.

    On a raw corpus (pack's record options apply): tokenize it once and compare every registered strategy.

    Also length percentiles and what other --max-len values would cost. Nothing is written.

    Examples:

      packcli stats packed/ --plot packing.png

      packcli stats packed/ --batch-size 32 --json

      packcli stats corpus.jsonl --max-len 2048 --tokenizer tokenizer.json
    """
    from packcli.report.render import loss_warning, print_corpus_choices, print_stats
    from packcli.report.stats import measure_corpus, measure_output
    from packcli.write.manifest import MANIFEST_NAME

    if plot is not None:
        from packcli.report.plot import check_plot_path

        check_plot_path(plot)  # before any work: a typo or a missing matplotlib fails at once
    targets = paths or ["packed"]
    raw = not (len(targets) == 1 and (Path(targets[0]) / MANIFEST_NAME).is_file())
    if raw:
        from packcli.options import PackOptions
        from packcli.report.progress import make_reporter

        options = PackOptions(
            max_len=max_len,
            tokenizer=tokenizer,
            strategy=strategy,
            window=window,
            seed=seed,
            text_field=text_field,
            overflow=overflow,
            prompt_field=prompt_field,
            response_field=response_field,
            messages_field=messages_field,
            chat_template=chat_template,
            loss_on=loss_on,
            eos=not no_eos,
            bos=bos,
            eos_token=eos_token,
            skip_bad_records=skip_bad_records,
        )
        warnings, reporter = _Warnings(quiet), make_reporter(quiet)
        try:
            measured = measure_corpus(targets, options, batch_size, warnings, reporter)
        finally:
            reporter.close()
            warnings.close()
    else:
        _refuse_corpus_options(ctx, targets[0])
        measured = measure_output(Path(targets[0]), batch_size, seed)
    figures = measured.figures
    _warn_loss(loss_warning(figures, figures["max_len"]))
    if plot is not None:
        from packcli.report.plot import plot_stats

        plot_stats(measured, plot, " ".join(targets), raw)
    if json_output:
        print(json.dumps(figures, sort_keys=True))
        return
    print_stats(figures, " ".join(targets))
    if raw:
        print_corpus_choices(figures)
        print(f"the tokenized corpus is kept for the next `packcli pack` of it: {figures['tokenization_cache']}")
    if plot is not None:
        print(f"plot written to {plot}")


# Options that describe how to read and pack a raw corpus: a packed output already fixed them.
_CORPUS_ONLY = (
    "max_len", "tokenizer", "strategy", "window", "text_field", "overflow", "prompt_field", "response_field",
    "messages_field", "chat_template", "loss_on", "no_eos", "bos", "eos_token", "skip_bad_records",
)  # fmt: skip


def _refuse_corpus_options(ctx: typer.Context, output: str) -> None:
    sources = {name: ctx.get_parameter_source(name) for name in _CORPUS_ONLY}
    given = [name for name, source in sources.items() if source is not None and source.name != "DEFAULT"]
    if given:
        from packcli.errors import UsageError

        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"{flags}: for a raw corpus; {output} is a packed output, which already fixed them")


@app.command(cls=Command)
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


@app.command(cls=Command)
def show(
    path: Annotated[Path, typer.Argument(help="A packed output directory.")] = Path("packed"),
    row: Annotated[int, typer.Option(min=0, help="The row to show, counted from 0 over all shards.")] = 0,
    positions: Annotated[
        bool, typer.Option("--positions", help="List every token with its position, id and supervision.")
    ] = False,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="The tokenizer to decode with.", show_default="the one the output was packed with"),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Decode one packed row: its documents separated and numbered, supervised tokens (fine-tuning) marked.

    Supervised tokens are green on a terminal, between ⟦ and ⟧ otherwise. The quickest check that masks are right.

    Examples:

      packcli show packed/

      packcli show packed/ --row 17 --positions

      packcli show sft-packed/ --json
    """
    from packcli.report.show import decode_row, output_tokenizer, print_row, read_row

    manifest, shown = read_row(path, row)
    decoded = decode_row(shown, output_tokenizer(manifest, tokenizer), positions)
    if json_output:
        print(json.dumps(decoded, sort_keys=True, ensure_ascii=False))
    else:
        print_row(decoded, str(path))


def main() -> None:
    """Console entry point."""
    app()
