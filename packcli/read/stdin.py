"""``-`` as an INPUT: standard input, spooled to a temporary file for the length of one command.

Packing reads its inputs more than once (a bad record is re-read by the line parser that names it; a JSON file is
sniffed for an array first), so a pipe cannot be read in place. The spool's name takes its format from the first
bytes (gzip, zstd, bzip2 and xz magic; Parquet's ``PAR1``; Arrow's ``ARROW1`` or stream marker; JSON otherwise),
messages name it ``<stdin>``, and the run identity knows it by the sha256 of its bytes: the same bytes piped twice
are the same input, so a rerun is "up to date" and ``stats -`` leaves tokens that ``pack -`` reuses. The spool is
removed when the command ends, and one that a killed run left is removed by the next run that spools.

The spool is a value, a :class:`~packcli.read.inputs.Spool`, handed to the run (``stdin=``): its input takes its
name and identity from it. Errors raised and warnings given while it lives name ``<stdin>``, never the temporary file.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packcli.errors import PackcliError, UsageError
from packcli.read.inputs import Spool
from packcli.util.locks import FileLock

__all__ = ["STDIN", "STDIN_NAME", "Spooled", "spooled_stdin"]

STDIN = "-"  # the INPUT that means standard input
STDIN_NAME = "<stdin>"  # how messages and the manifest name it

_CHUNK = 1 << 20
_WAIT_S = 0.2  # the longest a signal waits while standard input is idle
_PREFIX = "packcli-stdin-"  # $TMPDIR/packcli-stdin-*: one run's spool and its lock
_LOCK_NAME = "lock"
_MAGIC = (  # first bytes -> the spool's suffix, which picks the reader
    (b"\x1f\x8b", ".jsonl.gz"),
    (b"\x28\xb5\x2f\xfd", ".jsonl.zst"),
    (b"BZh", ".jsonl.bz2"),
    (b"\xfd7zXZ\x00", ".jsonl.xz"),
    (b"PAR1", ".parquet"),
    (b"ARROW1", ".arrow"),
    (b"\xff\xff\xff\xff", ".arrow"),  # an Arrow IPC stream (continuation marker)
)
_MAGIC_BYTES = max(len(magic) for magic, _ in _MAGIC)
_SPOOL_NAMES = frozenset({"stdin.jsonl", *(f"stdin{suffix}" for _, suffix in _MAGIC)})

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Spooled:
    """The INPUTs with ``-`` replaced by the spool's path, the spool (None without ``-``), and the command's warning
    callback naming the spool ``<stdin>``."""

    files: list[str]
    spool: Spool | None
    warn: Warn


@contextmanager
def spooled_stdin(
    specs: Sequence[str], partitioned: bool = False, warn: Warn = lambda message: None
) -> Iterator[Spooled]:
    """``specs`` with ``-`` replaced by a spool of standard input (removed on exit); unchanged without ``-``.

    A :class:`PackcliError` raised in the block, and a warning given through the yielded ``warn``, name the spool
    ``<stdin>``.

    Raises:
        UsageError: ``-`` is given twice, standard input is a terminal or closed (nothing piped in), or the run is
            partitioned (partitions read their inputs by path, possibly on other machines; the command makes
            ``--partitions 1`` on the local engine the plain run before it asks).
        PackcliError: standard input cannot be kept in ``$TMPDIR``.
    """
    if STDIN not in specs:
        yield Spooled(list(specs), None, warn)
        return
    if list(specs).count(STDIN) > 1:
        raise UsageError(f"{STDIN} (standard input) is given more than once; it can be read only once")
    if partitioned:
        raise UsageError(
            f"{STDIN} (standard input) cannot be cut into partitions or sent to workers (with {STDIN}, --partitions 1 "
            "is the plain run, in this process): save it to a file and pass the file"
        )
    if sys.stdin is None or sys.stdin.isatty():
        state = "closed" if sys.stdin is None else "a terminal"
        raise UsageError(
            f"{STDIN} reads standard input, which is {state}: pipe a corpus in (zcat corpus.jsonl.gz | packcli pack -)"
        )
    directory, lock = _new_spool_directory()
    try:
        spool = Spool(*_spool(sys.stdin.buffer, directory), STDIN_NAME)
        files = [str(spool.path) if spec == STDIN else spec for spec in specs]
        try:
            yield Spooled(files, spool, lambda message: warn(spool.named(message)))
        except PackcliError as exc:
            spool.rename(exc)
            raise
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        lock.release()


def _new_spool_directory() -> tuple[Path, FileLock]:
    """A directory ``$TMPDIR/packcli-stdin-*`` (mode 0700) for this run's spool, locked while the run lives, after
    removing the spools of runs that died. It is locked before it gets the name that other runs look for, so none
    can mistake a new spool for a dead one."""
    root = Path(os.environ.get("TMPDIR") or tempfile.gettempdir())
    try:
        root = root.resolve(strict=True)
        _remove_dead_spools(root)
        fresh = Path(tempfile.mkdtemp(prefix=f".{_PREFIX}new-", dir=root))
    except OSError as exc:
        raise PackcliError(f"cannot keep standard input in {root} (TMPDIR): {exc.strerror or exc}") from None
    lock = FileLock(fresh / _LOCK_NAME)
    lock.acquire()
    directory = fresh.rename(root / fresh.name.replace(f".{_PREFIX}new-", _PREFIX))
    return directory, lock


def _remove_dead_spools(root: Path) -> None:
    """Remove what runs killed outright (kill -9) left: this user's own spool directories (mode 0700, holding only
    a lock file and a spool) whose lock is free, since a lock dies with its run. Anything else of that name, another
    user's, a symbolic link, a folder of the user's own, is never touched."""
    for candidate in root.glob(f"{_PREFIX}*"):
        try:
            info = candidate.lstat()
            if not (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700):
                continue
            names = {entry.name for entry in os.scandir(candidate)}
            if not (names <= {_LOCK_NAME, *_SPOOL_NAMES} and stat.S_ISREG((candidate / _LOCK_NAME).lstat().st_mode)):
                continue
        except OSError:  # removed meanwhile, or unreadable
            continue
        stale = FileLock(candidate / _LOCK_NAME)
        if stale.acquire(wait=False):  # the run that made it is gone
            shutil.rmtree(candidate, ignore_errors=True)
            stale.release()


def _spool(stream: BinaryIO, directory: Path) -> tuple[Path, str]:
    """Copy ``stream`` into ``directory/stdin.SUFFIX``; (that file, the sha256 of its bytes)."""
    chunks = _chunks(stream)
    head = b""
    for chunk in chunks:  # enough bytes to tell the format
        head += chunk
        if len(head) >= _MAGIC_BYTES:
            break
    suffix = next((suffix for magic, suffix in _MAGIC if head.startswith(magic)), ".jsonl")
    spool = directory / f"stdin{suffix}"
    digest = hashlib.sha256(head)
    try:
        with open(spool, "wb") as out:
            out.write(head)
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise PackcliError(
            f"cannot keep standard input in {directory.parent} (TMPDIR): {exc.strerror or exc}"
        ) from None
    return spool, digest.hexdigest()


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    """The bytes of ``stream`` as they arrive. A pipe is waited on in short steps: a signal that the kernel hands to
    another thread (pyarrow's pool is running) would otherwise wait for the main thread's read to return, which
    an idle writer never makes happen."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # an in-memory stream
        yield from iter(lambda: stream.read(_CHUNK), b"")
        return
    while True:
        if select.select([fd], [], [], _WAIT_S)[0]:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return
            yield chunk
