"""Overflow policies: every token is packed, truncated or dropped, and counted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packcli.errors import PackcliError
from packcli.options import Overflow
from packcli.packing.overflow import apply_overflow


def test_worked_example() -> None:
    lengths = np.array([6, 2])
    pieces, counts = apply_overflow(lengths, 4, Overflow.split)
    assert list(zip(pieces.start.tolist(), pieces.length.tolist())) == [(0, 4), (4, 2), (6, 2)]
    assert pieces.document.tolist() == [0, 0, 1] and counts.split_documents == 1
    pieces, counts = apply_overflow(lengths, 4, Overflow.truncate)
    assert list(zip(pieces.start.tolist(), pieces.length.tolist())) == [(0, 4), (6, 2)]
    assert (counts.truncated_documents, counts.truncated_tokens) == (1, 2)
    pieces, counts = apply_overflow(lengths, 4, Overflow.drop)
    assert list(zip(pieces.start.tolist(), pieces.length.tolist())) == [(6, 2)]
    assert (counts.dropped_documents, counts.dropped_tokens) == (1, 6)


@given(st.lists(st.integers(1, 40), max_size=30), st.integers(1, 12), st.sampled_from(list(Overflow)))
def test_tokens_are_accounted_for(lengths_: list[int], max_len: int, policy: Overflow) -> None:
    lengths = np.array(lengths_, dtype=np.int64)
    pieces, counts = apply_overflow(lengths, max_len, policy)
    assert np.all((pieces.length >= 1) & (pieces.length <= max_len))
    assert int(pieces.length.sum()) + counts.truncated_tokens + counts.dropped_tokens == int(lengths.sum())
    covered = np.zeros(int(lengths.sum()), dtype=int)
    for start, length in zip(pieces.start, pieces.length):
        covered[start : start + length] += 1
    assert covered.max(initial=0) <= 1  # no token twice
    if policy is Overflow.split:
        assert covered.sum() == len(covered)
        assert counts.split_documents == int((lengths > max_len).sum())


def test_a_document_of_no_tokens_is_refused_not_lost() -> None:
    for policy in Overflow:
        with pytest.raises(PackcliError, match="document 1 has no tokens"):
            apply_overflow(np.array([3, 0, 2]), 4, policy)
