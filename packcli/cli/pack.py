"""The ``pack`` command: its options map one to one to :class:`~packcli.options.PackOptions`; the work is
:func:`packcli.run.driver.pack_corpus`'s. Heavy modules are imported inside the command so ``--help`` stays instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from packcli.cli import flags
from packcli.cli.closed_stdout import said_with_what_was_done
from packcli.cli.notices import Warnings, resolve_summary, warn_loss, write_summary
from packcli.errors import one_line
from packcli.options import DEFAULT_MAX_LEN
from packcli.util.signals import Interrupted

# The console entry point (``packcli``, ``python -m packcli``) runs: this process is packcli's own command, every
# thread and tokenizer pool in it packcli's, so the local engine may fork its first worker from it. The app invoked
# in a caller's process (typer's CliRunner, a test suite) may sit beside the caller's tokenizer pool: it spawns.
_own_command = False


def as_own_command() -> None:
    """Say that this process is packcli's command (the console entry point calls it, before the app runs)."""
    global _own_command
    _own_command = True


if TYPE_CHECKING:
    from packcli.run.setup import PackResult

__all__ = ["pack"]


def pack(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Files (.jsonl, .ndjson, .json, each also .gz/.zst/.bz2/.xz; .parquet; .arrow), directories, globs, "
            "or - for standard input."
        ),
    ],
    max_len: flags.MaxLenOption = DEFAULT_MAX_LEN,
    tokenizer: flags.TokenizerOption = None,
    tokenizer_backend: flags.TokenizerBackendOption = "auto",
    strategy: flags.StrategyOption = "bfd",
    out: Annotated[str, typer.Option(help="Output directory, or URL (s3://, gs://, az://).")] = "packed",
    text_field: flags.TextFieldOption = "text",
    overflow: flags.OverflowOption = None,
    prompt_field: flags.PromptFieldOption = None,
    response_field: flags.ResponseFieldOption = None,
    messages_field: flags.MessagesFieldOption = None,
    tools_field: flags.ToolsFieldOption = "tools",
    chat_template: flags.ChatTemplateOption = None,
    loss_on: flags.LossOnOption = "assistant",
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
    no_position_ids: Annotated[
        bool,
        typer.Option(
            "--no-position-ids", help="Leave the position_ids column out: readers rebuild it from cu_seqlens."
        ),
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
    window: flags.WindowOption = None,
    no_eos: flags.NoEosOption = False,
    bos: flags.BosOption = False,
    eos_token: flags.EosTokenOption = None,
    skip_bad_records: flags.SkipBadRecordsOption = False,
    partitions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Pack as this many partitions (mixtures of the whole corpus), then merge. With -, only 1: the "
            "plain run.",
        ),
    ] = None,
    partition_size: Annotated[
        str | None, typer.Option(help="Or as many partitions as it takes at about this many input bytes each.")
    ] = None,
    engine: Annotated[
        str, typer.Option(help="What runs the partitions: 'local' (worker processes) or 'ray' (packcli\\[ray]).")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="The Ray cluster for --engine ray \\[default: RAY_ADDRESS, else a local Ray].")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing, different output.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the fingerprint the run would write, whether --out is up to date and what would be read; "
            "read no record, write nothing (a CI cache key).",
        ),
    ] = False,
    summary_file: flags.SummaryOption = None,
    json_output: flags.JsonOption = False,
    quiet: flags.QuietOption = False,
) -> None:
    """Tokenize INPUTS and pack whole documents into sequences of at most --max-len tokens.

    Examples:

      packcli pack corpus.jsonl --max-len 4096

      packcli pack data/ --tokenizer tokenizer.json --strategy ffd --out packed-ffd

      packcli pack 'shards/*.parquet' --overflow drop --json

      packcli pack sft.jsonl --prompt-field prompt --response-field response --max-len 2048

      packcli pack web.jsonl code/ --weights 0.7,0.3 --target-tokens 3M

      packcli pack tokens.parquet --ids-field input_ids --eos-id 2

      zcat corpus.jsonl.gz | packcli pack - --out packed

      packcli pack corpus/ --partitions 64 --engine ray --ray-address head:6379

      packcli pack corpus/ --max-len 2048 --dry-run --json
    """
    from packcli.cli.progress import make_reporter
    from packcli.read.stdin import STDIN, spooled_stdin
    from packcli.run.driver import pack_corpus
    from packcli.storage import location

    options = flags.pack_options(locals())
    if STDIN in inputs:
        options = options.in_one_process()
    warnings = Warnings(quiet)
    if dry_run:
        from packcli.run.dry_run import dry_run as plan_run

        try:
            with spooled_stdin(inputs, options.partitioned, warnings) as given:
                planned = plan_run(given.files, options, location(out), overwrite, given.warn, given.spool)
                report = planned if json_output else _dry_run_lines(planned)  # names <stdin> while it is spooled
        finally:
            warnings.close()
        print(json.dumps(report, sort_keys=True) if isinstance(report, dict) else "\n".join(report))
        return
    summary = resolve_summary(summary_file)  # one that cannot be written is said now, not after the whole run
    reporter = make_reporter(quiet)
    try:
        with spooled_stdin(inputs, options.partitioned, warnings) as given:
            result = pack_corpus(
                given.files,
                options,
                location(out),
                overwrite,
                reporter,
                given.warn,
                given.spool,
                fork_workers=_own_command,
            )
    finally:
        reporter.close()
        warnings.close()
    done = f"{out} was published and is complete" if result.status == "packed" else f"{out} is up to date"
    try:
        with said_with_what_was_done(done):
            _report(result, out, json_output, summary, warnings)
    except Interrupted:  # the output is in place: say so, not that nothing was written
        raise Interrupted(f"interrupted after {out} was published: the output is complete") from None


def _dry_run_lines(report: dict[str, Any]) -> list[str]:
    """What ``pack --dry-run`` prints without ``--json``, from :func:`dry_run`'s object."""
    documents, out = report["input_documents"], one_line(report["out"])
    read = f"{report['input_files']:,} file(s), {report['input_bytes']:,} bytes" + (
        "" if documents is None else f", {documents:,} documents"
    )
    doing = (
        f"{out} is up to date: the run would do nothing"
        if report["status"] == "up-to-date"
        else f"would read {read} and write {out}"
        + (" (replacing the output there)" if report["output"] == "other" else "")
    )
    lines = [f"fingerprint {report['fingerprint']}", doing]
    partitions = report.get("partitions")
    if partitions is not None:
        lines.append(f"  {partitions['count']:,} partitions (plan {partitions['plan_hash'][:16]})")
    return [*lines, f"  checked: {report['checked']}"]


def _report(result: PackResult, out: str, json_output: bool, summary: Path | None, warnings: Warnings) -> None:
    """What pack prints once the output is in place: the warnings, the summary file, the summary or JSON."""
    from packcli.cli.summary import pack_summary
    from packcli.report.markdown import pack_markdown
    from packcli.report.terminal import loss_warning, special_text_warning, tools_warning

    figures = result.summary()
    special_text = special_text_warning(figures)
    if special_text is not None:
        warnings(special_text)
    # printed even with --quiet, as a loss is: a mistyped field silently changes every chat
    untooled = tools_warning(figures, result.manifest["options"].get("tools_field", ""))
    lost = [warning for warning in (untooled, loss_warning(figures, figures["max_len"])) if warning is not None]
    for warning in lost:
        warn_loss(warning)
    shown = [*warnings.first, *lost]
    write_summary(pack_markdown(figures, out, shown, warnings.count + len(lost)), summary)
    if json_output:
        print(json.dumps(figures, sort_keys=True))
    elif result.status == "up-to-date":
        print(f"{one_line(str(out))} is up to date (same inputs, tokenizer and options); nothing to do")
    else:
        print("\n".join(pack_summary(figures, out)))
