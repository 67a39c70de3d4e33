"""Human-readable reports for ``stats`` and ``verify`` (rich tables and terminal histograms on stdout)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

_BAR_WIDTH = 40


def _histogram(console: Console, title: str, histogram: dict[str, list[float]], percent: bool) -> None:
    counts, edges = histogram["counts"], histogram["edges"]
    top = max(max(counts), 1)
    console.print(f"\n[bold]{title}[/bold]")
    for low, high, count in zip(edges, edges[1:], counts):
        label = f"{low:6.0%}-{high:4.0%}" if percent else f"{int(low):>7,}-{int(high):<7,}"
        console.print(f"  {label} {'█' * round(_BAR_WIDTH * count / top):<{_BAR_WIDTH}} {int(count):,}")


def print_stats(stats: dict[str, Any], title: str) -> None:
    """The totals, packing against the padding baselines, overflow counts and the two histograms."""
    console = Console(highlight=False)
    window = f", windows of {stats['window']:,} documents" if stats.get("window") else ""
    console.print(f"[bold]{title}[/bold]  strategy {stats['strategy']}{window}, max_len {stats['max_len']:,}")
    console.print(
        f"  {stats['documents']:,} documents, {stats['tokens']:,} tokens, {stats['sequences']:,} sequences "
        f"(lower bound {stats['lower_bound_sequences']:,}, gap {stats['gap_to_lower_bound']:,})"
    )
    table = Table(title="compute per layout", title_justify="left")
    for column in ("layout", "slots", "padding tokens", "efficiency", "compute / packing"):
        table.add_column(column, justify="right" if column != "layout" else "left")
    packed_slots = stats["tokens"] + stats["packing"]["padding_tokens"]
    for name, key in (
        ("packing", "packing"),
        ("pad to max_len", "pad_to_max_len"),
        (f"pad to longest, batches of {stats['pad_to_longest']['batch_size']}", "pad_to_longest"),
    ):
        figures = stats[key]
        slots = stats["tokens"] + figures["padding_tokens"]
        table.add_row(
            name,
            f"{slots:,}",
            f"{figures['padding_tokens']:,}",
            f"{figures['efficiency']:.2%}",
            f"{slots / packed_slots:.2f}x" if packed_slots else "-",
        )
    console.print(table)
    per_sequence = stats["documents_per_sequence"]
    steps = stats["steps_per_epoch"]
    console.print(f"  documents per sequence: mean {per_sequence['mean']:.2f}, max {per_sequence['max']:,}")
    console.print(
        f"  steps per epoch at {steps['batch_size']} sequences per step: {steps['steps']:,} "
        f"({steps['steps_drop_last']:,} dropping the last partial batch)"
    )
    console.print(
        f"  overflow: {stats['split_documents']:,} documents split, {stats['truncated_tokens']:,} tokens truncated, "
        f"{stats['dropped_documents']:,} documents dropped; {stats['bad_records']:,} bad records skipped, "
        f"{stats['empty_documents']:,} empty texts skipped"
    )
    if "supervised_tokens" in stats:
        console.print(
            f"  fine-tuning: {stats['supervised_tokens']:,} supervised tokens ({stats['supervised_fraction']:.2%}), "
            f"{stats['unsupervised_sequences']:,} sequences without any supervised token"
        )
    if "sources" in stats:
        _sources(console, stats["sources"])
    _histogram(console, "document lengths (tokens)", stats["histograms"]["document_length"], percent=False)
    _histogram(console, "sequence fill", stats["histograms"]["sequence_fill"], percent=True)


def _sources(console: Console, sources: list[dict[str, Any]]) -> None:
    """A mixed output's sources: what each put into the output, and how often its tokens were used."""
    table = Table(title="sources (mixed)", title_justify="left")
    for column in ("source", "weight", "documents", "tokens", "share", "used"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source in sources:
        table.add_row(
            source["path"],
            f"{source['weight']:.1%}",
            f"{source['documents']:,}",
            f"{source['tokens']:,}",
            f"{source['share']:.1%}",
            f"{source['repeats']:.2f}x",
        )
    console.print(table)


def print_strategy_comparison(stats: dict[str, Any]) -> None:
    """One row per registered strategy, for ``stats`` on a raw corpus."""
    console = Console(highlight=False)
    table = Table(
        title=f"strategies at max_len {stats['max_len']:,} ({stats['tokens']:,} tokens, "
        f"{stats['documents']:,} documents)",
        title_justify="left",
    )
    for column in (
        "strategy",
        "sequences",
        "gap to lower bound",
        "efficiency",
        "docs / sequence",
        "steps / epoch",
    ):
        table.add_column(column, justify="right" if column != "strategy" else "left")
    for name, figures in stats["strategies"].items():
        table.add_row(
            name,
            f"{figures['sequences']:,}",
            f"{figures['gap_to_lower_bound']:,}",
            f"{figures['packing']['efficiency']:.2%}",
            f"{figures['documents_per_sequence']['mean']:.2f}",
            f"{figures['steps_per_epoch']['steps']:,}",
        )
    table.add_row(
        "pad to max_len",
        f"{stats['documents']:,}",
        f"{stats['documents'] - stats['lower_bound_sequences']:,}",
        f"{stats['pad_to_max_len']['efficiency']:.2%}",
        "1.00",
        "-",
    )
    console.print(table)
