"""What packcli knows of a tokenizer before it encodes anything, read from its ``tokenizer.json`` text without building
it: the model's kind and settings, the normalizer, pre-tokenizer and post-processor, the added tokens numbered as
Hugging Face numbers them, and the size of the model's vocabulary. These give the manifest's vocabulary size and
EOS/BOS ids, the fast backends' gate and the chat checks; Hugging Face's build (Tekken: about 0.7 CPU s, holding the
GIL) is left to what encodes or decodes with it (the cross-check, ``--tokenizer-backend hf``, ``show``).

Only what is needed is parsed: the top-level keys in order, and in the model every key up to ``merges``, most of the
file (its parse alone takes longer than the rest): the keys after it are read only where one that matters follows.
A file this reader does not take (a model without a vocabulary object, an added token without its flags) is built
by Hugging Face instead, and the same facts taken from the build (:func:`built_facts`), which also raises Hugging
Face's own error for a broken file.

The model's vocabulary is parsed once, for the vocabulary size and the added tokens' ids, and not kept (Tekken's
131,072 entries held as a dict were about 15 MiB on top of every run's peak): the rare look-up of a token that is
not an added one (an ``eos_token`` named in tokenizer_config.json that is an ordinary token) parses it again.

Invariant: wherever :func:`read_facts` reads a file, its facts equal :func:`built_facts` of Hugging Face's build of
it, key by key, vocabulary included (tests/test_facts.py, on every shared tokenizer).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AddedToken", "TokenizerFacts", "built_facts", "read_facts"]

FLAGS = ("special", "lstrip", "rstrip", "normalized", "single_word")  # an added token's, each required by the file
SETTINGS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback")
COMPONENTS = ("normalizer", "pre_tokenizer", "post_processor")

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# A key that matters, after the model's merges: only a key is a string directly followed by a colon. A key spelled
# with an escape (``"added_\u0074okens"``) may be any of them: its last escape, the rest of it (no escaped quote)
# and the colon.
_LATER_KEYS = "|".join(("type", "vocab", "added_tokens", *SETTINGS, *COMPONENTS))
_LATER_KEY = re.compile(rf'"(?:{_LATER_KEYS})"[ \t\n\r]*:')
_ESCAPED_KEY = re.compile(r'\\[^"\\]+"[ \t\n\r]*:')


@dataclass(frozen=True)
class AddedToken:
    """An added token's content and flags (its id is its key in :attr:`TokenizerFacts.added`)."""

    content: str
    special: bool
    lstrip: bool
    rstrip: bool
    normalized: bool
    single_word: bool


@dataclass(frozen=True)
class TokenizerFacts:
    """A tokenizer as packcli reads it, equal whether read from the file or from Hugging Face's build."""

    model: dict[str, Any]  # "type" (BPE, WordPiece, ...) and the settings of SETTINGS that are set (truthy)
    normalizer: dict[str, Any] | None
    pre_tokenizer: dict[str, Any] | None
    post_processor: dict[str, Any] | None
    added: dict[int, AddedToken]  # by the id Hugging Face gives each
    vocab_size: int  # Hugging Face's ``get_vocab_size(with_added_tokens=True)``: the distinct token texts
    # the model's vocabulary, without the added tokens, made anew at each call (not kept: see the module's docstring)
    vocabulary: Callable[[], dict[str, int]] = field(compare=False, repr=False)

    def token_to_id(self, content: str) -> int | None:
        """The id of ``content``: an added token's first, else the model's (None: neither)."""
        for token_id, token in self.added.items():
            if token.content == content:
                return token_id
        return self.vocabulary().get(content)

    def id_to_token(self, token_id: int) -> str | None:
        """The text of ``token_id``: an added token's first, else the model's (None: neither)."""
        if token_id in self.added:
            return self.added[token_id].content
        return next((content for content, number in self.vocabulary().items() if number == token_id), None)


def built_facts(tokenizer: Any) -> TokenizerFacts:
    """The facts of a Hugging Face ``tokenizers.Tokenizer``, from its own accessors."""
    model = tokenizer.model
    settings = {name: getattr(model, name, None) for name in SETTINGS}
    components = [getattr(tokenizer, name) for name in COMPONENTS]
    normalizer, pre_tokenizer, post_processor = [
        None if component is None else json.loads(component.__getstate__()) for component in components
    ]
    added = {
        token_id: AddedToken(token.content, *(bool(getattr(token, flag)) for flag in FLAGS))
        for token_id, token in tokenizer.get_added_tokens_decoder().items()
    }
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    return TokenizerFacts(
        {"type": type(model).__name__, **{name: value for name, value in settings.items() if value}},
        normalizer,
        pre_tokenizer,
        post_processor,
        dict(sorted(added.items())),
        _size(vocab, added.values()),
        functools.partial(tokenizer.get_vocab, with_added_tokens=False),
    )


def _size(vocab: dict[str, int], added: Iterable[AddedToken]) -> int:
    """Hugging Face's ``get_vocab_size(with_added_tokens=True)``: the distinct texts of the model and added tokens."""
    return len(vocab.keys() | {token.content for token in added})


def read_facts(source: str) -> TokenizerFacts | None:
    """The facts of a ``tokenizer.json`` text, without building it; None where this reader does not take the file
    (then :func:`built_facts` of Hugging Face's build gives them)."""
    try:
        top, vocab_at = _read(source)
        model, tokens = top["model"], top.get("added_tokens") or []
        vocab = model["vocab"]
        if not isinstance(vocab, dict) or not isinstance(model["type"], str) or not isinstance(tokens, list):
            return None
        components = [top.get(name) for name in COMPONENTS]
        if any(component is not None and not isinstance(component, dict) for component in components):
            return None
        added = [_added_token(token) for token in tokens]
        settings = {name: model.get(name) for name in SETTINGS}
    except (ValueError, KeyError, TypeError):
        return None
    normalizer, pre_tokenizer, post_processor = components
    model_facts = {"type": model["type"], **{name: value for name, value in settings.items() if value}}
    numbered = dict(sorted(_numbered(added, vocab).items()))
    vocabulary = functools.partial(_vocab_at, source, vocab_at)
    return TokenizerFacts(
        model_facts, normalizer, pre_tokenizer, post_processor, numbered, _size(vocab, numbered.values()), vocabulary
    )


def _vocab_at(source: str, at: int) -> dict[str, int]:
    """The vocabulary object of a tokenizer.json text, parsed from its position ``at``."""
    vocab: dict[str, int] = _DECODER.raw_decode(source, at)[0]
    return vocab


def _read(source: str) -> tuple[dict[str, Any], int]:
    """The top-level object of a tokenizer.json text, its model's ``merges`` left unread (absent) where no key
    that matters follows them; and where the model's ``vocab`` value starts (-1: no vocab read)."""
    scan = _Scanner(source)
    top: dict[str, Any] = {}
    vocab_at = -1
    for key in scan.members():
        if key != "model":
            top[key] = scan.value()
            continue
        model: dict[str, Any] = {}
        top["model"] = model
        for name in scan.members():
            if name == "merges" and not any(key.search(source, scan.at) for key in (_LATER_KEY, _ESCAPED_KEY)):
                return top, vocab_at  # nothing after the merges is read
            if name == "vocab":
                vocab_at = scan.start()
            model[name] = scan.value()
    return top, vocab_at


class _Scanner:
    """Reads a JSON text value by value from a position, leaving unread what the caller does not ask for."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def value(self) -> Any:
        value, self.at = _DECODER.raw_decode(self.text, self.start())
        return value

    def members(self) -> Iterator[str]:
        """An object's keys, in order, each yielded with the position at its value, which the caller reads."""
        if not self._take("{"):
            raise ValueError("not a JSON object")
        if self._take("}"):
            return
        while True:
            key = self.value()
            if not isinstance(key, str) or not self._take(":"):
                raise ValueError("not a JSON object")
            yield key
            if self._take("}"):
                return
            if not self._take(","):
                raise ValueError("not a JSON object")

    def start(self) -> int:
        """Where the next value starts (past any white space)."""
        self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]
        return self.at

    def _take(self, char: str) -> bool:
        if self.text[self.start() : self.at + 1] == char:
            self.at += 1
            return True
        return False


def _added_token(entry: Any) -> AddedToken:
    """One ``added_tokens`` entry (Hugging Face refuses one without its id or each flag: so does this reader)."""
    values = [entry["content"], *(entry[flag] for flag in FLAGS)]
    if (
        not isinstance(entry["id"], int)
        or not isinstance(values[0], str)
        or not all(isinstance(value, bool) for value in values[1:])
    ):
        raise ValueError("not an added token")
    return AddedToken(*values)


def _numbered(tokens: list[AddedToken], vocab: dict[str, int]) -> dict[int, AddedToken]:
    """The added tokens by id, numbered as Hugging Face numbers them as it loads a file (the file's ids are not
    read): a token whose text the model has takes the model's id; any other the next id after the highest added
    one, or the model's size; an empty token, or one equal to another in every field, is skipped; a later token
    with the same id replaces an earlier one."""
    ids: dict[str, int] = {}
    by_id: dict[int, AddedToken] = {}
    kept: set[AddedToken] = set()  # by_id's values
    highest: int | None = None
    size = len(vocab)
    for token in tokens:
        if not token.content or token in kept:
            continue
        token_id = ids.get(token.content, vocab.get(token.content))
        if token_id is None:
            token_id = size if highest is None or (highest < size and size) else highest + 1
        ids[token.content] = token_id
        highest = token_id if highest is None else max(highest, token_id)
        kept.discard(by_id.get(token_id))
        by_id[token_id] = token
        kept.add(token)
    return by_id
