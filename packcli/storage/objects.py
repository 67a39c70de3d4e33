"""One object store operation at a time, through fsspec: the filesystem of a URL, an object's facts, reading it
(streamed and retried), listing a prefix, writing and removing objects.

Invariants: fsspec and the protocol libraries are imported only here, under ``requires_extra("cloud")``; every
failure is a :class:`PackcliError` naming the URL, with the values of credential variables scrubbed from the
store's message; listings are never served from a cache (another process may have written since); a read reads at
most ``READ_BLOCK`` bytes at once and retries a transient failure ``READ_ATTEMPTS`` times, backing off.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from packcli.errors import MissingExtraError, PackcliError, requires_extra

__all__ = [
    "READ_ATTEMPTS",
    "READ_BLOCK",
    "ObjectInfo",
    "copy_object",
    "create_object",
    "exists",
    "filesystem",
    "find_objects",
    "glob_objects",
    "is_dir",
    "is_file",
    "list_children",
    "object_info",
    "open_object",
    "read_object",
    "remove_objects",
    "upload_file",
    "write_object",
]

READ_BLOCK = 8 << 20  # bytes a read fetches at once: the memory a stream holds
READ_ATTEMPTS = 5
_BACKOFF_S = 0.2
# what the store libraries read credentials from; their values never appear in a message
_SECRET_VARIABLES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
)
# failures that another attempt cannot mend
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError)


@dataclass(frozen=True)
class ObjectInfo:
    """What the store says of an object: size, modification time and version tag (ETag, or None)."""

    size: int
    mtime_ns: int
    etag: str | None
    is_dir: bool = False


def filesystem(url: str) -> tuple[Any, str]:
    """(the fsspec filesystem, the path within it) of ``url``.

    Raises:
        MissingExtraError: fsspec, or the protocol's library (s3fs, gcsfs, adlfs), is not installed.
    """
    with requires_extra("cloud", f"the URL {url}"):
        import fsspec.core
    try:
        fs, path = fsspec.core.url_to_fs(url)
        return fs, str(path)
    except ImportError:
        raise MissingExtraError(
            f"the URL {url} needs the library of its protocol, which is not installed: pip install 'packcli[cloud]'"
        ) from None
    except ValueError as exc:
        raise PackcliError(f"not a URL packcli can read: {_scrubbed(exc)}", url) from None


def _scrubbed(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    for name in _SECRET_VARIABLES:
        secret = os.environ.get(name)
        if secret:
            text = text.replace(secret, "***")
    return text


@contextmanager
def _named(url: str, what: str, writing: bool = False) -> Iterator[None]:
    """Turn the store's errors into one line naming the URL; ``writing``: a write (or a listing), which finds no
    object missing but its bucket."""
    try:
        yield
    except PackcliError:
        raise
    except FileNotFoundError:
        if writing:
            bucket = url.split("://", 1)[-1].split("/", 1)[0]
            raise PackcliError(f"{what}: the bucket {bucket} does not exist (packcli creates no bucket)", url) from None
        raise PackcliError(f"{what}: no such object or prefix", url) from None
    except PermissionError as exc:
        raise PackcliError(f"{what}: access denied ({_scrubbed(exc)}); check the credentials", url) from None
    except Exception as exc:
        raise PackcliError(f"{what}: {_scrubbed(exc)}", url) from None


def _tag(info: dict[str, Any]) -> str | None:
    for key in ("ETag", "etag", "md5Hash", "content_md5"):
        value = info.get(key)
        if value:
            return str(value).strip('"')
    return None


def _mtime_ns(info: dict[str, Any]) -> int:
    for key in ("LastModified", "last_modified", "mtime", "updated", "created"):
        value = info.get(key)
        if isinstance(value, datetime):
            return int(value.timestamp() * 1e9)
        if isinstance(value, (int, float)):
            return int(value * 1e9)
        if isinstance(value, str):
            try:
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
            except ValueError:
                continue
    return 0


def object_info(url: str) -> ObjectInfo:
    """The facts of the object (or prefix) at ``url``."""
    fs, path = filesystem(url)
    with _named(url, "cannot read"):
        fs.invalidate_cache()
        info = fs.info(path)
    return ObjectInfo(int(info.get("size") or 0), _mtime_ns(info), _tag(info), info.get("type") == "directory")


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    with _named(url, "cannot read"):
        fs.invalidate_cache()
        return bool(fs.exists(path))


def is_file(url: str) -> bool:
    """Whether an object is at ``url``. Only the store's "no such object" is False: a refusal (a wrong key) is
    raised, never taken for an absent object (fsspec's ``isfile`` answers False to any error)."""
    fs, path = filesystem(url)
    with _named(url, "cannot read"):
        fs.invalidate_cache()
        try:
            return bool(fs.info(path).get("type") == "file")
        except FileNotFoundError:
            return False


def is_dir(url: str) -> bool:
    fs, path = filesystem(url)
    with _named(url, "cannot read"):
        fs.invalidate_cache()
        return bool(fs.isdir(path))


def _urls(fs: Any, paths: Any) -> list[str]:
    return sorted(str(fs.unstrip_protocol(path)) for path in paths)


def list_children(url: str) -> list[str]:
    """The objects and prefixes directly under ``url``, as URLs, sorted."""
    fs, path = filesystem(url)
    with _named(url, "cannot list"):
        fs.invalidate_cache()
        return _urls(fs, fs.ls(path, detail=False))


def find_objects(url: str) -> list[str]:
    """Every object under the prefix ``url`` (at any depth), as URLs, sorted; none for an absent prefix (so a
    store that finds nothing to list is missing the bucket, and says so). A folder marker (a zero-byte object whose
    key ends in ``/``, as a store's console makes a folder) is no object, nor the prefix itself, which s3fs lists as
    a directory when an object appears under it while it looks."""
    fs, path = filesystem(url)
    with _named(url, "cannot list", writing=True):
        fs.invalidate_cache()
        found = fs.find(path, detail=True)
        return _urls(fs, [name for name, info in found.items() if info["type"] == "file" and not name.endswith("/")])


def glob_objects(url: str) -> list[str]:
    """What the pattern ``url`` matches (objects and prefixes), as URLs, sorted."""
    fs, path = filesystem(url)
    with _named(url, "cannot list"):
        fs.invalidate_cache()
        return _urls(fs, fs.glob(path))


def read_object(url: str) -> bytes:
    """The whole of a small object (a manifest, a lock)."""
    with open_object(url) as stream:
        return stream.read()


class _RetryingReader(io.RawIOBase):
    """An object as a seekable raw stream: each read fetches one byte range, retried on a transient failure."""

    def __init__(self, fs: Any, path: str, url: str, size: int) -> None:
        self.fs, self.path, self.url, self.size = fs, path, url, size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self.size, self.position + len(view), self.position + READ_BLOCK)
        if end <= self.position:
            return 0
        data = self._fetch(self.position, end)
        view[: len(data)] = data
        self.position += len(data)
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object, fetched ``READ_BLOCK`` bytes at a time (not the default's 8 KiB)."""
        blocks = []
        while block := self.read(READ_BLOCK):
            blocks.append(block)
        return b"".join(blocks)

    def _fetch(self, start: int, end: int) -> bytes:
        for attempt in range(READ_ATTEMPTS):
            try:
                data = self.fs.cat_file(self.path, start=start, end=end)
                if len(data) == end - start:
                    return bytes(data)
                failure: Exception = OSError(f"the store returned {len(data)} of {end - start} bytes")
            except _PERMANENT:
                with _named(self.url, "cannot read"):
                    raise  # named: an object removed after it was opened (a lock released meanwhile) is no raw error
            except Exception as exc:
                failure = exc
            if attempt + 1 < READ_ATTEMPTS:
                time.sleep(_BACKOFF_S * 2**attempt)
        raise PackcliError(
            f"cannot read bytes {start:,}-{end:,} after {READ_ATTEMPTS} attempts: {_scrubbed(failure)}", self.url
        )


def open_object(url: str) -> IO[bytes]:
    """A buffered, seekable stream of the object at ``url``, holding at most ``READ_BLOCK`` bytes."""
    fs, path = filesystem(url)
    with _named(url, "cannot read"):
        fs.invalidate_cache()
        info = fs.info(path)
        if info.get("type") == "directory":
            raise IsADirectoryError(path)
    raw = _RetryingReader(fs, path, url, int(info.get("size") or 0))
    return io.BufferedReader(raw, buffer_size=READ_BLOCK)


def write_object(url: str, data: bytes) -> None:
    """Put ``data`` at ``url`` whole: a reader sees the previous object or this one, never a part."""
    fs, path = filesystem(url)
    with _named(url, "cannot write", writing=True):
        fs.pipe_file(path, data)


def create_object(url: str, data: bytes) -> bool:
    """Put ``data`` at ``url`` only if no object is there (a conditional create); False if one is."""
    fs, path = filesystem(url)
    with _named(url, "cannot create", writing=True):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
    return True


def upload_file(local: str, url: str) -> None:
    """Copy a local file to ``url``."""
    fs, path = filesystem(url)
    with _named(url, "cannot upload", writing=True):
        fs.put_file(local, path)


def copy_object(source: str, url: str) -> None:
    """Copy the object at ``source`` to ``url`` in the same store (the store copies: no byte comes here)."""
    fs, path = filesystem(url)
    with _named(source, "cannot copy"):
        fs.cp_file(filesystem(source)[1], path)


def remove_objects(urls: list[str]) -> None:
    """Remove the objects at ``urls`` (absent ones are fine)."""
    for url in urls:
        fs, path = filesystem(url)
        with _named(url, "cannot remove"), suppress(FileNotFoundError):
            fs.rm_file(path)
