"""pack_corpus end to end on real text with the real tokenizer: round trip, determinism, reruns, atomicity."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE, read_jsonl, shared_path, write_jsonl

from packcli.encode.tokenizer import load_tokenizer
from packcli.errors import PackcliError
from packcli.options import Overflow, PackOptions
from packcli.pipeline import pack_corpus
from packcli.write import rows
from packcli.write.shards import read_shard


def documents_of(out: Path) -> list[list[int]]:
    """Every packed document (piece) of an output, in row order."""
    manifest_shards = sorted(out.glob("shard-*.arrow"))
    pieces = []
    for path in manifest_shards:
        table = read_shard(path)
        for ids, cu in zip(table.column("input_ids").to_pylist(), table.column("cu_seqlens").to_pylist()):
            pieces.extend(ids[a:b] for a, b in zip(cu, cu[1:]))
    return pieces


def shard_digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("shard-*.arrow"))}


def test_round_trip_in_input_order_gives_back_every_text(tmp_path: Path, tiny_corpus: Path) -> None:
    texts = [r["text"] for r in read_jsonl(tiny_corpus)]
    options = PackOptions(max_len=300, strategy="greedy", shard_size=200_000, shuffle=False)
    result = pack_corpus([str(tiny_corpus)], options, tmp_path / "out")
    tokenizer = load_tokenizer().tokenizer
    flat = [token for piece in documents_of(tmp_path / "out") for token in piece]
    eos = 50256
    ends = [i for i, token in enumerate(flat) if token == eos]
    decoded = [tokenizer.decode(flat[a + 1 if k else 0 : b]) for k, (a, b) in enumerate(zip([-1, *ends], ends))]
    assert decoded == texts
    totals = result.manifest["totals"]
    assert totals["split_documents"] > 0 and totals["tokens"] == totals["input_tokens"] == len(flat)
    assert len(result.manifest["shards"]) > 1


def test_round_trip_best_fit_keeps_every_document_and_token(tmp_path: Path, tiny_corpus: Path) -> None:
    from datasets import Dataset

    records = read_jsonl(tiny_corpus)
    options = PackOptions(max_len=2048, overflow=Overflow.split)
    result = pack_corpus([str(tiny_corpus)], options, tmp_path / "out")
    loaded = load_tokenizer()
    encoded = [
        [*ids, 50256]
        for ids in (
            e.ids for e in loaded.tokenizer.encode_batch([r["text"] for r in records], add_special_tokens=False)
        )
    ]
    pieces = documents_of(tmp_path / "out")
    assert Counter(t for p in pieces for t in p) == Counter(t for ids in encoded for t in ids)
    # Pieces that end a document: whole short documents, and the last piece of each split one.
    ends = sorted(loaded.tokenizer.decode(p[:-1]) for p in pieces if p[-1] == 50256)
    expected = [
        r["text"] if len(ids) <= 2048 else loaded.tokenizer.decode(ids[(len(ids) - 1) // 2048 * 2048 : -1])
        for r, ids in zip(records, encoded)
    ]
    assert ends == sorted(expected)
    for shard in result.manifest["shards"]:
        dataset = Dataset.from_file(str(tmp_path / "out" / shard["file"]))
        assert len(dataset) == shard["rows"]
        assert sum(map(len, dataset["input_ids"])) == shard["tokens"]
    from datasets import load_dataset

    files = [str(tmp_path / "out" / shard["file"]) for shard in result.manifest["shards"]]
    loaded = load_dataset("arrow", data_files=files, split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert len(loaded) == result.manifest["totals"]["sequences"]
    assert loaded.column_names == ["input_ids", "position_ids", "cu_seqlens"]


def test_truncate_and_drop_are_counted(tmp_path: Path) -> None:
    records = [{"text": "word " * 50}, {"text": "short"}, {"text": ""}]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    for policy in Overflow:
        totals = pack_corpus([str(path)], PackOptions(max_len=20, overflow=policy), tmp_path / policy.value).manifest[
            "totals"
        ]
        assert totals["input_tokens"] == totals["tokens"] + totals["truncated_tokens"] + totals["dropped_tokens"]
        assert totals["empty_documents"] == 1 and totals["input_documents"] == 2
        expected = {"split": (4, 0, 0), "truncate": (2, 32, 0), "drop": (1, 0, 1)}[policy.value]
        assert (totals["documents"], totals["truncated_tokens"], totals["dropped_documents"]) == expected


def test_identical_rerun_is_a_no_op_and_changes_need_overwrite(tmp_path: Path, tiny_corpus: Path) -> None:
    out = tmp_path / "out"
    first = pack_corpus([str(tiny_corpus)], PackOptions(max_len=512), out)
    digests = shard_digests(out)
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = pack_corpus([str(tiny_corpus)], PackOptions(max_len=512, workers=1), out)
    assert again.status == "up-to-date" and again.manifest == first.manifest
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes
    with pytest.raises(PackcliError, match="--overwrite"):
        pack_corpus([str(tiny_corpus)], PackOptions(max_len=256), out)
    assert shard_digests(out) == digests  # refused: left intact
    replaced = pack_corpus([str(tiny_corpus)], PackOptions(max_len=256), out, overwrite=True)
    assert replaced.status == "packed" and replaced.manifest["max_len"] == 256
    assert not list(tmp_path.glob(".out.packcli-*"))


def test_unrelated_directory_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(PackcliError, match=r"'mine\.txt' but is not a packcli output"):
            pack_corpus([str(SAMPLE)], PackOptions(), tmp_path / "out", overwrite=overwrite)
    assert (tmp_path / "out" / "mine.txt").read_text() == "precious"


def test_same_input_and_options_give_byte_identical_shards(tmp_path: Path, tiny_corpus: Path) -> None:
    for name in ("a", "b"):
        pack_corpus([str(tiny_corpus)], PackOptions(max_len=1024, shard_size=300_000), tmp_path / name)
    assert shard_digests(tmp_path / "a") == shard_digests(tmp_path / "b")
    assert len(shard_digests(tmp_path / "a")) > 1


def test_worker_counts_give_byte_identical_shards(tmp_path: Path, tiny_corpus: Path) -> None:
    for workers in ("1", "2"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "packcli",
                "pack",
                str(tiny_corpus),
                "--max-len",
                "700",
                "--workers",
                workers,
                "--out",
                str(tmp_path / workers),
                "--quiet",
            ],
            check=True,
        )
    assert shard_digests(tmp_path / "1") == shard_digests(tmp_path / "2") != {}


@pytest.mark.parametrize("existing", [False, True])
def test_failure_mid_write_leaves_no_output_and_propagates(
    tmp_path: Path, tiny_corpus: Path, monkeypatch: pytest.MonkeyPatch, existing: bool
) -> None:
    out = tmp_path / "out"
    if existing:
        pack_corpus([str(tiny_corpus)], PackOptions(max_len=128), out)
        before = shard_digests(out)
    real = rows.row_batch
    calls = []

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise OSError("No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(rows, "row_batch", failing)
    with pytest.raises(OSError, match="No space left"):
        pack_corpus([str(tiny_corpus)], PackOptions(max_len=256, shard_size=100_000), out, overwrite=True)
    assert len(calls) == 3
    if existing:
        assert shard_digests(out) == before and (out / "manifest.json").exists()
    else:
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out"] if existing else [])


def test_real_corpus_with_a_shared_tokenizer(tmp_path: Path) -> None:
    corpus = shared_path("data/cpython_stdlib.jsonl")
    tokenizer = shared_path("tokenizers/tekken/tokenizer.json")
    options = PackOptions(max_len=4096, tokenizer=str(tokenizer), bos=True, shuffle=False)  # first row: bfd's first
    result = pack_corpus([str(corpus)], options, tmp_path / "o")
    totals = result.manifest["totals"]
    assert totals["input_documents"] == 540
    # tekken's own count for this corpus is 2,854,676 tokens without BOS/EOS (shared/data/README.md)
    assert totals["input_tokens"] == 2_854_676 + 2 * 540
    assert totals["tokens"] == totals["input_tokens"] and totals["split_documents"] == 216
    lower_bound = -(-totals["tokens"] // 4096)
    assert lower_bound <= totals["sequences"] <= lower_bound * 1.01
    first = read_shard(tmp_path / "o" / "shard-00000.arrow").column("input_ids")[0].as_py()
    assert first[0] == 1 or len(first) == 4096
    assert int(np.max(np.concatenate([np.array(p) for p in documents_of(tmp_path / "o")]))) < 131072
