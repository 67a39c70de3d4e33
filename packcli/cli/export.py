"""The ``export`` command: a packcli output in the format a trainer reads; the work is
:func:`packcli.export.export_output`'s. Heavy modules are imported inside the command so ``--help`` stays instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from packcli.cli import flags
from packcli.cli.closed_stdout import said_with_what_was_done
from packcli.cli.notices import Warnings
from packcli.errors import one_line
from packcli.storage.urls import location

__all__ = ["export"]


def export(
    packed: Annotated[
        Path,
        typer.Argument(parser=location, help="A packed output directory or output URL (plain or partitioned)."),
    ],
    to: Annotated[str, typer.Option("--to", help="megatron, bridge, olmo-core, nanotron or mds.")],
    out: Annotated[Path, typer.Option(parser=flags.local_path, help="Export directory.")],
    pad_to_multiple: Annotated[
        int | None,
        typer.Option(min=1, help="bridge: pad each document with EOS to a multiple of this many tokens (CP/SP)."),
    ] = None,
    sources: Annotated[
        bool,
        typer.Option(
            "--sources",
            help="Also write each sample's sources (input, record, piece of pieces): mds in a 'sources' column, the "
            "other formats in sources.jsonl, one line per sample.",
        ),
    ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing, different export.")] = False,
    json_output: flags.JsonOption = False,
    quiet: flags.ExportQuietOption = False,
) -> None:
    """Write PACKED in the on-disk format a trainer reads (see docs/export.md); PACKED is checked first.

    Examples:

      packcli export packed/ --to megatron --out megatron-data

      packcli export sft-packed/ --to bridge --out bridge-data --pad-to-multiple 8

      packcli export packed/ --to olmo-core --out olmo-data --json

      packcli export packed/ --to mds --out mds-data --sources
    """
    from packcli.errors import UsageError
    from packcli.export import export_output
    from packcli.report.terminal import count

    if pad_to_multiple is not None and to != "bridge":
        raise UsageError("--pad-to-multiple is for --to bridge")
    warnings = Warnings(quiet)
    try:
        options = {"pad_to_multiple": pad_to_multiple, "sources": True if sources else None}  # None: not asked
        result = export_output(packed, to, out, options, overwrite, warnings)
    finally:
        warnings.close()
    summary = result.summary(out)
    done = f"{out} is up to date" if result.status == "up-to-date" else f"{out} was written and is complete"
    with said_with_what_was_done(done):
        if json_output:
            print(json.dumps(summary, sort_keys=True))
        elif result.status == "up-to-date":
            print(f"{one_line(str(out))} is up to date (same packed output, format and options); nothing to do")
        else:
            totals = summary["totals"]
            print(
                f"exported {count(totals['documents'], 'document')} in {count(totals['sequences'], 'sequence')} "
                f"({totals['tokens']:,} tokens) as {to} into {one_line(str(out))}"
            )
