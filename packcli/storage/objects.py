"""Object store operations through fsspec: facts, listings, streamed reads, writes and removals (on S3 conditional
ones too: only if absent, or only if still at a version; several objects at once by the store's batch calls).

Invariants: fsspec is imported only here; every failure is a :class:`PackcliError` naming the URL, credentials
scrubbed; listings are never cached (another process may write meanwhile); a stream holds at most ``READ_BLOCK``
bytes; the store's library retries a transient failure, read or write (botocore a 5xx, a throttle, a lost connection;
s3fs a body cut short): packcli adds no retry loop.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from packcli.errors import MissingExtraError, PackcliError, requires_extra
from packcli.util.files import temporary_beside

__all__ = [
    "READ_BLOCK",
    "ObjectInfo",
    "create_object",
    "fetch_checked",
    "filesystem",
    "glob_objects",
    "is_file",
    "object_info",
    "object_sizes",
    "open_object",
    "remove_object_if",
    "remove_objects",
    "replace_object",
    "request",
    "upload_files",
    "write_object",
]

READ_BLOCK = 8 << 20  # bytes a read fetches at once: the memory a stream holds (and a copy writes at once)
# what the store libraries read credentials from; their values never appear in a message
_SECRET_VARIABLES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
)
# the keyword of "only if the object is still at this version tag" (S3's If-Match, the ETag quoted as HTTP does)
_IF_MATCH = {"s3": "IfMatch", "s3a": "IfMatch"}
# the store's answers to a conditional request whose condition failed (another writer came first)
_CONDITION_FAILED = ("PreconditionFailed", "ConditionalRequestConflict")


@dataclass(frozen=True)
class ObjectInfo:
    """What the store says of an object: size, modification time and version tag (ETag, or None)."""

    size: int
    mtime_ns: int
    etag: str | None
    is_dir: bool = False


def filesystem(url: str) -> tuple[Any, str]:
    """(the fsspec filesystem, the path within it) of ``url``; the filesystem keeps no listing cache.

    Raises:
        MissingExtraError: fsspec, or the protocol's library (s3fs, gcsfs, adlfs), is not installed.
    """
    with requires_extra("cloud", f"the URL {url}"):
        import fsspec.core
    try:
        fs, path = fsspec.core.url_to_fs(url, use_listings_cache=False)
        return fs, str(path)
    except ImportError:
        raise MissingExtraError(
            f"the URL {url} needs the library of its protocol, which is not installed: pip install 'packcli[cloud]'"
        ) from None
    except ValueError as exc:
        raise PackcliError(f"not a URL packcli can read: {_scrubbed(exc)}", url) from None


def _scrubbed(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    for secret in filter(None, map(os.environ.get, _SECRET_VARIABLES)):
        text = text.replace(secret, "***")
    return text


@contextmanager
def request(url: str, what: str, writing: bool = False) -> Iterator[tuple[Any, str]]:
    """The filesystem and path of ``url``, the store's errors in the block one line naming it; ``writing`` (a write,
    or a listing) finds no object missing but its bucket."""
    fs, path = filesystem(url)
    try:
        yield fs, path
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
        if isinstance(value, str):
            with suppress(ValueError):
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if isinstance(value, datetime):
            value = value.timestamp()
        if isinstance(value, (int, float)):
            return int(value * 1e9)
    return 0


def object_info(url: str) -> ObjectInfo:
    """The facts of the object (or prefix) at ``url``."""
    with request(url, "cannot read") as (fs, path):
        info = fs.info(path)
    return ObjectInfo(int(info.get("size") or 0), _mtime_ns(info), _tag(info), info.get("type") == "directory")


def is_file(url: str) -> bool:
    """Whether an object is at ``url``: a refusal (a wrong key) raises, where fsspec's ``isfile`` answers False."""
    with request(url, "cannot read") as (fs, path), suppress(FileNotFoundError):
        return bool(fs.info(path).get("type") == "file")
    return False


def glob_objects(url: str) -> list[str]:
    """What the pattern ``url`` matches (objects and prefixes), as URLs, sorted."""
    with request(url, "cannot list") as (fs, path):
        return sorted(fs.unstrip_protocol(match) for match in fs.glob(path))


def object_sizes(url: str) -> dict[str, int]:
    """Every object under the prefix ``url`` (at any depth) by URL, sorted, with its size, from one listing (a
    missing bucket is said). A folder marker (a key ending in ``/``, as a console makes) is no object, nor the prefix
    itself, which s3fs lists when an object appears under it while it looks."""
    with request(url, "cannot list", writing=True) as (fs, path):
        return {
            str(fs.unstrip_protocol(name)): int(info.get("size") or 0)
            for name, info in sorted(fs.find(path, detail=True).items())
            if info["type"] == "file" and not name.endswith("/")
        }


class _NamedFile(io.RawIOBase):
    """The store library's file of an object as a raw stream whose failures name the URL."""

    def __init__(self, file: Any, url: str) -> None:
        self.file, self.url = file, url

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return int(self.file.tell())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self.file.seek(offset, whence))

    def readinto(self, buffer: Any) -> int:
        with request(self.url, "cannot read"):  # an object removed after it was opened too: no raw error
            return int(self.file.readinto(buffer))

    def readall(self) -> bytes:
        """The rest of the object in one request (not the default's 8 KiB at a time)."""
        with request(self.url, "cannot read"):
            return bytes(self.file.read())

    def close(self) -> None:
        self.file.close()
        super().close()


def open_object(url: str) -> IO[bytes]:
    """A buffered, seekable stream of the object at ``url``: the buffer is its only cache, and each read past it
    fetches ``READ_BLOCK`` bytes in one request."""
    with request(url, "cannot read") as (fs, path):
        file = fs.open(path, "rb", block_size=READ_BLOCK, cache_type="none")
        if getattr(file, "details", {}).get("type") == "directory":
            file.close()
            raise IsADirectoryError(path)
    return io.BufferedReader(_NamedFile(file, url), buffer_size=READ_BLOCK)


def write_object(url: str, data: bytes) -> None:
    """Put ``data`` at ``url`` whole: a reader sees the previous object or this one, never a part."""
    with request(url, "cannot write", writing=True) as (fs, path):
        fs.pipe_file(path, data)


def create_object(url: str, data: bytes) -> str | None:
    """Put ``data`` at ``url`` only if no object is there (on a store without conditional writes: PackcliError); the
    new object's version tag ("" where the store names none), or None if an object is there."""
    with request(url, "cannot create", writing=True) as (fs, path):
        _if_match(fs, url)
        try:
            return _written_tag(fs, path, fs.pipe_file(path, data, mode="create"))
        except FileExistsError:
            return None


def replace_object(url: str, data: bytes, tag: str) -> str | None:
    """Put ``data`` at ``url`` only if the object there is still at version ``tag`` (of two writers that read one
    version, one succeeds); the new version tag, or None when the object changed or went."""
    with request(url, "cannot write", writing=True) as (fs, path), _unless_changed() as changed:
        response = fs.pipe_file(path, data, **{_if_match(fs, url): f'"{tag}"'})
    return None if changed else _written_tag(fs, path, response)


def remove_object_if(url: str, tag: str) -> bool:
    """Remove the object at ``url`` only if it is still at version ``tag``; False when it changed or went."""
    with request(url, "cannot remove") as (fs, path), _unless_changed() as changed:
        bucket, key, _ = fs.split_path(path)
        fs.call_s3("delete_object", Bucket=bucket, Key=key, **{_if_match(fs, url): f'"{tag}"'})
    return not changed


@contextmanager
def _unless_changed() -> Iterator[list[bool]]:
    """A conditional request in the block that the store refused because the object changed (or went) is no error:
    the list yielded then holds True."""
    changed: list[bool] = []
    try:
        yield changed
    except OSError as exc:
        response = getattr(exc.__cause__, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        if not (isinstance(exc, FileNotFoundError) or code in _CONDITION_FAILED):
            raise
        changed.append(True)


def _if_match(fs: Any, url: str) -> str:
    """The keyword of a conditional request on ``fs``'s store; refused (PackcliError) for a store without one."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    keyword = next((_IF_MATCH[name] for name in protocols if name in _IF_MATCH), None)
    if keyword is None:
        raise PackcliError(
            f"packcli makes the conditional writes that keep two runs apart on s3:// stores only, not {protocols[0]}://",
            url,
        )
    return keyword


def _written_tag(fs: Any, path: str, response: Any) -> str:
    """The version tag of an object just written: from the store's answer, else from its facts ("" if none)."""
    return (_tag(response) if isinstance(response, dict) else None) or _tag(fs.info(path)) or ""


def upload_files(files: dict[str, str]) -> None:
    """Copy local files to their URLs (``{path: url}``), all in one store, several at once."""
    for url in list(files.values())[:1]:  # none, or the first URL: its store is every URL's
        with request(url, "cannot upload", writing=True) as (fs, _):
            fs.put(list(files), [filesystem(each)[1] for each in files.values()])


def remove_objects(urls: list[str]) -> None:
    """Remove the objects at ``urls`` of one store (absent ones are fine) by its batch call (S3's ``DeleteObjects``);
    a key holding a pattern's characters alone, as the batch would glob it."""
    paths = {filesystem(url)[1]: url for url in urls}
    batch = [path for path in paths if not glob.has_magic(path)]
    if batch:
        with request(urls[0], "cannot remove") as (fs, _):
            fs.rm(batch)
    for path in sorted(set(paths) - set(batch)):
        with request(paths[path], "cannot remove") as (fs, _), suppress(FileNotFoundError):
            fs.rm_file(path)


def fetch_checked(source: Path, path: Path, sha256: str) -> None:
    """Copy the object ``source`` to ``path``, taking the name only once checked against ``sha256``.

    Raises:
        PackcliError: the copy differs from ``sha256``, or the object cannot be read.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = temporary_beside(path, ".part")  # fillers of one copy never share one
    digest = hashlib.sha256()
    try:
        with open_object(str(source)) as stream, os.fdopen(handle, "wb") as copy:
            while block := stream.read(READ_BLOCK):
                digest.update(block)
                copy.write(block)
    except PackcliError:
        partial.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != sha256:
        from packcli.format.integrity import Damage  # here: `packcli --help` loads no numpy (via sidecars)

        partial.unlink()
        raise PackcliError(Damage(source.name, "sha256").problem, source)
    os.replace(partial, path)
