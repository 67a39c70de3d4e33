"""``-`` as an INPUT: standard input, spooled to a temporary file for the length of one command.

Packing reads its inputs more than once (a bad record is re-read by the line parser that names it; a JSON file is
sniffed for an array first), so a pipe cannot be read in place. The spool's name takes its format from the first
bytes (gzip, zstd, bzip2 and xz magic; Parquet's ``PAR1``; Arrow's ``ARROW1`` or stream marker; JSON otherwise),
messages name it ``<stdin>``, and the run identity knows it by the sha256 of its bytes: the same bytes piped twice
are the same input, so a rerun is "up to date" and ``stats -`` leaves tokens that ``pack -`` reuses. The spool is
removed when the command ends, and one that a killed run left is removed by the next run that spools.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from packcli.errors import PackcliError, UsageError, named_as
from packcli.write.locks import FileLock

__all__ = ["STDIN", "STDIN_NAME", "spool_digest", "spooled_stdin"]

STDIN = "-"  # the INPUT that means standard input
STDIN_NAME = "<stdin>"  # how messages and the manifest name it
_CHUNK = 1 << 20
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
_digests: dict[Path, str] = {}  # spool -> sha256 of its bytes, while its command runs


@contextmanager
def spooled_stdin(specs: Sequence[str], partitioned: bool = False) -> Iterator[list[str]]:
    """``specs`` with ``-`` replaced by a spool of standard input (removed on exit); unchanged without ``-``.

    Raises:
        UsageError: ``-`` is given twice, standard input is a terminal (nothing piped in), or the run is partitioned
            (partitions read their inputs by path, possibly on other machines).
    """
    if STDIN not in specs:
        yield list(specs)
        return
    if list(specs).count(STDIN) > 1:
        raise UsageError(f"{STDIN} (standard input) is given more than once; it can be read only once")
    if partitioned:
        raise UsageError(f"{STDIN} (standard input) cannot be cut into partitions: save it to a file and pass the file")
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(
            f"{STDIN} reads standard input, but nothing is piped in: e.g. zcat corpus.jsonl.gz | packcli pack -"
        )
    directory, lock = _new_spool_directory()
    spool = directory / "stdin"
    try:
        spool, digest = _spool(sys.stdin.buffer, directory)
        _digests[spool] = digest
        with named_as(spool, STDIN_NAME):
            yield [str(spool) if spec == STDIN else spec for spec in specs]
    finally:
        _digests.pop(spool, None)
        shutil.rmtree(directory, ignore_errors=True)
        lock.release()


def spool_digest(path: Path) -> str | None:
    """The sha256 of a spool of standard input; None for any other file."""
    return _digests.get(path)


def _new_spool_directory() -> tuple[Path, FileLock]:
    """A directory ``$TMPDIR/packcli-stdin-*`` for this run's spool, locked while the run lives. Spools of runs that
    died (kill -9) are removed first: their locks died with them. The directory is locked before it gets the name
    that other runs look for, so none can mistake a new spool for a dead one."""
    root = Path(tempfile.gettempdir()).resolve()
    for dead in root.glob(f"{_PREFIX}*"):
        stale = FileLock(dead / _LOCK_NAME)
        try:
            if not stale.acquire(wait=False):
                continue  # a live run's spool
        except OSError:  # another user's, or removed meanwhile
            continue
        shutil.rmtree(dead, ignore_errors=True)
        stale.release()
    fresh = Path(tempfile.mkdtemp(prefix=f".{_PREFIX}new-", dir=root))
    lock = FileLock(fresh / _LOCK_NAME)
    lock.acquire()
    directory = fresh.rename(root / fresh.name.replace(f".{_PREFIX}new-", _PREFIX))
    return directory, lock


def _spool(stream: BinaryIO, directory: Path) -> tuple[Path, str]:
    """Copy ``stream`` into ``directory/stdin.SUFFIX``; (that file, the sha256 of its bytes)."""
    head = stream.read(_CHUNK)
    suffix = next((suffix for magic, suffix in _MAGIC if head.startswith(magic)), ".jsonl")
    spool = directory / f"stdin{suffix}"
    digest = hashlib.sha256()
    try:
        with open(spool, "wb") as out:
            chunk = head
            while chunk:
                digest.update(chunk)
                out.write(chunk)
                chunk = stream.read(_CHUNK)
    except OSError as exc:
        raise PackcliError(f"cannot keep standard input in {directory.parent}: {exc.strerror or exc}") from None
    return spool, digest.hexdigest()
