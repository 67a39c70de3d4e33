"""stats: figures checked against values computed by hand, on a real packed output and on a raw corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.options import PackOptions
from packcli.pipeline import pack_corpus
from packcli.report.stats import corpus_stats, packed_stats, sequence_stats

runner = CliRunner()


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    # " hello" is one GPT-2 token; with EOS the documents are 5, 3, 4, 2 and 6 tokens long.
    return write_jsonl(tmp_path / "small.jsonl", [{"text": " hello" * (n - 1)} for n in (5, 3, 4, 2, 6)])


def test_packed_stats_by_hand(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "out")
    stats = packed_stats(tmp_path / "out", batch_size=2)
    # bfd, max_len 8: 6 | 5 | 4 opens three sequences; 3 joins the 5 (room 3), 2 joins the 6 (room 2).
    assert (stats["documents"], stats["tokens"], stats["sequences"]) == (5, 20, 3)
    assert stats["lower_bound_sequences"] == 3 and stats["gap_to_lower_bound"] == 0
    assert stats["packing"] == {"efficiency": 20 / 24, "padding_tokens": 4}
    assert stats["pad_to_max_len"] == {"efficiency": 20 / 40, "padding_tokens": 20}
    # sorted longest first, batches of 2: [6, 5] -> 12 slots, [4, 3] -> 8, [2] -> 2: 22 slots
    assert stats["pad_to_longest"] == {"batch_size": 2, "efficiency": 20 / 22, "padding_tokens": 2}
    assert stats["compute_saved"] == {"vs_pad_to_max_len": 40 / 24, "vs_pad_to_longest": 22 / 24}
    assert stats["documents_per_sequence"] == {"mean": 5 / 3, "max": 2}
    assert stats["steps_per_epoch"] == {"batch_size": 2, "steps": 2, "steps_drop_last": 1}
    assert sum(stats["histograms"]["document_length"]["counts"]) == 5
    assert stats["histograms"]["sequence_fill"]["counts"][-1] == 2  # two full sequences
    assert stats["split_documents"] == 0 and stats["strategy"] == "bfd"


def test_overflow_counts_reach_stats(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=4, overflow="drop"), tmp_path / "out")  # type: ignore[arg-type]  # a name works too
    stats = packed_stats(tmp_path / "out")
    assert stats["dropped_documents"] == 2 and stats["documents"] == 3 and stats["tokens"] == 9


def test_sequence_stats_on_no_padding() -> None:
    stats = sequence_stats([4, 4], [1, 1], 4, 8)
    assert stats["packing"]["efficiency"] == 1.0 and stats["pad_to_longest"]["padding_tokens"] == 0


def test_raw_corpus_compares_every_strategy(small_corpus: Path) -> None:
    stats = corpus_stats([str(small_corpus)], PackOptions(max_len=8), batch_size=2)
    assert set(stats["strategies"]) >= {"bfd", "ffd", "greedy"}
    assert stats["strategies"]["bfd"]["sequences"] == 3 == stats["sequences"]
    # greedy in input order: [5, 3] [4, 2] [6]
    assert stats["strategies"]["greedy"]["sequences"] == 3
    assert stats["strategies"]["greedy"]["documents_per_sequence"]["max"] == 2


def test_stats_cli_json_and_report(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "out")
    result = runner.invoke(app, ["stats", str(tmp_path / "out"), "--json", "--batch-size", "2"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["pad_to_longest"]["padding_tokens"] == 2
    human = runner.invoke(app, ["stats", str(tmp_path / "out")])
    assert human.exit_code == 0 and "pad to max_len" in human.stdout and "sequence fill" in human.stdout
    raw = runner.invoke(app, ["stats", str(small_corpus), "--max-len", "8"])
    assert raw.exit_code == 0 and "greedy" in raw.stdout
    missing = runner.invoke(app, ["stats", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "no such file" in missing.stderr


def test_stats_tokenization_is_reused_by_pack(tmp_path: Path, small_corpus: Path) -> None:
    first = corpus_stats([str(small_corpus)], PackOptions(max_len=8))
    cache_entry = Path(first["tokenization_cache"])
    assert cache_entry.is_dir()
    again = corpus_stats([str(small_corpus)], PackOptions(max_len=16))  # another max_len: same tokens
    assert again["tokenization_cache"] == first["tokenization_cache"] and again["sequences"] == 2
    reused = pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "reused")
    assert reused.from_cache and not cache_entry.exists()  # pack consumed the entry
    fresh = pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "fresh")
    assert not fresh.from_cache
    for name in ("shard-00000.arrow",):
        assert (tmp_path / "reused" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()
    assert reused.manifest["totals"] == fresh.manifest["totals"]
