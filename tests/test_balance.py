"""Balanced steps, the pure core: every row once per epoch, each global batch keeps its rows, the one-row placement
is the optimum (a brute-force oracle), every rank computes the same placement, and the cost model by hand."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.loader.balance import (
    RowCost,
    balance_batches,
    global_batches,
    rank_rows,
    row_document_lengths,
    slot_costs,
    step_imbalance,
)
from packcli.loader.order import rank_order

TINY = {  # head_dim 4; per token and layer: 8*4*(2*2 + 2*1) + 3*8*16 = 576 multiply-adds
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 3,
    "vocab_size": 10,
}


def placed(costs: np.ndarray, order: np.ndarray, world_size: int, batch_size: int, grad_accum: int) -> np.ndarray:
    """The balanced slots of an epoch whose plain rank-major order is ``order``."""
    slots = global_batches(order, world_size, batch_size, grad_accum)
    return np.take_along_axis(slots, balance_batches(slot_costs(costs, slots), world_size, batch_size), 1)


@st.composite
def epochs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Row costs from random document lengths (ties included), a seeded order, and (world_size, B, A)."""
    world_size, batch_size, grad_accum = (draw(st.integers(1, 4)) for _ in range(3))
    rows = draw(st.integers(1, 3 * world_size * batch_size * grad_accum + 5))
    documents = draw(st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=4), min_size=rows, max_size=rows))
    lengths = np.array([length for row in documents for length in row])
    offsets = np.concatenate([[0], np.cumsum([len(row) for row in documents])])
    costs = RowCost(per_token=7.0, per_square=1.0).row_costs(lengths, offsets)
    order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(rows)
    return costs, order, world_size, batch_size, grad_accum


@settings(max_examples=150, deadline=None)
@given(epochs())
def test_every_row_once_each_global_batch_unchanged_and_every_rank_alike(
    epoch: tuple[np.ndarray, np.ndarray, int, int, int],
) -> None:
    costs, order, world_size, batch_size, grad_accum = epoch
    per_rank = len(order) // world_size
    plain = global_batches(order, world_size, batch_size, grad_accum)
    balanced = placed(costs, order, world_size, batch_size, grad_accum)
    assert (
        balanced.shape == plain.shape == (per_rank // (batch_size * grad_accum), world_size * batch_size * grad_accum)
    )
    assert (np.sort(balanced, axis=1) == np.sort(plain, axis=1)).all()  # each step sees the rows it saw
    # Each rank computes the placement itself (a fresh copy of the inputs): its rows plus its plain tail.
    delivered = []
    for rank in range(world_size):
        mine = rank_rows(placed(costs.copy(), order.copy(), world_size, batch_size, grad_accum), rank, world_size,
                         batch_size)  # fmt: skip
        tail = order[rank * per_rank : (rank + 1) * per_rank][len(mine) :]
        assert len(mine) == len(plain) * batch_size * grad_accum
        delivered += [*mine.tolist(), *tail.tolist()]
    assert sorted(delivered) == sorted(order[: world_size * per_rank].tolist())  # every row once, none twice
    assert (
        step_imbalance(slot_costs(costs, balanced), world_size, batch_size)
        <= step_imbalance(slot_costs(costs, plain), world_size, batch_size) + 1e-12
        or batch_size > 1
    )  # one row a micro-batch: never worse than the plain order


def slowest_sum(costs: np.ndarray, world_size: int) -> float:
    """The sum over micro-steps of the slowest rank, one row a micro-batch (slots micro-step major)."""
    return float(costs.reshape(-1, world_size).max(axis=1).sum())


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.data())
def test_one_row_a_micro_batch_is_the_optimum_of_a_brute_force_search(
    world_size: int, grad_accum: int, data: st.DataObject
) -> None:
    size = world_size * grad_accum
    if size > 7:
        return
    costs = np.array(data.draw(st.lists(st.integers(0, 30), min_size=size, max_size=size)), dtype=np.float64)
    balanced = costs[balance_batches(costs[None], world_size, 1)[0]]
    best = min(slowest_sum(costs[list(order)], world_size) for order in itertools.permutations(range(size)))
    assert slowest_sum(balanced, world_size) == best
    # the sorted optimum: micro-step a takes the a-th run of world_size rows by cost
    assert slowest_sum(balanced, world_size) == float(np.sort(costs)[::-1][::world_size].sum())


def test_the_worked_example_of_the_module_docstring() -> None:
    costs = np.array([[1.0, 9.0, 2.0, 8.0]])
    placement = balance_batches(costs, world_size=2, batch_size=1)
    assert np.take_along_axis(costs, placement, 1).tolist() == [[9.0, 8.0, 2.0, 1.0]]
    assert step_imbalance(costs, 2, 1) == pytest.approx(0.7)  # (9 + 8) / 10 - 1
    assert step_imbalance(np.take_along_axis(costs, placement, 1), 2, 1) == pytest.approx(0.1)  # (9 + 2) / 10 - 1


def test_placement_is_the_same_when_computed_twice() -> None:
    rng = np.random.default_rng(3)
    costs = rng.integers(1, 5, size=(50, 2 * 3 * 4)).astype(np.float64)  # many ties
    first = balance_batches(costs, world_size=3, batch_size=2)
    assert (first == balance_batches(costs.copy(), world_size=3, batch_size=2)).all()
    assert (np.sort(first, axis=1) == np.arange(costs.shape[1])).all()  # a permutation of each batch's slots


def test_row_cost_from_a_config_by_hand(tmp_path: Path) -> None:
    # per token: 3 passes * 2 FLOPs * (3 layers * 576 + hidden 8 * vocab 10) = 10,848
    # per squared length: 3 passes * 2 * 3 layers * 2 heads * head_dim 4 = 144
    cost = RowCost.from_config(TINY)
    assert (cost.per_token, cost.per_square) == (10_848.0, 144.0)
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert RowCost.from_config(tmp_path) == RowCost.from_config(tmp_path / "config.json") == cost
    # a row of documents [3, 2] and a row of one document [5]: the same tokens, attention 13 against 25
    costs = cost.row_costs(np.array([3, 2, 5]), np.array([0, 2, 3]))
    assert costs.tolist() == [10_848 * 5 + 144 * 13, 10_848 * 5 + 144 * 25]


@pytest.mark.parametrize("missing", ["hidden_size", "num_hidden_layers", "vocab_size"])
def test_a_config_missing_a_field_is_one_error_naming_it(missing: str) -> None:
    config = {key: value for key, value in TINY.items() if key != missing}
    with pytest.raises(ValueError, match=f"no '{missing}'") as refused:
        RowCost.from_config(config)
    assert "\n" not in str(refused.value)


def test_a_bad_field_and_a_bad_file_are_one_error_each(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"num_attention_heads=0 is not a positive integer"):
        RowCost.from_config({**TINY, "num_attention_heads": 0})
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: cannot read a model config\.json"):
        RowCost.from_config(tmp_path)
    with pytest.raises(ValueError, match=r"per_square=-1\.0: pass a finite number >= 0"):
        RowCost(per_token=1.0, per_square=-1.0)


def test_row_document_lengths_on_the_docstring_example() -> None:
    lengths, offsets = row_document_lengths(np.array([0, 3, 5, 0, 2]), np.array([0, 3, 5]))
    assert (lengths.tolist(), offsets.tolist()) == ([3, 2, 2], [0, 2, 3])
    lengths, offsets = row_document_lengths(np.array([0, 4, 0, 1, 3, 0, 2]), np.array([0, 2, 5, 7]))
    assert (lengths.tolist(), offsets.tolist()) == ([4, 1, 2, 2], [0, 1, 3, 4])


def test_rank_order_on_the_docstring_example() -> None:
    costs = np.array([1.0, 9.0, 2.0, 8.0, 5.0, 6.0, 3.0])
    supervised = np.arange(1, 8) * 10  # row k: 10 * (k + 1) tokens
    orders = [rank_order(np.arange(7), rank, 2, 3, (1, 2), costs, supervised) for rank in (0, 1)]
    assert [order.rows.tolist() for order in orders] == [[1, 4, 2], [3, 0, 5]]
    # the global batch holds rows 0, 1, 3, 4 (10 + 20 + 40 + 50); the tail rows 2 and 5 (30 + 60)
    assert [order.items.tolist() for order in orders if order.items is not None] == [[120, 120, 90]] * 2
    plain = rank_order(np.arange(7), 0, 2, 3, (1, 2), None, supervised)
    assert plain.rows.tolist() == [0, 1, 2] and rank_order(np.arange(7), 1, 2, 3, (1, 2)).items is None


def test_coefficients_past_float64_are_one_value_error_and_huge_finite_costs_still_place_every_row() -> None:
    """Costs near float64's limit once overflowed in the sums of a micro-step, so every rank looked full and the
    placement read uninitialised slots (an IndexError at 9e18); an int past float64's range was a TypeError."""
    with pytest.raises(ValueError, match="per_token=10000"):
        RowCost(per_token=10**400, per_square=1.0)
    with pytest.raises(ValueError, match="float64"):
        RowCost(per_token=1e306, per_square=0.0).row_costs(np.array([1000, 1000]), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="float64"):
        RowCost.from_config({**TINY, "hidden_size": 10**320, "head_dim": 4})
    costs = np.full((3, 8), 1e308)
    costs[:, ::3] = 1.7e308
    placed = balance_batches(costs, world_size=2, batch_size=2)
    assert (np.sort(placed, axis=1) == np.arange(8)).all()


def test_fewer_rows_than_one_global_batch_make_no_global_batch_whatever_the_world_size() -> None:
    """A world size far past the rows (a typo, or stats --world-size 1e22) gives no global batch, not a numpy error
    about array dimensions."""
    assert global_batches(np.arange(10), 10**22, 2, 2).shape[0] == 0
    assert global_batches(np.arange(10), 3, 2, 2).shape[0] == 0
