"""The gigatoken backend, the default fast one: special-token text in a document stays text with every shared
tokenizer (gigatoken has no switch for it; packcli builds it without the added tokens), the shards are those of
``--tokenizer-backend hf`` byte for byte, and the added tokens are taken out of a tokenizer.json however it is
written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import SAMPLE, listed_files, read_jsonl, shared_path, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.backends import HFBackend, open_backends
from packcli.encode.gigatoken_backend import without_added_tokens
from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.format.shards import read_shard

runner = CliRunner()


@pytest.mark.shared
@pytest.mark.parametrize(("name", "special"), [("gpt2", "<|endoftext|>"), ("tekken", "</s>"), ("qwen", "<|im_end|>")])
def test_special_token_text_in_a_document_stays_text_and_the_shards_are_hfs(
    name: str, special: str, tmp_path: Path
) -> None:
    """Documents holding the tokenizer's special-token text (alone, first, inside, last, twice) among real ones:
    auto encodes with gigatoken and writes --tokenizer-backend hf's bytes; the special's id is in the shards only
    where packcli appends EOS by id."""
    tokenizer = str(shared_path(f"tokenizers/{name}"))
    texts = [record["text"][:500] for record in read_jsonl(SAMPLE)[:60]]
    for k, text in enumerate([special, f"{special}starts", f"in the {special} middle", f"ends{special}"]):
        texts[5 + 7 * k] = text  # within and past the cross-check's free minimum
    texts[50] = f"twice {special}{special} and <s> [INST] <|im_start|> too"
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": text} for text in texts])
    manifests = {}
    for backend in ("auto", "hf"):
        out = tmp_path / backend
        args = ["pack", str(corpus), "--tokenizer", tokenizer, "--out", str(out), "--max-len", "512", "--quiet"]
        result = runner.invoke(app, [*args, "--tokenizer-backend", backend])
        assert result.exit_code == 0, result.output
        manifests[backend] = json.loads((out / "manifest.json").read_text())
    assert [manifests[b]["tokenizer"]["backend"] for b in ("auto", "hf")] == ["gigatoken", "hf"]
    assert "backend_fallback" not in manifests["auto"]["tokenizer"]
    files = listed_files(manifests["auto"])
    assert files and all((tmp_path / "auto" / f).read_bytes() == (tmp_path / "hf" / f).read_bytes() for f in files)
    special_id = load_tokenizer(tokenizer).tokenizer.token_to_id(special)
    eos_id = manifests["auto"]["tokenizer"]["eos_id"]
    table = pa.concat_tables(read_shard(tmp_path / "auto" / shard["file"]) for shard in manifests["auto"]["shards"])
    ids = np.concatenate([np.asarray(row, dtype=np.int64) for row in table.column("input_ids").to_pylist()])
    assert int((ids == special_id).sum()) == (len(texts) if special_id == eos_id else 0)


def test_markup_passes_gigatoken_over_where_a_special_token_is_not_its_id_alone() -> None:
    """A special added token with the text of a vocabulary entry under another id: Hugging Face gives the entry's id
    in markup, gigatoken the added one, and fastokens too; so a run that encodes markup takes Hugging Face, saying
    why for both, while one that encodes documents alone (the added tokens dropped) keeps gigatoken."""
    spec = json.loads(load_tokenizer().source)
    added = {"id": 50257, "content": "ab", "single_word": False, "lstrip": False, "rstrip": False}
    spec["added_tokens"].append(added | {"normalized": False, "special": True})
    source = json.dumps(spec)
    loaded = LoadedTokenizer(source, "edited", "0" * 64, 50258, 50256, None)
    markup = open_backends(loaded, "auto", True)
    assert (markup.name, markup.fallback) == (
        "hf",
        "added token 'ab' is not id 397 alone to gigatoken; added token 'ab' is id 50257 to fastokens, 397 to "
        "Hugging Face",
    )
    documents = open_backends(loaded, "auto", False)
    assert (documents.name, documents.fallback) == ("gigatoken", None)
    texts = ["abab ab", "x</s>ab<|endoftext|>"]
    want = HFBackend(loaded.tokenizer).id_lists(texts)
    assert documents.text.ids(documents.text.encode(texts))[0].tolist() == [*want[0], *want[1]]


def spec_with(keys: list[str], vocab: dict[str, int]) -> dict[str, Any]:
    """A small tokenizer.json-like object with its top-level keys in the order ``keys``."""
    values: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "added_tokens": [{"id": 3, "content": "</s>", "special": True}, {"id": 4, "content": '{"]', "special": 1}],
        "normalizer": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    }
    return {key: values[key] for key in keys}


HF_ORDER = ["version", "truncation", "added_tokens", "normalizer", "model"]


@pytest.mark.parametrize(
    "keys", [HF_ORDER, ["model", "version", "added_tokens"], ["version", "model"], ["added_tokens", "model"]]
)
@pytest.mark.parametrize("layout", [{}, {"indent": 2}, {"separators": (",", ":")}, {"indent": "\t"}])
def test_the_added_tokens_are_taken_out_however_the_file_is_written(keys: list[str], layout: dict[str, Any]) -> None:
    """Written in Hugging Face's key order, or the model first (whose vocabulary holds a token spelled like the key,
    and like JSON), indented, compact or with tabs: the same object with ``added_tokens`` empty, nothing else
    changed."""
    spec = spec_with(keys, {'"added_tokens": [1]': 0, "added_tokens": 1, "}": 2})
    source = json.dumps(spec, **layout)
    assert json.loads(without_added_tokens(source)) == {**spec, "added_tokens": []}


@pytest.mark.shared
def test_a_shared_tokenizer_loses_its_added_tokens_and_nothing_else() -> None:
    source = shared_path("tokenizers/tekken/tokenizer.json").read_text(encoding="utf-8")
    spec = json.loads(source)
    assert len(spec["added_tokens"]) == 1000
    assert json.loads(without_added_tokens(source)) == {**spec, "added_tokens": []}


FORKS = """
import gzip, os, sys
import gigatoken
from packcli.encode import gigatoken_backend as giga

backend = giga.GigatokenBackend(gigatoken.Tokenizer.from_json(gzip.open(sys.argv[1], "rt", encoding="utf-8").read()))
texts = ["packed documents, one after another " * 40 + str(k) for k in range(400)]
want = backend.ids(backend.encode(texts, parallel=False))[0].tolist()  # on this thread: no pool started


def child_says() -> str:
    pid = os.fork()
    if pid == 0:
        same = backend.ids(backend.encode(texts))[0].tolist() == want
        os._exit(10 * same + giga._pool_lost)
    return {10: "parallel", 11: "on its thread"}.get(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), "wrong ids")


before = child_says()
backend.encode(texts)  # the parent starts its pool
print(before, "|", child_says())
"""


def test_a_worker_forked_before_the_pool_started_encodes_in_parallel_and_one_forked_after_on_its_thread() -> None:
    """The local engine forks its workers from one that built the tokenizers: a child forked before gigatoken's
    thread pool started keeps parallel encoding (its own pool); one forked after (where a parallel encode would never
    return) encodes on its thread. Both give the same ids. (The timeout only keeps a hang from stalling the suite.)"""
    tokenizer = Path(__file__).resolve().parents[1] / "packcli" / "assets" / "gpt2" / "tokenizer.json.gz"
    environment = {**os.environ, "RAYON_NUM_THREADS": "2"}
    result = subprocess.run(
        [sys.executable, "-c", FORKS, str(tokenizer)], capture_output=True, text=True, env=environment, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["parallel", "|", "on", "its", "thread"]
