"""``packcli.pack()``: a datasets.Dataset (or IterableDataset, or files) in, the output written as ``pack`` writes
it, and a datasets.Dataset memory-mapped from the shards out; ``import packcli`` does not import datasets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

import packcli
from packcli.errors import PackcliError, UsageError
from tests.conftest import SAMPLE, read_jsonl, shared_path, write_jsonl


def shard_hashes(out: Path) -> list[str]:
    return [shard["sha256"] for shard in json.loads((out / "manifest.json").read_text())["shards"]]


@pytest.fixture(scope="module")
def records() -> list[dict[str, str]]:
    return [{"text": record["text"]} for record in read_jsonl(SAMPLE)[:10]]


def test_a_dataset_and_a_jsonl_file_of_the_same_texts_give_the_same_shards(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    from_file = packcli.pack(write_jsonl(tmp_path / "a.jsonl", records), max_len=128, out=tmp_path / "file")
    dataset = datasets.Dataset.from_list([{**record, "id": n} for n, record in enumerate(records)])
    from_dataset = packcli.pack(dataset, max_len=128, out=tmp_path / "dataset")
    assert shard_hashes(tmp_path / "file") == shard_hashes(tmp_path / "dataset")
    assert from_dataset.column_names == ["input_ids", "position_ids", "cu_seqlens"]
    assert from_dataset[:] == from_file[:]
    # memory-mapped from the shard itself, not copied
    assert [Path(f["filename"]).parent for f in from_dataset.cache_files] == [tmp_path / "dataset"]
    streamed = packcli.pack(dataset.to_iterable_dataset(), max_len=128, out=tmp_path / "iterable")
    assert shard_hashes(tmp_path / "iterable") == shard_hashes(tmp_path / "file") and len(streamed) == len(from_file)


def test_the_same_dataset_again_is_up_to_date_and_a_bad_record_is_named_by_its_row(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "packed"
    packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    manifest = (out / "manifest.json").stat()
    again = packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    assert (out / "manifest.json").stat().st_mtime_ns == manifest.st_mtime_ns  # nothing rewritten
    assert len(again) > 0
    assert [entry["path"] for entry in json.loads((out / "manifest.json").read_text())["inputs"]] == ["<dataset>"]
    with pytest.raises(PackcliError, match=r"other inputs|another"):
        packcli.pack(datasets.Dataset.from_list(records[:5]), max_len=128, out=out)
    bad = datasets.Dataset.from_list([*records[:3], {"text": ""}, {"text": None}])
    with pytest.raises(PackcliError) as caught:
        packcli.pack(bad, max_len=128, out=tmp_path / "bad")
    assert str(caught.value).startswith("<dataset>:") and "dataset.arrow" not in str(caught.value)


def test_fine_tuning_columns_and_options_pass_through(tmp_path: Path) -> None:
    rows = read_jsonl(shared_path("data/bigbench_sft.jsonl"))[:20]
    dataset = datasets.Dataset.from_list([{"q": row["prompt"], "a": row["response"]} for row in rows])
    packed = packcli.pack(
        dataset, max_len=512, out=tmp_path / "sft", prompt_field="q", response_field="a", strategy="ffd", seed=3
    )
    manifest = json.loads((tmp_path / "sft" / "manifest.json").read_text())
    assert manifest["strategy"] == "ffd" and manifest["options"]["seed"] == 3
    assert "labels" in packed.column_names
    assert (
        sum(sum(label != -100 for label in row) for row in packed["labels"]) == manifest["totals"]["supervised_tokens"]
    )


def test_bad_options_and_columns_are_one_clear_error(records: list[dict[str, str]], tmp_path: Path) -> None:
    dataset = datasets.Dataset.from_list(records)
    with pytest.raises(UsageError, match="unknown pack option"):
        packcli.pack(dataset, max_len=128, out=tmp_path / "x", max_length=3)
    with pytest.raises(UsageError, match="no column 'body'"):
        packcli.pack(dataset, max_len=128, out=tmp_path / "x", text_field="body")
    with pytest.raises(
        UsageError, match=r"one dataset, not a dict of splits \(train\): pass one, e.g. source\['train'\]"
    ):
        packcli.pack(datasets.DatasetDict({"train": dataset}), max_len=128, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_import_packcli_does_not_import_datasets() -> None:
    code = "import sys, packcli; print('datasets' in sys.modules, callable(packcli.pack), 'datasets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True", "False"]
