"""What ``pack`` and ``stats`` print on a terminal or in a log: the ``stats`` view (leading with the compute
multiple against random batches), the raw-corpus tables, and the loss warning (``pack``'s summary lines are
packcli/cli/summary.py's). Outside a terminal nothing is wrapped at 80 columns: a log line or a piped table keeps
its shape.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from packcli.errors import option

if TYPE_CHECKING:  # rich is imported where it draws: the pack summary is plain lines (spares pack 40 ms)
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "console",
    "count",
    "documents_and_pieces",
    "documents_phrase",
    "loss_warning",
    "percent",
    "print_corpus_choices",
    "print_model_cost",
    "print_model_cost_candidates",
    "print_stats",
    "special_text_warning",
    "token_loss",
    "tools_warning",
]

LOSS_WARNING_SHARE = 0.01  # drop/truncate throwing away more than this share of the input tokens is a warning
_BAR_WIDTH = 40


def console() -> Console:
    """A console for stdout; not a terminal (a pipe, a log file): as wide as each line needs."""
    from rich.console import Console

    terminal = sys.stdout.isatty()
    return Console(highlight=False, soft_wrap=not terminal, width=None if terminal else 1000)


def _table(title: str) -> Table:
    """An empty table, titled on the left."""
    from rich.table import Table

    return Table(title=title, title_justify="left")


def token_loss(totals: dict[str, Any]) -> tuple[int, int]:
    """(input tokens dropped or truncated, input tokens) of a manifest's totals or a ``stats`` object; an output
    that predates ``input_tokens`` counts its tokens plus the lost ones."""
    lost = int(totals.get("dropped_tokens", 0)) + int(totals.get("truncated_tokens", 0))
    return lost, int(totals.get("input_tokens") or totals.get("tokens", 0) + lost)


def documents_and_pieces(figures: dict[str, Any]) -> tuple[int, str]:
    """(input documents, " in N pieces" where split documents made more pieces, else "") of ``stats`` figures."""
    documents, pieces = int(figures.get("input_documents", figures["documents"])), int(figures["documents"])
    return documents, f" in {pieces:,} pieces" if pieces != documents and figures.get("split_documents") else ""


def documents_phrase(figures: dict[str, Any]) -> str:
    """Input documents and what overflow made of them, for a headline: "194 of 200 documents (6 dropped)",
    "200 documents (6 truncated)", "198 documents in 1,559 pieces", "200 documents"."""
    documents, pieces = int(figures.get("input_documents", figures["documents"])), int(figures["documents"])
    if figures.get("dropped_documents"):
        return f"{pieces:,} of {count(documents, 'document')} ({figures['dropped_documents']:,} dropped)"
    if figures.get("truncated_documents"):
        return f"{count(documents, 'document')} ({figures['truncated_documents']:,} truncated)"
    return count(documents, "document") + documents_and_pieces(figures)[1]


def loss_warning(totals: dict[str, Any], max_len: int) -> str | None:
    """The warning for ``--overflow drop``/``truncate`` throwing away more than 1% of the input tokens, or None."""
    lost, total = token_loss(totals)
    if not total or lost <= LOSS_WARNING_SHARE * total:
        return None
    dropped = int(totals.get("dropped_documents", 0))
    truncated = int(totals.get("truncated_documents", 0))
    overflow, longest = option("overflow"), option("max_len", f"{max_len:,}")
    how = (
        f"{overflow} drop left out {count(dropped, 'document')} longer than {longest}"
        if dropped
        else f"{overflow} truncate cut {count(truncated, 'document')} to {longest}"
    )
    return (
        f"{how}: {lost:,} of {total:,} input tokens lost ({lost / total:.2%}); {overflow} split keeps every token, "
        f"`packcli stats CORPUS` with this run's other options shows what other {option('max_len')} values would cost"
    )


def tools_warning(totals: dict[str, Any], tools_field: str) -> str | None:
    """The warning for a ``--tools-field`` that no chat record holds (a mistyped name renders every chat without its
    tools), or None: the field held tools, or the run counted none (the default field, or no chats)."""
    if totals.get("records_with_tools", 1):
        return None
    return (
        f"no record holds tool definitions in the field {tools_field!r} that {option('tools_field')} names: every "
        "chat was rendered without tools (manifest total records_with_tools)"
    )


def special_text_warning(totals: dict[str, Any]) -> str | None:
    """The warning for chat messages whose special-token text the template made special tokens, or None."""
    held = int(totals.get("special_text_messages", 0))
    if not held:
        return None
    return (
        f"{count(held, 'message')} {'holds' if held == 1 else 'hold'} special-token text that the chat template "
        "renders as special tokens, as apply_chat_template does, so it can end or open a turn (manifest total "
        "special_text_messages)"
    )


def percent(share: float) -> str:
    """A share as a percentage to 0.1%; a positive one below that is ``<0.1%``, never ``0.0%``."""
    return "<0.1%" if 0 < share < 0.0005 else f"{share:.1%}"


def count(number: int, noun: str) -> str:
    """``1 shard``, ``2 shards``."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _print_bars(out: Console, title: str, histogram: dict[str, list[float]], percent: bool) -> None:
    counts, edges = histogram["counts"], histogram["edges"]
    top = max(max(counts), 1)
    out.print(f"\n[bold]{title}[/bold]")
    for low, high, count in zip(edges, edges[1:], counts):
        label = f"{low:6.0%}-{high:4.0%}" if percent else f"{int(low):>7,}-{int(high):<7,}"
        out.print(f"  {label} {'█' * round(_BAR_WIDTH * count / top):<{_BAR_WIDTH}} {int(count):,}")


def _layouts(stats: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    batch = stats["pad_to_longest"]["batch_size"]
    return [
        (f"packing ({stats['strategy']})", stats["packing"]),
        (f"random batches of {batch}, each padded to its longest", stats["pad_to_longest"]),
        (f"batches of {batch} grouped by length, padded to the longest", stats["length_grouped"]),
        ("every document alone, padded to max_len", stats["pad_to_max_len"]),
    ]


def print_stats(stats: dict[str, Any], title: str) -> None:
    """The headline (compute against random batches), totals, the layout table, overflow and the histograms."""
    out = console()
    window = f", windows of {stats['window']:,} documents" if stats.get("window") else ""
    out.print(f"[bold]{title}[/bold]  strategy {stats['strategy']}{window}, max_len {stats['max_len']:,}")
    random = stats["pad_to_longest"]
    saved = stats["compute_saved"]["vs_pad_to_longest"]
    ratio = f"{saved:.2f}x less" if saved >= 1 else f"{1 / saved:.2f}x more"  # more: fewer documents than a row holds
    out.print(
        f"  [bold]packing needs {ratio} compute than random batches of {random['batch_size']}, each padded to its "
        f"longest[/bold] ({stats['packing']['efficiency']:.2%} of the computed slots hold real tokens, against "
        f"{random['efficiency']:.2%})"
    )
    out.print(
        f"  {documents_phrase(stats)}, {count(stats['tokens'], 'token')}, "
        f"{count(stats['sequences'], 'sequence')} "
        f"(lower bound {stats['lower_bound_sequences']:,}, gap {stats['gap_to_lower_bound']:,})"
    )
    table = _table("compute per layout")
    for column in ("layout", "slots", "padding tokens", "efficiency", "compute / packing"):
        table.add_column(column, justify="right" if column != "layout" else "left")
    packed_slots = stats["tokens"] + stats["packing"]["padding_tokens"]
    for name, figures in _layouts(stats):
        slots = stats["tokens"] + figures["padding_tokens"]
        table.add_row(
            name,
            f"{slots:,}",
            f"{figures['padding_tokens']:,}",
            f"{figures['efficiency']:.2%}",
            f"{slots / packed_slots:.2f}x" if packed_slots else "-",
        )
    out.print(table)
    per_sequence = stats["documents_per_sequence"]
    steps = stats["steps_per_epoch"]
    out.print(f"  documents per sequence: mean {per_sequence['mean']:.2f}, max {per_sequence['max']:,}")
    out.print(
        f"  steps per epoch at {steps['batch_size']} sequences per step: {steps['steps']:,} "
        f"({steps['steps_drop_last']:,} dropping the last partial batch)"
    )
    lost = stats.get("dropped_tokens", 0) + stats.get("truncated_tokens", 0)
    share = f" ({lost / stats['input_tokens']:.2%} of the input tokens)" if lost and stats.get("input_tokens") else ""
    out.print(
        f"  overflow ({stats.get('overflow') or 'split'}): {stats['split_documents']:,} documents split, "
        f"{stats['truncated_tokens']:,} tokens truncated, {stats['dropped_documents']:,} documents "
        f"({stats.get('dropped_tokens', 0):,} tokens) dropped{share}; {stats['bad_records']:,} bad records skipped, "
        f"{stats['empty_documents']:,} empty texts skipped"
    )
    if "supervised_tokens" in stats:
        out.print(
            f"  fine-tuning: {stats['supervised_tokens']:,} supervised tokens ({stats['supervised_fraction']:.2%}), "
            f"{stats['unsupervised_sequences']:,} sequences without any supervised token"
        )
    if "sources" in stats:
        _print_sources(out, stats["sources"])
    lengths = stats["histograms"]["document_length"]
    _print_bars(out, "packed document lengths (tokens; a split document's pieces counted apart)", lengths, False)
    _print_bars(out, "sequence fill", stats["histograms"]["sequence_fill"], percent=True)


def print_corpus_choices(stats: dict[str, Any]) -> None:
    """Raw corpus: length percentiles, what each candidate ``max_len`` costs, and one row per strategy."""
    out = console()
    lengths = stats["lengths"]
    out.print(
        f"\n[bold]document lengths before overflow (tokens)[/bold]: p50 {lengths['p50']:,}, p90 {lengths['p90']:,}, "
        f"p99 {lengths['p99']:,}, max {lengths['max']:,} (mean {lengths['mean']:,.1f}, {lengths['documents']:,} "
        f"documents)"
    )
    table = _table("choosing --max-len")
    for column in (
        "max_len",
        "documents over",
        "truncate loses",
        "drop loses",
        "split: pieces",
        "sequences",
        "efficiency",
    ):
        table.add_column(column, justify="right")
    for candidate in stats["max_len_candidates"]:
        given = " (given)" if candidate["max_len"] == stats["max_len"] else ""
        truncate, drop, split = candidate["truncate"], candidate["drop"], candidate["split"]
        table.add_row(
            f"{candidate['max_len']:,}{given}",
            f"{candidate['documents_over']:,}",
            f"{truncate['tokens_lost']:,} ({truncate['fraction_lost']:.1%})",
            f"{drop['tokens_lost']:,} ({drop['fraction_lost']:.1%})",
            f"{split['pieces']:,}",
            f"{split['sequences']:,}",
            f"{split['efficiency']:.2%}",
        )
    out.print(table)
    _print_strategy_comparison(out, stats)


def _print_sources(out: Console, sources: list[dict[str, Any]]) -> None:
    """A mixed output's sources: what each put into the output, and how often its tokens were used."""
    table = _table("sources (mixed)")
    for column in ("source", "weight", "documents", "tokens", "share", "used"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source in sources:
        table.add_row(
            source["path"],
            percent(source["weight"]),
            f"{source['documents']:,}",
            f"{source['tokens']:,}",
            percent(source["share"]),
            f"{source['repeats']:.2f}x",
        )
    out.print(table)


def _print_strategy_comparison(out: Console, stats: dict[str, Any]) -> None:
    table = _table(
        f"strategies at max_len {stats['max_len']:,} ({stats['tokens']:,} tokens, {stats['documents']:,} documents)"
    )
    for column in ("strategy", "sequences", "gap to lower bound", "efficiency", "docs / sequence", "steps / epoch"):
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
    out.print(table)


def flops(value: float) -> str:
    """FLOPs with an SI prefix, three significant digits: ``1.23 PFLOP``."""
    prefixes = ("", "k", "M", "G", "T", "P", "E", "Z", "Y")
    power = min(max(math.floor(math.log10(value) / 3), 0), len(prefixes) - 1) if value > 0 else 0
    return f"{value / 1000**power:.3g} {prefixes[power]}FLOP"


def _step(model: dict[str, Any]) -> str:
    """``8 ranks x 1 row x 4 micro-steps``: the step of the imbalance figures."""
    rows, steps = model["batch_size"], model["grad_accum"]
    return f"{count(model['world_size'], 'rank')} x {count(rows, 'row')} x {count(steps, 'micro-step')}"


def imbalance_line(model: dict[str, Any], sequences: int) -> str:
    """The step imbalance of the plain and the balanced order, or why there is none."""
    size = model["world_size"] * model["batch_size"] * model["grad_accum"]
    if model["plain_imbalance"] is None:
        made = f"{count(sequences, 'sequence')} make no global batch of {size:,}"
        return f"step imbalance: no figure, {made} ({_step(model)})"
    left = f", {count(model['rows_left_out'], 'row')} left out" if model["rows_left_out"] else ""
    batches = model["global_batches"]
    return (
        f"step imbalance at {_step(model)} ({batches:,} global batch{'' if batches == 1 else 'es'}{left}): slowest "
        f"rank above the mean, plain order {model['plain_imbalance']:.1%}, balanced {model['balanced_imbalance']:.1%} "
        f"(a step {model['balanced_speedup']:.2f}x faster)"
    )


def print_model_cost(stats: dict[str, Any]) -> None:
    """``--model-config``: the FLOPs of each layout with attention counted, the row costs and the step imbalance."""
    out = console()
    model = stats["model_cost"]
    table = _table("model cost per layout (FLOPs of one epoch, forward and backward, attention counted)")
    for column in ("layout", "FLOPs", "attention", "FLOPs / packing"):
        table.add_column(column, justify="right" if column != "layout" else "left")
    packed = model["packing"]["flops"]
    batch = stats["pad_to_longest"]["batch_size"]
    for name, key in (
        (f"packing ({stats['strategy']}), varlen", "packing"),
        (f"random batches of {batch}, each padded to its longest", "pad_to_longest"),
        (f"batches of {batch} grouped by length, padded to the longest", "length_grouped"),
        ("every document alone, padded to max_len", "pad_to_max_len"),
    ):
        figures = model[key]
        table.add_row(
            name,
            flops(figures["flops"]),
            f"{figures['attention_share']:.1%}",
            f"{figures['flops'] / packed:.2f}x" if packed else "-",
        )
    out.print(table)
    costs = model["row_cost"]
    out.print(
        f"  row cost: p50 {flops(costs['p50'])}, p90 {flops(costs['p90'])}, p99 {flops(costs['p99'])}, "
        f"max {flops(costs['max'])} (max / mean {costs['max'] / costs['mean'] if costs['mean'] else 1:.2f}x)"
    )
    out.print(f"  {imbalance_line(model, stats['sequences'])}")


def print_model_cost_candidates(stats: dict[str, Any]) -> None:
    """Raw corpus with ``--model-config``: the model cost of each candidate ``max_len``'s split packing."""
    out = console()
    model = stats["model_cost"]
    table = _table(f"model cost per --max-len (split, {stats['strategy']}; imbalance at {_step(model)})")
    columns = ("max_len", "FLOPs", "attention", "random batches / packing", "plain imbalance", "balanced imbalance")
    for column in columns:
        table.add_column(column, justify="right")
    for candidate in stats["max_len_candidates"]:
        given = " (given)" if candidate["max_len"] == stats["max_len"] else ""
        figures = candidate["split"]["model_cost"]
        table.add_row(
            f"{candidate['max_len']:,}{given}",
            flops(figures["packing"]["flops"]),
            f"{figures['packing']['attention_share']:.1%}",
            f"{figures['compute_saved']['vs_pad_to_longest']:.2f}x",
            *(
                "-" if figures[key] is None else f"{figures[key]:.1%}"
                for key in ("plain_imbalance", "balanced_imbalance")
            ),
        )
    out.print(table)
