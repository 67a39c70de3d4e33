"""A local copy of an output on object storage, for what reads shards as local files (stats, verify, show, the
loader): ``manifest.json`` and the shards at their manifest paths, in a directory of a cache.

Invariants: a shard is fetched once (a copy of the manifest's size is kept) and, unless told otherwise, checked
against the manifest's sha256 before it takes its name; the manifest is written last, so a copy without one is
incomplete and refetched; a cache directory holds one copy per output URL and fingerprint, and is kept under a size
limit by removing the least recently used copies (never the one being read).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packcli.errors import PackcliError, UsageError
from packcli.format.manifest import MANIFEST_NAME, read_manifest, shard_path, write_manifest
from packcli.storage.objects import open_object
from packcli.storage.urls import UrlPath, location

__all__ = ["cached_output", "local_output", "readable_output"]

_COPY_BLOCK = 8 << 20


def cached_output(url: Path, cache_dir: Path, limit_bytes: int | None = None, check: bool = True) -> Path:
    """The local copy of the output at ``url`` in ``cache_dir``, fetching what it lacks.

    Args:
        url: an output on object storage.
        cache_dir: where copies are kept (created if absent).
        limit_bytes: keep the cache under this size, removing the least recently used other copies.
        check: refuse a shard whose sha256 differs from the manifest's (``verify`` reports it instead).

    Raises:
        PackcliError: not an output, a shard damaged in the store, or the output alone over ``limit_bytes``.
    """
    manifest = read_manifest(url)
    size = sum(int(shard["bytes"]) for shard in manifest["shards"])
    if limit_bytes is not None and size > limit_bytes:
        raise PackcliError(f"the output's {size:,} bytes exceed the cache limit of {limit_bytes:,} bytes", url)
    key = hashlib.sha256(f"{url}\n{manifest['fingerprint']}".encode()).hexdigest()[:24]
    local = cache_dir / key
    local.mkdir(parents=True, exist_ok=True)
    if limit_bytes is not None:
        _evict(cache_dir, keep=local, room=size, limit_bytes=limit_bytes)
    if (local / MANIFEST_NAME).is_file():
        os.utime(local / MANIFEST_NAME)  # most recently used
        return local
    for shard in manifest["shards"]:
        path = shard_path(local, shard["file"])
        if not (path.is_file() and path.stat().st_size == shard["bytes"]):
            _fetch(shard_path(url, shard["file"]), path, shard["sha256"] if check else None)
    write_manifest(local, manifest)
    return local


def _fetch(source: Path, path: Path, sha256: str | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")  # ranks filling one cache each write their own
    digest = hashlib.sha256()
    with open_object(str(source)) as stream, open(partial, "wb") as copy:
        while block := stream.read(_COPY_BLOCK):
            digest.update(block)
            copy.write(block)
    if sha256 is not None and digest.hexdigest() != sha256:
        partial.unlink()
        raise PackcliError("sha256 differs from the manifest (the object was changed or damaged)", source)
    os.replace(partial, path)


def _evict(cache_dir: Path, keep: Path, room: int, limit_bytes: int) -> None:
    """Remove the least recently used copies until ``room`` more bytes fit under ``limit_bytes``."""
    copies = [entry for entry in cache_dir.iterdir() if entry.is_dir() and entry != keep]
    sizes = {entry: sum(f.stat().st_size for f in entry.rglob("*") if f.is_file()) for entry in copies}
    used = sum(sizes.values())

    def last_use(entry: Path) -> int:
        manifest = entry / MANIFEST_NAME
        return manifest.stat().st_mtime_ns if manifest.is_file() else 0

    for entry in sorted(copies, key=last_use):
        if used + room <= limit_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        used -= sizes[entry]


@contextmanager
def local_output(path: Path, check: bool = True) -> Iterator[Path]:
    """``path`` itself when local; for a URL, a temporary local copy of the output, removed after."""
    if not isinstance(path, UrlPath):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="packcli-remote-") as directory:
        yield cached_output(path, Path(directory), check=check)


def readable_output(path: str | Path, cache_dir: str | Path | None, limit_bytes: int | None = None) -> Path:
    """The local directory of the output at ``path``: itself, or for a URL its copy in ``cache_dir``.

    Raises:
        UsageError: a URL without a ``cache_dir``.
    """
    where = location(str(path))
    if not isinstance(where, UrlPath):
        return where
    if cache_dir is None:
        raise UsageError(f"{where} is a URL: give cache_dir=DIR, the local directory its shards are fetched into")
    return cached_output(where, Path(cache_dir), limit_bytes)
