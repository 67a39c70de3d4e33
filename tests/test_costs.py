"""stats --model-config: FLOPs per layout, row costs and step imbalance, checked against hand computations on real
packed outputs, with the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import documented_names, json_keys, output_rows, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.loader.balance import RowCost
from packcli.report.costs import ModelCost

runner = CliRunner()

# A tiny decoder: head_dim 8 / 2 = 4, two key-value heads of the two attention heads' four (grouped-query).
TINY = {
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 64,
}


def tiny_coefficients() -> tuple[int, int]:
    """(FLOPs per token, FLOPs per squared document length) of TINY, written out by hand: per layer q and o are
    8 x 8, k and v 8 x 4, the SwiGLU MLP three 8 x 16 matrices; the head 8 x 64; 2 FLOPs a multiply-add, times 3
    for forward and backward. Attention: 2 products of l^2 / 2 x heads x head_dim each, times 2 FLOPs, per layer."""
    per_layer = 8 * 8 + 8 * 4 + 8 * 4 + 8 * 8 + 3 * 8 * 16
    per_token = 3 * 2 * (2 * per_layer + 8 * 64)
    per_square = 3 * 2 * 2 * (2 * 4)
    return per_token, per_square


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY))
    return path


@pytest.fixture
def small_output(tmp_path: Path) -> Path:
    # " hello" is one GPT-2 token; with EOS the documents are 5, 3, 4, 2 and 6 tokens long. bfd at max_len 8:
    # rows [6 2], [5 3], [4].
    corpus = write_jsonl(tmp_path / "small.jsonl", [{"text": " hello" * (n - 1)} for n in (5, 3, 4, 2, 6)])
    result = runner.invoke(app, ["pack", str(corpus), "--max-len", "8", "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.stderr
    return tmp_path / "out"


@pytest.fixture
def many_rows(tmp_path: Path) -> Path:
    """96 rows of max_len 64 holding documents of very different lengths: one long, or many short."""
    lengths = [(i * 37) % 61 + 2 for i in range(200)] + [63] * 20
    corpus = write_jsonl(tmp_path / "many.jsonl", [{"text": " hello" * (n - 1)} for n in lengths])
    result = runner.invoke(app, ["pack", str(corpus), "--max-len", "64", "--out", str(tmp_path / "many"), "-q"])
    assert result.exit_code == 0, result.stderr
    return tmp_path / "many"


def stats_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["stats", *args, "--json"])
    assert result.exit_code == 0, result.output
    figures: dict[str, Any] = json.loads(result.stdout)
    return figures


def document_lengths(out: Path) -> list[list[int]]:
    """Each row's document lengths, from its cu_seqlens as pyarrow reads them."""
    return [np.diff(row["cu_seqlens"]).tolist() for row in output_rows(out)]


def test_flops_per_layout_by_hand(small_output: Path, config: Path) -> None:
    per_token, per_square = tiny_coefficients()
    figures = stats_json(str(small_output), "--model-config", str(config), "--batch-size", "2")
    model = figures["model_cost"]
    assert (model["per_token"], model["per_square"]) == (per_token, per_square)
    rows = document_lengths(small_output)
    assert sorted(map(sorted, rows)) == [[2, 6], [3, 5], [4]]
    # packing, varlen: 20 tokens; attention on each document's own square: 36 + 4 + 25 + 9 + 16 = 90
    assert model["packing"]["flops"] == 20 * per_token + 90 * per_square
    assert model["packing"]["attention_share"] == pytest.approx(90 * per_square / (20 * per_token + 90 * per_square))
    # every document alone in a row of 8: 5 rows of 8 slots, each attending over 8 x 8
    assert model["pad_to_max_len"]["flops"] == 5 * (8 * per_token + 64 * per_square)
    # sorted batches of 2: [6 5] -> 2 rows of 6, [4 3] -> 2 of 4, [2] -> 1 of 2
    grouped = (2 * 6 + 2 * 4 + 2) * per_token + (2 * 36 + 2 * 16 + 4) * per_square
    assert model["length_grouped"]["flops"] == grouped
    # random batches: the output's documents in the seeded order (seed 0), in batches of 2, padded to the longest
    documents = [length for row in rows for length in row]
    shuffled = [documents[i] for i in np.random.default_rng(0).permutation(len(documents))]
    batches = [shuffled[i : i + 2] for i in range(0, len(shuffled), 2)]
    random = sum(len(b) * max(b) for b in batches) * per_token + sum(len(b) * max(b) ** 2 for b in batches) * per_square
    assert model["pad_to_longest"]["flops"] == random
    packed = model["packing"]["flops"]
    assert model["compute_saved"] == pytest.approx(
        {"vs_pad_to_max_len": model["pad_to_max_len"]["flops"] / packed, "vs_pad_to_longest": random / packed,
         "vs_length_grouped": grouped / packed}
    )  # fmt: skip
    costs = sorted(per_token * sum(row) + per_square * sum(d * d for d in row) for row in rows)
    assert model["row_cost"]["max"] == costs[-1] and model["row_cost"]["p50"] == costs[1]
    assert model["row_cost"]["mean"] == pytest.approx(sum(costs) / 3)
    assert sum(model["row_cost"]["histogram"]["counts"]) == 3
    # 3 rows, fewer than one global batch of 8 ranks x 2 rows: no imbalance figure, and the report says why
    assert model["global_batches"] == 0 and model["rows_left_out"] == 3
    assert model["plain_imbalance"] is None and model["balanced_imbalance"] is None
    human = runner.invoke(app, ["stats", str(small_output), "--model-config", str(config)], env={"COLUMNS": "200"})
    assert human.exit_code == 0, human.output
    assert "no figure, 3 sequences make no global batch of 64" in human.stdout
    assert "model cost" in human.stdout and "attention" in human.stdout


def test_the_docstring_example() -> None:
    # packcli/report/costs.py: documents 6, 1, 5, 2 packed as [6 1] [5 2], max_len 8, batches of 2, seed 1
    model = ModelCost(RowCost(per_token=1, per_square=1), world_size=1, batch_size=2, seed=1)
    figures = model.figures(np.array([6, 1, 5, 2]), np.array([2, 2]), 8)
    flops = {key: figures[key]["flops"] for key in ("packing", "pad_to_max_len", "pad_to_longest", "length_grouped")}
    assert flops == {"packing": 80, "pad_to_max_len": 288, "pad_to_longest": 144, "length_grouped": 96}
    assert figures["compute_saved"]["vs_pad_to_max_len"] == 288 / 80
    assert figures["global_batches"] == 1 and figures["plain_imbalance"] == 0.0  # one rank waits on no other


def plain_and_optimal_imbalance(
    costs: list[float], world_size: int, grad_accum: int, seed: int = 0
) -> tuple[float, float]:
    """The definitions, with plain loops (batch size 1): rank r takes rows order[r * R:(r + 1) * R], micro-step a
    of step g its row g * A + a; sorted descending inside each global batch and dealt W at a time is the optimum."""
    order = np.random.default_rng([seed, 0]).permutation(len(costs)).tolist()
    per_rank = len(costs) // world_size
    steps = per_rank // grad_accum
    plain = optimal = mean = 0.0
    for g in range(steps):
        batch = []
        for a in range(grad_accum):
            micro = [costs[order[r * per_rank + g * grad_accum + a]] for r in range(world_size)]
            plain += max(micro)
            mean += sum(micro) / world_size
            batch += micro
        batch.sort(reverse=True)
        optimal += sum(batch[a * world_size] for a in range(grad_accum))
    return plain / mean - 1, optimal / mean - 1


def test_step_imbalance_of_the_plain_and_the_balanced_order(many_rows: Path, config: Path) -> None:
    per_token, per_square = tiny_coefficients()
    rows = document_lengths(many_rows)
    costs = [float(per_token * sum(row) + per_square * sum(d * d for d in row)) for row in rows]
    args = [str(many_rows), "--model-config", str(config.parent), "--world-size", "4", "--grad-accum", "3"]
    model = stats_json(*args, "--batch-size", "1")["model_cost"]
    plain, optimal = plain_and_optimal_imbalance(costs, world_size=4, grad_accum=3)
    assert (model["world_size"], model["batch_size"], model["grad_accum"]) == (4, 1, 3)
    assert model["global_batches"] == len(rows) // 12 and model["rows_left_out"] == len(rows) % 12
    assert model["plain_imbalance"] == pytest.approx(plain) and plain > 0.05
    assert model["balanced_imbalance"] == pytest.approx(optimal) and optimal < plain
    assert model["balanced_speedup"] == pytest.approx((1 + plain) / (1 + optimal))
    two = stats_json(*args, "--batch-size", "2")["model_cost"]
    assert 0 <= two["balanced_imbalance"] <= two["plain_imbalance"]
    reseeded = stats_json(*args, "--batch-size", "1", "--seed", "5")["model_cost"]  # the loader's seed=5
    assert reseeded["plain_imbalance"] == pytest.approx(plain_and_optimal_imbalance(costs, 4, 3, seed=5)[0])
    human = runner.invoke(app, ["stats", *args, "--batch-size", "1"], env={"COLUMNS": "200"})
    assert f"plain order {plain:.1%}, balanced {optimal:.1%}" in human.stdout, human.stdout


def test_model_cost_keys_are_documented(many_rows: Path, config: Path, tmp_path: Path) -> None:
    figures = stats_json(str(many_rows), "--model-config", str(config))
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": " hello" * n} for n in (3, 40, 200, 90, 12, 500)])
    raw = stats_json(str(corpus), "--max-len", "128", "--model-config", str(config))
    documented = documented_names("stats.md", "## Model cost and balanced steps")
    assert json_keys(figures["model_cost"]) - documented == set()
    assert figures["model_cost"]["global_batches"] >= 1  # 8 ranks x 8 rows: a figure of each order
    assert 0 <= figures["model_cost"]["balanced_imbalance"] <= figures["model_cost"]["plain_imbalance"]
    # a raw corpus: the top level for --strategy at --max-len, and each --max-len candidate's split packing
    assert raw["model_cost"]["packing"]["flops"] > 0
    candidates = raw["max_len_candidates"]
    assert len(candidates) > 1 and all("model_cost" in candidate["split"] for candidate in candidates)
    given = next(candidate for candidate in candidates if candidate["max_len"] == 128)
    assert given["split"]["model_cost"]["packing"] == raw["model_cost"]["packing"]
    assert (
        json_keys(given) - documented_names("stats.md", "## A raw corpus: choosing `--max-len`") - documented == set()
    )
    human = runner.invoke(app, ["stats", str(corpus), "--max-len", "128", "--model-config", str(config)])
    assert human.exit_code == 0 and "model cost per --max-len" in human.stdout, human.output


def test_without_model_config_nothing_changes(small_output: Path) -> None:
    figures = stats_json(str(small_output))
    assert "model_cost" not in figures
    result = runner.invoke(app, ["stats", str(small_output), "--world-size", "2"])
    assert result.exit_code == 2 and "--world-size: only with --model-config" in result.stderr


@pytest.mark.parametrize("field", ["hidden_size", "vocab_size"])
def test_a_config_missing_a_field_is_one_error_naming_it_and_the_file(
    small_output: Path, tmp_path: Path, field: str
) -> None:
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({key: value for key, value in TINY.items() if key != field}))
    result = runner.invoke(app, ["stats", str(small_output), "--model-config", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: --model-config {path} has no {field!r}: " + (
        "RowCost.from_config needs hidden_size, intermediate_size, num_attention_heads, num_hidden_layers, vocab_size"
    )]  # fmt: skip


def test_a_config_that_is_not_there_fails_before_any_work(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "hello"}])
    result = runner.invoke(app, ["stats", str(corpus), "--model-config", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and f"error: --model-config {tmp_path / 'none.json'}: cannot read" in result.stderr
    assert "tokeniz" not in result.stderr  # refused before the corpus was read
