"""Files written whole or not at all, and a file's sha256: the helpers every writer of packcli shares.

A reader never sees half a file: text goes to ``NAME.tmp``, is fsynced, then renamed over ``NAME``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "canonical_json",
    "file_sha256",
    "temporary_beside",
    "unwritable",
    "why_absent",
    "write_atomically",
    "write_json",
]


def canonical_json(value: Any) -> str:
    """The canonical text of every JSON file packcli writes: sorted keys, two-space indent, a final newline."""
    return json.dumps(value, sort_keys=True, indent=2) + "\n"


def write_atomically(path: Path, text: str, own_name: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically: temporary file, fsync, rename. Returns ``path``. ``own_name``: the
    temporary file is this writer's own (:func:`temporary_beside`), for a file that several processes or threads
    may write at once (the last rename wins); else it is ``NAME.tmp``, which an output's cleanup knows."""
    if own_name:
        handle, tmp = temporary_beside(path, ".tmp")
        file = os.fdopen(handle, "w", encoding="utf-8")
    else:
        tmp = path.with_name(path.name + ".tmp")
        file = open(tmp, "w", encoding="utf-8")  # noqa: SIM115
    with file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    return path


def temporary_beside(path: Path, suffix: str) -> tuple[int, Path]:
    """A new file of this writer's own beside ``path`` (its descriptor and name), to be renamed over it: writers of
    one file never share a temporary one. Readable by all, as ``open`` would make it."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=suffix)
    os.fchmod(handle, 0o644)
    return handle, Path(name)


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


def why_absent(path: Path) -> str:
    """Why ``path`` names nothing to read, as an error says it: a loop of symbolic links, a link to nothing, or
    the system's reason (no such file or directory; permission denied on the way)."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        if exc.errno == errno.ENOENT and path.is_symlink():
            return "a link to nothing"
        return (exc.strerror or str(exc)).lower()
    return "no such file or directory"  # gone since it was looked for
