"""The commands that read and report, writing nothing: ``stats`` (of an output or a raw corpus), ``verify``,
``show`` and ``strategies``. Heavy modules are imported inside each command so ``--help`` stays instant.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from packcli.cli import flags
from packcli.cli.notices import Warnings, resolve_summary, warn_loss, write_summary
from packcli.errors import one_line
from packcli.options import DEFAULT_MAX_LEN

if TYPE_CHECKING:
    from packcli.report.costs import ModelCost

__all__ = ["show", "stats", "strategies", "verify"]


def strategies(json_output: flags.JsonOption = False) -> None:
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


def stats(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None,
        typer.Argument(help="A packed output, or raw corpus files (as for pack).", show_default="packed"),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1,
            max=flags.INT64_MAX,
            help="Documents per batch of the padding baselines; sequences per step (with --model-config: per rank "
            "and micro-step).",
        ),
    ] = 8,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random batches (and of strategies that take one).")] = 0,
    plot: Annotated[
        Path | None,
        typer.Option(
            parser=flags.local_path, help="Also draw the figures into this .png, .svg or .pdf (needs packcli\\[plot])."
        ),
    ] = None,
    max_len: flags.MaxLenOption = DEFAULT_MAX_LEN,
    tokenizer: flags.TokenizerOption = None,
    tokenizer_backend: flags.TokenizerBackendOption = "auto",
    strategy: flags.StrategyOption = "bfd",
    window: flags.WindowOption = None,
    text_field: flags.TextFieldOption = "text",
    overflow: flags.OverflowOption = None,
    prompt_field: flags.PromptFieldOption = None,
    response_field: flags.ResponseFieldOption = None,
    messages_field: flags.MessagesFieldOption = None,
    tools_field: flags.ToolsFieldOption = "tools",
    chat_template: flags.ChatTemplateOption = None,
    loss_on: flags.LossOnOption = "assistant",
    no_eos: flags.NoEosOption = False,
    bos: flags.BosOption = False,
    eos_token: flags.EosTokenOption = None,
    skip_bad_records: flags.SkipBadRecordsOption = False,
    min_efficiency: Annotated[
        str | None,
        typer.Option(help="Gate: fail (exit 3) below this packing efficiency, 0.95 or 95%.", show_default="no gate"),
    ] = None,
    max_loss: Annotated[
        str | None,
        typer.Option(
            help="Gate: fail (exit 3) above this share of the input tokens dropped or truncated, 0.01 or 1%.",
            show_default="no gate",
        ),
    ] = None,
    max_gap: Annotated[
        str | None,
        typer.Option(
            help="Gate: fail (exit 3) above this many sequences over the lower bound ceil(tokens / max_len), or "
            "this share of it (2%).",
            show_default="no gate",
        ),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(
            parser=flags.local_path,
            help="A transformers config.json (or a directory holding one): also FLOPs per layout with attention "
            "counted, row costs, and the step imbalance of the plain and the balanced order.",
            show_default="no model",
        ),
    ] = None,
    world_size: Annotated[
        int,
        typer.Option(
            min=1, max=flags.INT64_MAX, help="With --model-config: data-parallel ranks of the step imbalance."
        ),
    ] = 8,
    grad_accum: Annotated[
        int, typer.Option(min=1, max=flags.INT64_MAX, help="With --model-config: micro-steps per optimizer step.")
    ] = 1,
    summary_file: flags.SummaryOption = None,
    json_output: flags.JsonOption = False,
    quiet: flags.QuietOption = False,
) -> None:
    """Report what packing bought: compute against random padded batches, the lower bound, steps per epoch, overflow.

    On a raw corpus (pack's record options apply): tokenize it once and compare every registered strategy.

    Also length percentiles and what other --max-len values would cost. No output is written; the tokens stay in
    the tokenization cache ($PACKCLI_CACHE), so the next pack of the same corpus does not tokenize again.

    Examples:

      packcli stats packed/ --plot packing.png

      packcli stats packed/ --batch-size 32 --json

      packcli stats corpus.jsonl --max-len 2048 --tokenizer tokenizer.json

      packcli stats packed/ --min-efficiency 95% --max-loss 1% --max-gap 2%

      packcli stats packed/ --model-config config.json --world-size 8 --batch-size 1 --grad-accum 4
    """
    from packcli.format.manifest import is_output
    from packcli.read.stdin import STDIN, STDIN_NAME, spooled_stdin
    from packcli.report.gates import check_gates, failure, measure_checked, parse_gates
    from packcli.report.markdown import stats_markdown
    from packcli.report.stats import measure_output
    from packcli.report.terminal import (
        loss_warning,
        print_corpus_choices,
        print_model_cost,
        print_model_cost_candidates,
        print_stats,
        special_text_warning,
        tools_warning,
    )
    from packcli.run.analysis import measure_corpus
    from packcli.storage import location

    gates = parse_gates(min_efficiency, max_loss, max_gap)  # an impossible threshold fails before any work
    model = _model_cost(ctx, model_config, world_size, batch_size, grad_accum, seed)  # a bad config.json too
    summary = resolve_summary(summary_file)
    if plot is not None:
        from packcli.report.plot import check_plot_path

        check_plot_path(plot)  # before any work: a typo or a missing matplotlib fails at once
    if not paths and not Path("packed").exists():  # bare `packcli stats` reads pack's default --out
        from packcli.errors import PackcliError

        raise PackcliError("no packcli output here (run packcli pack first, or name an output or a corpus)", "packed")
    targets = paths or ["packed"]
    outputs = [target for target in targets if target != STDIN and is_output(location(target))]
    if outputs and len(targets) > 1:
        from packcli.errors import UsageError

        raise UsageError(
            "stats reads one packed output at a time, or raw corpus files: run it once per output", outputs[0]
        )
    raw = not outputs
    title = one_line(" ".join(STDIN_NAME if target == STDIN else target for target in targets))
    if raw:
        from packcli.cli.progress import make_reporter

        record = {name: value for name, value in locals().items() if name in (*flags.RECORD_FLAGS, "seed")}
        options = flags.pack_options(record)
        warnings, reporter = Warnings(quiet), make_reporter(quiet)
        try:
            with spooled_stdin(targets, warn=warnings) as given:
                per_candidate = model.figures if model else None
                measured = measure_corpus(
                    given.files, options, batch_size, given.warn, reporter, given.spool, per_candidate
                )
                for warning in (  # as pack says them
                    special_text_warning(measured.figures),
                    tools_warning(measured.figures, options.tools_field),
                ):
                    if warning is not None:
                        warnings(warning)
        finally:
            reporter.close()
            warnings.close()
    else:
        _refuse_corpus_options(ctx, targets[0])
        measure = measure_checked if gates else measure_output  # a gate first needs a sound output
        measured = measure(location(targets[0]), batch_size, seed)  # an output URL: its shards streamed
    figures = measured.figures
    if model is not None:
        figures["model_cost"] = model.figures(measured.lengths, measured.documents_per_row, figures["max_len"])
    warn_loss(loss_warning(figures, figures["max_len"]))
    verdicts = check_gates(gates, figures, title)
    if gates:
        figures["gates"] = verdicts
    write_summary(stats_markdown(figures, title, verdicts), summary)
    if plot is not None:
        from packcli.report.plot import plot_stats

        plot_stats(measured, plot, title, raw)
    if json_output:
        print(json.dumps(figures, sort_keys=True))
    else:
        print_stats(figures, title)
        if model is not None:
            print_model_cost(figures)
        if raw:
            print_corpus_choices(figures)
            if model is not None:
                print_model_cost_candidates(figures)
            print(f"the tokenized corpus is kept for the next `packcli pack` of it: {figures['tokenization_cache']}")
        if plot is not None:
            print(f"plot written to {plot}")
    failed = failure(gates, verdicts, title)
    if failed is not None:
        raise failed


def _model_cost(
    ctx: typer.Context, config: Path | None, world_size: int, batch_size: int, grad_accum: int, seed: int
) -> ModelCost | None:
    """The model of ``--model-config`` and the step its imbalance is measured for; ``--world-size`` and
    ``--grad-accum`` without it are a usage error (they would change nothing)."""
    from packcli.errors import UsageError

    if config is None:
        given = [name for name in ("world_size", "grad_accum") if _given(ctx, name)]
        if given:
            raise UsageError(f"{', '.join('--' + name.replace('_', '-') for name in given)}: only with --model-config")
        return None
    from packcli.loader.balance import RowCost
    from packcli.report.costs import ModelCost

    try:
        cost = RowCost.from_config(config)
    except ValueError as error:
        raise UsageError(f"--model-config {error}") from None
    return ModelCost(cost, world_size, batch_size, grad_accum, seed)


def _json(value: object) -> str:
    """``value`` as JSON: its text as it is on a UTF-8 standard output, else as JSON's ``\\u`` escapes (what the
    stream would write for a character it cannot encode is no JSON)."""
    utf8 = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") == "utf8"
    return json.dumps(value, sort_keys=True, ensure_ascii=not utf8)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the option ``name`` was given (on the command line or from the environment), not defaulted."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def _refuse_corpus_options(ctx: typer.Context, output: str) -> None:
    given = [name for name in flags.RECORD_FLAGS if _given(ctx, name)]
    if given:
        from packcli.errors import UsageError

        named = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"{named}: for a raw corpus; {output} is a packed output, which already fixed them")


def verify(
    path: Annotated[str, typer.Argument(help="A packed output directory, or URL.")] = "packed",
    summary_file: flags.SummaryOption = None,
    json_output: flags.JsonOption = False,
) -> None:
    """Re-read a packed output and check every invariant and checksum; exit 0 only if all hold, else 1.

    Examples:

      packcli verify packed/

      packcli verify packed/ --json
    """
    from packcli.errors import PackcliError
    from packcli.report.markdown import verify_markdown
    from packcli.report.terminal import count
    from packcli.report.verify import MAX_LISTED, verify_output
    from packcli.storage import location

    summary = resolve_summary(summary_file)
    report = verify_output(location(path))  # an output URL: each shard streamed, hashed as it is read
    write_summary(verify_markdown(report.to_json(), one_line(str(path))), summary)
    if json_output:
        print(json.dumps(report.to_json(), sort_keys=True))
    elif report.ok:
        print(
            f"{one_line(str(path))}: OK ({count(report.shards, 'shard')}, {count(report.rows, 'sequence')}, "
            f"{report.tokens:,} tokens checked)"
        )
    else:
        for problem in report.problems:
            print(f"problem: {problem}", file=sys.stderr)
        if report.count > MAX_LISTED:
            print(f"... and {report.count - MAX_LISTED} more problems", file=sys.stderr)
    if not report.ok:  # the log's one line, with --json too: the object on stdout holds the problems
        raise PackcliError(f"{report.count} problem(s) found", path)


def show(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="A packed output directory, or URL.")] = "packed",
    row: Annotated[int, typer.Option(min=0, help="The row to show, counted from 0 over all shards.")] = 0,
    positions: Annotated[
        bool, typer.Option("--positions", help="List every token with its position, id and supervision.")
    ] = False,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="The tokenizer to decode with.", show_default="the one the output was packed with"),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source", metavar="FILE:LINE", help="Find the rows where the record at FILE:LINE (or row) went instead."
        ),
    ] = None,
    json_output: flags.JsonOption = False,
) -> None:
    """Decode one packed row: its documents separated and numbered, each with its source (FILE:LINE, piece k of
    n), supervised tokens (fine-tuning) marked; or, with --source, find where a record went.

    Supervised tokens are green on a terminal, between ⟦ and ⟧ otherwise. The quickest check that masks are right.

    Examples:

      packcli show packed/

      packcli show packed/ --row 17 --positions

      packcli show sft-packed/ --json

      packcli show packed/ --source corpus.jsonl:638
    """
    from packcli.report.show import decode_row, find_source, output_tokenizer, print_found, print_row, read_row
    from packcli.storage import location

    out = location(path)  # an output URL is streamed: find_source reads the source index, read_row one shard
    if source is not None:
        decoding = [flag for flag, name in (("--row", "row"), ("--positions", "positions")) if _given(ctx, name)]
        if decoding:
            from packcli.errors import UsageError

            raise UsageError(f"--source finds the rows a record went to; it takes no {' or '.join(decoding)}")
        found = find_source(out, source)
        if json_output:
            print(_json(found))
        else:
            print_found(found, one_line(str(path)))
        return
    manifest, shown = read_row(out, row)
    decoded = decode_row(shown, output_tokenizer(manifest, tokenizer), positions)
    if json_output:
        print(_json(decoded))
    else:
        print_row(decoded, one_line(str(path)))
