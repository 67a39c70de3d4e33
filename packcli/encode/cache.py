"""The tokenization cache: ``stats`` on a raw corpus keeps its tokenized corpus, keyed by what decides the tokens
(inputs, tokenizer, record options), so a later ``stats`` at another max_len or strategy, and the ``pack`` that
follows, do not tokenize again. ``pack`` consumes the entry it uses: the cache does not grow with every corpus.

Location: ``$PACKCLI_CACHE``, else ``~/.cache/packcli``. Size: at most ``$PACKCLI_CACHE_MAX`` bytes (``4GiB`` by
default): adding an entry evicts the least recently used others until the cache fits (the new entry stays even if
it alone is larger).

Safe under concurrent runs: each tokenization writes into a temporary directory of its own (a unique name, claimed by
a lock on a file inside it for as long as its run lives), and becomes an entry by one rename. Adding, evicting and
removing entries hold the cache lock (``.lock``) exclusively, opening one holds it shared, so an entry is never
removed while another run opens it. A temporary directory whose run died is removed by the next update.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from packcli.encode.backends import takes_tokens
from packcli.encode.corpus import Tokenized
from packcli.encode.store import TokenStore
from packcli.errors import PackcliError, UsageError
from packcli.read.fields import ReadCounts
from packcli.util.locks import FileLock

__all__ = ["cache_root", "discard", "load", "new_store_path", "save"]

DEFAULT_MAX = "4GiB"
_LOCK_NAME = ".lock"
_TEMPORARY_PREFIX = ".tmp-"
_COMPLETE = "counts.json"  # written last into the temporary directory: an entry holding it is complete
_BACKEND = "backend.json"  # the tokenizer backend that encoded the entry (the manifest of the pack records it)
_claims: dict[Path, FileLock] = {}  # temporary directories this process is filling


def cache_root() -> Path:
    """Where entries live: ``$PACKCLI_CACHE``, else ``~/.cache/packcli``."""
    return Path(os.environ.get("PACKCLI_CACHE") or Path.home() / ".cache" / "packcli")


def cache_limit() -> int:
    """The size bound in bytes: ``$PACKCLI_CACHE_MAX`` (bytes, or a size such as ``500MB``), else 4 GiB."""
    from packcli.option_text import parse_size

    text = os.environ.get("PACKCLI_CACHE_MAX") or DEFAULT_MAX
    try:
        return parse_size(text)
    except UsageError as exc:
        raise UsageError(f"PACKCLI_CACHE_MAX: {exc.message}") from None


def new_store_path(key: str) -> Path:
    """A fresh path for the token store of a tokenization to cache under ``key`` (pass the result to :func:`save`).

    Raises:
        PackcliError: the cache directory cannot be created or written (the message names ``PACKCLI_CACHE``).
    """
    cache_limit()  # a wrong PACKCLI_CACHE_MAX is reported before the work, not after it
    with _cache_lock(shared=False, create=True):
        temporary = cache_root() / f"{_TEMPORARY_PREFIX}{key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            temporary.mkdir()
            claim = FileLock(temporary / _LOCK_NAME)
            claim.acquire()
        except OSError as exc:
            raise _unusable(exc) from None
    _claims[temporary] = claim
    return temporary / "tokens"


def save(tokenized: Tokenized, key: str) -> Tokenized:
    """Make a fresh tokenization (its store made at :func:`new_store_path`) the entry for ``key``; returns it,
    read from the cache. When another run saved the same key first, that entry is kept and this one dropped, unless
    this one is Hugging Face's tokens and that one another backend's (which an explicit ``hf`` would not take)."""
    temporary = tokenized.store.path.parent
    tokenized.store.finish()
    tokenized.store.close()
    np.save(temporary / "lengths.npy", tokenized.lengths)
    np.save(temporary / "file_documents.npy", tokenized.file_documents)
    np.save(temporary / "records.npy", tokenized.records)
    (temporary / _BACKEND).write_text(json.dumps(tokenized.backend, sort_keys=True))
    (temporary / _COMPLETE).write_text(json.dumps(asdict(tokenized.counts), sort_keys=True))
    entry = cache_root() / key
    with _cache_lock(shared=False, create=True):
        claim = _claims.pop(temporary)
        replaces = tokenized.backend.get("backend") == "hf" and _backend_of(entry) != "hf"
        if _complete(entry) and not replaces:
            _remove(temporary)
        else:
            _remove(entry)
            os.replace(temporary, entry)
            (entry / _LOCK_NAME).unlink()
        claim.release()
        _evict(cache_limit(), keep=entry)
        _remove_abandoned()
        cached = _open(entry)
    assert cached is not None
    return cached


def load(key: str, requested: str = "auto") -> Tokenized | None:
    """The cached tokenization for ``key``, or None (also when the cache cannot be read, or when another backend
    encoded it than ``--tokenizer-backend requested`` takes: see :func:`~packcli.encode.backends.takes_tokens`)."""
    entry = cache_root() / key
    if not _complete(entry):
        return None
    try:
        with _cache_lock(shared=True, create=False):
            return _open(entry) if takes_tokens(requested, _backend_of(entry)) else None
    except (OSError, PackcliError):
        return None


def discard(key: str) -> None:
    """Remove an entry (``pack`` does, once it has used it); a cache it cannot write is left as it is."""
    try:
        with _cache_lock(shared=False, create=False):
            _remove(cache_root() / key)
    except (OSError, PackcliError):
        pass


def _complete(entry: Path) -> bool:
    """Whether an entry is complete and of this packcli: not one written by a packcli that did not count documents
    per file, name its backend, number each document's record or count what this one counts (replaced when saved
    again)."""
    if not all((entry / name).is_file() for name in (_COMPLETE, "file_documents.npy", "records.npy", _BACKEND)):
        return False
    try:
        counted = json.loads((entry / _COMPLETE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(counted, dict) and set(counted) == {field.name for field in fields(ReadCounts)}


def _open(entry: Path) -> Tokenized | None:
    """Open a complete entry and mark it used now (eviction goes by last use)."""
    if not _complete(entry):
        return None
    store = TokenStore.reopen(entry / "tokens")
    with suppress(OSError):  # a read-only cache still serves; its entries just age by creation
        os.utime(entry)
    counts = ReadCounts(**json.loads((entry / _COMPLETE).read_text()))
    backend = json.loads((entry / _BACKEND).read_text())
    lengths, records = np.load(entry / "lengths.npy"), np.load(entry / "records.npy")
    return Tokenized(store, lengths, counts, np.load(entry / "file_documents.npy"), records, backend)


def _backend_of(entry: Path) -> str | None:
    """The tokenizer backend that encoded a complete entry (None: no record of it)."""
    try:
        backend = json.loads((entry / _BACKEND).read_text())
    except (OSError, ValueError):
        return None
    return backend.get("backend") if isinstance(backend, dict) else None


@contextmanager
def _cache_lock(shared: bool, create: bool) -> Iterator[None]:
    """Hold the cache lock; ``create`` makes the cache directory first (an error naming PACKCLI_CACHE if it
    cannot)."""
    root = cache_root()
    lock = FileLock(root / _LOCK_NAME)
    try:
        if create:
            root.mkdir(parents=True, exist_ok=True)
        lock.acquire(shared=shared)
    except OSError as exc:
        raise _unusable(exc) from None
    try:
        yield
    finally:
        lock.release()


def _evict(limit: int, keep: Path) -> None:
    """Remove the least recently used entries, other than ``keep``, until the cache holds at most ``limit`` bytes."""
    entries = [path for path in cache_root().iterdir() if path.is_dir() and not path.name.startswith(".")]
    sizes = {path: sum(f.stat().st_size for f in path.iterdir() if f.is_file()) for path in entries}
    total = sum(sizes.values())
    for path in sorted(entries, key=lambda path: path.stat().st_mtime_ns):
        if total <= limit:
            break
        if path != keep:
            _remove(path)
            total -= sizes[path]


def _remove_abandoned() -> None:
    """Remove temporary directories whose run died (their claim lock is free). Called under the cache lock."""
    for temporary in cache_root().glob(f"{_TEMPORARY_PREFIX}*"):
        if temporary in _claims:
            continue
        claim = FileLock(temporary / _LOCK_NAME)
        try:
            if not claim.acquire(wait=False):
                continue
        except OSError:
            continue
        _remove(temporary)
        claim.release()


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _unusable(exc: OSError) -> PackcliError:
    return PackcliError(
        f"cannot use the tokenization cache ({exc.strerror or exc}): set PACKCLI_CACHE to a writable directory",
        cache_root(),
    )
