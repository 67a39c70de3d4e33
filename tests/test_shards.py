"""Shard writing: the format invariants on real Arrow files, roll-over, atomicity under failure."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.encode.store import TokenStore
from packcli.format.schema import shard_schema
from packcli.format.shards import ShardWriter, read_shard
from packcli.options import Overflow
from packcli.packing.overflow import apply_overflow
from packcli.strategies import run_strategy
from packcli.write.layout import Rows
from packcli.write.rows import write_rows


def write_case(
    directory: Path, lengths: np.ndarray, max_len: int, shard_size: int, strategy: str = "bfd"
) -> list[pa.Table]:
    """Pack lengths whose store holds tokens 0, 1, 2, ...: each token's value is its own store position."""
    store = TokenStore(directory / "tokens.tmp")
    store.append(np.arange(int(lengths.sum()), dtype=np.int32))
    store.finish()
    pieces, _ = apply_overflow(lengths, max_len, Overflow.split)
    packing = run_strategy(strategy, pieces.length, max_len)
    rows = Rows.packed(pieces.start, pieces.length, pieces.document, packing.order, packing.offsets)
    shards = write_rows(directory, store.gather, None, rows, shard_schema({"k": "v"}), shard_size)
    store.remove()
    return [read_shard(directory / shard.file) for shard in shards]


@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=80),
    max_len=st.integers(1, 32),
    shard_size=st.sampled_from([64, 1000, 1 << 20]),
    strategy=st.sampled_from(["bfd", "ffd", "greedy"]),
)
@settings(max_examples=60, deadline=None)
def test_format_invariants(lengths: list[int], max_len: int, shard_size: int, strategy: str) -> None:
    directory = Path(tempfile.mkdtemp(prefix="packcli-shards-"))  # fresh per example: a replay reuses its inputs
    try:
        tables = write_case(directory, np.array(lengths), max_len, shard_size, strategy)
    finally:
        shutil.rmtree(directory)
    seen = []
    for table in tables:
        for ids, positions, cu in zip(
            *(table.column(name).to_pylist() for name in ("input_ids", "position_ids", "cu_seqlens"))
        ):
            assert 1 <= len(ids) <= max_len
            assert cu[0] == 0 and cu[-1] == len(ids) and all(a < b for a, b in zip(cu, cu[1:]))
            for start, end in zip(cu, cu[1:]):
                assert positions[start:end] == list(range(end - start))  # restart exactly at each document
                assert ids[start:end] == list(range(ids[start], ids[start] + end - start))  # one contiguous piece
            seen.extend(ids)
    assert sorted(seen) == list(range(sum(lengths)))  # every token exactly once


def test_shards_roll_over_and_are_readable_by_datasets(tmp_path: Path) -> None:
    from datasets import Dataset

    tables = write_case(tmp_path, np.full(400, 50), 128, shard_size=20_000)
    assert len(tables) > 3
    files = sorted(tmp_path.glob("shard-*.arrow"))
    assert [f.name for f in files] == [f"shard-{i:05d}.arrow" for i in range(len(tables))]
    assert all(f.stat().st_size < 2 * 20_000 for f in files)
    dataset = Dataset.from_file(str(files[0]))
    assert dataset.column_names == ["input_ids", "position_ids", "cu_seqlens"]
    assert dataset[0]["input_ids"] == tables[0].column("input_ids")[0].as_py()
    assert read_shard(files[0]).schema.metadata == {b"k": b"v"}


def test_failed_write_removes_every_shard_and_propagates(tmp_path: Path) -> None:
    schema = shard_schema({})
    batch = pa.RecordBatch.from_pylist([{"input_ids": [1], "position_ids": [0], "cu_seqlens": [0, 1]}], schema=schema)
    with pytest.raises(RuntimeError, match="disk on fire"), ShardWriter(tmp_path, schema, shard_size=1) as writer:
        writer.write(batch, 1, 1, 10)
        writer.write(batch, 1, 1, 10)  # rolls over: shard 0 is final now
        assert (tmp_path / "shard-00000.arrow").exists()
        raise RuntimeError("disk on fire")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ahead, sync", [(1 << 12, 1 << 12), (1 << 30, 1 << 30)])
def test_the_checksum_is_the_files_with_hashing_and_flushing_beside_the_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: int, sync: int
) -> None:
    """Small limits: the writer waits on the hash thread and flushes early many times; large: neither happens."""
    from packcli.format import shards

    monkeypatch.setattr(shards, "HASH_AHEAD", ahead)
    monkeypatch.setattr(shards, "SYNC_BYTES", sync)
    schema = shard_schema({})
    with ShardWriter(tmp_path, schema, shard_size=1 << 30) as writer:
        for k in range(40):
            tokens = np.arange(k * 1000, (k + 1) * 1000, dtype=np.int32)
            rows = [{"input_ids": tokens.tolist(), "position_ids": list(range(1000)), "cu_seqlens": [0, 1000]}]
            writer.write(pa.RecordBatch.from_pylist(rows, schema=schema), 1, 1000, 8_000)
    [info] = writer.shards
    data = (tmp_path / info.file).read_bytes()
    assert len(data) == info.bytes > 40 * 8_000 > 64 * (1 << 12)
    assert hashlib.sha256(data).hexdigest() == info.sha256
    assert read_shard(tmp_path / info.file).column("input_ids").to_pylist()[39][:2] == [39_000, 39_001]
