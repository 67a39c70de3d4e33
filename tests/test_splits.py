"""``split_pieces``: each shard's sidecar names exactly the pieces of split documents it holds, where they are; the
manifest stays O(shards) whatever the number of pieces, on every engine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import listed_split_pieces, shared_path, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from s3_server import S3Server
from typer.testing import CliRunner

from packcli.cli import app
from packcli.format.shards import ShardInfo
from packcli.options import Overflow
from packcli.packing.order import shuffle_rows
from packcli.packing.overflow import apply_overflow
from packcli.strategies import run_strategy
from packcli.write.layout import Rows
from packcli.write.splits import split_pieces

runner = CliRunner()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    max_len=st.integers(1, 16),
    seed=st.integers(0, 5),
    cuts=st.lists(st.integers(0, 100), max_size=4),
)
def test_every_piece_of_every_split_document_is_listed_once_where_it_lies(
    lengths: list[int], max_len: int, seed: int, cuts: list[int]
) -> None:
    pieces, _ = apply_overflow(np.array(lengths), max_len, Overflow.split)
    packing = shuffle_rows(run_strategy("bfd", pieces.length, max_len, seed, None), seed)
    rows = len(packing)
    bounds = sorted({0, rows, *(cut % (rows + 1) for cut in cuts)})
    shards = [ShardInfo(f"shard-{k:05d}.arrow", end - start, 0, 0, 0, "") for k, (start, end) in enumerate(zip(bounds[:-1], bounds[1:]))]  # fmt: skip
    entries = split_pieces(
        Rows.packed(pieces.start, pieces.length, pieces.document, packing.order, packing.offsets), shards
    )
    found: dict[int, list[int]] = {}
    for shard_index, shard_entries_ in enumerate(entries):
        first_row = bounds[shard_index]
        for row, index, document, piece, stored_at in shard_entries_.tolist():
            assert 0 <= row < shards[shard_index].rows
            assert stored_at == packing.offsets[first_row + row] + index  # the piece's entry in the rows
            assert int(pieces.document[packing.order[stored_at]]) == document
            found.setdefault(document, []).append(piece)
    split = [n for n, length in enumerate(lengths) if length > max_len]
    assert sorted(found) == split
    for document in split:
        assert sorted(found[document]) == list(range(-(-lengths[document] // max_len)))


ENGINES = {"plain": [], "partitions": ["--partitions", "2", "--workers", "2"]}


@pytest.mark.parametrize("engine", [*ENGINES, "s3"])
def test_thousands_of_split_documents_leave_the_manifest_small_on_every_engine(
    engine: str, tmp_path: Path, s3_server: S3Server
) -> None:
    """bigbench_sft at --max-len 32 splits thousands of documents into tens of thousands of pieces: inline, the
    manifest held 2 MB of them; in the shards' sidecars it stays under 64 KiB, and the output verifies."""
    corpus = shared_path("data/bigbench_sft.jsonl")
    out = s3_server.bucket() + "/packed" if engine == "s3" else str(tmp_path / "packed")
    options = ENGINES.get(engine, ENGINES["partitions"])
    result = runner.invoke(app, ["pack", str(corpus), "--max-len", "32", "--out", out, "--quiet", *options])
    assert result.exit_code == 0, result.output
    local = tmp_path / "copy"
    if engine == "s3":
        s3_server.filesystem().get(out, str(local), recursive=True)
    else:
        local = Path(out)
    manifest_bytes = (local / "manifest.json").read_bytes()
    manifest = json.loads(manifest_bytes)
    assert manifest["totals"]["split_documents"] > 2_000
    assert len(manifest_bytes) < 64 << 10
    listed = [entry for shard in manifest["shards"] for entry in listed_split_pieces(local, shard)]
    totals = manifest["totals"]
    assert len(listed) == totals["documents"] - totals["input_documents"] + totals["split_documents"]
    assert all("split_pieces" not in shard for shard in manifest["shards"])
    verified = runner.invoke(app, ["verify", out])
    assert verified.exit_code == 0, verified.output


def test_each_later_piece_records_whether_its_first_token_is_supervised_in_the_whole_record(tmp_path: Path) -> None:
    """Labels given with the ids, spans of one token included, cut every 4 tokens: each listed
    piece's ``first_supervised`` is its record's label there (1 unless -100), 0 for a first piece; int8, after the
    digest. An output without labels has no such column."""
    labels = [
        [-100, 2, -100, -100, 5, -100, -100, -100, 9, -100, 11],  # one-token spans at the cuts (4 and 8)
        [-100, -100, -100, -100, 5, 6, 7, 8, -100, 10],  # a one-token gap at 8
        [1, 2, 3, 4, 5, 6, 7, 8, 9],
    ]
    records = [{"ids": list(range(1, len(row) + 1)), "labels": row} for row in labels]
    corpus = write_jsonl(tmp_path / "ids.jsonl", records * 3)
    args = ["--ids-field", "ids", "--eos-id", "0", "--max-len", "4", "--overflow", "split"]
    for name, extra in [("labelled", ["--labels-field", "labels"]), ("plain", [])]:
        result = runner.invoke(app, ["pack", str(corpus), *args, *extra, "--out", str(tmp_path / name), "--quiet"])
        assert result.exit_code == 0, result.output
    out = tmp_path / "labelled"
    manifest = json.loads((out / "manifest.json").read_text())
    found = []
    for shard in manifest["shards"]:
        table = pa.ipc.open_stream((out / shard["sidecars"]["split_pieces"]["file"]).read_bytes()).read_all()
        assert table.schema.names[4:] == ["digest", "first_supervised"]
        assert table.schema.field("first_supervised").type == pa.int8()
        for (_, _, document, piece), first in zip(
            listed_split_pieces(out, shard), table["first_supervised"].to_pylist()
        ):
            record = labels[document % len(labels)]  # documents are numbered from 0 in input order
            found.append((first, int(piece > 0 and record[piece * 4] != -100)))
    assert len(found) == 3 * 9 and all(first == expected for first, expected in found)
    assert {first for first, _ in found} == {0, 1}
    plain = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    for shard in plain["shards"]:
        schema = pa.ipc.open_stream(
            (tmp_path / "plain" / shard["sidecars"]["split_pieces"]["file"]).read_bytes()
        ).schema
        assert schema.names == ["row", "index", "document", "piece", "digest"]
