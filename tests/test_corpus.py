"""tokenize_corpus on skewed corpora: huge documents among short ones keep their exact tokens, and the output is
byte-identical with one tokenizer thread (batches never joined) or two (batches joined around the huge ones)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE, read_jsonl, write_jsonl

from packcli.encode.corpus import Batch, balanced
from packcli.encode.tokenizer import load_tokenizer
from packcli.format.shards import read_shard
from packcli.read.fields import Field, ReadCounts
from packcli.read.inputs import read_records

HUGE_BYTES = (600_000, 900_000)  # each far over half a ~1 MB read piece: the tokenizer would have it alone
SHORT_BYTES = 1_000_000


def skewed_corpus(path: Path) -> tuple[Path, list[str]]:
    """Short documents (paragraphs of the sample's modules) with two huge ones (modules concatenated) among them,
    written as JSON Lines; also return the texts in order."""
    modules = [record["text"] for record in read_jsonl(SAMPLE)]
    short: list[str] = []
    for text in modules:
        short.extend(paragraph for paragraph in text.split("\n\n") if paragraph.strip())
        if sum(map(len, short)) >= SHORT_BYTES:
            break
    huge = []
    at = 0
    for size in HUGE_BYTES:
        parts: list[str] = []
        while sum(map(len, parts)) < size:
            parts.append(modules[at % len(modules)])
            at += 1
        huge.append("\n".join(parts))
    third = len(short) // 3
    texts = [*short[:third], huge[0], *short[third : 2 * third], huge[1], *short[2 * third :]]
    write_jsonl(path, [{"text": text} for text in texts])
    return path, texts


def pack(corpus: Path, out: Path, *flags: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "packcli", "pack", str(corpus), "--out", str(out), "--quiet", *flags],
        check=True,
    )


def shard_digests(out: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(out.glob("shard-*.arrow"))}


@pytest.fixture(scope="module")
def skewed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The skewed corpus, written once for this module (read-only)."""
    return skewed_corpus(tmp_path_factory.mktemp("skewed") / "skewed.jsonl")


def test_the_skewed_corpus_makes_joined_batches_for_two_threads(skewed: tuple[Path, list[str]]) -> None:
    """The corpus above exercises the joining: read as pack reads it, some batches are joined for two threads."""
    corpus, texts = skewed
    read = [
        (batch.columns[0], batch.position, 0, batch.records)
        for batch in read_records(corpus, [Field("text")], ReadCounts(), False, print)
    ]
    sizes = lambda texts: [len(text) for text in texts]  # noqa: E731
    for threads in (1, 2):
        joined = list(balanced(read, sizes, threads))
        assert [text for batch, _, _, _ in joined for text in batch] == texts
        assert [line for *_, lines in joined for line in lines.tolist()] == list(range(1, len(texts) + 1))
        assert joined[-1][1] == read[-1][1] == corpus.stat().st_size
        if threads == 1:
            assert len(joined) == len(read)
        else:
            assert len(joined) < len(read)
            for batch, _, _, _ in joined[:-1]:
                assert max(sizes(batch)) * threads <= sum(sizes(batch))


def numbered(batches: list[tuple[list[str], int, int]]) -> list[Batch]:
    """Batches with their records numbered from 1, one after another."""
    sizes = np.cumsum([0, *(len(texts) for texts, _, _ in batches)])
    return [(*batch, np.arange(start, end) + 1) for batch, start, end in zip(batches, sizes[:-1], sizes[1:])]


def plain(batches: Iterable[Batch]) -> list[tuple[list[str], int, int, list[int]]]:
    return [(texts, position, file, records.tolist()) for texts, position, file, records in batches]


def test_balanced_joins_only_until_the_largest_is_a_fair_share() -> None:
    batches = numbered(
        [(["a", "b"], 10, 0), (["x" * 6, "c"], 20, 0), (["dd"], 30, 0), (["eee"], 40, 0), (["f", "g"], 50, 0)]
    )
    joined = plain(balanced(batches, lambda texts: [len(t) for t in texts], threads=2))
    assert joined == [(["a", "b"], 10, 0, [1, 2]), (["x" * 6, "c", "dd", "eee"], 40, 0, [3, 4, 5, 6]), (["f", "g"], 50, 0, [7, 8])]  # fmt: skip
    capped = plain(balanced(batches, lambda texts: [len(t) for t in texts], threads=2, limit=8))
    assert capped == [(["a", "b"], 10, 0, [1, 2]), (["x" * 6, "c", "dd"], 30, 0, [3, 4, 5]), (["eee", "f", "g"], 50, 0, [6, 7, 8])]  # fmt: skip
    assert plain(balanced(batches[1:2], lambda texts: [len(t) for t in texts], threads=4)) == plain(batches[1:2])


def test_balanced_never_joins_two_files() -> None:
    """Each file's documents are counted per batch (mixing and partitions need them), so a file ends a batch."""
    batches = numbered([(["x" * 6], 10, 0), (["a"], 20, 1), (["b"], 30, 1), (["y" * 9], 40, 2)])
    joined = plain(balanced(batches, lambda texts: [len(t) for t in texts], threads=2))
    assert joined == [(["x" * 6], 10, 0, [1]), (["a", "b"], 30, 1, [2, 3]), (["y" * 9], 40, 2, [4])]


def test_a_huge_document_among_short_ones_keeps_its_exact_tokens_on_one_thread_or_two(
    tmp_path: Path, skewed: tuple[Path, list[str]]
) -> None:
    """Each thread count in its own process (the tokenizer's thread pool is sized once per process): the same
    bytes, and the exact tokens of one batch call over every text (no golden digest: it would break on any
    tokenizers release that changes a merge)."""
    corpus, texts = skewed
    for workers in ("1", "2"):
        pack(
            corpus,
            tmp_path / workers,
            "--workers",
            workers,
            "--max-len",
            "4096",
            "--strategy",
            "greedy",
            "--no-shuffle",
        )
    assert shard_digests(tmp_path / "1") == shard_digests(tmp_path / "2") != {}
    tokens = np.concatenate(
        [
            np.concatenate(read_shard(path).column("input_ids").to_numpy())
            for path in sorted((tmp_path / "2").glob("shard-*.arrow"))
        ]
    )
    tokenizer = load_tokenizer().tokenizer
    eos = 50256
    # One batch call over every text: other batches than pack's, and the same ids for every document.
    expected = [[*encoding.ids, eos] for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    huge = [k for k, text in enumerate(texts) if len(text) >= min(HUGE_BYTES)]
    assert len(huge) == 2 and 0 < huge[0] < huge[1] < len(texts) - 1
    assert tokens.tolist() == [token for ids in expected for token in ids]
