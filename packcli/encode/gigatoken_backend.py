"""The gigatoken backend: the default fast backend for the byte-level BPE tokenizers that
:func:`~packcli.encode.backends.fast_refusal` allows (measured against fastokens and Hugging Face in
``bench/bench_fast_backends.py``: the same ids on every shared corpus, a build of about a third of fastokens' CPU
time, with a lower peak; docs/performance.md).

gigatoken always recognizes special-token text; it has no switch to keep it as text, which is packcli's rule for
documents. So the tokenizer that encodes documents is built from the ``tokenizer.json`` with its ``added_tokens``
emptied: the model alone, which encodes ``<|endoftext|>`` or ``</s>`` in a document as Hugging Face does with
``encode_special_tokens``. That holds only where every added token is special (a non-special added token is
recognized in text by Hugging Face too, and would be lost): :func:`refusal` says so otherwise. Template markup,
where specials are recognized, gets the file as it is.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

from packcli.encode.tokenizer import LoadedTokenizer
from packcli.util.memory import release_free_memory

__all__ = ["GigatokenBackend", "load_gigatoken", "markup_refusal", "refusal", "without_added_tokens"]


class GigatokenBackend:
    """gigatoken: a batch comes back as an awkward array, whose buffers (flat uint32 ids and int64 offsets) are read
    without a copy."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, texts: list[str], parallel: bool = True) -> Any:
        # Its thread pool is the Rust one RAYON_NUM_THREADS sizes (packcli.encode.tokenizer.use_threads), started at
        # the first parallel encode. A child forked after that has the pool but not its threads (a parallel encode
        # there never returns), so it encodes on the calling thread; a child forked before starts a pool of its own.
        global _pool_started
        parallel = parallel and not _pool_lost and _threads() != "1"
        _pool_started = _pool_started or parallel
        return self.tokenizer.encode_batch(texts, parallel=parallel)

    def import_arrays(self) -> None:
        """Encode nothing, on this thread: what the first encode imports (awkward, in which gigatoken returns each
        batch: about 0.2-0.4 CPU s) is imported now (a worker, before it forks the others, which then need not)."""
        self.encode([], parallel=False)

    def ids(self, encoded: Any) -> tuple[np.ndarray, np.ndarray]:
        layout = encoded.layout
        offsets = np.asarray(layout.offsets)
        # ids are below the vocabulary size, so the uint32 values read as int32 unchanged: no copy
        tokens = np.asarray(layout.content.data)[offsets[0] : offsets[-1]].view("<i4")
        return tokens, np.diff(offsets)


_pool_started = False  # this process has encoded on gigatoken's thread pool
_pool_lost = False  # this process was forked from one that had: the pool's threads stayed behind


def _after_fork() -> None:
    global _pool_lost
    _pool_lost = _pool_lost or _pool_started


os.register_at_fork(after_in_child=_after_fork)


def _threads() -> str | None:
    return os.environ.get("RAYON_NUM_THREADS")


_built: dict[tuple[str, bool], Any] = {}  # gigatoken tokenizers built in this process: (tokenizer.json, markup)


def load_gigatoken(loaded: LoadedTokenizer, markup: bool) -> Any:
    """gigatoken's tokenizer for ``loaded`` (raises what gigatoken raises), built once per process: for documents
    without the added tokens (special-token text stays text), for ``markup`` with them."""
    import gigatoken

    key = (loaded.source, markup)
    if key not in _built:
        _built[key] = gigatoken.Tokenizer.from_json(loaded.source if markup else without_added_tokens(loaded.source))
        release_free_memory()  # the build's scratch
    return _built[key]


def refusal(loaded: LoadedTokenizer) -> str | None:
    """Why gigatoken is not used for ``loaded`` (whose kind fast_refusal allows), known before any build: an added
    token that is not special, which the tokenizer built without the added tokens would lose."""
    ordinary = [token.content for token in loaded.facts.added.values() if not token.special]
    if ordinary:
        return f"gigatoken cannot keep special-token text as text where an added token is not special ({ordinary[0]!r})"
    return None


def markup_refusal(loaded: LoadedTokenizer, markup: Any) -> str | None:
    """Why gigatoken is not used for template markup: ``markup`` (its tokenizer with the added tokens) does not
    encode each added token's text to Hugging Face's id alone."""
    contents = [token.content for token in loaded.facts.added.values()]
    backend = GigatokenBackend(markup)
    tokens, lengths = backend.ids(backend.encode(contents, parallel=False))  # a few tokens: no pool started
    for content, count, got in zip(contents, lengths, _firsts(tokens, lengths)):
        want = loaded.facts.token_to_id(content)
        if count != 1 or got != want:
            return f"added token {content!r} is not id {want} alone to gigatoken"
    return None


def _firsts(tokens: np.ndarray, lengths: np.ndarray) -> list[int]:
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    return [int(tokens[start]) if count else -1 for start, count in zip(starts, lengths)]


_SPACE = re.compile(r"[ \t\n\r]*")


def without_added_tokens(source: str) -> str:
    """``source`` (a tokenizer.json text) with ``"added_tokens": []``.

    The top-level keys are read one by one up to ``added_tokens``, which Hugging Face writes before the model (the
    vocabulary, megabytes): only that much is parsed, not the whole file (a full parse of Tekken's takes longer
    than gigatoken's build). A file whose model comes first is parsed whole."""
    decoder = json.JSONDecoder()
    at = _SPACE.match(source).end()  # type: ignore[union-attr]
    if source[at : at + 1] == "{":
        at += 1
        while True:
            at = _SPACE.match(source, at).end()  # type: ignore[union-attr]
            if source[at : at + 1] != '"':
                break
            key, at = decoder.raw_decode(source, at)
            at = _SPACE.match(source, at).end()  # type: ignore[union-attr]
            if source[at : at + 1] != ":" or key == "model":
                break
            start = _SPACE.match(source, at + 1).end()  # type: ignore[union-attr]
            _, at = decoder.raw_decode(source, start)
            if key == "added_tokens":
                return source[:start] + "[]" + source[at:]
            at = _SPACE.match(source, at).end()  # type: ignore[union-attr]
            if source[at : at + 1] != ",":
                break
            at += 1
    spec = json.loads(source)
    spec["added_tokens"] = []
    return json.dumps(spec)
