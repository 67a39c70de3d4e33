"""Context parallelism: the shares of one batch from all ``cp_size`` ranks put back together are the padded
sequence (each document padded to a multiple of 2 * cp_size, rank r keeping chunks r and 2 * cp_size - 1 - r), on
real outputs (text and fine-tuning) and on random rows; cp_size=1 is the plain varlen batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the loader needs the torch extra")
from conftest import SAMPLE, read_jsonl, shared_path, write_jsonl  # noqa: E402

from packcli.options import PackOptions  # noqa: E402
from packcli.run.driver import pack_corpus  # noqa: E402
from packcli.torch import PackedDataset, collate_varlen, loader  # noqa: E402

PAD = 7
KEYS = ("input_ids", "position_ids", "labels", "shift_labels")


@pytest.fixture(scope="module")
def text_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cp-text")
    corpus = write_jsonl(folder / "corpus.jsonl", read_jsonl(SAMPLE)[:6])
    pack_corpus([str(corpus)], PackOptions(max_len=96), folder / "packed")
    return folder / "packed"


@pytest.fixture(scope="module")
def sft_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cp-sft")
    corpus = write_jsonl(folder / "sft.jsonl", read_jsonl(shared_path("data/bigbench_sft.jsonl"))[:120])
    pack_corpus([str(corpus)], PackOptions(max_len=256, prompt_field="prompt", response_field="response"), folder / "o")
    return folder / "o"


def padded_sequence(rows: list[dict[str, Any]], cp_size: int, pad: int = PAD) -> dict[str, list[int]]:
    """What the shares must reassemble into, by a plain loop: each document, then padding to a multiple of
    2 * cp_size (pad id, label -100, positions running on); shift_labels is labels moved one to the left. One rank
    (cp_size 1) holds the whole sequence: no padding."""
    multiple = 2 * cp_size if cp_size > 1 else 1
    out: dict[str, list[int]] = {key: [] for key in ("input_ids", "position_ids", "labels", "real", "padded")}
    for row in rows:
        cu = row["cu_seqlens"].tolist()
        for a, b in zip(cu[:-1], cu[1:]):
            padding = -(b - a) % multiple
            source = row["labels"] if "labels" in row else row["input_ids"]
            out["input_ids"] += [int(t) for t in row["input_ids"][a:b]] + [pad] * padding
            out["labels"] += [-100] + [int(t) for t in source[a + 1 : b]] + [-100] * padding
            out["position_ids"] += list(range(b - a + padding))
            out["real"].append(b - a)
            out["padded"].append(b - a + padding)
    out["shift_labels"] = [*out["labels"][1:], -100]
    return out


def reassemble(shares: list[dict[str, Any]], cp_size: int) -> dict[str, list[int]]:
    """Put every rank's share back: per document, its first chunk at chunk r and its second at chunk 2C-1-r."""
    bounds = shares[0]["cu_seqlens_padded"].tolist()
    whole = {key: [None] * bounds[-1] for key in KEYS}
    for rank, share in enumerate(shares):
        assert share["input_ids"].shape == (1, bounds[-1] // cp_size)
        cursor = 0
        for a, b in zip(bounds[:-1], bounds[1:]):
            chunk = (b - a) // (2 * cp_size)
            for k in (rank, 2 * cp_size - 1 - rank):
                for key in KEYS:
                    whole[key][a + k * chunk : a + (k + 1) * chunk] = share[key][0, cursor : cursor + chunk].tolist()
                cursor += chunk
    return whole  # type: ignore[return-value]


def check_shares(rows: list[dict[str, Any]], cp_size: int) -> None:
    shares = [collate_varlen(rows, pad_id=PAD, cp_size=cp_size, cp_rank=rank) for rank in range(cp_size)]
    expected = padded_sequence(rows, cp_size)
    if cp_size == 1:  # the plain batch (test_cp_size_one_is_the_plain_batch), which is the whole sequence
        for key in ("input_ids", "position_ids", "labels"):
            assert shares[0][key][0].tolist() == expected[key]
        assert shares[0]["cu_seqlens"].tolist() == np.concatenate(([0], np.cumsum(expected["real"]))).tolist()
        return
    assert reassemble(shares, cp_size) == {key: expected[key] for key in KEYS}
    for share in shares:  # every rank: the boundaries of the whole sequence
        assert share["cu_seqlens"].tolist() == np.concatenate(([0], np.cumsum(expected["real"]))).tolist()
        assert share["cu_seqlens_padded"].tolist() == np.concatenate(([0], np.cumsum(expected["padded"]))).tolist()
        assert share["cu_seqlens"].dtype == share["cu_seqlens_padded"].dtype == torch.int32
        assert share["max_seqlen"] == max(expected["padded"])
        assert share["row_index"].tolist() == [row["row_index"] for row in rows]


def busiest_rows(out: Path, count: int) -> list[dict[str, Any]]:
    dataset = PackedDataset(out, shuffle=False)
    rows = sorted((dataset.row(i) for i in range(dataset.num_rows)), key=lambda row: -len(row["cu_seqlens"]))
    return rows[:count]


@pytest.mark.parametrize("cp_size", [1, 2, 4])
def test_shares_reassemble_a_text_output(text_output: Path, cp_size: int) -> None:
    rows = busiest_rows(text_output, 4)
    assert any((np.diff(row["cu_seqlens"]) % (2 * cp_size)).any() for row in rows) or cp_size == 1  # some padding
    check_shares(rows, cp_size)


@pytest.mark.parametrize("cp_size", [1, 2, 4])
def test_shares_reassemble_a_fine_tuning_output(sft_output: Path, cp_size: int) -> None:
    rows = busiest_rows(sft_output, 3)
    assert "labels" in rows[0]  # the labels column, prompts at -100
    check_shares(rows, cp_size)


def test_cp_size_one_is_the_plain_batch(text_output: Path) -> None:
    rows = busiest_rows(text_output, 3)
    plain, one = collate_varlen(rows, pad_id=PAD), collate_varlen(rows, pad_id=PAD, cp_size=1, cp_rank=0)
    assert plain.keys() == one.keys()
    for key, value in plain.items():
        assert torch.equal(value, one[key]) if isinstance(value, torch.Tensor) else value == one[key]


@st.composite
def random_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows = []
    for index in range(draw(st.integers(1, 4))):
        lengths = draw(st.lists(st.integers(1, 23), min_size=1, max_size=5))
        tokens = draw(st.lists(st.integers(0, 50_000), min_size=sum(lengths), max_size=sum(lengths)))
        cu = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        rows.append(
            {
                "row_index": index,
                "input_ids": np.array(tokens, dtype=np.int32),
                "position_ids": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
                "cu_seqlens": cu,
            }
        )
    return rows


@given(rows=random_rows(), cp_size=st.integers(1, 4))
def test_shares_of_random_rows_reassemble(rows: list[dict[str, Any]], cp_size: int) -> None:
    check_shares(rows, cp_size)


def test_the_loader_gives_each_cp_rank_its_share_of_the_same_rows(text_output: Path) -> None:
    batches = [
        next(iter(loader(text_output, batch_size=3, seed=1, rank=0, world_size=1, cp_size=2, cp_rank=rank)))
        for rank in range(2)
    ]
    assert batches[0]["row_index"].tolist() == batches[1]["row_index"].tolist()
    dataset = PackedDataset(text_output, seed=1)
    rows = [dataset.row(i) for i in batches[0]["row_index"].tolist()]
    expected = padded_sequence(rows, 2, pad=dataset.pad_id)
    assert reassemble(batches, 2) == {key: expected[key] for key in KEYS}


def test_context_parallel_arguments_are_checked(text_output: Path) -> None:
    with pytest.raises(ValueError, match="data-parallel rank"):  # the global rank would split the CP group's rows
        loader(text_output, batch_size=2, cp_size=2, cp_rank=0)
    with pytest.raises(ValueError, match="layout='varlen'"):
        loader(text_output, batch_size=2, layout="padded", rank=0, world_size=1, cp_size=2)
    with pytest.raises(ValueError, match=r"cp_rank 2 is not in 0\.\.1"):
        loader(text_output, batch_size=2, rank=0, world_size=1, cp_size=2, cp_rank=2)
    with pytest.raises(ValueError, match="cp_size must be an integer >= 1"):
        collate_varlen(busiest_rows(text_output, 1), cp_size=0)
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        collate_varlen(busiest_rows(text_output, 1), cp_size=2, pad_to_multiple_of=8)


def test_each_context_parallel_share_carries_the_whole_batchs_sources(packed_rows: Path) -> None:
    """Every rank of a context-parallel group reads the same rows: each share lists all their documents' sources."""
    whole = next(iter(loader(packed_rows, batch_size=4, rank=0, world_size=1, sources=True)))
    for cp_rank in range(2):
        share = next(iter(loader(packed_rows, 4, rank=0, world_size=1, cp_size=2, cp_rank=cp_rank, sources=True)))
        assert share["sources"] == whole["sources"] and len(share["sources"]) == len(share["cu_seqlens"]) - 1
