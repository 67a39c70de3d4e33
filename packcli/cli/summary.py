"""The lines ``pack`` prints once its output is in place: input documents and output pieces counted apart, every
other non-zero total by its manifest name, each mixed source, and a partitioned run's packing gap."""

from __future__ import annotations

from typing import Any

from packcli.errors import one_line
from packcli.format.manifest import TOTALS
from packcli.report.terminal import count, documents_phrase, percent

__all__ = ["pack_summary"]

HEADLINE = ("documents", "tokens", "sequences", "input_documents")  # said in the summary's first line


def pack_summary(summary: dict[str, Any], out: object) -> list[str]:
    """The lines ``pack`` prints: input documents and output pieces counted apart, then every other non-zero
    total by its manifest name, then each mixed source."""
    documents, pieces = int(summary.get("input_documents", summary["documents"])), int(summary["documents"])
    tokens = count(summary["tokens"], "token")
    if summary.get("dropped_documents") or summary.get("truncated_documents"):
        what = f"{documents_phrase(summary)}, {tokens},"  # the tokens kept, not those lost
    elif summary.get("split_documents"):
        what = f"{count(documents, 'document')}, split into {pieces:,} pieces ({tokens}),"
    else:
        what = f"{count(documents, 'document')} ({tokens})"
    capacity = summary["sequences"] * summary["max_len"]
    lines = [
        f"packed {what} into {count(summary['sequences'], 'sequence')} of max_len {summary['max_len']:,} "
        f"({summary['tokens'] / capacity:.2%} full), {count(summary['shards'], 'shard')} in {one_line(str(out))}"
    ]
    for key in TOTALS:
        if (
            key not in HEADLINE
            and summary.get(key)
            and not (key == "input_tokens" and summary[key] == summary["tokens"])
        ):
            lines.append(f"  {key.replace('_', ' ')}: {summary[key]:,}")
    lines += [f"  {_source_line(source)}" for source in summary.get("sources", [])]
    if "packing_gap" in summary:
        lines.append(
            f"  partitions: {summary['partitions']:,} ({summary['partitions_reused']:,} reused); "
            f"{summary['packing_gap']:+.3%} sequences against the lower bound {summary['lower_bound_sequences']:,}"
        )
    return lines


def _source_line(source: dict[str, Any]) -> str:
    """One mixed source in the summary, saying when it was repeated or sampled down."""
    used = source["repeats"]
    if used > 1:
        passes = f"{source['passes']} whole pass{'es' if source['passes'] > 1 else ''}"
        how = f"repeated: {used:.2f} times its tokens ({passes}, then a sample)"
    elif source["weight"] == 0:
        how = "left out: its weight is 0"
    elif not source["output_tokens"]:
        how = "nothing drawn: its share is less than any of its documents"
    elif used < 1:
        how = f"sampled down to {percent(used)} of its tokens"
    else:
        how = "used once"
    return (
        f"source {source['path']}: {source['output_tokens']:,} tokens, {percent(source['share'])} of the output "
        f"(weight {percent(source['weight'])}); {how}"
    )
