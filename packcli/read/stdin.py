"""``-`` as an INPUT: standard input, spooled to a temporary file for the length of one command.

Packing reads its inputs more than once (a bad record is re-read by the line parser that names it; a JSON file is
sniffed for an array first), so a pipe cannot be read in place. The spool's name takes its format from the first
bytes (gzip, zstd, bzip2 and xz magic; Parquet's ``PAR1``; Arrow's ``ARROW1`` or stream marker; JSON otherwise),
messages name it ``<stdin>``, and the run identity knows it by the sha256 of its bytes: the same bytes piped twice
are the same input, so a rerun is "up to date" and ``stats -`` leaves tokens that ``pack -`` reuses. The spool is
a temporary directory, ``$TMPDIR/packcli-stdin-*``, removed when the command ends (an error, Ctrl-C, SIGTERM and
SIGHUP included); only a run killed outright (kill -9) leaves it there, for the system's cleaning of ``$TMPDIR``.

The spool is a value, a :class:`~packcli.read.inputs.Spool`, handed to the run (``stdin=``): its input takes its
name and identity from it. Errors raised and warnings given while it lives name ``<stdin>``, never the temporary file.
"""

from __future__ import annotations

import hashlib
import os
import select
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packcli.errors import PackcliError, UsageError
from packcli.read.inputs import Spool
from packcli.read.streams import MAGIC

__all__ = ["STDIN", "STDIN_NAME", "Spooled", "spooled_stdin"]

STDIN = "-"  # the INPUT that means standard input
STDIN_NAME = "<stdin>"  # how messages and the manifest name it

_CHUNK = 1 << 20
_WAIT_S = 0.2  # the longest a signal waits while standard input is idle
_PREFIX = "packcli-stdin-"  # $TMPDIR/packcli-stdin-*: one run's spool
_MAGIC = (  # first bytes -> the spool's suffix, which picks the reader
    *((magic, f".jsonl{suffix}") for suffix, (_, magic) in MAGIC.items()),
    (b"PAR1", ".parquet"),
    (b"ARROW1", ".arrow"),
    (b"\xff\xff\xff\xff", ".arrow"),  # an Arrow IPC stream (continuation marker)
)
_MAGIC_BYTES = max(len(magic) for magic, _ in _MAGIC)

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
    root = Path(os.environ.get("TMPDIR") or tempfile.gettempdir())  # read now: tempfile keeps the first it found
    try:
        scratch = tempfile.TemporaryDirectory(prefix=_PREFIX, dir=root.resolve(strict=True), ignore_cleanup_errors=True)
    except OSError as exc:
        raise PackcliError(f"cannot keep standard input in {root} (TMPDIR): {exc.strerror or exc}") from None
    with scratch as directory:
        spool = Spool(*_spool(sys.stdin.buffer, Path(directory)), STDIN_NAME)
        files = [str(spool.path) if spec == STDIN else spec for spec in specs]
        try:
            yield Spooled(files, spool, lambda message: warn(spool.named(message)))
        except PackcliError as exc:
            spool.rename(exc)
            raise


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
