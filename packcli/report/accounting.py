"""The identities a manifest's totals obey, checked against each other and against what the shards hold.

Every input token is packed, truncated or dropped; one overflow policy acts per run; a split document yields at
least two pieces, all but its last exactly ``max_len`` long; a dropped document is longer than ``max_len``. With EOS
appended, a document that verify could not hold to EOS on its own (a truncated one, or any piece of an output that
does not record its split pieces) and does not end with it is a cut one, so such documents bound the counts from
below. Exact where the totals determine a value (``input_tokens``, ``documents``, ``supervised_tokens``, and a mixed
run's per-source output, which adds up to them); bounds where they cannot (which documents were truncated is not
recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packcli.format.integrity import total_damage

__all__ = ["Observed", "check_totals"]


@dataclass
class Observed:
    """What the shards hold, summed while verifying them."""

    sequences: int = 0
    documents: int = 0
    tokens: int = 0
    supervised_tokens: int = 0
    unsupervised_sequences: int = 0
    labelled: bool = False  # some shard has a labels column
    # max_len-long documents (pieces) without EOS whose place allows it: truncated, or not recorded (EOS appended)
    cut_pieces: int = 0
    full_pieces: int = 0  # documents (pieces) exactly max_len long
    unmarked_starts: int = 0  # documents (pieces) without BOS whose place is not recorded (BOS prepended)


POLICY_COUNTS = {"split": "split_documents", "truncate": "truncated_documents", "drop": "dropped_documents"}


def check_totals(manifest: dict[str, Any], observed: Observed, eos_appended: bool) -> list[str]:
    """Problems with the manifest's totals (empty when they hold). Keys of format version 1 that an older manifest
    may lack are checked where present."""
    totals: dict[str, int] = manifest["totals"]
    max_len: int = manifest["max_len"]
    problems = []

    def expect(holds: bool, what: str) -> None:
        if not holds:
            problems.append(f"manifest {what}")

    counted = {key: getattr(observed, key) for key in ("sequences", "documents", "tokens")}
    problems.extend(f"manifest {problem}" for _, problem in total_damage(totals, counted))
    if observed.labelled:
        for key in ("supervised_tokens", "unsupervised_sequences"):
            if key in totals:
                value = getattr(observed, key)
                expect(totals[key] == value, f"totals.{key} is {totals[key]}, the shards' labels hold {value}")
    split, dropped, truncated_tokens = (
        totals["split_documents"],
        totals["dropped_documents"],
        totals["truncated_tokens"],
    )
    truncated = totals.get("truncated_documents")
    dropped_tokens = totals.get("dropped_tokens")
    if "input_tokens" in totals and dropped_tokens is not None:
        expect(
            totals["input_tokens"] == totals["tokens"] + truncated_tokens + dropped_tokens,
            f"totals.input_tokens {totals['input_tokens']} is not tokens {totals['tokens']} + truncated_tokens "
            f"{truncated_tokens} + dropped_tokens {dropped_tokens}",
        )
    if dropped_tokens is not None:
        expect(
            dropped_tokens >= dropped * (max_len + 1) and (dropped == 0) == (dropped_tokens == 0),
            f"totals.dropped_tokens {dropped_tokens} cannot be what {dropped} dropped documents, each longer than "
            f"max_len {max_len}, held",
        )
    if truncated is not None:
        expect(
            truncated <= truncated_tokens and (truncated == 0) == (truncated_tokens == 0),
            f"totals.truncated_tokens {truncated_tokens} cannot be what {truncated} truncated documents lost",
        )
    policy = manifest["options"].get("overflow")
    acted = {name: totals.get(key, 0) for name, key in POLICY_COUNTS.items()}
    others = [f"{POLICY_COUNTS[name]} {count}" for name, count in acted.items() if count and name != policy]
    if policy in POLICY_COUNTS:
        expect(not others, f"totals: {', '.join(others)} under --overflow {policy}")
    else:
        expect(len(others) <= 1, f"totals: {', '.join(others)}: one overflow policy acts per run")
    if "input_documents" in totals:
        extra = totals["documents"] - (totals["input_documents"] - dropped)  # pieces beyond one per document
        expect(
            extra >= split and (extra == 0) == (split == 0),
            f"totals: documents {totals['documents']}, input_documents {totals['input_documents']}, "
            f"dropped_documents {dropped} and split_documents {split} do not add up (a split document yields at "
            "least two pieces, any other document one or none)",
        )
        if truncated is not None or truncated_tokens == 0:
            cut = extra + (truncated or 0)  # documents cut at max_len: split pieces but the last, truncated documents
            expect(
                observed.full_pieces >= cut,
                f"totals: {cut} documents cut at max_len (split or truncated), but only {observed.full_pieces} "
                "pieces are max_len long",
            )
            if eos_appended:
                expect(
                    observed.cut_pieces <= cut,
                    f"totals: {observed.cut_pieces} pieces do not end with EOS, more than the {cut} that splitting and "
                    "truncation account for",
                )
    if "sources" in manifest:  # a mixed run: its per-source output adds up to the totals
        for key, total in (("output_tokens", "tokens"), ("output_documents", "documents")):
            summed = sum(source[key] for source in manifest["sources"])
            expect(summed == totals[total], f"sources: {key} add up to {summed}, totals.{total} is {totals[total]}")
    option_max_len = manifest["options"].get("max_len")
    expect(option_max_len in (None, max_len), f"max_len {max_len} differs from options.max_len {option_max_len}")
    return problems
