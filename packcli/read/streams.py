"""Opening an input file as a stream of decompressed bytes: plain, gzip, zstd, bzip2 or xz, chosen by the file
name's last suffix (any case). The raw file's position says how far into the file on disk reading has come, for
progress; a damaged compressed stream raises one of ``STREAM_ERRORS`` while it is read.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa

from packcli.errors import PackcliError

__all__ = ["COMPRESSIONS", "STREAM_ERRORS", "Span", "open_decompressed"]

COMPRESSIONS = (".gz", ".zst", ".bz2", ".xz")

# What reading a truncated or corrupt compressed stream raises (gzip: OSError, EOFError or zlib.error; zstd:
# pa.ArrowInvalid; bzip2: OSError or EOFError; xz: lzma.LZMAError or EOFError).
STREAM_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, pa.ArrowInvalid)

Span = tuple[int, int]  # [start, end) of a file in its own unit: bytes, row groups or record batches


class _ByteRange(io.RawIOBase):
    """The bytes [start, end) of an open file, as a stream of their own."""

    def __init__(self, raw: IO[bytes], start: int, end: int) -> None:
        raw.seek(start)
        self.raw = raw
        self.left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")[: self.left]
        count = self.raw.readinto(view) or 0  # type: ignore[attr-defined]
        self.left -= count
        return count


def _decompress(raw: IO[bytes], suffix: str) -> IO[bytes]:
    if suffix == ".gz":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw))
    if suffix == ".zst":
        return cast(IO[bytes], io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd")))
    if suffix == ".bz2":
        return cast(IO[bytes], bz2.BZ2File(raw))
    if suffix == ".xz":
        return cast(IO[bytes], lzma.LZMAFile(raw))
    return raw


@contextmanager
def open_decompressed(path: Path, span: Span | None = None) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """(decompressed stream, raw file) of ``path``, or of its bytes ``span`` (a plain file only); a file that cannot
    be opened is a PackcliError naming it."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise PackcliError(f"cannot read: {exc.strerror or exc}", path) from None
    with raw:
        if span is not None:
            assert path.suffix.lower() not in COMPRESSIONS, "a compressed file is read whole"
            yield cast(IO[bytes], io.BufferedReader(_ByteRange(raw, *span))), raw
        else:
            yield _decompress(raw, path.suffix.lower()), raw
