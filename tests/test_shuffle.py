"""Rows are written in a seeded random order: no trend from long documents to short ones along the shards, the
seed changes the order of the rows and never the rows; --no-shuffle keeps packing order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from conftest import shared_path
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from packcli.cli import app
from packcli.format.shards import read_shard
from packcli.packing.order import permute_rows, shuffle_rows
from packcli.strategies import Packing, check_packing, run_strategy

runner = CliRunner()


def packed_rows(out: Path) -> list[tuple[tuple[int, ...], int]]:
    """Each row's input_ids and its longest document, in shard order."""
    result = []
    for path in sorted(out.glob("shard-*.arrow")):
        table = read_shard(path)
        for ids, cu in zip(table.column("input_ids").to_pylist(), table.column("cu_seqlens").to_pylist()):
            result.append((tuple(ids), int(np.diff(cu).max())))
    return result


def pack(corpus: Path, out: Path, *flags: str) -> list[tuple[tuple[int, ...], int]]:
    result = runner.invoke(app, ["pack", str(corpus), "--max-len", "512", "--out", str(out), "--quiet", *flags])
    assert result.exit_code == 0, result.output
    return packed_rows(out)


def correlation(rows: list[tuple[tuple[int, ...], int]]) -> float:
    longest = np.array([row[1] for row in rows], dtype=np.float64)
    return float(np.corrcoef(np.arange(len(longest)), longest)[0, 1])


def test_rows_are_shuffled_by_seed_and_kept_in_packing_order_on_request(tmp_path: Path) -> None:
    corpus = shared_path("data/bigbench_sft.jsonl")  # ~650 rows of 512 tokens
    default = pack(corpus, tmp_path / "default")
    ordered = pack(corpus, tmp_path / "ordered", "--no-shuffle")
    other_seed = pack(corpus, tmp_path / "seed1", "--seed", "1")
    assert len(default) > 500
    # bfd opens rows longest first: in packing order the longest document falls along the shards.
    assert correlation(ordered) < -0.5
    assert abs(correlation(default)) < 0.15 and abs(correlation(other_seed)) < 0.15
    # Any seed: the same rows (as a multiset), in another order.
    assert Counter(row[0] for row in default) == Counter(row[0] for row in ordered) == Counter(r[0] for r in other_seed)
    assert [row[0] for row in default] != [row[0] for row in other_seed]
    # The same seed, the same bytes: test_pipeline's determinism tests pack with the default, shuffled rows.


packings = st.lists(st.integers(1, 16), min_size=0, max_size=80).map(
    lambda lengths: (np.array(lengths, dtype=np.int64), run_strategy("bfd", np.array(lengths, dtype=np.int64), 16))
)


@given(packings, st.integers(0, 2**32))
def test_a_shuffle_moves_whole_rows_and_keeps_each_one(case: tuple[np.ndarray, Packing], seed: int) -> None:
    lengths, packing = case
    shuffled = shuffle_rows(packing, seed)
    check_packing(shuffled, lengths, 16)

    def row_list(p: Packing) -> list[list[int]]:
        return [p.order[a:b].tolist() for a, b in zip(p.offsets[:-1], p.offsets[1:])]

    before, after = row_list(packing), row_list(shuffled)
    assert sorted(after) == sorted(before)
    assert np.array_equal(shuffle_rows(packing, seed).order, shuffled.order)  # seeded
    permutation = np.random.default_rng(seed).permutation(len(before))
    assert row_list(permute_rows(packing, permutation)) == [before[k] for k in permutation]
