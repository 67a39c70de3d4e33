"""Writing rows: every row holds exactly its pieces' tokens, whatever the batch and shard boundaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.store import TokenStore
from packcli.format.columns import IGNORE_INDEX
from packcli.format.manifest import read_manifest
from packcli.format.schema import shard_schema
from packcli.format.shards import read_shard
from packcli.write import rows
from packcli.write.layout import Rows


def store_of(path: Path, tokens: np.ndarray, mask: np.ndarray | None = None) -> TokenStore:
    store = TokenStore(path, with_mask=mask is not None)
    store.append(tokens, mask)
    store.finish()
    return store


def read_rows(directory: Path) -> list[dict[str, list[int]]]:
    out: list[dict[str, list[int]]] = []
    for shard in sorted(directory.glob("*.arrow")):
        out += read_shard(shard).to_pylist()
    return out


@pytest.mark.parametrize("shard_size", [10**9, 300])
def test_rows_hold_their_pieces_across_batches_and_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_size: int
) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, size=60).astype(np.int64)
    tokens = rng.integers(0, 50_000, size=int(lengths.sum())).astype(np.int32)
    starts = np.cumsum(lengths) - lengths
    order = rng.permutation(len(lengths)).astype(np.int64)
    offsets = np.arange(0, len(lengths) + 1, 3, dtype=np.int64)  # 3 pieces a row
    monkeypatch.setattr(rows, "BATCH_BYTES", 200)  # many record batches
    store = store_of(tmp_path / "tokens", tokens)
    placed = Rows.packed(starts, lengths, np.arange(len(lengths)), order, offsets)
    shards = rows.write_rows(tmp_path, store.gather, None, placed, shard_schema({}), shard_size)
    store.remove()
    written = read_rows(tmp_path)
    assert (len(shards) > 1) == (shard_size == 300)
    assert sum(shard.rows for shard in shards) == len(written) == len(offsets) - 1
    for k, row in enumerate(written):
        docs = order[offsets[k] : offsets[k + 1]]
        assert row["input_ids"] == [int(t) for d in docs for t in tokens[starts[d] : starts[d] + lengths[d]]]
        assert row["position_ids"] == [p for d in docs for p in range(lengths[d])]
        assert row["cu_seqlens"] == [0, *np.cumsum(lengths[docs]).tolist()]


def test_the_next_batch_is_gathered_on_a_helper_thread_and_its_error_stops_the_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write phase uses two threads: the store is read for the next batch while this one is written. A read
    that fails is raised as it was, after the batch before it, and leaves no shard behind."""
    import threading

    lengths = np.full(40, 5, dtype=np.int64)
    tokens = np.arange(200, dtype=np.int32)
    starts = np.cumsum(lengths) - lengths
    monkeypatch.setattr(rows, "BATCH_BYTES", 100)  # a batch or two per row
    store = store_of(tmp_path / "tokens", tokens)
    placed = Rows.packed(starts, lengths, np.arange(40), np.arange(40, dtype=np.int64), np.arange(41, dtype=np.int64))
    gathered: list[str] = []

    def gather(where: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        gathered.append(threading.current_thread().name)
        if len(gathered) == 7:
            raise OSError("the token store is shorter than expected")
        return store.gather(where, sizes)

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OSError, match="shorter than expected"):
        rows.write_rows(out, gather, None, placed, shard_schema({}), 10**9)
    assert len(gathered) == 7 and all(name.startswith("packcli-gather") for name in gathered)
    assert list(out.iterdir()) == []
    shards = rows.write_rows(out, store.gather, None, placed, shard_schema({}), 10**9)
    store.remove()
    assert sum(shard.rows for shard in shards) == 40
    assert [row["input_ids"] for row in read_rows(out)] == [list(range(5 * k, 5 * k + 5)) for k in range(40)]


def test_labels_follow_the_mask_and_supervision_is_counted(tmp_path: Path) -> None:
    tokens = np.arange(1, 9, dtype=np.int32)
    mask = np.array([0, 1, 1, 0, 0, 0, 0, 1], dtype=bool)  # no document's first token: it never takes loss
    store = store_of(tmp_path / "tokens", tokens, mask)
    supervision = rows.Supervision()
    placed = Rows(np.arange(4), np.array([0, 3, 6]), np.array([3, 3, 2]), np.arange(3), np.zeros(3), np.ones(3))
    schema = shard_schema({}, labels=True)
    rows.write_rows(tmp_path, store.gather, store.gather_mask, placed, schema, 10**9, supervision)
    store.remove()
    labels = [row["labels"] for row in read_rows(tmp_path)]
    assert labels[1] == [IGNORE_INDEX] * 3  # no supervised token in the second piece
    assert [t for row in labels for t in row if t != IGNORE_INDEX] == [2, 3, 8]
    assert supervision.unsupervised_sequences == 1
    assert supervision.supervised_tokens == 3


def test_no_position_ids_leaves_that_column_out_and_every_other_as_it_was(
    tiny_corpus: Path, packed_text: Path, tmp_path: Path
) -> None:
    """``--no-position-ids`` on a real corpus: the same rows less ``position_ids``, fewer bytes, the manifest's
    ``columns`` and options say so, another fingerprint; ``datasets`` reads the shard as it is. The default writes
    the manifest as before the flag existed (no ``position_ids`` key among its options)."""
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "lean"
    args = ["pack", str(tiny_corpus), "--max-len", "512", "--shard-size", "100KB", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(app, [*args, "--no-position-ids"])
    assert result.exit_code == 0, result.output
    full, lean = read_manifest(packed_text), read_manifest(out)
    assert full["columns"] == ["input_ids", "position_ids", "cu_seqlens"] and "position_ids" not in full["options"]
    assert lean["columns"] == ["input_ids", "cu_seqlens"] and lean["options"]["position_ids"] is False
    assert lean["fingerprint"] != full["fingerprint"]
    assert lean["totals"] == full["totals"]

    def rows_of(packed: Path, manifest: dict[str, Any]) -> pa.Table:
        return pa.concat_tables([read_shard(packed / shard["file"]) for shard in manifest["shards"]])

    assert rows_of(out, lean).equals(rows_of(packed_text, full).drop_columns(["position_ids"]))
    assert sum(s["bytes"] for s in lean["shards"]) < sum(s["bytes"] for s in full["shards"])
    dataset = datasets.Dataset.from_file(str(out / lean["shards"][0]["file"]))
    assert dataset.column_names == ["input_ids", "cu_seqlens"] and len(dataset) == lean["shards"][0]["rows"]
