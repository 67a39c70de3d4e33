"""Documents as flat token arrays (tokens, per-document lengths, supervision mask): EOS and BOS added in step with
the mask, and the documents that come to nothing left out and counted as empty; what every encoder ends with."""

from __future__ import annotations

from typing import Any

import numpy as np

from packcli.read.fields import ReadCounts

__all__ = ["Flat", "add_specials", "kept_records", "without_empty"]

Flat = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # tokens, lengths, supervision mask (or None)


def add_specials(
    tokens: np.ndarray,
    lengths: np.ndarray,
    mask: np.ndarray | None,
    eos_supervised: np.ndarray | None,
    eos_id: int | None,
    bos_id: int | None,
    rendered: bool = False,
) -> Flat:
    """Append EOS to (and prepend BOS to) every document of a flat token array, keeping the mask in step: EOS is
    supervised where ``eos_supervised`` says (the document's end is), BOS never.

    ``rendered`` (chat templates, which may render ``eos_token`` and ``bos_token`` themselves): a document that
    already ends with EOS gets no second one (its own keeps the supervision the template's turn gave it), and one
    that already starts with BOS no second BOS.
    """
    if eos_id is not None:
        ends = np.cumsum(lengths)
        add = ~_has_at(tokens, lengths, ends - 1, eos_id) if rendered else np.ones(len(lengths), dtype=bool)
        tokens = np.insert(tokens, ends[add], eos_id)
        if mask is not None and eos_supervised is not None:
            mask = np.insert(mask, ends[add], eos_supervised[add])
        lengths = lengths + add
    if bos_id is not None:
        starts = np.cumsum(lengths) - lengths
        add = ~_has_at(tokens, lengths, starts, bos_id) if rendered else np.ones(len(lengths), dtype=bool)
        tokens = np.insert(tokens, starts[add], bos_id)
        if mask is not None:
            mask = np.insert(mask, starts[add], False)
        lengths = lengths + add
    return tokens, lengths, mask


def _has_at(tokens: np.ndarray, lengths: np.ndarray, positions: np.ndarray, token_id: int) -> np.ndarray:
    """Per document, whether ``tokens`` holds ``token_id`` at its position (a document of no tokens: False)."""
    found = np.zeros(len(lengths), dtype=bool)
    filled = lengths > 0
    found[filled] = tokens[positions[filled]] == token_id
    return found


def kept_records(records: list[Any], keep: list[bool], counts: ReadCounts) -> tuple[list[Any], np.ndarray]:
    """The records ``keep`` marks, and ``keep`` as a bool array (where each document came from); the others are
    counted as empty documents."""
    kept = np.array(keep, dtype=bool).reshape(len(records))
    counts.empty_documents += len(records) - int(np.count_nonzero(kept))
    return [record for record, keeping in zip(records, keep) if keeping], kept


def without_empty(flat: Flat, counts: ReadCounts) -> tuple[Flat, np.ndarray]:
    """``flat`` without its documents of no tokens (with a mask: of no supervised token after the first, whose
    label is always -100), which are counted as empty, and which documents it kept (a bool per document).

    Example: lengths [2, 0, 1] -> [2, 1], one empty document; with mask [F, T, T], lengths [2, 1] -> [2], one empty.
    """
    tokens, lengths, mask = flat
    if mask is None:
        keep = lengths > 0
    else:
        supervised_before = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
        ends = np.cumsum(lengths)
        seconds = np.minimum(ends - lengths + 1, ends)  # each document's second token (its end, if it has none)
        keep = supervised_before[ends] > supervised_before[seconds]
    empty = len(keep) - int(np.count_nonzero(keep))
    if empty == 0:
        return flat, keep
    counts.empty_documents += empty
    if mask is None:
        return (tokens, lengths[keep], None), keep  # an empty document holds no tokens
    kept_tokens = np.repeat(keep, lengths)
    return (tokens[kept_tokens], lengths[keep], mask[kept_tokens]), keep
