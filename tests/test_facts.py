"""What a run reads of its tokenizer from the file, without building it: equal to what Hugging Face's build gives,
key by key, on every shared tokenizer and the bundled one; and the cross-check's build comes before the fast
backend's, while the heap is almost empty (a whole run's peak), not at its first sample."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import pytest
from conftest import shared_path
from tokenizers import Tokenizer

from packcli.encode import backends
from packcli.encode import facts as facts_module
from packcli.encode.backends import open_backends
from packcli.encode.encoders import make_encoder
from packcli.encode.facts import built_facts, read_facts
from packcli.encode.tokenizer import document_tokenizer, load_tokenizer
from packcli.errors import PackcliError
from packcli.options import PackOptions


@pytest.mark.parametrize("name", ["bundled", "gpt2", "tekken", "qwen", "minilm"])
def test_the_facts_read_from_the_file_are_hugging_faces(name: str) -> None:
    source = load_tokenizer(None if name == "bundled" else str(shared_path(f"tokenizers/{name}"))).source
    built = Tokenizer.from_str(source)
    read, want = read_facts(source), built_facts(built)
    assert read is not None
    for key in (field.name for field in dataclasses.fields(want) if field.compare):
        assert getattr(read, key) == getattr(want, key), key
    assert read.vocab_size == built.get_vocab_size(with_added_tokens=True)
    for token_id, token in want.added.items():
        assert read.token_to_id(token.content) == built.token_to_id(token.content) == token_id
    vocab = read.vocabulary()
    assert vocab == want.vocabulary() and read.vocab_size == len(
        vocab.keys() | {t.content for t in want.added.values()}
    )
    for token_id in (0, 1, 3, 1000, 50256, len(vocab) - 1):
        assert read.id_to_token(token_id) == built.id_to_token(token_id)


def _added(token_id: int, content: str, **flags: Any) -> dict[str, Any]:
    base = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    return {"id": token_id, "content": content, **base, **flags}


@pytest.mark.parametrize(
    "added",
    [
        [_added(3, "<x>"), _added(4, "<y>")],
        [_added(10, "<x>"), _added(4, "<y>")],  # the file's ids are not Hugging Face's
        [_added(1, "<x>")],  # an id the model has
        [_added(5, "b")],  # a text the model has: its id
        [_added(3, "<x>"), _added(3, "<y>")],
        [_added(3, "<x>"), _added(4, "<x>")],  # the same token twice
        [_added(3, "<x>"), _added(4, "<x>", special=False)],  # the same text, other flags
        [_added(7, ""), _added(3, "<x>", lstrip=True, normalized=True)],
    ],
)
def test_added_tokens_are_numbered_as_hugging_face_numbers_them(added: list[dict[str, Any]]) -> None:
    spec = json.loads(load_tokenizer().source)
    spec["model"]["vocab"], spec["model"]["merges"] = {"a": 0, "b": 1, "c": 2}, []
    spec["added_tokens"] = added
    source = json.dumps(spec)
    read = read_facts(source)
    assert read == built_facts(Tokenizer.from_str(source))
    assert read is not None and read.vocab_size == Tokenizer.from_str(source).get_vocab_size(with_added_tokens=True)


def test_keys_after_the_merges_are_read_and_a_file_laid_out_otherwise_is_built() -> None:
    spec = json.loads(load_tokenizer().source)
    model = spec.pop("model")
    merges = model.pop("merges")
    later = {"type": "BPE", "merges": merges, "dropout": 0.5, "vocab": model.pop("vocab")}
    source = json.dumps({"model": later, **spec, "normalizer": {"type": "NFC"}})
    read = read_facts(source)
    assert read is not None and read.model == {"type": "BPE", "dropout": 0.5} and read.normalizer == {"type": "NFC"}
    assert read == built_facts(Tokenizer.from_str(source))
    spec["added_tokens"][0].pop("special")  # Hugging Face refuses it, naming the field
    assert read_facts(json.dumps({**spec, "model": later})) is None


def test_a_key_spelled_with_escapes_after_the_merges_is_read() -> None:
    spec = json.loads(load_tokenizer().source)
    added = [*spec.pop("added_tokens"), _added(0, "<z>")]
    model = spec.pop("model")
    model["merges"] = model.pop("merges")  # the model's last key
    text = json.dumps({**spec, "model": model})[:-1] + ', "added_\\u0074okens": ' + json.dumps(added) + "}"
    read = read_facts(text)  # not the file without its added tokens: a vocabulary short of Hugging Face's
    assert read == built_facts(Tokenizer.from_str(text))
    for name in ("gpt2", "tekken", "qwen"):  # an escaped quote in a merge ('\\" :') is no key: merges stay unread
        assert (
            "merges"
            not in facts_module._read(load_tokenizer(str(shared_path(f"tokenizers/{name}"))).source)[0]["model"]
        )


def test_an_added_token_without_an_id_is_built_as_hugging_face_refuses_it() -> None:
    spec = json.loads(load_tokenizer().source)
    spec["added_tokens"][0].pop("id")
    assert read_facts(json.dumps(spec)) is None


def test_a_tokenizer_file_not_in_utf8_is_named(tmp_path: Any) -> None:
    (tmp_path / "tokenizer.json").write_bytes(b'{"model": "\xff"}')
    with pytest.raises(PackcliError, match=r"not a valid tokenizer\.json: not UTF-8") as caught:
        load_tokenizer(str(tmp_path))
    assert str(tmp_path) in str(caught.value)


def test_a_broken_file_is_hugging_faces_error(tmp_path: Any) -> None:
    spec = json.loads(load_tokenizer().source)
    spec["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    loaded = load_tokenizer(str(tmp_path))  # read without a build: the build that needs it says what is wrong
    with pytest.raises(PackcliError, match=r"not a valid tokenizer\.json"):
        open_backends(loaded, "hf", False).text.encode(["text"])


def test_the_cross_checks_build_comes_before_the_fast_backends_and_a_description_builds_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    document_tokenizer.cache_clear()
    loaded = load_tokenizer()
    open_backends(loaded, "hf", False)  # as a driver's set-up describes the run: nothing built
    assert document_tokenizer.cache_info().currsize == 0
    built_first = []
    opener = backends.FAST_BACKENDS["gigatoken"]

    def recording(loaded: Any, markup: bool) -> Any:
        built_first.append(document_tokenizer.cache_info().currsize == 1)
        return opener(loaded, markup)

    monkeypatch.setitem(backends.FAST_BACKENDS, "gigatoken", recording)
    opened = open_backends(loaded, "auto", False)
    assert opened.name == "gigatoken" and opened.reference_text is not None and built_first == [True]
    assert opened.reference_text.id_lists(["a first document"]) == [[64, 717, 3188]]


def test_a_worker_about_to_fork_builds_what_encoding_would_build_on_first_use() -> None:
    document_tokenizer.cache_clear()
    loaded = load_tokenizer()
    make_encoder(PackOptions(max_len=64, tokenizer_backend="hf"), loaded)
    assert document_tokenizer.cache_info().currsize == 0
    make_encoder(PackOptions(max_len=64, tokenizer_backend="hf"), loaded, built=True)  # as start_worker does
    assert document_tokenizer.cache_info().currsize == 1
    make_encoder(PackOptions(max_len=64), loaded, built=True)
    assert "awkward" in sys.modules
