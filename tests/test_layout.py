"""Vectorized layout against plain loops."""

from __future__ import annotations

from random import Random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from packcli.format.schema import position_ids
from packcli.write.layout import Rows, cu_seqlens, row_token_offsets


@st.composite
def rows(draw: st.DrawFn) -> list[list[int]]:
    return draw(st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=6), max_size=8))


def flat(rows_: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([n for row in rows_ for n in row], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum([len(row) for row in rows_]))).astype(np.int64)
    return lengths, offsets


@given(rows())
def test_position_ids_restart_at_every_document(rows_: list[list[int]]) -> None:
    lengths, _ = flat(rows_)
    expected = [i for n in lengths for i in range(n)]
    assert position_ids(lengths).tolist() == expected
    assert position_ids(lengths).dtype == np.int32


@given(rows())
def test_cu_seqlens_per_row(rows_: list[list[int]]) -> None:
    lengths, offsets = flat(rows_)
    values, list_offsets = cu_seqlens(lengths, offsets)
    got = [values[list_offsets[k] : list_offsets[k + 1]].tolist() for k in range(len(rows_))]
    assert got == [np.concatenate(([0], np.cumsum(row))).tolist() for row in rows_]
    assert (
        row_token_offsets(lengths, offsets).tolist()
        == np.concatenate(([0], np.cumsum([sum(r) for r in rows_]))).tolist()
    )


@given(st.lists(st.integers(1, 4), max_size=8), st.randoms(use_true_random=False))
def test_rows_list_each_piece_in_row_order_with_its_place_in_its_document(counts: list[int], random: Random) -> None:
    """The writers' rows: the pieces (given in input order, a document's pieces adjacent) in the order the rows hold
    them, each with its number in its document and its document's number of pieces, against plain loops."""
    document = np.repeat(np.arange(len(counts), dtype=np.int64) * 3, counts)  # documents numbered with gaps
    n = len(document)
    start, length = np.arange(n, dtype=np.int64) * 10, np.arange(n, dtype=np.int64) + 1
    order = np.array(random.sample(range(n), n), dtype=np.int64)
    offsets = np.array(sorted({0, n // 2, n}), dtype=np.int64)
    rows = Rows.packed(start, length, document, order, offsets)
    assert len(rows) == len(offsets) - 1 and rows.offsets.tolist() == offsets.tolist()
    assert [rows.start.tolist(), rows.length.tolist(), rows.document.tolist()] == [[int(a[k]) for k in order] for a in (start, length, document)]  # fmt: skip
    assert rows.piece.tolist() == [list(document[:k]).count(document[k]) for k in order]
    assert rows.pieces.tolist() == [list(document).count(document[k]) for k in order]
