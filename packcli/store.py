"""A temporary on-disk token store: tokens are appended as they are produced and read back piece by piece when
rows are written, so peak memory stays O(documents) plus one batch, whatever the corpus' token count."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from packcli.layout import exclusive_cumsum

TOKEN_DTYPE = np.int32
_TOKEN_BYTES = np.dtype(TOKEN_DTYPE).itemsize


class TokenStore:
    """Append-only int32 token file; after :meth:`finish`, :meth:`gather` reads pieces of it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._file = open(path, "w+b")

    def append(self, tokens: np.ndarray) -> int:
        """Append tokens; returns the store offset of the first one."""
        offset = self.count
        self._file.write(np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE).tobytes())
        self.count += len(tokens)
        return offset

    def finish(self) -> None:
        """Stop appending; the file is complete for reading."""
        self._file.flush()

    def gather(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The tokens of pieces (start, length), concatenated.

        Read with one ``preadv`` per run of pieces that are adjacent both in the store and in the result, straight
        into the result. (A memory map would make much of the store resident: each page fault maps a whole large
        folio, up to 2 MiB, around the document it reads.)
        """
        starts = np.asarray(starts, dtype=np.int64)
        bounds = exclusive_cumsum(lengths)
        tokens = np.empty(int(bounds[-1]), dtype=TOKEN_DTYPE)
        if len(starts) == 0:
            return tokens
        run = np.flatnonzero(np.concatenate(([True], starts[1:] != starts[:-1] + lengths[:-1])))
        run_bounds = np.append(bounds[run], bounds[-1]) * _TOKEN_BYTES
        view = memoryview(tokens).cast("B")
        descriptor = self._file.fileno()
        for offset, first, last in zip((starts[run] * _TOKEN_BYTES).tolist(), run_bounds[:-1].tolist(), run_bounds[1:].tolist()):
            if os.preadv(descriptor, [view[first:last]], offset) != last - first:
                raise OSError(f"token store {self.path} is shorter than expected")
        return tokens

    def remove(self) -> None:
        """Close and delete the file."""
        self._file.close()
        self.path.unlink(missing_ok=True)
