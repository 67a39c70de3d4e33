"""``UrlPath``: a URL that behaves as a ``Path`` (name, suffix, joining, stat, existence, reading), its file
operations sent to the store. Invariants: ``str()`` is the URL, never with credentials (refused); ``os.fspath`` raises,
so no local file operation runs on a URL by mistake; a plain path or a ``file://`` URL is a plain ``Path``.
"""

from __future__ import annotations

import os
import re
import stat as stat_module
from collections.abc import Generator
from pathlib import Path, PosixPath
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from packcli.errors import UsageError
from packcli.storage import objects

__all__ = ["UrlPath", "file_sizes", "is_url", "location"]

# a scheme of two letters or more (one letter is a Windows drive) followed by "://"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
# what PurePosixPath makes of "scheme://rest": the double slash folded to one
_FOLDED = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


def is_url(spec: str | Path) -> bool:
    """True for a URL packcli reads through fsspec: any ``scheme://`` but ``file://`` (a local path) and ``-``."""
    is_str_url = isinstance(spec, str) and bool(_URL.match(spec)) and not spec.lower().startswith("file://")
    return isinstance(spec, UrlPath) or is_str_url


def location(spec: str) -> Path:
    """Where ``spec`` points: a :class:`UrlPath` for a store URL, else a plain ``Path`` (``file://`` stripped).

    Raises:
        UsageError: a URL carrying a user, password or a query of ``key=value`` pairs (credentials go in the
            environment; a key may hold a ``?`` of its own, or one of a glob).
    """
    if spec.lower().startswith("file://"):  # "?" and "#" are the file name's, as they are a store key's
        parts = urlsplit(spec, allow_fragments=False)
        return Path(unquote(parts.path + ("?" + parts.query if "?" in spec else "")))
    if not is_url(spec):
        return Path(spec)
    parts = urlsplit(spec)
    if parts.username or parts.password or "=" in parts.query:  # a key may hold "?": a signature's is key=value
        raise UsageError(
            f"{parts.scheme}://{parts.hostname or ''}{parts.path}: credentials in a URL are refused; give them "
            "through the environment (AWS_ACCESS_KEY_ID, ...) as the store's library takes them"
        )
    return UrlPath(spec.rstrip("/") if len(spec.rstrip("/")) > len(parts.scheme) + 3 else spec)


class UrlPath(PosixPath):
    """An object or prefix in a store, named by URL; derived paths (``parent``, ``/``) are UrlPaths too."""

    def __str__(self) -> str:
        return _FOLDED.sub(r"\1://", super().__str__(), count=1)

    def __repr__(self) -> str:
        return f"UrlPath({str(self)!r})"

    def __fspath__(self) -> str:
        raise TypeError(f"{self} is a URL: this operation needs a local path")

    def resolve(self, strict: bool = False) -> UrlPath:
        return self

    def absolute(self) -> UrlPath:
        return self

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        """Size and modification time of an object (a prefix: a directory of size 0)."""
        info = objects.object_info(str(self))
        mode = stat_module.S_IFDIR | 0o755 if info.is_dir else stat_module.S_IFREG | 0o644
        ns = info.mtime_ns
        return os.stat_result((mode, 0, 0, 1, 0, 0, info.size, *[ns // 10**9] * 3, *[ns / 1e9] * 3, *[ns] * 3))

    def exists(self, *, follow_symlinks: bool = True) -> bool:
        with objects.request(str(self), "cannot read") as (fs, path):
            return bool(fs.exists(path))

    def is_file(self) -> bool:
        return objects.is_file(str(self))

    def is_dir(self) -> bool:
        with objects.request(str(self), "cannot read") as (fs, path):
            return bool(fs.isdir(path))

    def is_symlink(self) -> bool:
        return False

    def iterdir(self) -> Generator[UrlPath, None, None]:
        """The objects and prefixes directly under it, sorted."""
        with objects.request(str(self), "cannot list") as (fs, path):
            children = sorted(fs.unstrip_protocol(child) for child in fs.ls(path, detail=False))
        yield from (UrlPath(url) for url in children)

    def read_bytes(self) -> bytes:
        """The whole of a small object (a manifest, a lock): s3fs looks up its size, then reads it."""
        with objects.request(str(self), "cannot read") as (fs, path):
            return bytes(fs.cat_file(path))

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def open(  # type: ignore[override]
        self, mode: str = "r", buffering: int = -1, encoding: str | None = None, *args: Any, **kwargs: Any
    ) -> IO[Any]:
        """Read-only: a buffered, seekable stream of the object."""
        if mode != "rb":
            raise ValueError(f"{self}: objects are opened with mode 'rb' only, not {mode!r}")
        return objects.open_object(str(self))


def file_sizes(root: Path) -> dict[str, int]:
    """The files of an output at ``root`` by their names relative to it, with their sizes, from one listing (what
    :mod:`packcli.format.integrity` checks a manifest against): under a URL every object at any depth, in a
    directory its plain files."""
    if not isinstance(root, UrlPath):
        from packcli.format.integrity import directory_sizes  # here: `packcli --help` loads no numpy (via sidecars)

        return directory_sizes(root)
    return {url[len(f"{root}/") :]: size for url, size in objects.object_sizes(str(root)).items()}
