"""What each tool wrote, as a multiset of documents: their count, their tokens, and a hash of each document.

Every output format is read back into documents (each document's token ids, its EOS with it where the format
keeps one), and each document is hashed (blake2b of its ids as uint32), so two outputs hold the same documents,
in any order, when their hash multisets are equal. Readers, one a format:

- `megatron`: the `.bin`/`.idx` pair, one sequence a document (Megatron's `_IndexReader` layout);
- `eos`: flat token files (`.npy` without a header) of OLMo-core and dolma, cut after each EOS, as OLMo-core cuts;
- `ds`: datatrove's `.ds` with its `.ds.index` of document ends;
- `arrow`: Arrow stream files of packed rows, cut by `cu_seqlens` (packcli) or `seq_lengths` (TRL).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}


@dataclass
class Documents:
    """A multiset of documents: how many, how many tokens, and the count of each document's hash."""

    count: int
    tokens: int
    hashes: Counter[bytes]

    def differing(self, other: Documents) -> int:
        """How many documents one side holds that the other does not (0: the same multiset)."""
        return sum(((self.hashes - other.hashes) + (other.hashes - self.hashes)).values())


def collect(documents: Iterable[np.ndarray]) -> Documents:
    hashes: Counter[bytes] = Counter()
    count = tokens = 0
    for ids in documents:
        count += 1
        tokens += len(ids)
        hashes[hashlib.blake2b(ids.astype("<u4").tobytes(), digest_size=8).digest()] += 1
    return Documents(count, tokens, hashes)


def read(kind: str, paths: list[Path], eos: int, dtype: str = "uint16") -> Documents:
    """The documents in PATHS, read as KIND (megatron, eos, ds or arrow)."""
    readers = {"megatron": _megatron, "eos": lambda p: _eos(p, eos, dtype), "ds": lambda p: _ds(p, dtype)}
    reader = readers.get(kind, _arrow)
    return collect(ids for path in sorted(paths) for ids in reader(path))


def _megatron(idx: Path) -> Iterator[np.ndarray]:
    with idx.open("rb") as handle:
        if handle.read(9) != b"MMIDIDX\x00\x00":
            raise SystemExit(f"{idx}: not a Megatron index")
        handle.read(8)  # version
        code = handle.read(1)[0]
        sequences = int(np.frombuffer(handle.read(8), np.uint64)[0])
        handle.read(8)  # document-index count
        lengths = np.frombuffer(handle.read(4 * sequences), np.int32)
    tokens = np.fromfile(idx.with_suffix(".bin"), MEGATRON_DTYPES[code])
    yield from np.split(tokens, np.cumsum(lengths)[:-1]) if sequences else ()


def _eos(path: Path, eos: int, dtype: str) -> Iterator[np.ndarray]:
    tokens = np.fromfile(path, dtype)
    ends = np.flatnonzero(tokens == eos) + 1
    if len(ends) == 0 or ends[-1] != len(tokens):
        ends = np.append(ends, len(tokens))
    yield from (piece for piece in np.split(tokens, ends[:-1]) if len(piece))


def _ds(path: Path, dtype: str) -> Iterator[np.ndarray]:
    tokens = np.fromfile(path, dtype)
    ends = np.fromfile(path.with_name(path.name + ".index"), np.uint64).astype(np.int64)
    yield from np.split(tokens, ends[:-1]) if len(ends) else ()


def _arrow(path: Path) -> Iterator[np.ndarray]:
    with pa.memory_map(str(path)) as source:
        for batch in pa.ipc.open_stream(source):
            ids = batch.column("input_ids")
            names = batch.schema.names
            for row in range(batch.num_rows):
                tokens = ids[row].values.to_numpy()
                if "cu_seqlens" in names:
                    cuts = batch.column("cu_seqlens")[row].values.to_numpy()[1:-1]
                else:
                    cuts = np.cumsum(batch.column("seq_lengths")[row].values.to_numpy())[:-1]
                yield from np.split(tokens, cuts)
