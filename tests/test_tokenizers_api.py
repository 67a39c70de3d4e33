"""The Hugging Face ``tokenizers`` API packcli uses, exactly as it uses it: tokenizers 1.0 drops several of these
(``from_str``, ``to_str``, ``token_to_id``, ``encode_batch_fast``, ``no_padding``, the ``encode_special_tokens``
attribute), so an upgrade past the ``<1`` pin fails here first, naming what is gone."""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from packcli.encode.tokenizer import load_tokenizer


def test_the_tokenizers_calls_packcli_makes() -> None:
    source = load_tokenizer().source
    tokenizer = Tokenizer.from_str(source)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    assert tokenizer.truncation is None and tokenizer.padding is None
    tokenizer.encode_special_tokens = True
    text = "a <|endoftext|> b"
    as_text = tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids
    assert 50256 not in as_text and tokenizer.decode_batch([as_text]) == [text]
    tokenizer.encode_special_tokens = False
    assert 50256 in tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids
    assert json.loads(Tokenizer.from_str(tokenizer.to_str()).to_str())["model"]["type"] == "BPE"
    assert tokenizer.token_to_id("<|endoftext|>") == 50256 and tokenizer.token_to_id("<nope>") is None
    assert tokenizer.id_to_token(50256) == "<|endoftext|>"
    assert tokenizer.get_vocab_size(with_added_tokens=True) == 50257
    (added,) = tokenizer.get_added_tokens_decoder().items()
    assert added[0] == 50256 and added[1].content == "<|endoftext|>" and added[1].special
    assert not (added[1].lstrip or added[1].rstrip or added[1].normalized or added[1].single_word)
    # what the backend gate reads (packcli.encode.backends.fast_refusal)
    model = tokenizer.model
    assert type(model).__name__ == "BPE"
    assert (model.dropout, model.unk_token, model.continuing_subword_prefix, model.end_of_word_suffix) == (None,) * 4
    assert model.byte_fallback is False and tokenizer.normalizer is None and tokenizer.post_processor is None
    assert json.loads(tokenizer.pre_tokenizer.__getstate__())["type"] == "ByteLevel"
