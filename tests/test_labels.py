"""Stored labels: every document's first token is -100 in the shards themselves (``--loss-on all`` included), so a
trainer that reads them with ``datasets`` rather than our loader cannot learn across a boundary either."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shared_path, write_jsonl
from datasets import Dataset

from packcli.format.manifest import read_manifest
from packcli.format.schema import ignore_document_starts
from packcli.options import PackOptions
from packcli.run.driver import pack_corpus

CHATS = [
    {"messages": [{"role": "user", "content": f"What is {n} plus {n}?"}, {"role": "assistant", "content": f"{2 * n}."}]}
    for n in range(40)
]


def test_ignore_document_starts_marks_each_first_token() -> None:
    labels = np.array([5, 6, 7, 8, 9, 10])
    assert ignore_document_starts(labels, np.array([3, 2, 1])).tolist() == [-100, 6, 7, -100, 9, -100]


def stored_rows(out: Path) -> list[dict[str, list[int]]]:
    rows = []
    for shard in read_manifest(out)["shards"]:
        rows.extend(Dataset.from_file(str(out / shard["file"])).to_list())
    return rows


@pytest.mark.parametrize("loss_on", ["all", "assistant"])
def test_stored_labels_ignore_document_starts(tmp_path: Path, loss_on: str) -> None:
    corpus = write_jsonl(tmp_path / "chats.jsonl", CHATS)
    out = tmp_path / "packed"
    pack_corpus([str(corpus)], PackOptions(max_len=128, messages_field="messages", loss_on=loss_on), out)
    rows = stored_rows(out)
    supervised = 0
    for row in rows:
        labels, ids, cu = np.array(row["labels"]), np.array(row["input_ids"]), row["cu_seqlens"]
        assert (labels[cu[:-1]] == -100).all()
        taken = labels != -100
        assert (labels[taken] == ids[taken]).all()
        supervised += int(taken.sum())
        if loss_on == "all":  # every other token takes loss
            assert int(taken.sum()) == len(ids) - (len(cu) - 1)
    assert read_manifest(out)["totals"]["supervised_tokens"] == supervised


def test_prompt_response_labels_from_the_shared_corpus(tmp_path: Path) -> None:
    corpus = shared_path("data/bigbench_sft.jsonl")
    out = tmp_path / "packed"
    pack_corpus([str(corpus)], PackOptions(max_len=1024, prompt_field="prompt", response_field="response"), out)
    rows = stored_rows(out)
    starts = np.concatenate([np.array(row["labels"])[row["cu_seqlens"][:-1]] for row in rows])
    assert len(starts) == read_manifest(out)["totals"]["documents"] and (starts == -100).all()
