"""Vectorized layout against plain loops."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from packcli.format.schema import position_ids
from packcli.write.layout import cu_seqlens, gather_index, row_token_offsets


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


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 7)), max_size=10))
def test_gather_index_concatenates_ranges(pieces: list[tuple[int, int]]) -> None:
    starts = np.array([s for s, _ in pieces], dtype=np.int64)
    lengths = np.array([n for _, n in pieces], dtype=np.int64)
    assert gather_index(starts, lengths).tolist() == [s + i for s, n in pieces for i in range(n)]
