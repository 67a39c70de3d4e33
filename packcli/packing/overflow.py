"""Apply the overflow policy to documents longer than max_len, before packing; count what it did.

Works on lengths only: a document (of at least one token: the encoders count documents of none as empty) becomes
zero or more *pieces* (token start in the store, length), each of 1..max_len tokens. Example, max_len 4, lengths
[6, 2]: split -> pieces (0, 4), (4, 2), (6, 2); truncate -> (0, 4), (6, 2) with 2 truncated tokens; drop -> (6, 2)
with 1 dropped document of 6 tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from packcli.errors import PackcliError
from packcli.options import Overflow

__all__ = ["Pieces", "apply_overflow", "output_lengths"]


@dataclass(frozen=True)
class Pieces:
    """What packing sees: one entry per piece, in input order."""

    start: np.ndarray  # int64 token offset of the piece in the token store
    length: np.ndarray  # int64, each in 1..max_len
    document: np.ndarray  # int64 index of the input document the piece comes from


@dataclass(frozen=True)
class OverflowCounts:
    """Manifest totals for overflow; every input token is packed, truncated or dropped."""

    split_documents: int = 0
    truncated_documents: int = 0
    truncated_tokens: int = 0
    dropped_documents: int = 0
    dropped_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def apply_overflow(
    lengths: np.ndarray, max_len: int, policy: Overflow, starts: np.ndarray | None = None
) -> tuple[Pieces, OverflowCounts]:
    """Turn document lengths into pieces of at most ``max_len`` tokens under ``policy``.

    Args:
        lengths: the documents' token counts.
        max_len: the longest piece.
        policy: what happens to a longer document.
        starts: each document's first token in the store; default: the documents lie end to end in order
            (a mixed stream passes its own, where a repeated document appears more than once).

    Raises:
        PackcliError: a document of no tokens, which ``split`` would lose without a count.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) and int(lengths.min()) < 1:
        raise PackcliError(f"document {int(np.argmin(lengths))} has no tokens; empty documents are counted, not packed")
    starts = np.cumsum(lengths) - lengths if starts is None else np.asarray(starts, dtype=np.int64)
    documents = np.arange(len(lengths), dtype=np.int64)
    long = lengths > max_len
    n_long = int(long.sum())
    if policy is Overflow.drop:
        keep = ~long
        counts = OverflowCounts(dropped_documents=n_long, dropped_tokens=int(lengths[long].sum()))
        return Pieces(starts[keep], lengths[keep], documents[keep]), counts
    if policy is Overflow.truncate:
        counts = OverflowCounts(truncated_documents=n_long, truncated_tokens=int((lengths[long] - max_len).sum()))
        return Pieces(starts, np.minimum(lengths, max_len), documents), counts
    per_document = -(-lengths // max_len)  # ceil
    document = np.repeat(documents, per_document)
    index_in_document = np.arange(len(document)) - np.repeat(np.cumsum(per_document) - per_document, per_document)
    piece_start = starts[document] + index_in_document * max_len
    piece_length = np.minimum(max_len, lengths[document] - index_in_document * max_len)
    return Pieces(piece_start, piece_length, document), OverflowCounts(split_documents=n_long)


def output_lengths(lengths: np.ndarray, max_len: int, policy: Overflow) -> np.ndarray:
    """The tokens each document puts into the output under ``policy``: all of them (split), at most ``max_len``
    (truncate), or none when longer (drop)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if policy is Overflow.truncate:
        kept: np.ndarray = np.minimum(lengths, max_len)
    elif policy is Overflow.drop:
        kept = np.where(lengths > max_len, 0, lengths)
    else:
        kept = lengths
    return kept
