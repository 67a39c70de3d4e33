"""The loader's local copy of an output on object storage (it memory-maps shards; ``stats``, ``verify``, ``show`` and
``export`` stream them): the manifest and the files it lists, one copy per output URL and fingerprint in a cache.

Invariants: the copy is held to the manifest read from the store on every open: each listed file is there at its
size and sha256, hashed when fetched (before it takes its name) and whenever its size or mtime is not as when last
found intact (``.intact.json``); a file that differs is fetched again with a warning, files only an earlier manifest
listed are removed, and the manifest is written last. The least recently used copies go to keep the cache under its
limit, never one in use (each user holds a shared lock on its ``.in-use.lock``). Each fetch writes a temporary name
of its own, so loaders, ranks and threads may fill one copy together.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import warnings
from contextlib import suppress
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError, UsageError
from packcli.format.integrity import listed_files
from packcli.format.manifest import MANIFEST_NAME, read_manifest, shard_path
from packcli.format.sidecars import entry_files
from packcli.storage.objects import fetch_checked
from packcli.storage.urls import UrlPath, location
from packcli.util.files import canonical_json, file_sha256, write_atomically
from packcli.util.locks import FileLock

__all__ = ["readable_output"]

IN_USE = ".in-use.lock"  # in a copy: held shared by each user, exclusively by whoever removes the copy
INTACT = ".intact.json"  # in a copy: per shard file, the [size, mtime_ns, sha256] it had when last found intact


def readable_output(
    path: str | Path, cache_dir: str | Path | None, limit_bytes: int | None = None, sidecars: bool = False
) -> tuple[Path, FileLock | None]:
    """The local directory of the output at ``path``: itself, or for a URL its copy in ``cache_dir`` (fetching what
    it lacks) with the shared lock that keeps the copy in the cache until the caller releases it.

    Args:
        limit_bytes: keep the cache under this size, removing the least recently used other copies.
        sidecars: fetch the shards' sidecars too (the loader reads them with ``sources=True``).

    Raises:
        UsageError: a URL without a ``cache_dir``.
        PackcliError: not an output, a shard damaged in the store, the output alone over ``limit_bytes``, or no
            room under it without removing copies in use.
    """
    url = location(str(path))
    if not isinstance(url, UrlPath):
        return url, None
    if cache_dir is None:
        raise UsageError(f"{url} is a URL: give cache_dir=DIR, the local directory its shards are fetched into")
    try:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file there, or on its path
        raise UsageError(
            f"cache_dir={cache_dir} is not a directory: give the local directory {url}'s shards go into"
        ) from None
    manifest = read_manifest(url)
    size = sum(int(item["bytes"]) for item in listed_files(manifest, sidecars))
    if limit_bytes is not None and size > limit_bytes:
        raise PackcliError(f"the output's {size:,} bytes exceed the cache limit of {limit_bytes:,} bytes", url)
    local = Path(cache_dir) / hashlib.sha256(f"{url}\n{manifest['fingerprint']}".encode()).hexdigest()[:24]
    in_use = _hold(local)
    try:
        if limit_bytes is not None:
            _evict(Path(cache_dir), keep=local, room=size, limit_bytes=limit_bytes)
        _fill(url, local, manifest, sidecars)
        os.utime(local / MANIFEST_NAME)  # most recently used
    except BaseException:
        in_use.release()
        raise
    return local, in_use


def _fill(url: Path, local: Path, manifest: dict[str, Any], sidecars: bool) -> None:
    """Bring the copy ``local`` to ``manifest``: fetch each file it lacks or holds otherwise than listed (a warning
    where it held another), write the manifest, remove the files only its earlier manifest listed."""
    earlier = _read_json(local / MANIFEST_NAME)
    intact = _read_json(local / INTACT) or {}
    found: dict[str, list[Any]] = {}
    refetched = 0
    for item in listed_files(manifest, sidecars):
        name, path = str(item["file"]), shard_path(local, item["file"])
        state = _state(path)
        if state[:1] == [item["bytes"]]:
            if intact.get(name) == [*state, item["sha256"]]:
                continue  # as it was when last found intact
            if file_sha256(path) == item["sha256"]:
                found[name] = [*state, item["sha256"]]
                continue
        # a complete copy lacked the shard (not a sidecar: a copy may be made without those), or held another
        refetched += bool(state) or (earlier is not None and "rows" in item)
        fetch_checked(shard_path(url, item["file"]), path, item["sha256"])
        found[name] = [*_state(path), item["sha256"]]
    text = canonical_json(manifest)
    rewritten = earlier is not None and earlier != json.loads(text)
    if refetched or rewritten:
        other = "its manifest is another: the output was written again since"
        why = other if rewritten else f"{refetched} shard(s) changed, cut short or missing in it"
        warnings.warn(
            f"{url}: the local copy in {local} differs from the output ({why}): what differs is fetched again",
            UserWarning,
            stacklevel=3,
        )
    if found:
        write_atomically(local / INTACT, canonical_json({**intact, **found}), own_name=True)
    if earlier is None or rewritten:
        write_atomically(local / MANIFEST_NAME, text, own_name=True)  # the commit, last
    if rewritten and earlier is not None:
        for name in _names(earlier) - _names(manifest):  # only the earlier manifest listed them
            with suppress(FileNotFoundError, PackcliError):
                shard_path(local, name).unlink()


def _names(manifest: dict[str, Any]) -> set[str]:
    """The files a copy's own manifest lists, however damaged (what it can tell)."""
    shards = manifest.get("shards")
    return {
        str(item["file"])
        for shard in (shards if isinstance(shards, list) else [])
        if isinstance(shard, dict) and "file" in shard
        for item in entry_files(shard)
    }


def _state(path: Path) -> list[int]:
    """A file's size and mtime (ns), or [] where there is none."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return []
    return [stat.st_size, stat.st_mtime_ns]


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file of the copy, or None where absent or unreadable (the copy is then checked anew)."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _hold(local: Path) -> FileLock:
    """A shared lock on the copy ``local`` (created if absent), taken again if the copy is removed meanwhile."""
    while True:
        local.mkdir(parents=True, exist_ok=True)
        in_use = FileLock(local / IN_USE)
        try:
            in_use.acquire(shared=True)
        except FileNotFoundError:  # removed between mkdir and lock: make it again
            continue
        return in_use


def _evict(cache_dir: Path, keep: Path, room: int, limit_bytes: int) -> None:
    """Remove the least recently used copies not in use until ``room`` more bytes fit under ``limit_bytes``; a
    PackcliError if the copies in use leave no such room."""
    copies = [entry for entry in cache_dir.iterdir() if entry.is_dir() and entry != keep]
    sizes = {entry: _size(entry) for entry in copies}
    used = sum(sizes.values())
    # least recently used first (by the manifest's mtime; a copy without one, incomplete, before all)
    for entry in sorted(copies, key=lambda entry: _state(entry / MANIFEST_NAME)[1:]):
        if used + room <= limit_bytes:
            return
        remover = FileLock(entry / IN_USE)
        try:
            if not remover.acquire(wait=False):
                continue  # a loader or a rank reads it, or fills it
        except FileNotFoundError:  # removed meanwhile by another
            used -= sizes[entry]
            continue
        # one rename first: a loader coming for this copy makes a new one (the lock file leaves with it), never
        # finds one half removed
        doomed = cache_dir / f".removing-{entry.name}-{os.getpid()}-{threading.get_ident()}"
        entry.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        remover.release()
        used -= sizes[entry]
    if used + room > limit_bytes:
        raise PackcliError(
            f"the cache limit of {limit_bytes:,} bytes leaves no room for the output's {room:,} bytes: other copies "
            f"of {used:,} bytes are in use (by loaders or ranks reading them); raise the limit or use another cache",
            cache_dir,
        )


def _size(copy: Path) -> int:
    """The bytes of a copy's files (a file renamed or removed meanwhile counts nothing)."""
    total = 0
    for path in copy.rglob("*"):
        with suppress(FileNotFoundError):
            total += path.stat().st_size if path.is_file() else 0
    return total
