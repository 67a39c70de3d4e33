"""Encoders: a document that tokenizes to nothing (whitespace under a WordPiece tokenizer with --no-eos) is counted
as empty under every overflow policy and strategy, never lost, never packed as a zero-length document."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_path, write_jsonl
from tokenizers import Tokenizer, models, pre_tokenizers
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.documents import without_empty
from packcli.read.fields import ReadCounts

runner = CliRunner()
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def test_without_empty_drops_documents_of_no_tokens_and_counts_them() -> None:
    counts = ReadCounts()
    tokens = np.array([5, 6, 7], dtype=np.int32)
    kept, which = without_empty((tokens, np.array([0, 2, 0, 1, 0]), None), counts)
    assert kept[0].tolist() == [5, 6, 7] and kept[1].tolist() == [2, 1] and kept[2] is None
    assert which.tolist() == [False, True, False, True, False]
    assert counts.empty_documents == 3
    flat = (tokens, np.array([2, 1]), None)
    assert without_empty(flat, counts)[0] is flat and counts.empty_documents == 3


def test_without_empty_drops_documents_with_nothing_supervised() -> None:
    """Nothing supervised after a document's first token (whose label is always -100) is nothing supervised."""
    counts = ReadCounts()
    tokens = np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.int32)
    mask = np.array([False, True, False, False, False, True, True, True])
    kept, which = without_empty((tokens, np.array([2, 0, 3, 2, 1]), mask), counts)
    assert which.tolist() == [True, False, False, True, False]
    assert kept[0].tolist() == [1, 2, 6, 7] and kept[1].tolist() == [2, 2]
    assert kept[2] is not None and kept[2].tolist() == [False, True, True, True]
    assert counts.empty_documents == 3


def wordpiece(tmp_path: Path) -> Path:
    """A real WordPiece tokenizer (the kind BERT uses): whitespace is no token at all."""
    vocab = {"[UNK]": 0, "[SEP]": 1, **{word: number for number, word in enumerate(WORDS, start=2)}}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["[SEP]"])
    path = tmp_path / "wordpiece" / "tokenizer.json"
    path.parent.mkdir()
    tokenizer.save(str(path))
    return path


def corpus(tmp_path: Path) -> tuple[Path, int, int]:
    """Texts of 1 to 20 words (some over --max-len 8) with whitespace-only texts among them; (path, documents,
    empty documents)."""
    texts = [" ".join(WORDS[k % 8] for k in range(n)) for n in (1, 3, 8, 12, 20, 2, 5)]
    blank = ["   ", "\n\t", " \u3000 "]
    records = [{"text": text} for pair in zip(texts, [*blank, "", "", "", ""]) for text in pair if text]
    return write_jsonl(tmp_path / "corpus.jsonl", records), len(texts), len(blank)


@pytest.mark.parametrize("overflow", ["split", "truncate", "drop"])
@pytest.mark.parametrize("strategy", ["bfd", "ffd", "greedy"])
def test_documents_that_tokenize_to_nothing_are_counted_as_empty(tmp_path: Path, overflow: str, strategy: str) -> None:
    path, documents, empty = corpus(tmp_path)
    out = tmp_path / "out"
    args = ["--tokenizer", str(wordpiece(tmp_path)), "--no-eos", "--max-len", "8"]
    result = runner.invoke(
        app, ["pack", str(path), "--out", str(out), *args, "--overflow", overflow, "--strategy", strategy, "--json"]
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["input_documents"], summary["empty_documents"]) == (documents, empty)
    assert summary["input_tokens"] == 1 + 3 + 8 + 12 + 20 + 2 + 5
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


def test_the_same_with_the_shared_minilm_tokenizer(tmp_path: Path) -> None:
    minilm = shared_path("tokenizers/minilm")
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "a real sentence"}, {"text": " \n "}, {"text": "more words"}])
    for overflow in ("split", "truncate", "drop"):
        for strategy in ("bfd", "ffd", "greedy"):
            out = tmp_path / f"{overflow}-{strategy}"
            args = ["--tokenizer", str(minilm), "--no-eos", "--overflow", overflow, "--strategy", strategy]
            result = runner.invoke(app, ["pack", str(path), "--out", str(out), *args, "--json"])
            assert result.exit_code == 0, (overflow, strategy, result.stderr)
            summary = json.loads(result.stdout)
            assert (summary["input_documents"], summary["empty_documents"]) == (2, 1), (overflow, strategy)
            assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


def test_a_response_that_tokenizes_to_nothing_has_nothing_to_supervise(tmp_path: Path) -> None:
    records = [{"prompt": "alpha beta", "response": "gamma"}, {"prompt": "delta", "response": "  \t "}]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    args = ["--prompt-field", "prompt", "--response-field", "response", "--no-eos", "--max-len", "8"]
    result = runner.invoke(
        app, ["pack", str(path), "--out", str(tmp_path / "o"), "--tokenizer", str(wordpiece(tmp_path)), *args, "--json"]
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["input_documents"], summary["empty_documents"], summary["supervised_tokens"]) == (1, 1, 1)


def test_a_corpus_of_nothing_but_empty_documents_is_one_clear_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "blank.jsonl", [{"text": "  "}, {"text": "\n"}])
    args = ["--tokenizer", str(wordpiece(tmp_path)), "--no-eos"]
    result = runner.invoke(app, ["pack", str(path), "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 1 and "no documents: the input holds no usable record (2 empty" in result.stderr
