"""Opening an input file as a stream of decompressed bytes: plain, gzip, zstd, bzip2 or xz, chosen by the file
name's last suffix (any case). The raw file's position says how far into the file on disk reading has come, for
progress; a damaged compressed stream raises one of ``STREAM_ERRORS`` while it is read, and so do bytes after a
whole stream that are no stream (an append gone wrong): every byte of the file is read or refused, never dropped.
:func:`read_named` turns such an error into one naming where the data broke: after which line, or within how many
bytes.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa

from packcli.errors import PackcliError

__all__ = ["COMPRESSIONS", "MAGIC", "STREAM_ERRORS", "Span", "chunks", "damaged", "open_decompressed", "read_named"]

# Each compression packcli reads: its suffix, its name and the bytes its data begins with (its magic number).
MAGIC = {
    ".gz": ("gzip", b"\x1f\x8b"),
    ".zst": ("zstd", b"\x28\xb5\x2f\xfd"),
    ".bz2": ("bzip2", b"BZh"),
    ".xz": ("xz", b"\xfd7zXZ\x00"),
}
COMPRESSIONS = tuple(MAGIC)

# What reading a truncated or corrupt compressed stream raises (gzip: OSError, EOFError or zlib.error; zstd:
# pa.ArrowInvalid; bzip2: OSError or EOFError; xz: lzma.LZMAError or EOFError).
STREAM_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, pa.ArrowInvalid)

_SKIP_BYTES = 1 << 20  # what a recount of a damaged stream skips at a time, up to where it broke
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


Decompressor = bz2.BZ2Decompressor | lzma.LZMADecompressor
_RAW_BLOCK = io.DEFAULT_BUFFER_SIZE  # what BZ2File and LZMAFile read at a time


class _Streams(io.RawIOBase):
    """The decompressed bytes of a bzip2 or xz file of one stream or more (``cat a.xz b.xz`` makes two), read as
    ``bzcat`` and ``xzcat`` read them: bytes after a whole stream must be another stream, or xz's stream padding (null
    bytes, 4 at a time, after an xz stream, skipped), else reading raises one of ``STREAM_ERRORS`` there, after the
    last byte of the stream before. Python's BZ2File and LZMAFile end the file at such bytes instead, dropping them
    unsaid, and at xz's padding too, dropping every stream after it."""

    def __init__(self, raw: IO[bytes], first: Decompressor, following: Callable[[], Decompressor]) -> None:
        self._raw = raw
        self._decompressor = first
        self._following = following
        self._padded = isinstance(first, lzma.LZMADecompressor)
        self._ended = False
        self._after_stream = False  # the current stream follows a whole one and has given no byte yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as view, view.cast("B") as out:
            data = self._decompressed(len(out))
            out[: len(data)] = data
        return len(data)

    def _decompressed(self, size: int) -> bytes:
        """Up to ``size`` decompressed bytes; b"" only at the file's end."""
        while size and not self._ended:
            if self._decompressor.eof:
                after = self._after_padding(self._decompressor.unused_data or self._raw.read(_RAW_BLOCK))
                if not after:
                    self._ended = True
                    break
                self._decompressor = self._following()
                self._after_stream = True
                try:
                    data = self._decompressor.decompress(after, size)
                except STREAM_ERRORS as exc:
                    raise type(exc)(f"bytes after a whole stream are no stream ({exc})") from None
            elif self._decompressor.needs_input:
                block = self._raw.read(_RAW_BLOCK)
                if not block:
                    ended = "compressed file ended before the end-of-stream marker was reached"
                    if self._after_stream:
                        ended = f"bytes after a whole stream are no stream ({ended})"
                    raise EOFError(ended)
                data = self._decompressor.decompress(block, size)
            else:
                data = self._decompressor.decompress(b"", size)
            if data:
                self._after_stream = False
                return data
        return b""

    def _after_padding(self, after: bytes) -> bytes:
        """The bytes after a stream from the first that is not xz's stream padding on (read on as needed; b"" at the
        file's end); bzip2 has no padding."""
        padding = 0
        while self._padded and after.startswith(b"\0"):
            rest = after.lstrip(b"\0")
            padding += len(after) - len(rest)
            after = rest or self._raw.read(_RAW_BLOCK)
        if padding % 4:
            raise lzma.LZMAError(f"stream padding of {padding:,} null bytes, not a multiple of 4")
        return after


class _NoStream(io.RawIOBase):
    """A compressed file of no bytes: no stream at all, which gzip's and zstd's readers take for an empty text.
    Reading it raises what bzip2's and xz's readers raise there, so it is named as damaged, not packed as nothing."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")


def _decompress(raw: IO[bytes], suffix: str) -> IO[bytes]:
    if suffix in (".gz", ".zst"):
        if not raw.read(1):
            return cast(IO[bytes], io.BufferedReader(_NoStream()))
        raw.seek(0)
    if suffix == ".gz":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw))
    if suffix == ".zst":
        return cast(IO[bytes], io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd")))
    if suffix == ".bz2":
        return cast(IO[bytes], io.BufferedReader(_Streams(raw, bz2.BZ2Decompressor(), bz2.BZ2Decompressor)))
    if suffix == ".xz":  # the first stream may be legacy .lzma, as LZMAFile reads it; xz takes only .xz after it
        following = partial(lzma.LZMADecompressor, lzma.FORMAT_XZ)
        return cast(IO[bytes], io.BufferedReader(_Streams(raw, lzma.LZMADecompressor(), following)))
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


def chunks(stream: IO[bytes], raw: IO[bytes], path: Path, size: int) -> Iterator[bytes]:
    """The decompressed bytes of ``stream`` in pieces of ``size`` (the last shorter), each read by :func:`read_named`,
    which names where damaged compressed data broke."""
    offset = lines = 0
    while chunk := read_named(stream, raw, size, path, lines, offset):
        offset, lines = offset + len(chunk), lines + chunk.count(b"\n")
        yield chunk


def read_named(stream: IO[bytes], raw: IO[bytes], size: int, path: Path, lines_before: int, offset: int) -> bytes:
    """``stream.read(size)``, or the error naming where the compressed data broke: after which line, or within
    how many bytes of the file (those read so far, never more than the file holds). ``offset``: the decompressed
    bytes read before, holding ``lines_before`` line ends."""
    try:
        return stream.read(size)
    except STREAM_ERRORS as exc:
        read = raw.tell()
        raise damaged(path, exc, _whole_lines(path, offset, lines_before), read) from None


def _whole_lines(path: Path, offset: int, lines_before: int) -> int:
    """The line ends a damaged compressed file yields before it breaks. The read that broke lost its decompressed
    bytes with the error, so the stream is read again: its first ``offset`` bytes (``lines_before`` line ends) in
    large steps, then in steps of 4 KiB; a step that breaks may lose what it had decompressed (zstd's does), so
    that last step is read once more a byte at a time."""
    count, step = lines_before, 1 << 12
    while True:
        try:
            with open_decompressed(path) as (stream, _):
                # unbuffered, so that a step asks the decompressor for no more than ``step`` bytes
                source = stream.raw if isinstance(stream, io.BufferedReader) else stream
                left = offset
                while left > 0 and (skipped := source.read(min(left, _SKIP_BYTES))):
                    left -= len(skipped)
                while block := source.read(step):
                    count += block.count(b"\n")
                    offset += len(block)
            return count
        except STREAM_ERRORS:
            if step == 1:
                return count
            step = 1


def damaged(path: Path, exc: Exception, lines_before: int, read: int) -> PackcliError:
    """A compressed stream that cannot be read on: where it broke, as near as the reader knows; or a file named for
    a compression whose data does not begin as that compression's does (a plain file named ``.gz``)."""
    if not lines_before and (misnamed := _not_compressed(path)):
        return misnamed
    where = (
        f"after line {lines_before:,}" if lines_before else f"in its first {read:,} bytes" if read else "at its start"
    )
    return PackcliError(f"the compressed data is damaged or cut short {where}: {exc}", path)


def _not_compressed(path: Path) -> PackcliError | None:
    """The error for ``path`` where its first bytes are neither its compression's magic number nor a cut copy of
    it; None otherwise (an empty file, or one cut inside those bytes, is damaged)."""
    if path.suffix.lower() not in MAGIC:
        return None
    kind, magic = MAGIC[path.suffix.lower()]
    try:
        with path.open("rb") as raw:
            head = raw.read(8)  # the longest magic number, xz's, has 6
    except OSError:
        return None
    if not head or head.startswith(magic) or magic.startswith(head):
        return None
    named = f"is not {kind} data, though named {path.suffix} (it begins with {head!r})"
    for suffix, (other, other_magic) in MAGIC.items():
        if head.startswith(other_magic):
            return PackcliError(f"{named}; it is {other} data: name it {suffix}", path)
    return PackcliError(f"{named}; rename it for what it holds, or compress it", path)
