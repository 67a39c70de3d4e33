"""A temporary on-disk token store: tokens are appended as they are produced and memory-mapped for packing,
so peak memory stays O(documents) plus one batch, whatever the corpus' token count."""

from __future__ import annotations

from pathlib import Path

import numpy as np

TOKEN_DTYPE = np.int32


class TokenStore:
    """Append-only int32 token file; :meth:`finish` returns a read-only memory map of everything appended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._file = open(path, "wb")

    def append(self, tokens: np.ndarray) -> int:
        """Append tokens; returns the store offset of the first one."""
        offset = self.count
        self._file.write(np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE).tobytes())
        self.count += len(tokens)
        return offset

    def finish(self) -> np.ndarray:
        """Close for writing and map the file for reading."""
        self._file.close()
        if self.count == 0:
            return np.zeros(0, dtype=TOKEN_DTYPE)
        return np.memmap(self.path, dtype=TOKEN_DTYPE, mode="r", shape=(self.count,))

    def remove(self) -> None:
        """Delete the file (the memory map returned by finish must no longer be used)."""
        self._file.close()
        self.path.unlink(missing_ok=True)
