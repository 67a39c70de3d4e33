"""Files written whole or not at all, and a file's sha256: the helpers every writer of packcli shares.

A reader never sees half a file: text goes to ``NAME.tmp``, is fsynced, then renamed over ``NAME``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["canonical_json", "file_sha256", "unwritable", "write_atomically", "write_json"]


def canonical_json(value: Any) -> str:
    """The canonical text of every JSON file packcli writes: sorted keys, two-space indent, a final newline."""
    return json.dumps(value, sort_keys=True, indent=2) + "\n"


def write_atomically(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: temporary file, fsync, rename. Returns ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def write_json(path: Path, value: Any) -> Path:
    """Write ``value`` as canonical JSON, atomically."""
    return write_atomically(path, canonical_json(value))


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of a file's bytes (or an object's, for a URL), read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be opened to write or append, as the system says it (``No such file or directory``), or
    None when it can: checked before a command's work, so that a mistyped file fails at once and not after it."""
    if path.is_dir():
        return os.strerror(errno.EISDIR)
    if path.exists():
        return None if os.access(path, os.W_OK) else os.strerror(errno.EACCES)
    if not path.parent.exists():
        return os.strerror(errno.ENOENT)
    if not path.parent.is_dir():
        return os.strerror(errno.ENOTDIR)
    return None if os.access(path.parent, os.W_OK | os.X_OK) else os.strerror(errno.EACCES)
