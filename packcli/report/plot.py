"""``packcli stats --plot FILE``: one figure of four panels that show what packing did, drawn with matplotlib (the
``plot`` extra, imported only here): document lengths with ``max_len`` marked, the fill of each sequence, compute
against the padding baselines, and one row's block-causal attention mask with its document boundaries. With
``--model-config``, two more: FLOPs per layout (linear and attention), and the row costs with the step imbalance.

The mask is drawn at most ``_MASK_CELLS`` cells a side (a cell is several tokens for a long ``max_len``), built with
one numpy comparison, never a loop over positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError, UsageError, requires_extra
from packcli.report.stats import Measured, histogram
from packcli.report.terminal import documents_phrase
from packcli.util.files import unwritable

__all__ = ["check_plot_path", "plot_stats"]

FORMATS = (".png", ".svg", ".pdf")
_FEATURE = "stats --plot"
_MASK_CELLS = 384
_PACKING, _BASELINE, _LOSS = "#1f6fb4", "#9aa5b1", "#d1495b"
_DOCUMENT_COLOURS = ("#1f6fb4", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2", "#edc948", "#9c755f")


def check_plot_path(path: Path) -> None:
    """A usage error for a format matplotlib is not asked to write, a data error for a file that cannot be written
    (a directory that does not exist), and the install hint when matplotlib is missing."""
    if path.suffix.lower() not in FORMATS:
        raise UsageError(f"--plot {path}: the file name must end in {', '.join(FORMATS)}")
    reason = unwritable(path)
    if reason is not None:
        raise PackcliError(f"cannot write the plot ({reason})", path)
    with requires_extra("plot", _FEATURE):
        import matplotlib  # noqa: F401


def plot_stats(measured: Measured, path: Path, title: str, raw: bool) -> None:
    """Draw the four panels of ``measured`` into ``path`` (.png, .svg or .pdf).

    Args:
        measured: the figures and lengths of ``stats``.
        path: the picture file to write.
        title: what was measured (the output directory or the corpus).
        raw: the lengths are a raw corpus' (before overflow) rather than an output's.
    """
    check_plot_path(path)
    with requires_extra("plot", _FEATURE):
        from matplotlib.figure import Figure  # no pyplot: no global state, no display backend

    figures = measured.figures
    model = figures.get("model_cost")  # with --model-config: a third row of panels
    figure = Figure(figsize=(11, 10.8 if model else 7.2), layout="constrained")
    panels = figure.subplots(3 if model else 2, 2)
    (lengths, fill), (compute, mask) = panels[0], panels[1]
    _draw_lengths(lengths, measured, raw)
    _draw_fill(fill, measured)
    _draw_compute(compute, figures)
    _draw_mask(mask, measured)
    if model:
        _draw_model_flops(panels[2][0], figures)
        _draw_row_costs(panels[2][1], figures)
    figure.suptitle(
        f"{title}: {documents_phrase(figures)}, {figures['tokens']:,} tokens, "
        f"{figures['sequences']:,} sequences of max_len {figures['max_len']:,} ({figures['strategy']})",
        fontsize=12,
    )
    try:
        figure.savefig(path, dpi=80)
    except OSError as exc:
        raise PackcliError(f"cannot write the plot ({exc.strerror or exc})", path) from None


def _style(axes: Any, title: str) -> None:
    axes.set_title(title, fontsize=11, loc="left")
    axes.spines[["top", "right"]].set_visible(False)
    axes.tick_params(labelsize=9)


def _draw_lengths(axes: Any, measured: Measured, raw: bool) -> None:
    lengths, max_len = measured.input_lengths, measured.figures["max_len"]
    low = max(int(lengths.min()), 1) if len(lengths) else 1
    high = max(int(lengths.max(initial=1)), max_len)
    logarithmic = high / low > 50
    edges = np.geomspace(low, high * 1.001, 41) if logarithmic else np.linspace(0, high, 41)
    counts = histogram(lengths, edges)["counts"]
    axes.stairs(counts, edges, fill=True, color=_PACKING, alpha=0.8)
    if logarithmic:
        axes.set_xscale("log")
    axes.axvline(max_len, color=_LOSS, linestyle="--", linewidth=1.5)
    over = int(np.count_nonzero(lengths > max_len))
    label = f"max_len {max_len:,}"
    if over:
        axes.axvspan(max_len, edges[-1], color=_LOSS, alpha=0.08)
        label += f"\n{over:,} longer: {measured.figures.get('overflow') or 'split'}"
    scale = np.log if logarithmic else np.asarray
    left = (scale(max_len) - scale(edges[0])) / (scale(edges[-1]) - scale(edges[0])) < 0.7  # room on the right
    axes.annotate(
        label,
        (max_len, 1),
        xycoords=("data", "axes fraction"),
        xytext=(5 if left else -5, -4),
        textcoords="offset points",
        ha="left" if left else "right",
        va="top",
        fontsize=9,
        color=_LOSS,
    )
    axes.set_xlabel("tokens per document" + (" (log scale)" if logarithmic else ""), fontsize=9)
    axes.set_ylabel("documents", fontsize=9)
    _style(axes, "input document lengths, before overflow" if raw else "packed document lengths (split pieces apart)")


def _draw_fill(axes: Any, measured: Measured) -> None:
    max_len = measured.figures["max_len"]
    starts = np.cumsum(measured.documents_per_row) - measured.documents_per_row
    rows = np.add.reduceat(measured.lengths, starts) if len(starts) else measured.lengths[:0]
    fill = 100 * rows / max_len
    edges = np.linspace(0, 100, 51)
    axes.stairs(histogram(fill, edges)["counts"], edges, fill=True, color=_PACKING, alpha=0.8)
    axes.set_yscale("log")
    axes.set_ylim(bottom=0.7)  # a bin of one sequence stays visible
    axes.set_xlim(0, 100)
    axes.set_xlabel("tokens in the sequence, % of max_len", fontsize=9)
    axes.set_ylabel("sequences (log scale)", fontsize=9)
    _style(axes, f"sequence fill: mean {float(fill.mean()) if len(fill) else 0:.1f}%")


def _draw_compute(axes: Any, figures: dict[str, Any]) -> None:
    batch = figures["pad_to_longest"]["batch_size"]
    layouts = [
        ("packing", figures["packing"]),
        (f"random batches of {batch},\npadded to longest", figures["pad_to_longest"]),
        (f"length-grouped batches\nof {batch}, padded to longest", figures["length_grouped"]),
        ("each document padded\nto max_len", figures["pad_to_max_len"]),
    ]
    packed_slots = figures["tokens"] + figures["packing"]["padding_tokens"]
    names = [name for name, _ in layouts][::-1]
    efficiency = [100 * layout["efficiency"] for _, layout in layouts][::-1]
    colours = [_BASELINE] * (len(layouts) - 1) + [_PACKING]
    bars = axes.barh(names, efficiency, color=colours, height=0.6)
    for bar, (_, layout) in zip(bars, layouts[::-1]):
        multiple = (figures["tokens"] + layout["padding_tokens"]) / packed_slots if packed_slots else 1.0
        axes.annotate(
            f"{layout['efficiency']:.1%}  ({multiple:.2f}x compute)",
            (bar.get_width(), bar.get_y() + 0.3),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=9,
        )
    axes.set_xlim(0, 140)
    axes.set_xticks([0, 25, 50, 75, 100])
    axes.set_xlabel("efficiency: real tokens / computed slots, %", fontsize=9)
    _style(axes, "compute per layout")


def _draw_mask(axes: Any, measured: Measured) -> None:
    with requires_extra("plot", _FEATURE):
        from matplotlib.colors import ListedColormap
        from matplotlib.patches import Rectangle

    max_len = measured.figures["max_len"]
    if len(measured.documents_per_row) == 0:
        axes.set_axis_off()
        return
    row = measured.example_row()
    cu = np.concatenate(([0], np.cumsum(measured.row_lengths(row))))
    cells = min(max_len, _MASK_CELLS)
    position = ((np.arange(cells) + 0.5) * max_len / cells).astype(np.int64)
    document = np.searchsorted(cu, position, side="right") - 1  # len(cu) - 1 past the last document: padding
    document[position >= cu[-1]] = -1
    allowed = (document[:, None] == document[None, :]) & (document[:, None] >= 0)
    allowed &= np.tril(np.ones((cells, cells), dtype=bool))
    image = np.where(allowed, document[:, None] % len(_DOCUMENT_COLOURS) + 1, 0)
    colours = ListedColormap(["#ffffff", *_DOCUMENT_COLOURS])
    axes.imshow(
        image,
        cmap=colours,
        vmin=0,
        vmax=len(_DOCUMENT_COLOURS),
        interpolation="nearest",
        extent=(0, max_len, max_len, 0),
    )
    for start, end in zip(cu[:-1], cu[1:]):  # each document's block: it attends within, never across
        axes.add_patch(Rectangle((start, start), end - start, end - start, fill=False, edgecolor="#333333", lw=0.8))
    if cu[-1] < max_len:
        axes.axhspan(cu[-1], max_len, color="#eeeeee", zorder=0)
    ticks = [int(cu[0])]
    for boundary in cu[1:]:  # leave out a label that would overlap the previous one
        if boundary - ticks[-1] >= max_len / 10:
            ticks.append(int(boundary))
    axes.set_xticks(ticks)
    axes.set_yticks(ticks)
    axes.tick_params(axis="x", labelrotation=90)
    axes.set_xlabel("key position (attended to)", fontsize=9)
    axes.set_ylabel("query position", fontsize=9)
    fill = cu[-1] / max_len
    _style(axes, f"block-causal mask of row {row}: {len(cu) - 1} documents\na typical row: the median fill, {fill:.1%}")


def _draw_model_flops(axes: Any, figures: dict[str, Any]) -> None:
    """Each layout's FLOPs over packing's, split into the linear layers and attention."""
    model, batch = figures["model_cost"], figures["pad_to_longest"]["batch_size"]
    layouts = [
        ("packing (varlen)", "packing"),
        (f"random batches of {batch},\npadded to longest", "pad_to_longest"),
        (f"length-grouped batches\nof {batch}, padded to longest", "length_grouped"),
        ("each document padded\nto max_len", "pad_to_max_len"),
    ][::-1]
    packed = model["packing"]["flops"] or 1.0
    total = np.array([model[key]["flops"] / packed for _, key in layouts])
    attention = total * np.array([model[key]["attention_share"] for _, key in layouts])
    names = [name for name, _ in layouts]
    axes.barh(names, total - attention, color=[_BASELINE] * (len(layouts) - 1) + [_PACKING], height=0.6)
    axes.barh(names, attention, left=total - attention, color=_LOSS, height=0.6, label="attention")
    for y, value in enumerate(total):
        axes.annotate(f"{value:.2f}x", (value, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
    axes.set_xlim(0, float(total.max()) * 1.25)
    axes.legend(fontsize=9, frameon=False, loc="upper right")
    axes.set_xlabel("FLOPs over packing's (forward and backward)", fontsize=9)
    _style(axes, "FLOPs per layout, attention counted")


def _draw_row_costs(axes: Any, figures: dict[str, Any]) -> None:
    """The distribution of row costs, and the step imbalance of the plain and the balanced order."""
    model = figures["model_cost"]
    costs = model["row_cost"]
    mean = costs["mean"] or 1.0
    edges = np.array(costs["histogram"]["edges"]) / mean
    if len(edges):
        axes.stairs(costs["histogram"]["counts"], edges, fill=True, color=_PACKING, alpha=0.8)
    axes.axvline(1.0, color=_LOSS, linestyle="--", linewidth=1.5)
    if model["plain_imbalance"] is None:
        size = model["world_size"] * model["batch_size"] * model["grad_accum"]
        said = f"step imbalance: fewer rows than\none global batch of {size:,}"
    else:
        said = (
            f"step imbalance, {model['world_size']} ranks x {model['batch_size']} x {model['grad_accum']}:\n"
            f"plain order {model['plain_imbalance']:.1%}, balanced {model['balanced_imbalance']:.1%}"
        )
    axes.annotate(said, (0.02, 0.97), xycoords="axes fraction", va="top", fontsize=9)
    axes.set_xlabel("row cost / mean row cost (FLOPs)", fontsize=9)
    axes.set_ylabel("sequences", fontsize=9)
    _style(axes, f"row costs: attention {model['packing']['attention_share']:.1%} of packing's FLOPs")
