"""A local copy of an output on object storage, for what reads shards as local files (stats, verify, show, the
loader): ``manifest.json`` and the shards at their manifest paths, in a directory of a cache.

Invariants: a shard is fetched once (a copy of the manifest's size is kept) and, unless told otherwise, checked
against the manifest's sha256 before it takes its name; the manifest is written last, so a copy without one is
incomplete and refetched; a cache directory holds one copy per output URL and fingerprint, and is kept under a size
limit by removing the least recently used copies. A copy in use is never removed: whoever fills or reads it holds a
shared lock on its ``.in-use.lock`` (every process and loader its own, till it lets go), and only a copy whose lock
can be taken exclusively goes; a limit that copies in use leave no room under is refused. Every fetch writes its own
temporary name, so loaders, ranks and threads may fill one copy together.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from packcli.errors import PackcliError, UsageError
from packcli.format.manifest import MANIFEST_NAME, read_manifest, shard_path
from packcli.format.sidecars import entry_files
from packcli.storage.objects import open_object
from packcli.storage.urls import UrlPath, location
from packcli.util.files import canonical_json, temporary_beside, write_atomically
from packcli.util.locks import FileLock

__all__ = ["cached_output", "held_copy", "local_output", "readable_output"]

_COPY_BLOCK = 8 << 20
IN_USE = ".in-use.lock"  # in a copy: held shared by each user, exclusively by whoever removes the copy


def cached_output(
    url: Path, cache_dir: Path, limit_bytes: int | None = None, check: bool = True, sidecars: bool = False
) -> Path:
    """The local copy of the output at ``url`` in ``cache_dir``, fetching what it lacks; nothing holds it after."""
    local, in_use = held_copy(url, cache_dir, limit_bytes, check, sidecars)
    in_use.release()
    return local


def held_copy(
    url: Path, cache_dir: Path, limit_bytes: int | None = None, check: bool = True, sidecars: bool = False
) -> tuple[Path, FileLock]:
    """The local copy of the output at ``url`` in ``cache_dir``, fetching what it lacks, and the shared lock that
    keeps it in the cache until released.

    Args:
        url: an output on object storage.
        cache_dir: where copies are kept (created if absent).
        limit_bytes: keep the cache under this size, removing the least recently used other copies.
        check: refuse a shard whose sha256 differs from the manifest's (``verify`` reports it instead).
        sidecars: fetch the shards' sidecars too (``verify``, ``show``, ``export``; the loader reads none).

    Raises:
        PackcliError: not an output, a shard damaged in the store, the output alone over ``limit_bytes``, or no
            room under it without removing copies in use.
    """
    manifest = read_manifest(url)
    size = sum(int(shard["bytes"]) for shard in manifest["shards"])
    if limit_bytes is not None and size > limit_bytes:
        raise PackcliError(f"the output's {size:,} bytes exceed the cache limit of {limit_bytes:,} bytes", url)
    key = hashlib.sha256(f"{url}\n{manifest['fingerprint']}".encode()).hexdigest()[:24]
    local = cache_dir / key
    in_use = _hold(local)
    try:
        if limit_bytes is not None:
            _evict(cache_dir, keep=local, room=size, limit_bytes=limit_bytes)
        if (local / MANIFEST_NAME).is_file():
            os.utime(local / MANIFEST_NAME)  # most recently used
            return local, in_use
        for item in (item for shard in manifest["shards"] for item in entry_files(shard)[: None if sidecars else 1]):
            path = shard_path(local, item["file"])
            if not (path.is_file() and path.stat().st_size == item["bytes"]):
                _fetch(shard_path(url, item["file"]), path, item["sha256"] if check else None)
        write_atomically(local / MANIFEST_NAME, canonical_json(manifest), own_name=True)  # the commit, last
    except BaseException:
        in_use.release()
        raise
    return local, in_use


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


def _fetch(source: Path, path: Path, sha256: str | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = temporary_beside(path, ".part")  # fillers of one copy never share one
    digest = hashlib.sha256()
    with open_object(str(source)) as stream, os.fdopen(handle, "wb") as copy:
        while block := stream.read(_COPY_BLOCK):
            digest.update(block)
            copy.write(block)
    if sha256 is not None and digest.hexdigest() != sha256:
        partial.unlink()
        raise PackcliError("sha256 differs from the manifest (the object was changed or damaged)", source)
    os.replace(partial, path)


def _evict(cache_dir: Path, keep: Path, room: int, limit_bytes: int) -> None:
    """Remove the least recently used copies not in use until ``room`` more bytes fit under ``limit_bytes``.

    Raises:
        PackcliError: the copies in use leave no such room.
    """
    copies = [entry for entry in cache_dir.iterdir() if entry.is_dir() and entry != keep]
    sizes = {entry: _size(entry) for entry in copies}
    used = sum(sizes.values())
    for entry in sorted(copies, key=_last_use):
        if used + room <= limit_bytes:
            return
        remover = FileLock(entry / IN_USE)
        try:
            if not remover.acquire(wait=False):
                continue  # a loader or a rank reads it, or fills it
        except FileNotFoundError:  # removed meanwhile by another
            used -= sizes[entry]
            continue
        # Out of the way first, in one rename: a loader that comes for this copy meanwhile makes a new one, never
        # finds one half removed (the lock file leaves with it, so a waiter on it takes the new copy's).
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


def _last_use(copy: Path) -> int:
    """When the copy was last opened (its manifest's mtime); 0 for a copy without one (incomplete)."""
    try:
        return (copy / MANIFEST_NAME).stat().st_mtime_ns
    except FileNotFoundError:
        return 0


@contextmanager
def local_output(path: Path, check: bool = True) -> Iterator[Path]:
    """``path`` itself when local; for a URL, a temporary local copy of the output, removed after."""
    if not isinstance(path, UrlPath):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="packcli-remote-") as directory:
        yield cached_output(path, Path(directory), check=check, sidecars=True)


def readable_output(
    path: str | Path, cache_dir: str | Path | None, limit_bytes: int | None = None
) -> tuple[Path, FileLock | None]:
    """The local directory of the output at ``path``: itself, or for a URL its copy in ``cache_dir`` with the
    shared lock that keeps the copy there while it is read (the caller releases it).

    Raises:
        UsageError: a URL without a ``cache_dir``.
    """
    where = location(str(path))
    if not isinstance(where, UrlPath):
        return where, None
    if cache_dir is None:
        raise UsageError(f"{where} is a URL: give cache_dir=DIR, the local directory its shards are fetched into")
    return held_copy(where, Path(cache_dir), limit_bytes)
