"""The token store: what is appended is what ``gather`` reads back, piece by piece, in any order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packcli.encode.store import TokenStore


def filled(path: Path, tokens: np.ndarray, mask: np.ndarray | None = None) -> TokenStore:
    store = TokenStore(path, with_mask=mask is not None)
    half = len(tokens) // 2
    assert store.append(tokens[:half], None if mask is None else mask[:half]) == 0
    assert store.append(tokens[half:], None if mask is None else mask[half:]) == half
    store.finish()
    return store


@given(
    st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=300),
    st.lists(st.tuples(st.integers(0, 299), st.integers(0, 40)), max_size=40),
)
def test_gather_equals_slicing(
    tmp_path_factory: pytest.TempPathFactory, values: list[int], wanted: list[tuple[int, int]]
) -> None:
    tokens = np.array(values, dtype=np.int32)
    pieces = [(start % len(tokens), length) for start, length in wanted]
    pieces = [(start, min(length, len(tokens) - start)) for start, length in pieces]
    store = filled(tmp_path_factory.mktemp("store") / "tokens", tokens)
    starts = np.array([p[0] for p in pieces], dtype=np.int64)
    lengths = np.array([p[1] for p in pieces], dtype=np.int64)
    expected = np.concatenate([tokens[s : s + n] for s, n in pieces]) if pieces else tokens[:0]
    assert np.array_equal(store.gather(starts, lengths), expected)
    store.remove()


def test_mask_travels_with_its_tokens_and_survives_reopen(tmp_path: Path) -> None:
    tokens = np.arange(10, dtype=np.int32) * 7
    mask = np.array([0, 1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    store = filled(tmp_path / "tokens", tokens, mask)
    assert store.has_mask
    store.close()
    reopened = TokenStore.reopen(tmp_path / "tokens")
    assert reopened.count == 10 and reopened.has_mask
    starts, lengths = np.array([6, 0, 3]), np.array([3, 2, 1])
    assert reopened.gather(starts, lengths).tolist() == [42, 49, 56, 0, 7, 21]
    assert reopened.gather_mask(starts, lengths).tolist() == [False, True, True, False, True, False]
    reopened.remove()
    assert not (tmp_path / "tokens").exists() and not (tmp_path / "tokens.mask").exists()


def test_reading_past_the_end_is_an_error(tmp_path: Path) -> None:
    store = filled(tmp_path / "tokens", np.arange(4, dtype=np.int32))
    with pytest.raises(OSError, match="shorter than expected"):
        store.gather(np.array([2]), np.array([5]))
    store.remove()
