"""A temporary on-disk token store: tokens are appended as they are produced and read back piece by piece when
rows are written, so peak memory stays O(documents) plus one batch, whatever the corpus' token count."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from packcli.util.arrays import exclusive_cumsum

__all__ = ["TokenStore"]

TOKEN_DTYPE = np.int32


class TokenStore:
    """Append-only int32 token file (and, with ``with_mask``, a parallel byte per token: supervised or not);
    after :meth:`finish`, :meth:`gather` reads pieces of it back."""

    def __init__(self, path: Path, with_mask: bool = False) -> None:
        self.path = path
        self.count = 0
        self._file: BinaryIO = open(path, "w+b")  # noqa: SIM115 (lives until remove())
        self.mask_path = path.with_name(path.name + ".mask") if with_mask else None
        self._mask: BinaryIO | None = open(self.mask_path, "w+b") if self.mask_path else None  # noqa: SIM115

    @classmethod
    def reopen(cls, path: Path) -> TokenStore:
        """A finished store on disk (and its mask file, if there is one), for reading."""
        store = cls.__new__(cls)
        store.path = path
        store.count = path.stat().st_size // np.dtype(TOKEN_DTYPE).itemsize
        store._file = open(path, "rb")  # noqa: SIM115 (lives until close() or remove())
        mask_path = path.with_name(path.name + ".mask")
        store.mask_path = mask_path if mask_path.is_file() else None
        store._mask = open(mask_path, "rb") if store.mask_path else None  # noqa: SIM115
        return store

    @property
    def has_mask(self) -> bool:
        """Whether the store keeps a supervision mask (fine-tuning records)."""
        return self._mask is not None

    def append(self, tokens: np.ndarray, mask: np.ndarray | None = None) -> int:
        """Append tokens (and their mask, when the store has one); returns the offset of the first."""
        offset = self.count
        self._file.write(np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE).data)  # the buffer itself, no copy
        if self._mask is not None:
            assert mask is not None and len(mask) == len(tokens)
            self._mask.write(np.ascontiguousarray(mask, dtype=np.uint8).data)
        self.count += len(tokens)
        return offset

    def finish(self) -> None:
        """Stop appending; the files are complete for reading."""
        self._file.flush()
        if self._mask is not None:
            self._mask.flush()

    def gather(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The tokens of pieces (start, length), concatenated."""
        return _read_pieces(self._file, TOKEN_DTYPE, starts, lengths)

    def gather_mask(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The supervision mask (bool) of pieces (start, length), concatenated."""
        assert self._mask is not None
        return _read_pieces(self._mask, np.uint8, starts, lengths).view(bool)

    def close(self) -> None:
        """Close the files, keeping them."""
        for handle in (self._file, self._mask):
            if handle is not None:
                handle.close()

    def remove(self) -> None:
        """Close and delete the files."""
        self.close()
        self.path.unlink(missing_ok=True)
        if self.mask_path is not None:
            self.mask_path.unlink(missing_ok=True)


def _read_pieces(handle: BinaryIO, dtype: type, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Read pieces (start, length) of a flat array file, concatenated.

    One ``preadv`` per run of pieces that are adjacent both in the file and in the result, straight into the
    result. (A memory map would make much of the file resident: each page fault maps a whole large folio, up to
    2 MiB, around the document it reads.)
    """
    item = np.dtype(dtype).itemsize
    starts = np.asarray(starts, dtype=np.int64)
    bounds = exclusive_cumsum(lengths)
    values: np.ndarray = np.empty(int(bounds[-1]), dtype=dtype)
    if len(starts) == 0:
        return values
    run = np.flatnonzero(np.concatenate(([True], starts[1:] != starts[:-1] + lengths[:-1])))
    run_bounds = np.append(bounds[run], bounds[-1]) * item
    view = values.data.cast("B")
    descriptor = handle.fileno()
    for offset, first, last in zip((starts[run] * item).tolist(), run_bounds[:-1].tolist(), run_bounds[1:].tolist()):
        if os.preadv(descriptor, [view[first:last]], offset) != last - first:
            raise OSError(f"{handle.name} is shorter than expected")
    return values
