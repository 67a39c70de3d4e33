"""Collate functions: a list of rows -> one batch of tensors, in the varlen (FlashAttention) or padded layout.

Both layouts keep what a transformers causal LM needs to find the documents by itself, so a batch passed whole
as ``model(**batch, use_cache=False)`` is right with sdpa, eager, flex_attention and flash_attention_2:
``position_ids`` restart at 0 at every document (and at the padding, which is one more document), and no 2D
``attention_mask`` key is present (transformers turns its packed-document detection off when it sees one).
Labels get -100 at every document's first token (:func:`packcli.format.schema.ignore_document_starts`, the rule the
writer applies too) and on padding.

Example, two rows [a0 a1 a2 | b0 b1] and [c0 c1]; varlen flattens them, padded stacks them to width 6:
    varlen  input_ids [a0 a1 a2 b0 b1 c0 c1]          position_ids [0 1 2 0 1 0 1]     cu_seqlens [0 3 5 7]
            labels    [-100 a1 a2 -100 b1 -100 c1]
    padded  input_ids [[a0 a1 a2 b0 b1 p ], [c0 c1 p p p p]]   position_ids [[0 1 2 0 1 0], [0 1 0 1 2 3]]
            document_ids [[0 0 0 1 1 -1], [0 0 -1 -1 -1 -1]]

With ``cp_size=C > 1`` the varlen batch is one context-parallel rank's share (:mod:`packcli.loader.context_parallel`):
each document padded to a multiple of 2C (pad id, labels -100, positions running on), this rank's two chunks of
each, and the boundaries of the whole padded sequence, as Transformer Engine's attention takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packcli.errors import PackcliError, requires_extra
from packcli.format.columns import IGNORE_INDEX, LABELS_COLUMN, POSITIONS_COLUMN
from packcli.format.schema import ignore_document_starts, position_ids
from packcli.loader.checks import at_least
from packcli.loader.context_parallel import padded_lengths, share_positions
from packcli.util.arrays import exclusive_cumsum

with requires_extra("torch", "packcli.torch"):
    import torch

__all__ = ["Row", "check_cp_options", "collate_cp_share", "collate_padded", "collate_varlen", "flash_attention_kwargs"]

Row = dict[str, Any]


_ROW_COLUMNS = ("input_ids", "cu_seqlens")  # what every collator reads from each row (position_ids where given)


def _document_lengths(rows: Sequence[Row]) -> np.ndarray:
    """Every document's length, over the rows in order.

    Raises:
        ValueError: a row lacks one of ``_ROW_COLUMNS`` (a Hugging Face Trainer drops the columns its model's
            forward does not name unless ``remove_unused_columns=False``).
    """
    for row in rows:
        missing = [name for name in _ROW_COLUMNS if name not in row]
        if missing:
            raise ValueError(
                f"rows without {', '.join(missing)} (they hold {', '.join(map(str, row)) or 'nothing'}): the collators "
                "need each row's document boundaries; a Hugging Face Trainer drops what the model's forward does not "
                "take, so pass TrainingArguments(remove_unused_columns=False)"
            )
    return np.concatenate([np.diff(row["cu_seqlens"]) for row in rows]).astype(np.int64)


def _flat_tokens(rows: Sequence[Row], lengths: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` ([3, T] int64) with the rows' input_ids, position_ids (rebuilt from the document lengths where
    the rows have none: an output packed with ``--no-position-ids`` read by ``datasets``) and labels, back to back."""
    total = int(lengths.sum())
    input_ids, positions, labels = out[:, :total]
    np.concatenate([row["input_ids"] for row in rows], out=input_ids)
    if POSITIONS_COLUMN in rows[0]:
        np.concatenate([row[POSITIONS_COLUMN] for row in rows], out=positions)
    else:
        positions[:] = position_ids(lengths)
    if LABELS_COLUMN in rows[0]:
        np.concatenate([row[LABELS_COLUMN] for row in rows], out=labels)
    else:
        labels[:] = input_ids
    ignore_document_starts(labels, lengths)  # also for outputs written before labels carried it


def _row_index(rows: Sequence[Row]) -> dict[str, torch.Tensor]:
    """``{"row_index": ...}`` where the rows carry it (the loader's do); rows read otherwise (the ``datasets.Dataset``
    that ``packcli.pack()`` returns) have no place in an output to name, and their batch has no such key."""
    if not all("row_index" in row for row in rows):
        return {}
    return {"row_index": torch.tensor([row["row_index"] for row in rows], dtype=torch.int64)}


def _sources(rows: Sequence[Row]) -> dict[str, list[dict[str, Any]]]:
    """``{"sources": [...]}`` where the rows carry them (the loader's, with ``sources=True``): one entry per document,
    in batch order (row by row, each row's documents in order; no entry for padding), a plain list, never a tensor."""
    if not rows or not all("sources" in row for row in rows):
        return {}
    return {"sources": [source for row in rows for source in row["sources"]]}


def _num_items(rows: Sequence[Row]) -> dict[str, int]:
    """``{"num_items_in_batch": n}`` where the rows carry it: the supervised tokens of the global batch they belong to
    (the loader's, with ``grad_accum`` or ``balance``). A Python int, as ``max_seqlen``: transformers' losses take
    one, and accelerate's batch dispatch on one process passes it through (a 0-d tensor fails its concatenation).

    Raises:
        ValueError: the rows belong to different global batches (the DataLoader's batch size is not the dataset's).
    """
    counts = {row["num_items_in_batch"] for row in rows if "num_items_in_batch" in row}
    if not counts:
        return {}
    if len(counts) > 1 or len(rows) != sum("num_items_in_batch" in row for row in rows):
        raise ValueError(
            "these rows belong to different global batches (num_items_in_batch "
            f"{sorted(counts)}): give the DataLoader the dataset's batch_size, as packcli.torch.loader() does"
        )
    return {"num_items_in_batch": int(counts.pop())}


def _boundary_count(lengths: np.ndarray, cu_seqlens_length: int | None) -> int:
    """Entries of ``cu_seqlens``: documents + 1, or ``cu_seqlens_length`` (the last offset repeated)."""
    if cu_seqlens_length is not None and cu_seqlens_length < len(lengths) + 1:
        raise PackcliError(f"cu_seqlens_length {cu_seqlens_length} < {len(lengths) + 1} boundaries in this batch")
    return max(cu_seqlens_length or 0, len(lengths) + 1)


def _offsets(lengths: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with the offsets of ``lengths``, the last one repeated to the end (empty documents)."""
    out[: len(lengths) + 1] = exclusive_cumsum(lengths)
    out[len(lengths) + 1 :] = out[len(lengths)]


def collate_varlen(
    rows: Sequence[Row],
    pad_to_multiple_of: int | None = None,
    cu_seqlens_length: int | None = None,
    pad_id: int = 0,
    cp_size: int = 1,
    cp_rank: int = 0,
) -> dict[str, Any]:
    """Flatten a batch of rows into one row, FlashAttention varlen style.

    Returns ``input_ids``, ``position_ids``, ``labels`` ([1, T] int64), ``cu_seqlens`` (int32 [documents + 1]),
    ``max_seqlen`` (int), ``document_ids`` and ``seq_idx`` (int32 [1, T], the document of each token), and
    ``row_index`` ([B]) and ``sources`` (a list, one entry per document) where the rows carry them. With
    ``cp_size > 1``: this context-parallel rank's share, see :func:`collate_cp_share`.

    Args:
        pad_to_multiple_of: pad T up to a multiple (8 suits tensor cores); the padding is one extra document with
            labels -100 and positions 0, 1, ...
        cu_seqlens_length: repeat the last offset up to this length, so shapes stay static (CUDA graphs,
            torch.compile); a zero-length document attends to nothing.
        pad_id: the token id of padding.
        cp_size, cp_rank: context parallelism: the number of ranks a sequence is split across, and this one's.
    """
    if check_cp_options(cp_size, cp_rank, pad_to_multiple_of):
        return collate_cp_share(rows, cp_size, cp_rank, cu_seqlens_length, pad_id)
    lengths = _document_lengths(rows)
    total = int(lengths.sum())
    pad = -total % pad_to_multiple_of if pad_to_multiple_of else 0
    # One buffer for the three token tensors, one for the int32 ones: fewer transfers from DataLoader workers.
    tokens = np.empty((3, total + pad), dtype=np.int64)
    _flat_tokens(rows, lengths, tokens)
    if pad:
        tokens[0, total:], tokens[1, total:], tokens[2, total:] = pad_id, np.arange(pad), IGNORE_INDEX
        lengths = np.append(lengths, pad)
    small = np.empty(total + pad + _boundary_count(lengths, cu_seqlens_length), dtype=np.int32)
    document_ids, cu_seqlens = small[: total + pad], small[total + pad :]
    document_ids[:] = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    _offsets(lengths, cu_seqlens)  # repeated last offset: empty documents keep shapes static
    token_tensors, small_tensors = torch.from_numpy(tokens), torch.from_numpy(small)
    document_tensor = small_tensors[: total + pad][None]
    return {
        "input_ids": token_tensors[0:1],
        "position_ids": token_tensors[1:2],
        "labels": token_tensors[2:3],
        "cu_seqlens": small_tensors[total + pad :],
        "max_seqlen": int(lengths.max(initial=0)),
        "document_ids": document_tensor,
        "seq_idx": document_tensor,
        **_row_index(rows),
        **_num_items(rows),
        **_sources(rows),
    }


def check_cp_options(cp_size: int, cp_rank: int, pad_to_multiple_of: int | None = None) -> bool:
    """Whether these options ask for a context-parallel share (``cp_size > 1``).

    Raises:
        ValueError: ``cp_size`` < 1, ``cp_rank`` outside 0..cp_size-1, or ``pad_to_multiple_of`` with a share.
    """
    at_least("cp_size", cp_size, 1, "the context-parallel ranks a sequence is split across")
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank {cp_rank} is not in 0..{cp_size - 1}: pass a cp_rank below cp_size={cp_size}")
    if cp_size > 1 and pad_to_multiple_of:
        raise ValueError(
            "pad_to_multiple_of does not apply with cp_size > 1: each document is padded to a multiple of "
            "2 * cp_size instead; leave it unset"
        )
    return cp_size > 1


def collate_cp_share(
    rows: Sequence[Row], cp_size: int, cp_rank: int, cu_seqlens_length: int | None = None, pad_id: int = 0
) -> dict[str, Any]:
    """Context-parallel rank ``cp_rank``'s share of the varlen batch of ``rows`` (:func:`collate_varlen` with
    ``cp_size``): each document padded to a multiple of ``2 * cp_size``, and this rank's chunks ``cp_rank`` and
    ``2 * cp_size - 1 - cp_rank`` of each.

    Returns ``input_ids``, ``position_ids`` (each token's position in its document), ``labels`` (-100 at document
    starts and on padding) and ``shift_labels`` (the label of the next token of the whole sequence: what a loss
    that shifts labels itself would see there; a share is not contiguous, so shifting it would pair tokens of
    different chunks), all [1, T / cp_size] int64; ``cu_seqlens`` (int32, the documents' real lengths) and
    ``cu_seqlens_padded`` (int32, the padded documents) of the *whole* sequence, as Transformer Engine's attention
    takes them on every rank; ``max_seqlen`` (the longest padded document); ``row_index`` and ``sources`` where the
    rows carry them.
    """
    lengths = _document_lengths(rows)
    real = np.empty((3, int(lengths.sum())), dtype=np.int64)
    _flat_tokens(rows, lengths, real)
    padded = padded_lengths(lengths, cp_size)
    total = int(padded.sum())
    within = position_ids(padded)  # each position's place in its padded document
    whole = np.empty((4, total), dtype=np.int64)  # input_ids, position_ids, labels, shift_labels
    whole[0], whole[1], whole[2] = pad_id, within, IGNORE_INDEX
    whole[:3, within < np.repeat(lengths, padded)] = real
    whole[3, :-1], whole[3, -1:] = whole[2, 1:], IGNORE_INDEX
    share = torch.from_numpy(np.ascontiguousarray(whole[:, share_positions(padded, cp_size, cp_rank)]))
    boundaries = np.empty((2, _boundary_count(lengths, cu_seqlens_length)), dtype=np.int32)
    _offsets(lengths, boundaries[0])
    _offsets(padded, boundaries[1])
    offsets = torch.from_numpy(boundaries)
    return {
        "input_ids": share[0:1],
        "position_ids": share[1:2],
        "labels": share[2:3],
        "shift_labels": share[3:4],
        "cu_seqlens": offsets[0],
        "cu_seqlens_padded": offsets[1],
        "max_seqlen": int(padded.max(initial=0)),
        **_row_index(rows),
        **_num_items(rows),
        **_sources(rows),
    }


def collate_padded(rows: Sequence[Row], max_len: int | None = None, pad_id: int = 0) -> dict[str, Any]:
    """Stack a batch of rows into [B, L] tensors padded with ``pad_id`` (L = ``max_len``, else the longest row).

    Returns ``input_ids``, ``position_ids``, ``labels`` (-100 at document starts and on padding),
    ``document_ids`` (int32, numbered from 0 in each row, -1 on padding), and ``row_index`` and ``sources`` where the
    rows carry them (see :func:`collate_varlen`). A row's padding is
    one more document (positions 0, 1, ...), so it never joins the row's last document; there is no
    ``attention_mask``: :func:`packcli.torch.block_causal_mask` turns ``document_ids`` into a 4D mask where one is
    wanted, and ``document_ids >= 0`` marks the real tokens.
    """
    lengths = _document_lengths(rows)
    row_lengths = np.array([len(row["input_ids"]) for row in rows], dtype=np.int64)
    width = max_len or int(row_lengths.max(initial=0))
    if row_lengths.max(initial=0) > width:
        raise PackcliError(f"row of {int(row_lengths.max())} tokens does not fit max_len {width}")
    flat = np.empty((3, int(row_lengths.sum())), dtype=np.int64)
    _flat_tokens(rows, lengths, flat)
    tokens = np.empty((3, len(rows), width), dtype=np.int64)
    tokens[0], tokens[2] = pad_id, IGNORE_INDEX
    tokens[1] = np.arange(width) - row_lengths[:, None]  # the padding's own positions 0, 1, ...
    real = np.arange(width) < row_lengths[:, None]  # row-major, like the flat arrays
    tokens[:, real] = flat
    document_ids = np.full((len(rows), width), -1, dtype=np.int32)
    documents_per_row = np.array([len(row["cu_seqlens"]) - 1 for row in rows], dtype=np.int64)
    document_ids[real] = np.repeat(position_ids(documents_per_row), lengths)
    token_tensors = torch.from_numpy(tokens)
    return {
        "input_ids": token_tensors[0],
        "position_ids": token_tensors[1],
        "labels": token_tensors[2],
        "document_ids": torch.from_numpy(document_ids),
        **_row_index(rows),
        **_num_items(rows),
        **_sources(rows),
    }


def flash_attention_kwargs(batch: dict[str, Any]) -> dict[str, Any]:
    """The explicit document boundaries of a varlen batch under the names transformers' ``flash_attention_2``
    takes (``cu_seq_lens_q/k``, ``max_length_q/k``): with them it need not derive boundaries from
    ``position_ids`` (a device-to-host sync per step)."""
    return {
        "cu_seq_lens_q": batch["cu_seqlens"],
        "cu_seq_lens_k": batch["cu_seqlens"],
        "max_length_q": batch["max_seqlen"],
        "max_length_k": batch["max_seqlen"],
    }
