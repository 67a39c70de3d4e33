"""What packing bought: efficiency against the padding baselines (:mod:`packcli.report.padding`), the lower bound,
steps per epoch, histograms; and the
figures of a raw corpus.

``sequence_stats`` is pure (lengths in, figures out). ``measure_output`` reads a packed output's manifest, checks
its listing against the shard files (:mod:`packcli.format.listing`: each listed once, none left out, rows and tokens
as listed), and reads only the memory-mapped ``cu_seqlens`` (and ``labels``) columns; a raw corpus is measured by
:func:`packcli.run.analysis.measure_corpus`. Both return the ``stats --json`` object and the arrays the plot draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError
from packcli.format.columns import IGNORE_INDEX, LABELS_COLUMN
from packcli.format.listing import check_listing, open_listed_shard
from packcli.format.manifest import TOTALS, read_manifest
from packcli.format.replaced import reads_output
from packcli.format.shards import flat_list_column
from packcli.loader.balance import row_document_lengths
from packcli.report.padding import baselines, padded

__all__ = ["DEFAULT_BATCH_SIZE", "Measured", "histogram", "measure_output", "packed_stats", "sequence_stats"]

DEFAULT_BATCH_SIZE = 8
HISTOGRAM_BINS = 16


def histogram(values: np.ndarray, edges: np.ndarray | int, top: float = 1.0) -> dict[str, list[float]]:
    """Counts of ``values`` per bin: ``edges`` given, or that many equal bins over ``0..top``. The one histogram
    of packcli: the ``--json`` figures, the terminal bars and the plot all draw these counts."""
    counts, bounds = np.histogram(values, bins=edges, range=None if isinstance(edges, np.ndarray) else (0, top))
    return {"edges": [round(float(edge), 4) for edge in bounds], "counts": counts.tolist()}


def sequence_stats(
    lengths: np.ndarray, documents_per_row: np.ndarray, max_len: int, batch_size: int, seed: int = 0
) -> dict[str, Any]:
    """Figures of one packing.

    Args:
        lengths: token count of every packed document, in output order.
        documents_per_row: documents in each sequence (sums to ``len(lengths)``).
        max_len: the sequence capacity.
        batch_size: documents per batch of the padding baselines, and sequences per optimizer step.
        seed: the random order of the random-batch (``pad_to_longest``) baseline.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    documents_per_row = np.asarray(documents_per_row, dtype=np.int64)
    tokens, documents, sequences = int(lengths.sum()), len(lengths), len(documents_per_row)
    lower_bound = -(-tokens // max_len)
    row_tokens = (
        np.add.reduceat(lengths, np.cumsum(documents_per_row) - documents_per_row) if sequences else lengths[:0]
    )
    packed_slots = sequences * max_len
    padding = baselines(lengths, max_len, batch_size, seed)
    return {
        "documents": documents,
        "tokens": tokens,
        "sequences": sequences,
        "max_len": max_len,
        "lower_bound_sequences": lower_bound,
        "gap_to_lower_bound": sequences - lower_bound,
        "packing": padded(tokens, packed_slots),
        **padding,
        "compute_saved": {
            f"vs_{name}": (tokens + figures["padding_tokens"]) / packed_slots if packed_slots else 1.0
            for name, figures in padding.items()
        },
        "documents_per_sequence": {
            "mean": documents / sequences if sequences else 0.0,
            "max": int(documents_per_row.max(initial=0)),
        },
        "steps_per_epoch": {
            "batch_size": batch_size,
            "steps": -(-sequences // batch_size),
            "steps_drop_last": sequences // batch_size,
        },
        "histograms": {
            "document_length": histogram(lengths, HISTOGRAM_BINS, max_len),
            "sequence_fill": histogram(row_tokens / max_len, HISTOGRAM_BINS),
        },
    }


@dataclass(frozen=True)
class Measured:
    """The ``stats --json`` figures and the arrays behind them (for the plot)."""

    figures: dict[str, Any]
    lengths: np.ndarray  # every output document (piece), in output order
    documents_per_row: np.ndarray
    input_lengths: np.ndarray  # the documents before overflow (a packed output knows only its pieces)

    def example_row(self) -> int:
        """A typical row to draw: of the median fill (the lower median of the rows' token counts), the first with the
        most documents of at least 1/32 of ``max_len`` (up to 6, so that each block is visible), then with the most
        distinct lengths among them."""
        count = len(self.documents_per_row)
        if count == 0:
            return 0
        rows = np.repeat(np.arange(count), self.documents_per_row)
        fill = np.bincount(rows, weights=self.lengths, minlength=count)
        median = fill == np.sort(fill)[(count - 1) // 2]
        visible = self.lengths >= self.figures["max_len"] / 32
        large = np.minimum(np.bincount(rows[visible], minlength=count), 6)
        pairs = np.unique(np.stack([rows[visible], self.lengths[visible]]), axis=1)  # distinct (row, length)
        distinct = np.bincount(pairs[0], minlength=count)
        return int(np.lexsort((np.arange(count), -distinct, -large, ~median))[0])

    def row_lengths(self, row: int) -> np.ndarray:
        """The document lengths of sequence ``row``."""
        start = int(self.documents_per_row[:row].sum())
        return self.lengths[start : start + int(self.documents_per_row[row])]


@reads_output
def measure_output(out: Path, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0) -> Measured:
    """Stats of a packed output, from its manifest and its ``cu_seqlens`` (and ``labels``) columns alone."""
    manifest = read_manifest(out)
    check_listing(out, manifest)  # a shard listed twice or left out would be counted twice or not at all
    lengths, per_row = [], []
    supervised = LABELS_COLUMN in manifest.get("columns", [])
    supervised_tokens = unsupervised_sequences = 0
    for index, shard in enumerate(manifest["shards"]):
        table = open_listed_shard(out, manifest, index)
        try:
            table = table.select(["cu_seqlens", *([LABELS_COLUMN] if supervised else [])])
        except KeyError as exc:
            raise PackcliError(f"unreadable shard (no column {exc}); run packcli verify", out / shard["file"]) from None
        if supervised:
            labels, label_offsets = flat_list_column(table.column(LABELS_COLUMN))
            taken = (labels != IGNORE_INDEX).astype(np.int64)
            per_sequence = np.add.reduceat(taken, label_offsets[:-1]) if len(taken) else taken
            supervised_tokens += int(taken.sum())
            unsupervised_sequences += int(np.count_nonzero(per_sequence == 0))
        shard_lengths, shard_offsets = row_document_lengths(*flat_list_column(table.column("cu_seqlens")))
        lengths.append(shard_lengths)
        per_row.append(np.diff(shard_offsets))
    all_lengths = np.concatenate(lengths).astype(np.int64) if lengths else np.zeros(0, dtype=np.int64)
    all_per_row = np.concatenate(per_row) if per_row else np.zeros(0, dtype=np.int64)
    stats = sequence_stats(all_lengths, all_per_row, int(manifest["max_len"]), batch_size, seed)
    if "sources" in manifest:  # a mixed output
        stats["sources"] = [
            {
                "path": source["path"],
                "weight": source["weight"],
                "documents": source["output_documents"],
                "tokens": source["output_tokens"],
                "share": source["share"],
                "repeats": source["repeats"],
            }
            for source in manifest["sources"]
        ]
    if supervised:
        stats["supervised_tokens"] = supervised_tokens
        stats["supervised_fraction"] = supervised_tokens / stats["tokens"] if stats["tokens"] else 0.0
        stats["unsupervised_sequences"] = unsupervised_sequences
    totals = manifest["totals"]
    stats.update({key: int(totals[key]) for key in TOTALS if key in totals and key not in stats})
    stats["strategy"] = manifest["strategy"]
    stats["window"] = manifest["options"].get("window")
    stats["overflow"] = manifest["options"].get("overflow")
    return Measured(stats, all_lengths, all_per_row, all_lengths)


def packed_stats(out: Path, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0) -> dict[str, Any]:
    """The ``stats --json`` object of a packed output."""
    return measure_output(out, batch_size, seed).figures
