"""``split_pieces``: each shard's entry names exactly the pieces of split documents it holds, where they are."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.options import Overflow
from packcli.plan.order import shuffle_rows
from packcli.plan.overflow import apply_overflow
from packcli.strategies import run_strategy
from packcli.write.shards import ShardInfo
from packcli.write.splits import shard_entries, split_pieces


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    max_len=st.integers(1, 16),
    seed=st.integers(0, 5),
    cuts=st.lists(st.integers(0, 100), max_size=4),
)
def test_every_piece_of_every_split_document_is_listed_once_where_it_lies(
    lengths: list[int], max_len: int, seed: int, cuts: list[int]
) -> None:
    pieces, _ = apply_overflow(np.array(lengths), max_len, Overflow.split)
    packing = shuffle_rows(run_strategy("bfd", pieces.length, max_len, seed, None), seed)
    rows = len(packing)
    bounds = sorted({0, rows, *(cut % (rows + 1) for cut in cuts)})
    shards = [ShardInfo(f"shard-{k:05d}.arrow", end - start, 0, 0, 0, "") for k, (start, end) in enumerate(zip(bounds[:-1], bounds[1:]))]  # fmt: skip
    entries = split_pieces(pieces, packing, shards)
    found: dict[int, list[int]] = {}
    for shard_index, shard_entries_ in enumerate(entries):
        first_row = bounds[shard_index]
        for row, index, document, piece in shard_entries_:
            assert 0 <= row < shards[shard_index].rows
            stored = int(packing.order[packing.offsets[first_row + row] + index])
            assert int(pieces.document[stored]) == document
            found.setdefault(document, []).append(piece)
    split = [n for n, length in enumerate(lengths) if length > max_len]
    assert sorted(found) == split
    for document in split:
        assert sorted(found[document]) == list(range(-(-lengths[document] // max_len)))
    listed = shard_entries(shards, entries)
    assert [("split_pieces" in entry) for entry in listed] == [bool(e) for e in entries]
