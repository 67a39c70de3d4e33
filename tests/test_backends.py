"""Tokenizer backends: both fast backends (gigatoken, the default, and fastokens) give exactly Hugging Face's
tokens on real corpora with every shared tokenizer (text, prompt/response and chats; special-token text in a
document stays text), auto falls back saying why, and a run whose backend gets one id wrong is stopped by the
cross-check, naming the document's file and line."""

from __future__ import annotations

import gzip
import json
import pickle
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import SAMPLE, listed_files, read_jsonl, shared_path, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from s3_server import S3Server
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode import backends as backends_module
from packcli.encode import gigatoken_backend
from packcli.encode.backends import (
    FAST_BACKENDS,
    NATIVE_SPLIT_REGEXES,
    Backend,
    Backends,
    FastBackend,
    HFBackend,
    Opened,
    fast_refusal,
    open_backends,
)
from packcli.encode.corpus import tokenize_corpus
from packcli.encode.crosscheck import CHARACTERS_PER_CHECKED, MIN_CHARACTERS, MIN_CHECKED, CrossCheck
from packcli.encode.encoders import SegmentEncoder, TextEncoder, make_encoder
from packcli.encode.gigatoken_backend import GigatokenBackend
from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.format.shards import read_shard
from packcli.options import PackOptions
from packcli.run.job import Shipped
from packcli.run.setup import set_up
from packcli.util.progress import SilentReporter

runner = CliRunner()
TRICKY = [
    " ",
    "  \n\t  \r\n",
    "a </s> <s> [INST] <|endoftext|> <|im_start|> b",
    "Cafe\u0301 na\u0308ive \u1100\u1161",  # decomposed accents, conjoining jamo
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8 \u2764\ufe0f",
    "\ufeffbyte order mark",
    "NUL\x00 and controls \x01\x1b[0m\x7f\x85, a BOM\ufeffinside, CRLF\r\nlines\r\n\r\n",
    "\u200b\u200c\u2060\u2028\u2029 \u00a0\u3000 \U0010ffff \ue000 \ufb01 \u2460 \uff76",
    "x" * 20_000,
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u4e2d\u6587 \u0939\u093f\u0928\u094d\u0926\u0940 123456789",
]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small slices of the shared corpora: text (gcide articles, CPython files, tricky strings), prompt/response
    pairs, and chats built from those pairs (their content holding literal special-token strings)."""
    directory = tmp_path_factory.mktemp("backend-corpora")
    with gzip.open(shared_path("data/gcide.jsonl.gz"), "rt", encoding="utf-8") as lines:
        gcide = [json.loads(next(lines))["text"] for _ in range(150)]
    with shared_path("data/cpython_stdlib.jsonl").open(encoding="utf-8") as lines:
        code = [json.loads(next(lines))["text"] for _ in range(4)]
    with shared_path("data/bigbench_sft.jsonl").open(encoding="utf-8") as lines:
        pairs = [json.loads(next(lines)) for _ in range(80)]
    chats = [
        {
            "messages": [
                {"role": "system", "content": "Answer <|im_end|> briefly </s>."},
                {"role": "user", "content": pair["prompt"]},
                {"role": "assistant", "content": pair["response"]},
            ]
        }
        for pair in pairs
    ]
    return {
        "text": write_jsonl(directory / "text.jsonl", [{"text": text} for text in [*gcide, *code, *TRICKY]]),
        "sft": write_jsonl(directory / "sft.jsonl", pairs),
        "chat": write_jsonl(directory / "chat.jsonl", chats),
    }


KINDS = {
    "text": {},
    "sft": {"prompt_field": "prompt", "response_field": "response"},
    "chat": {"messages_field": "messages"},
}


def tokens_of(path: Path, encoder: TextEncoder | SegmentEncoder, tmp_path: Path) -> tuple[bytes, bytes, list[int]]:
    """The token store's bytes (tokens, then the mask) and the document lengths of one corpus."""
    tokenized = tokenize_corpus([path], encoder, False, tmp_path / "store", SilentReporter(), print)
    tokenized.store.finish()
    mask = tokenized.store.mask_path.read_bytes() if tokenized.store.mask_path else b""
    result = tokenized.store.path.read_bytes(), mask, tokenized.lengths.tolist()
    tokenized.store.remove()
    return result


def encoder(kind: str, loaded: LoadedTokenizer, backends: Backends) -> TextEncoder | SegmentEncoder:
    options = PackOptions(**KINDS[kind])  # type: ignore[arg-type]
    return (
        TextEncoder(options, loaded, backends) if kind == "text" else SegmentEncoder(options, loaded, backends, print)
    )


@pytest.mark.shared
@pytest.mark.parametrize("name", ["gpt2", "tekken", "qwen", "minilm"])
def test_every_backend_gives_identical_tokens_for_text_sft_and_chats(
    name: str, corpora: dict[str, Path], tmp_path: Path
) -> None:
    loaded = load_tokenizer(str(shared_path(f"tokenizers/{name}")))
    auto = open_backends(loaded, "auto", True)
    if name == "minilm":  # WordPiece with a BertNormalizer: Hugging Face, and the manifest says why
        assert (auto.name, auto.fallback) == ("hf", "its model is WordPiece, not byte-level BPE")
        return
    assert (auto.name, auto.fallback) == ("gigatoken", None)
    assert auto.reference_text is not None and auto.reference_markup is not None
    hf = Backends("hf", "", auto.reference_text, auto.reference_markup, None, None)  # what --tokenizer-backend hf opens
    fastokens = Backends("fastokens", "", *FAST_BACKENDS["fastokens"](loaded, True), hf.text, hf.markup)  # type: ignore[arg-type]
    for kind in KINDS:
        fast = tokens_of(corpora[kind], encoder(kind, loaded, auto), tmp_path)
        assert fast == tokens_of(corpora[kind], encoder(kind, loaded, hf), tmp_path), kind
        assert fast == tokens_of(corpora[kind], encoder(kind, loaded, fastokens), tmp_path), kind
        assert len(fast[2]) >= 80 and (kind == "text") == (fast[1] == b"")


def run_pack(*args: str) -> Any:
    return runner.invoke(app, ["pack", *args, "--max-len", "512", "--quiet"])


def test_auto_and_hf_write_the_same_bytes_and_an_explicit_hf_repacks_what_gigatoken_encoded(tmp_path: Path) -> None:
    """The repo's own sample (no ../shared needed), bundled GPT-2: gigatoken under auto, Hugging Face when forced.
    The backend is outside the fingerprint: auto takes Hugging Face's output as up to date, but an explicit hf, the
    remedy where the fast backend is doubted, repacks gigatoken's (with or without --overwrite), then takes its own."""
    auto, hf = tmp_path / "auto", tmp_path / "hf"
    corpus = write_jsonl(tmp_path / "sample.jsonl", read_jsonl(SAMPLE)[:80])
    assert run_pack(str(corpus), "--out", str(auto)).exit_code == 0
    forced = run_pack(str(corpus), "--out", str(hf), "--tokenizer-backend", "hf")
    assert forced.exit_code == 0, forced.output
    manifests = [json.loads((out / "manifest.json").read_text()) for out in (auto, hf)]
    assert [m["tokenizer"]["backend"] for m in manifests] == ["gigatoken", "hf"]
    assert manifests[0]["fingerprint"] == manifests[1]["fingerprint"]
    assert "tokenizer_backend" not in manifests[0]["options"]
    shards = listed_files(manifests[0])  # the shards and their sidecars
    assert shards and all((auto / file).read_bytes() == (hf / file).read_bytes() for file in shards)
    assert json.loads(run_pack(str(corpus), "--out", str(hf), "--json").stdout)["status"] == "up-to-date"
    for extra in ([], ["--overwrite"]):
        out = tmp_path / f"fast{len(extra)}"
        assert json.loads(run_pack(str(corpus), "--out", str(out), "--json").stdout)["status"] == "packed"
        dry = run_pack(str(corpus), "--out", str(out), "--tokenizer-backend", "hf", "--dry-run", "--json", *extra)
        assert json.loads(dry.stdout)["status"] == "would-pack", dry.output
        again = run_pack(str(corpus), "--out", str(out), "--tokenizer-backend", "hf", "--json", *extra)
        assert json.loads(again.stdout)["status"] == "packed", again.output
        assert json.loads((out / "manifest.json").read_text())["tokenizer"]["backend"] == "hf"
        assert sorted(path.name for path in out.iterdir()) == sorted(["manifest.json", *shards])
        assert all((out / file).read_bytes() == (hf / file).read_bytes() for file in shards)
        repeated = run_pack(str(corpus), "--out", str(out), "--tokenizer-backend", "hf", "--json")
        assert json.loads(repeated.stdout)["status"] == "up-to-date"
    refused = run_pack(str(corpus), "--out", str(tmp_path / "x"), "--tokenizer-backend", "fast")
    assert refused.exit_code == 2 and "unknown --tokenizer-backend 'fast'; choose one of auto, hf" in refused.output


def test_an_explicit_hf_repacks_a_partitioned_output_url_that_gigatoken_encoded(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The same rule for a partitioned run (which finds an up-to-date output before starting its engine) and an
    output URL (whose publication judges the objects there): hf repacks gigatoken's output, then takes its own."""
    out = f"{s3_server.bucket()}/packed"
    corpus = write_jsonl(tmp_path / "sample.jsonl", read_jsonl(SAMPLE)[:40])
    parts = ["--partitions", "2", "--workers", "1", "--json"]
    statuses = []
    for backend in ("auto", "hf", "hf", "auto"):
        result = run_pack(str(corpus), "--out", out, "--tokenizer-backend", backend, *parts)
        assert result.exit_code == 0, result.output
        statuses.append(json.loads(result.stdout)["status"])
        assert json.loads(s3_server.filesystem().cat(f"{out}/manifest.json"))["tokenizer"]["backend"] == (
            "gigatoken" if len(statuses) == 1 else "hf"
        )
    assert statuses == ["packed", "packed", "up-to-date", "up-to-date"]


class OneWrongId:
    """A test backend: the default fast backend, except that the first token of a text holding MARKER comes back one
    higher."""

    MARKER = "wrong-here"

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    def encode(self, texts: list[str]) -> Any:
        return self.inner.encode(texts), [k for k, text in enumerate(texts) if self.MARKER in text]

    def ids(self, encoded: Any) -> tuple[np.ndarray, np.ndarray]:
        flat, marked = encoded
        tokens, lengths = self.inner.ids(flat)
        tokens = tokens.copy()
        starts = np.concatenate(([0], np.cumsum(lengths)))
        tokens[starts[marked]] += 1
        return tokens, lengths


def fine_tuning_record(kind: str, text: str) -> dict[str, Any]:
    """One record of ``kind`` whose supervised part is ``text``."""
    if kind == "text":
        return {"text": text}
    if kind == "sft":
        return {"prompt": "Question one", "response": text}
    turns = [("system", "Be brief."), ("user", "Question one"), ("assistant", "Yes."), ("user", "And?")]
    return {
        "messages": [{"role": role, "content": content} for role, content in turns]
        + [{"role": "assistant", "content": text}]
    }


FINE_TUNING_OPTIONS = {
    "text": [],
    "sft": ["--prompt-field", "prompt", "--response-field", "response"],
    "chat": ["--messages-field", "messages"],
}


@pytest.mark.parametrize("kind", ["text", "sft", "chat"])
def test_the_cross_check_stops_a_run_whose_backend_gets_one_id_wrong(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error names the document's line and the token that differs, counted from the document's first token
    (for a fine-tuning record, after its prompt or earlier turns): here the first token of the supervised text."""
    one_wrong_id(monkeypatch)
    texts = [record["text"][:400] for record in read_jsonl(SAMPLE)[:20]]
    texts[1] = OneWrongId.MARKER + " " + texts[1]  # early: within the free minimum of checked texts
    records = [fine_tuning_record(kind, text) for text in texts]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": ""}, *records])  # the marked record: line 3
    options = FINE_TUNING_OPTIONS[kind]
    result = run_pack(str(corpus), "--out", str(tmp_path / "out"), "--skip-bad-records", *options)
    assert result.exit_code == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.jsonl"]  # no output, nor its staging
    forced = run_pack(
        str(corpus), "--out", str(tmp_path / "out"), "--skip-bad-records", "--tokenizer-backend", "hf", *options
    )
    assert forced.exit_code == 0, forced.output
    document = packed_document_holding(tmp_path / "out", OneWrongId.MARKER)
    position = 0  # the supervised text is the whole document, or starts where the last supervised run does
    if kind != "text":
        supervised = np.concatenate(([False], document["labels"] != -100))
        position = int(np.flatnonzero(supervised[1:] & ~supervised[:-1])[-1])
        assert position >= (2 if kind == "sft" else 20)  # the prompt, or the earlier turns, are counted
    wrong, right = int(document["input_ids"][position]) + 1, int(document["input_ids"][position])
    assert result.output == (
        f"error: {corpus}:3: the gigatoken tokenizer backend encodes this document otherwise than Hugging Face "
        f"tokenizers (token {position}: {wrong}, expected {right}); rerun with --tokenizer-backend hf\n"
    )


def one_wrong_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto opens gigatoken, each of its backends wrapped in OneWrongId."""
    opener = FAST_BACKENDS["gigatoken"]

    def opened(loaded: LoadedTokenizer, markup: bool) -> Opened:
        text, marking = opener(loaded, markup)
        return OneWrongId(text), OneWrongId(marking) if marking is not None else None

    monkeypatch.setitem(FAST_BACKENDS, "gigatoken", opened)


BOS_TEMPLATE = "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"


@pytest.mark.parametrize(("kind", "added_bos"), [("sft", 1), ("chat", 0)])
def test_the_cross_check_counts_a_bos_the_template_renders_not_the_one_bos_adds(
    kind: str, added_bos: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token is counted in the document as the tokenizer renders it: a BOS that ``--bos`` prepends is not
    counted (the packed document holds the token one further on), one that the chat template renders
    (``{{ bos_token }}``, with ``--bos``, which then adds none) is; the empty system turn before counts nothing."""
    tekken = str(shared_path("tokenizers/tekken"))
    one_wrong_id(monkeypatch)
    texts = [record["text"][:300] for record in read_jsonl(SAMPLE)[:20]]
    texts[1] = OneWrongId.MARKER + " " + texts[1]
    if kind == "sft":
        records: list[dict[str, Any]] = [{"prompt": "Question one", "response": text} for text in texts]
    else:
        (tmp_path / "bos.jinja").write_text(BOS_TEMPLATE)
        turns = [("system", ""), ("user", "Question one")]
        records = [
            {"messages": [*({"role": r, "content": c} for r, c in turns), {"role": "assistant", "content": text}]}
            for text in texts
        ]
    options = [*FINE_TUNING_OPTIONS[kind], "--bos", "--tokenizer", tekken]
    if kind == "chat":
        options += ["--chat-template", str(tmp_path / "bos.jinja")]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    result = run_pack(str(corpus), "--out", str(tmp_path / "out"), *options)
    assert result.exit_code == 1, result.output
    forced = run_pack(str(corpus), "--out", str(tmp_path / "out"), "--tokenizer-backend", "hf", *options)
    assert forced.exit_code == 0, forced.output
    document = packed_document_holding(tmp_path / "out", OneWrongId.MARKER, tekken)
    assert int(document["input_ids"][0]) == 1  # Tekken's BOS, once
    supervised = np.concatenate(([False], document["labels"] != -100))
    packed_at = int(np.flatnonzero(supervised[1:] & ~supervised[:-1])[-1])  # the marked text's first token
    position = packed_at - added_bos
    right = int(document["input_ids"][packed_at])
    assert f"(token {position}: {right + 1}, expected {right})" in result.output, result.output


def packed_document_holding(out: Path, marker: str, tokenizer_spec: str | None = None) -> dict[str, np.ndarray]:
    """The columns of the one packed document of ``out`` whose text holds ``marker`` (decoded with
    ``tokenizer_spec``, by default the bundled GPT-2)."""
    table = pa.concat_tables(read_shard(shard) for shard in sorted(out.glob("shard-*.arrow")))
    tokenizer = load_tokenizer(tokenizer_spec).tokenizer
    found = []
    for k in range(table.num_rows):
        row = {name: np.asarray(table.column(name)[k].as_py()) for name in table.column_names if name != "cu_seqlens"}
        starts = [*np.flatnonzero(row["position_ids"] == 0), len(row["input_ids"])]
        for start, end in zip(starts, starts[1:]):
            document = {name: values[start:end] for name, values in row.items()}
            if marker in tokenizer.decode(document["input_ids"].tolist()):
                found.append(document)
    assert len(found) == 1
    return found[0]


def test_the_cross_checks_free_minimum_is_bounded_in_characters() -> None:
    """The first MIN_CHECKED texts are checked whatever their share, but only while they hold MIN_CHARACTERS in all:
    long documents (source files) are then checked within the share alone."""
    hf = HFBackend(load_tokenizer().tokenizer)
    short = [f"document {k}" for k in range(MIN_CHECKED + 8)]
    check = CrossCheck("hf", 0)
    check.verify(short, hf, hf.encode(short), hf)
    assert check.checked == MIN_CHECKED
    quarter = ["word " * (MIN_CHARACTERS // 20 + 1) + str(k) for k in range(8)]  # each just over a quarter
    check = CrossCheck("hf", 0)
    check.verify(quarter, hf, hf.encode(quarter), hf)
    assert check.checked == 3  # a fourth would pass MIN_CHARACTERS, and 8 texts earn no share of a whole one


def sampled(texts: list[str], cuts: list[int], seed: int = 0) -> list[int]:
    """The texts (indices) a run's cross-check takes when ``texts`` come in batches cut at ``cuts``."""
    check, taken = CrossCheck("fastokens", seed), []
    for start, end in zip([0, *cuts], [*cuts, len(texts)]):
        taken += [start + k for k in check.sample(texts[start:end])]
    return taken


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 19_999), max_size=8, unique=True).map(sorted), st.integers(0, 3))
def test_the_cross_checks_sample_depends_on_the_seed_and_the_documents_alone(cuts: list[int], seed: int) -> None:
    """Same documents and seed, same sample, however the run batched them (batches follow --workers and the
    machine's load) and however long encoding took: a rerun checks the same documents."""
    texts = [f"document {k} " + "word " * (k % 37) for k in range(20_000)]
    whole = sampled(texts, [], seed)
    assert len(whole) > MIN_CHECKED  # the share adds documents to the free minimum
    assert sampled(texts, cuts, seed) == whole
    if seed == 0:
        assert sampled(texts, cuts, 1) != whole


def test_the_cross_check_is_bounded_on_one_huge_document_and_on_many_tiny_ones() -> None:
    tiny = [str(k) for k in range(100_000)]  # 488,890 characters
    asked = sampled(tiny, list(range(1_000, 100_000, 1_000)))
    assert MIN_CHECKED < len(asked) <= MIN_CHECKED + sum(map(len, tiny)) // CHARACTERS_PER_CHECKED
    huge = ["word " * 400_000]  # 2 MB alone: over the free minimum, and more than the share ever earns
    assert sampled(huge, []) == []


def edited(change: dict[str, Any]) -> LoadedTokenizer:
    """The bundled GPT-2 tokenizer with parts of its tokenizer.json replaced."""
    spec = json.loads(load_tokenizer().source)
    spec.update(change)
    source = json.dumps(spec)
    return LoadedTokenizer(source, "edited", "0" * 64, 50257, 50256, None)


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"normalizer": {"type": "NFC"}}, "it has a normalizer (NFC)"),
        ({"pre_tokenizer": {"type": "Whitespace"}}, "its pre-tokenizer is Whitespace, not byte-level"),
        (
            {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}},
            "its ByteLevel pre-tokenizer adds a prefix space",
        ),
        (
            {
                "added_tokens": [
                    {"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": True, "rstrip": False}
                    | {"normalized": False, "special": True}
                ]
            },
            "added token '<|endoftext|>' sets lstrip",
        ),
    ],
)
def test_the_fallback_names_its_reason(change: dict[str, Any], reason: str) -> None:
    loaded = edited(change)
    assert fast_refusal(loaded.facts) == reason
    backends = open_backends(loaded, "auto", False)
    assert backends.describe() == {"backend": "hf", "backend_version": backends.version, "backend_fallback": reason}


def test_an_added_token_that_fastokens_numbers_otherwise_falls_back() -> None:
    """A tokenizer.json whose added token has the content of a vocabulary entry under another id: Hugging Face
    encodes the entry's id, fastokens the added one; gigatoken refuses a non-special added token (it keeps special-token
    text as text by dropping the added tokens). So auto takes Hugging Face and records why, for both."""
    added = {"id": 50257, "content": "ab", "single_word": False, "lstrip": False, "rstrip": False}
    loaded = edited({"added_tokens": [added | {"normalized": False, "special": False}]})
    fast = FastBackend(backends_module._load_fastokens(loaded), True)
    assert fast.ids(fast.encode(["abab"]))[0].tolist() == [50257, 50257]
    assert HFBackend(loaded.tokenizer).id_lists(["abab"]) == [[397, 397]]
    backends = open_backends(loaded, "auto", False)
    assert (backends.name, backends.fallback) == (
        "hf",
        "gigatoken cannot keep special-token text as text where an added token is not special ('ab'); "
        "added token 'ab' is id 50257 to fastokens, 397 to Hugging Face",
    )


def test_a_non_special_added_token_passes_gigatoken_over_for_fastokens_saying_why() -> None:
    """An added token that is not special is recognized in text by Hugging Face: gigatoken cannot keep it while it
    keeps special-token text as text, so fastokens encodes (Hugging Face's ids), and the manifest says why."""
    spec = json.loads(load_tokenizer().source)
    added = {"id": 50257, "content": "[MARK]", "single_word": False, "lstrip": False, "rstrip": False}
    loaded = edited({"added_tokens": [*spec["added_tokens"], added | {"normalized": False, "special": False}]})
    backends = open_backends(loaded, "auto", False)
    assert (backends.name, backends.fallback) == (
        "fastokens",
        "gigatoken cannot keep special-token text as text where an added token is not special ('[MARK]')",
    )
    texts = ["a [MARK] b <|endoftext|>", "[MARK]"]
    want = HFBackend(loaded.tokenizer).id_lists(texts)
    assert backends.text.ids(backends.text.encode(texts))[0].tolist() == [*want[0], *want[1]]


def test_without_a_fast_backend_the_next_runs_and_records_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fast backend that does not import (or cannot load the tokenizer) is passed over, the manifest saying why:
    gigatoken, then fastokens, then Hugging Face."""
    monkeypatch.setitem(sys.modules, "fastokens", None)  # what Python does for a module that cannot be imported
    backends = open_backends(load_tokenizer(), "auto", False)
    assert (backends.name, backends.fallback) == ("gigatoken", None)
    monkeypatch.setitem(sys.modules, "gigatoken", None)
    backends = open_backends(load_tokenizer(), "auto", False)
    assert backends.name == "hf" and re.fullmatch(
        r"gigatoken cannot be imported \(.*\); fastokens cannot be imported \(.*\)", backends.fallback or ""
    ), backends.fallback
    monkeypatch.delitem(sys.modules, "fastokens")

    def unloadable(loaded: LoadedTokenizer, markup: bool) -> None:
        raise ValueError("unsupported model field\nsecond line")

    monkeypatch.setattr(gigatoken_backend, "load_gigatoken", unloadable)
    monkeypatch.delitem(sys.modules, "gigatoken")
    backends = open_backends(load_tokenizer(), "auto", False)
    assert (backends.name, backends.fallback) == ("fastokens", "gigatoken cannot load it (unsupported model field)")


def test_a_template_post_processor_is_allowed_and_encodes_alike() -> None:
    """A post-processor that adds BOS on encode (as Llama's do) changes nothing: packcli adds specials by id."""
    template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}},
    }
    loaded = edited({"post_processor": template})
    auto, hf = open_backends(loaded, "auto", False), open_backends(loaded, "hf", False)
    assert auto.name == "gigatoken"
    texts = [*TRICKY, "plain words"]
    assert [a.tolist() for a in auto.text.ids(auto.text.encode(texts))] == [
        a.tolist() for a in hf.text.ids(hf.text.encode(texts))
    ]


def test_workers_rebuild_the_drivers_tokenizer_and_choose_the_same_backend() -> None:
    loaded = load_tokenizer()
    rebuilt = pickle.loads(pickle.dumps(Shipped(loaded, PackOptions()))).tokenizer  # as a worker gets it
    assert rebuilt is not loaded
    assert rebuilt.source == loaded.source and rebuilt.describe() == loaded.describe()
    assert rebuilt.tokenizer.encode_special_tokens and rebuilt.tokenizer.truncation is None
    assert open_backends(rebuilt, "auto", False).name == "gigatoken"


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_fallback_the_user_did_not_ask_about_is_quiet_and_in_the_manifest(tmp_path: Path, partitioned: bool) -> None:
    """auto is the default, so a WordPiece user never asked for a fast backend: the run says nothing of the backend on
    stderr (a warning on every run asked nothing of them), and the manifest records that Hugging Face encoded and
    why, whether the driver or its workers encode, or the tokens come from the cache a `stats` left."""
    minilm = str(shared_path("tokenizers/minilm/tokenizer.json"))
    corpus = write_jsonl(tmp_path / "c.jsonl", read_jsonl(SAMPLE)[:40])
    parts = ["--partitions", "2", "--workers", "1"] if partitioned else []
    if not partitioned:
        assert runner.invoke(app, ["stats", str(corpus), "--tokenizer", minilm]).stderr == ""
    command = ["pack", str(corpus), "--tokenizer", minilm, "--out", str(tmp_path / "out"), "--json", *parts]
    result = runner.invoke(app, command)
    assert result.exit_code == 0 and "backend" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["tokenized_from_cache"] != partitioned
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["tokenizer"]["backend"], manifest["tokenizer"]["backend_fallback"]) == (
        "hf",
        "its model is WordPiece, not byte-level BPE",
    )


def test_a_runs_driver_builds_no_fast_backend_and_its_job_builds_one(tmp_path: Path) -> None:
    """The driver's set-up wraps Hugging Face's tokenizer (a run found up to date builds nothing more); the job that
    encodes builds gigatoken's, once per process."""
    source = json.dumps(json.loads(load_tokenizer().source), indent=1)  # a text no other test has built
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(source)
    corpus = write_jsonl(tmp_path / "c.jsonl", read_jsonl(SAMPLE)[:5])
    options = PackOptions(max_len=64, tokenizer=str(tokenizer))
    setup = set_up([str(corpus)], options, encodes=False)
    assert setup.encoder.backend["backend"] == "hf" and (source, False) not in gigatoken_backend._built
    encoder = make_encoder(options, setup.tokenizer)  # the job's
    assert isinstance(encoder, TextEncoder) and encoder.backend["backend"] == "gigatoken"
    assert isinstance(encoder.text, GigatokenBackend)
    assert encoder.text.tokenizer is gigatoken_backend._built[source, False]  # built once, kept for the process
    assert make_encoder(options, setup.tokenizer).text.tokenizer is encoder.text.tokenizer  # type: ignore[attr-defined]


GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"  # its ByteLevel's own
MONGOLIAN = (
    "Mongolian, a vowel separator (U+180E) after a space: \u1828\u1822 \u180e\u1821; Bengali \u0995\u09be\u09b2."
)


def split_pre_tokenizer(regex: str) -> dict[str, Any]:
    """``Sequence[Split(regex), ByteLevel]``, as a tiktoken-style tokenizer.json writes it."""
    split = {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return {"type": "Sequence", "pretokenizers": [split, byte_level]}


def qwen_regex() -> str:
    spec = json.loads(shared_path("tokenizers/qwen/tokenizer.json").read_text(encoding="utf-8"))
    return str(spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"])


@pytest.mark.shared
@pytest.mark.parametrize("variant", ["qwen-wrapped", "gpt2-split"])
def test_auto_falls_back_from_a_split_regex_fastokens_runs_on_its_regex_engine(variant: str, tmp_path: Path) -> None:
    """Qwen's regex wrapped in (?:...), and GPT-2's written as a Split (what transformers' TikTokenConverter
    writes): fastokens runs either on PCRE2, which reads U+180E as whitespace, and encodes MONGOLIAN otherwise than
    Hugging Face; auto takes Hugging Face, records why, and writes --tokenizer-backend hf's shards."""
    base, regex = ("qwen", f"(?:{qwen_regex()})") if variant == "qwen-wrapped" else ("gpt2", GPT2_REGEX)
    spec = json.loads(shared_path(f"tokenizers/{base}/tokenizer.json").read_text(encoding="utf-8"))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(json.dumps({**spec, "pre_tokenizer": split_pre_tokenizer(regex)}), encoding="utf-8")
    loaded = load_tokenizer(str(tokenizer))
    fast = FastBackend(backends_module._load_fastokens(loaded), True)
    assert fast.ids(fast.encode([MONGOLIAN]))[0].tolist() != HFBackend(loaded.tokenizer).id_lists([MONGOLIAN])[0]
    texts = [record["text"][:300] for record in read_jsonl(SAMPLE)[:60]]
    for k in (40, 47, 55):  # past the cross-check's free minimum, as in a real corpus
        texts[k] += " " + MONGOLIAN
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": text} for text in texts])
    options = ["--tokenizer", str(tokenizer), "--max-len", "512", "--json"]
    results = {
        backend: runner.invoke(
            app, ["pack", str(corpus), *options, "--out", str(tmp_path / backend), "--tokenizer-backend", backend]
        )
        for backend in ("auto", "hf")
    }
    assert [result.exit_code for result in results.values()] == [0, 0], results["auto"].output
    manifests = [json.loads((tmp_path / backend / "manifest.json").read_text()) for backend in results]
    assert [manifest["tokenizer"]["backend"] for manifest in manifests] == ["hf", "hf"]
    assert manifests[0]["tokenizer"]["backend_fallback"].startswith(
        "its Split regex is none of those fastokens runs natively"
    ), manifests[0]["tokenizer"]
    shards = [shard["file"] for shard in manifests[0]["shards"]]
    assert shards and all((tmp_path / "auto" / f).read_bytes() == (tmp_path / "hf" / f).read_bytes() for f in shards)


@pytest.mark.parametrize("name", list(NATIVE_SPLIT_REGEXES))
def test_every_split_regex_fastokens_runs_natively_gives_hugging_faces_ids_and_no_other_is_allowed(name: str) -> None:
    """Each allowed regex, as a Split before GPT-2's vocabulary, on seeded strings of the characters that regex
    engines classify otherwise (U+180E, marks, Indic vowel signs, Unicode spaces, Han, letter numbers): Hugging
    Face's ids; the same regex wrapped in (?:...) is refused, saying why."""
    regex = NATIVE_SPLIT_REGEXES[name]
    loaded = edited({"pre_tokenizer": split_pre_tokenizer(regex)})
    assert fast_refusal(loaded.facts) is None
    alphabet = [*"ab Z1.\n'\t/s", *"\u180e\u093e\u09be\u4e2d\u00a0\u3000\u0301\u2028\u200b\u0c3e\u1680\u0085"]
    alphabet += [*"\u3005\u30fc\u02b0\u01c5\u0663\u2163"]
    generator = random.Random(0)
    texts = ["".join(generator.choices(alphabet, k=generator.randrange(1, 12))) for _ in range(5_000)]
    want = HFBackend(loaded.tokenizer).id_lists(texts)
    fast = FastBackend(backends_module._load_fastokens(loaded), True)
    tokens, lengths = fast.ids(fast.encode(texts))
    assert [ids.tolist() for ids in np.split(tokens, np.cumsum(lengths)[:-1])] == want
    backends = open_backends(loaded, "auto", False)  # gigatoken where it runs the regex itself, else fastokens
    assert backends.name == ("fastokens" if name == "Kimi" else "gigatoken"), backends.fallback
    if name == "Kimi":
        assert (backends.fallback or "").startswith("gigatoken cannot load it (Unknown pre_tokenizer Split regexes")
    tokens, lengths = backends.text.ids(backends.text.encode(texts))
    assert [ids.tolist() for ids in np.split(tokens, np.cumsum(lengths)[:-1])] == want
    wrapped = edited({"pre_tokenizer": split_pre_tokenizer(f"(?:{regex})")})
    assert (fast_refusal(wrapped.facts) or "").startswith("its Split regex is none of those fastokens runs natively")
