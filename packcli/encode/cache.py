"""The tokenization cache: ``stats`` on a raw corpus keeps its tokenized corpus, keyed by what decides the tokens
(inputs, tokenizer, record options), so a later ``stats`` at another max_len or strategy, and the ``pack`` that
follows, do not tokenize again. ``pack`` consumes the entry it uses: the cache does not grow with every corpus.

Location: ``$PACKCLI_CACHE``, else ``~/.cache/packcli``. Entries are written under a temporary name and renamed, so a
half-written entry is never used.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from packcli.encode.corpus import Tokenized
from packcli.encode.store import TokenStore
from packcli.read.fields import ReadCounts


def cache_root() -> Path:
    """Where entries live: ``$PACKCLI_CACHE``, else ``~/.cache/packcli``."""
    return Path(os.environ.get("PACKCLI_CACHE") or Path.home() / ".cache" / "packcli")


def save(tokenized: Tokenized, key: str) -> Tokenized:
    """Move a fresh tokenization into the cache; returns it, its store now read from the cache."""
    entry = cache_root() / key
    tmp = cache_root() / f".{key}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokenized.store.finish()
    shutil.move(str(tokenized.store.path), tmp / "tokens")
    if tokenized.store.mask_path is not None:
        shutil.move(str(tokenized.store.mask_path), tmp / "tokens.mask")
    tokenized.store.remove()
    np.save(tmp / "lengths.npy", tokenized.lengths)
    np.save(tmp / "file_documents.npy", tokenized.file_documents)
    (tmp / "counts.json").write_text(json.dumps(asdict(tokenized.counts), sort_keys=True))
    shutil.rmtree(entry, ignore_errors=True)
    os.replace(tmp, entry)
    cached = load(key)
    assert cached is not None
    return cached


def load(key: str) -> Tokenized | None:
    """The cached tokenization for ``key``, or None."""
    entry = cache_root() / key
    if not all((entry / name).is_file() for name in ("counts.json", "tokens", "file_documents.npy")):
        return None
    store = TokenStore.reopen(entry / "tokens")
    return Tokenized(
        store,
        np.load(entry / "lengths.npy"),
        ReadCounts(**json.loads((entry / "counts.json").read_text())),
        np.load(entry / "file_documents.npy"),
    )


def discard(key: str) -> None:
    """Remove an entry (``pack`` does, once it has used it)."""
    shutil.rmtree(cache_root() / key, ignore_errors=True)
