"""The tokenizer: bundled default, files and directories, the traps of real tokenizer files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_path
from tokenizers import Tokenizer

from packcli.encode.backends import HFBackend
from packcli.encode.documents import add_specials
from packcli.encode.tokenizer import load_tokenizer, special_ids
from packcli.errors import PackcliError, UsageError


def flatten(
    tokenizer: Tokenizer, texts: list[str], eos_id: int | None, bos_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The documents' tokens as a run stores them (Hugging Face backend), EOS/BOS added."""
    backend = HFBackend(tokenizer)
    tokens, lengths, _ = add_specials(*backend.ids(backend.encode(texts)), None, None, eos_id, bos_id)
    return tokens, lengths


def test_bundled_gpt2_encodes_special_strings_as_text_and_appends_eos() -> None:
    loaded = load_tokenizer()
    assert (loaded.vocab_size, loaded.eos_id, loaded.bos_id) == (50257, 50256, None)
    tokens, lengths = flatten(loaded.tokenizer, ["a <|endoftext|> b", "c"], *special_ids(loaded, True, False))
    assert lengths.tolist() == [len(tokens) - 2, 2]
    first = tokens[: lengths[0]]
    assert first[-1] == 50256 and 50256 not in first[:-1].tolist()  # the literal stays text
    assert loaded.tokenizer.decode(first[:-1].tolist()) == "a <|endoftext|> b"
    assert tokens.dtype == np.int32 and lengths.dtype == np.int64


def test_no_eos_and_missing_bos() -> None:
    loaded = load_tokenizer()
    tokens, lengths = flatten(loaded.tokenizer, ["hello"], *special_ids(loaded, False, False))
    assert 50256 not in tokens.tolist() and lengths.tolist() == [1]
    with pytest.raises(UsageError, match="no BOS token"):
        special_ids(loaded, True, True)


def test_bad_tokenizer_files(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(PackcliError, match=r"not a valid tokenizer\.json"):
        load_tokenizer(str(tmp_path / "broken.json"))
    with pytest.raises(PackcliError, match=r"directory holds no tokenizer\.json"):
        load_tokenizer(str(tmp_path))
    with pytest.raises(PackcliError, match="no hub model of that name in the local cache"):
        load_tokenizer("nobody/no-such-model")


def test_eos_from_tokenizer_config_and_explicit(tmp_path: Path) -> None:
    source = shared_path("tokenizers/tekken/tokenizer.json")
    (tmp_path / "tokenizer.json").write_bytes(source.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "[INST]"}}))
    assert load_tokenizer(str(tmp_path)).eos_id == 3
    assert load_tokenizer(str(source), eos_token="<s>").eos_id == 1
    with pytest.raises(UsageError, match="not in the vocabulary"):
        load_tokenizer(str(source), eos_token="<nope>")


@pytest.mark.parametrize(
    "name,eos,bos", [("gpt2", 50256, None), ("tekken", 2, 1), ("qwen", 151643, None), ("minilm", 102, 101)]
)
def test_shared_tokenizers_and_their_traps(name: str, eos: int, bos: int | None) -> None:
    loaded = load_tokenizer(str(shared_path(f"tokenizers/{name}")))
    assert (loaded.eos_id, loaded.bos_id) == (eos, bos)
    long_text = "The packer keeps </s> and <s> and <|endoftext|> as text. " * 60
    tokens, lengths = flatten(loaded.tokenizer, [long_text], eos, None)
    assert lengths[0] > 128  # minilm's file truncates to 128 unless switched off
    assert tokens[-1] == eos and eos not in tokens[:-1].tolist()
    if bos is not None:
        assert bos not in tokens.tolist()
