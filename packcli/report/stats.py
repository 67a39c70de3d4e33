"""What packing bought: efficiency against padding baselines, the lower bound, steps per epoch, histograms.

``sequence_stats`` is pure (lengths in, figures out). ``packed_stats`` reads a packed output's manifest and only
its memory-mapped ``cu_seqlens`` column; ``corpus_stats`` tokenizes a raw corpus once and compares every strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.options import PackOptions
from packcli.write.manifest import read_manifest, shard_path
from packcli.write.shards import IGNORE_INDEX, LABELS_COLUMN, flat_list_column, read_shard

DEFAULT_BATCH_SIZE = 8
OVERFLOW_TOTALS = (
    "dropped_documents",
    "dropped_tokens",
    "truncated_documents",
    "truncated_tokens",
    "split_documents",
    "bad_records",
    "empty_documents",
)
_HISTOGRAM_BINS = 16


def _padding(tokens: int, slots: int) -> dict[str, Any]:
    return {"efficiency": tokens / slots if slots else 1.0, "padding_tokens": slots - tokens}


def _histogram(values: np.ndarray, top: float) -> dict[str, list[float]]:
    counts, edges = np.histogram(values, bins=_HISTOGRAM_BINS, range=(0, top))
    return {"edges": [round(float(edge), 4) for edge in edges], "counts": counts.tolist()}


def sequence_stats(lengths: np.ndarray, documents_per_row: np.ndarray, max_len: int, batch_size: int) -> dict[str, Any]:
    """Figures of one packing.

    Args:
        lengths: token count of every packed document, in output order.
        documents_per_row: documents in each sequence (sums to ``len(lengths)``).
        max_len: the sequence capacity.
        batch_size: documents per batch for the pad-to-longest baseline, and sequences per optimizer step.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    documents_per_row = np.asarray(documents_per_row, dtype=np.int64)
    tokens, documents, sequences = int(lengths.sum()), len(lengths), len(documents_per_row)
    longest_first = np.sort(lengths)[::-1]
    batch_longest = longest_first[::batch_size]  # each batch of the sorted lengths is padded to its first
    batch_rows = np.minimum(batch_size, documents - np.arange(len(batch_longest)) * batch_size)
    lower_bound = -(-tokens // max_len)
    row_tokens = (
        np.add.reduceat(lengths, np.cumsum(documents_per_row) - documents_per_row) if sequences else lengths[:0]
    )
    packed_slots = sequences * max_len
    return {
        "documents": documents,
        "tokens": tokens,
        "sequences": sequences,
        "max_len": max_len,
        "lower_bound_sequences": lower_bound,
        "gap_to_lower_bound": sequences - lower_bound,
        "packing": _padding(tokens, packed_slots),
        "pad_to_max_len": _padding(tokens, documents * max_len),
        "pad_to_longest": {
            "batch_size": batch_size,
            **_padding(tokens, int((batch_longest * batch_rows).sum())),
        },
        "compute_saved": {
            "vs_pad_to_max_len": documents * max_len / packed_slots if packed_slots else 1.0,
            "vs_pad_to_longest": float((batch_longest * batch_rows).sum()) / packed_slots if packed_slots else 1.0,
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
            "document_length": _histogram(lengths, max_len),
            "sequence_fill": _histogram(row_tokens / max_len, 1.0),
        },
    }


def packed_stats(out: Path, batch_size: int = DEFAULT_BATCH_SIZE) -> dict[str, Any]:
    """Stats of a packed output, from its manifest and its ``cu_seqlens`` column alone."""
    manifest = read_manifest(out)
    lengths, per_row = [], []
    supervised = LABELS_COLUMN in manifest.get("columns", [])
    supervised_tokens = unsupervised_sequences = 0
    for shard in manifest["shards"]:
        path = shard_path(out, shard["file"])
        try:
            table = read_shard(path, ["cu_seqlens", *([LABELS_COLUMN] if supervised else [])])
        except (pa.ArrowException, OSError, KeyError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise PackcliError(f"unreadable shard ({reason}); run packcli verify on the output", path) from None
        if supervised:
            labels, label_offsets = flat_list_column(table.column(LABELS_COLUMN))
            taken = (labels != IGNORE_INDEX).astype(np.int64)
            per_sequence = np.add.reduceat(taken, label_offsets[:-1]) if len(taken) else taken
            supervised_tokens += int(taken.sum())
            unsupervised_sequences += int(np.count_nonzero(per_sequence == 0))
        cu, offsets = flat_list_column(table.column("cu_seqlens"))
        boundaries = np.diff(cu)
        keep = np.ones(len(boundaries), dtype=bool)
        keep[offsets[1:-1] - 1] = False  # the step from one row's end to the next row's 0
        lengths.append(boundaries[keep])
        per_row.append(np.diff(offsets) - 1)
    stats = sequence_stats(
        np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64),
        np.concatenate(per_row) if per_row else np.zeros(0, dtype=np.int64),
        int(manifest["max_len"]),
        batch_size,
    )
    totals = manifest["totals"]
    stats.update({key: int(totals.get(key, 0)) for key in OVERFLOW_TOTALS})
    stats["strategy"] = manifest["strategy"]
    stats["window"] = manifest["options"].get("window")
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
    return stats


def corpus_stats(
    inputs: list[str],
    options: PackOptions,
    batch_size: int = DEFAULT_BATCH_SIZE,
    warn: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Tokenize a raw corpus once and compare every registered strategy, writing no shards.

    The tokenized corpus stays in the tokenization cache (:mod:`packcli.encode.cache`) for the ``pack`` that follows.
    The top level holds the figures of ``options.strategy``; ``strategies`` holds those of each one.
    """
    from packcli.encode import cache
    from packcli.encode.corpus import tokenize_corpus
    from packcli.pipeline import set_up
    from packcli.plan.overflow import apply_overflow
    from packcli.report.progress import SilentReporter
    from packcli.strategies import available_strategies, run_strategy

    setup = set_up(inputs, options, warn)
    key = setup.cache_key()
    tokenized = cache.load(key)
    if tokenized is None:
        fresh = tokenize_corpus(
            setup.files,
            setup.encoder,
            options.skip_bad_records,
            cache.new_store_path(key),
            SilentReporter(),
            warn,
        )
        tokenized = cache.save(fresh, key)
    tokenized.store.close()
    if len(tokenized.lengths) == 0:
        raise PackcliError(f"no documents: the input holds no non-empty {options.text_field!r} text")
    pieces, overflow = apply_overflow(tokenized.lengths, options.max_len, options.overflow_policy)
    extra = {
        **overflow.to_json(),
        "bad_records": tokenized.counts.bad_records,
        "empty_documents": tokenized.counts.empty_documents,
    }
    compared = {}
    for name in available_strategies():
        packing = run_strategy(name, pieces.length, options.max_len, options.seed, options.window)
        compared[name] = {
            **sequence_stats(pieces.length[packing.order], np.diff(packing.offsets), options.max_len, batch_size),
            **extra,
            "strategy": name,
        }
    return {**compared[options.strategy], "strategies": compared, "tokenization_cache": str(cache.cache_root() / key)}
