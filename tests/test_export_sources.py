"""``packcli export --sources``: each exported sample's sources, read back as the format's reader reads them (MDS: the
``sources`` column decoded as streaming's ``MDSReader`` decodes a ``json`` column; the other formats: the
``sources.jsonl`` beside them), against the packed output's own source index (the loader's ``sources=True``) and
against the corpus itself: each exported document decodes to the record its sources name. On a partitioned output
with split documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import error_line, read_jsonl, shared_path
from test_export import RUNNER, corpora, decode_mds, export, run  # noqa: F401 (corpora: a fixture)
from tokenizers import Tokenizer

from packcli.cli import app
from packcli.torch import PackedDataset

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning"),
    # under make test (-n 2 --dist loadgroup) the module keeps to one worker: ``parts_packed`` (a partitioned pack
    # starting a worker) is built once, not once on each worker
    pytest.mark.xdist_group("export-sources"),
]


@pytest.fixture(scope="module")
def parts_packed(corpora: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """Long code files in two partitions at --max-len 256: many documents split across rows and partitions."""
    out = tmp_path_factory.mktemp("parts") / "packed"
    run("pack", corpora["code"], "--tokenizer", corpora["tokenizer"], "--max-len", "256", "--partitions", "2",
        "--workers", "1", "--overflow", "split", "--out", out, "--quiet")  # fmt: skip
    assert json.loads((out / "manifest.json").read_text())["totals"]["split_documents"] > 5
    return out


def row_sources(packed: Path) -> list[list[dict[str, Any]]]:
    """Each packed row's documents' sources, as the loader reads the source index."""
    dataset = PackedDataset(packed, shuffle=False, sources=True)
    return [dataset.row(index)["sources"] for index in range(dataset.num_rows)]


def decode_mds_sources(directory: Path) -> list[tuple[Any, np.ndarray]]:
    """(sources, tokens) of each sample of an MDS dataset with columns ``sources`` (json) and ``tokens``
    (ndarray:uint32), decoded as streaming's MDSReader does: the variable columns' sizes, then each column's bytes."""
    index = json.loads((directory / "index.json").read_text())
    samples = []
    for shard in index["shards"]:
        assert shard["column_names"] == ["sources", "tokens"] and shard["column_encodings"] == [
            "json",
            "ndarray:uint32",
        ]
        assert shard["column_sizes"] == [None, None]
        data = (directory / shard["raw_data"]["basename"]).read_bytes()
        assert len(data) == shard["raw_data"]["bytes"] < 1 << 26
        count = int(np.frombuffer(data, np.uint32, 1)[0])
        offsets = np.frombuffer(data, np.uint32, count + 1, 4)
        for start, end in zip(offsets[:-1], offsets[1:]):
            sample = data[start:end]
            sizes = np.frombuffer(sample, np.uint32, 2).tolist()
            assert 8 + sum(sizes) == len(sample)
            text, array = sample[8 : 8 + sizes[0]], sample[8 + sizes[0] :]
            assert array[0] >> 2 == 1  # 1-D
            shape = np.dtype(["uint8", "uint16", "uint32", "uint64"][array[0] & 3])
            length = int(np.frombuffer(array, shape, 1, 1)[0])
            samples.append(
                (json.loads(text.decode("utf-8")), np.frombuffer(array, np.uint32, length, 1 + shape.itemsize))
            )
    return samples


def test_mds_carries_each_rows_sources_in_a_sources_column(parts_packed: Path, tmp_path: Path) -> None:
    summary = export(parts_packed, "mds", tmp_path / "mds", "--sources")
    samples = decode_mds_sources(tmp_path / "mds")
    dataset = PackedDataset(parts_packed, shuffle=False)
    assert len(samples) == dataset.num_rows == summary["totals"]["sequences"]
    assert [tokens.tolist() for _, tokens in samples] == [
        dataset.row(i)["input_ids"].tolist() for i in range(len(samples))
    ]
    assert [sources for sources, _ in samples] == row_sources(parts_packed)
    assert any(entry["pieces"] > 1 for sources, _ in samples for entry in sources)  # split documents' pieces
    record = json.loads((tmp_path / "mds" / "export.json").read_text())
    assert record["options"] == {"sources": True} and record["sources"] == {"column": "sources"}


def test_mds_without_sources_is_unchanged_and_switching_is_another_export(parts_packed: Path, tmp_path: Path) -> None:
    """Without --sources nothing of the export changes (one tokens column, no sources key); asking for them at the
    same --out is another export (options differ), and a rerun with them is up to date."""
    export(parts_packed, "mds", tmp_path / "mds")
    record = json.loads((tmp_path / "mds" / "export.json").read_text())
    assert record["options"] == {} and "sources" not in record and not (tmp_path / "mds" / "sources.jsonl").exists()
    assert len(decode_mds(tmp_path / "mds")) == record["totals"]["sequences"]
    args = ["export", str(parts_packed), "--to", "mds", "--out", str(tmp_path / "mds"), "--sources"]
    refused = RUNNER.invoke(app, args)
    assert refused.exit_code == 1 and "other export options" in error_line(refused.stderr)
    run(*args, "--overwrite")
    again = RUNNER.invoke(app, args)
    assert again.exit_code == 0 and "up to date" in again.stdout


def test_document_formats_write_sources_jsonl_one_line_per_document(
    parts_packed: Path,
    corpora: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """megatron, olmo-core and nanotron have no place for them: ``sources.jsonl``, one line per exported document in
    export order, the same for the three; a split document joined whole lists its pieces 0..n-1, and every document
    decodes to the text of the record its line names."""
    texts = {}
    for fmt in ("megatron", "olmo-core", "nanotron"):
        summary = export(parts_packed, fmt, tmp_path / fmt, "--sources")
        assert summary["sources"] == {"file": "sources.jsonl"}
        assert "sources.jsonl" in [file["file"] for file in summary["files"]]
        texts[fmt] = (tmp_path / fmt / "sources.jsonl").read_text()
    assert texts["megatron"] == texts["olmo-core"] == texts["nanotron"]
    lines = [json.loads(line) for line in texts["nanotron"].splitlines()]
    tokens = np.fromfile(tmp_path / "nanotron" / "packcli.ds", dtype=np.uint16)
    ends = np.fromfile(tmp_path / "nanotron" / "packcli.ds.index", dtype=np.uint64).astype(np.int64)
    assert len(lines) == len(ends) == summary["totals"]["documents"]
    records = read_jsonl(corpora["code"])
    tokenizer = Tokenizer.from_file(str(shared_path("tokenizers/gpt2/tokenizer.json")))
    joined = 0
    for sources, start, end in zip(lines, np.concatenate(([0], ends[:-1])), ends):
        assert [entry["piece"] for entry in sources] == list(range(len(sources)))
        assert {(entry["input"], entry["record"], entry["pieces"]) for entry in sources} == {
            (sources[0]["input"], sources[0]["record"], len(sources))
        }
        assert Path(sources[0]["input"]).name == "code.jsonl"
        document = tokens[start:end].tolist()
        assert tokenizer.decode(document[:-1]) == records[sources[0]["record"] - 1]["text"] and document[-1] == 50256
        joined += len(sources) > 1
    assert joined > 5 and sorted(sources[0]["record"] for sources in lines) == list(range(1, 25))  # each once


def test_bridge_writes_one_line_per_packed_row(parts_packed: Path, tmp_path: Path) -> None:
    summary = export(parts_packed, "bridge", tmp_path / "bridge", "--sources")
    lines = [json.loads(line) for line in (tmp_path / "bridge" / "sources.jsonl").read_text().splitlines()]
    assert len(lines) == summary["totals"]["sequences"] and lines == row_sources(parts_packed)


def test_an_output_without_a_source_index_is_refused_before_anything_is_written(
    corpora: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """An output packed before packcli kept a source index cannot give sources: a usage error saying to repack,
    nothing written; without --sources it exports as before."""
    from conftest import as_packed_before_split_pieces

    packed = tmp_path / "old"
    run("pack", corpora["code"], "--tokenizer", corpora["tokenizer"], "--max-len", "1024", "--out", packed, "--quiet")
    as_packed_before_split_pieces(packed)
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "nanotron", "--out", str(tmp_path / "x"), "--sources"])
    assert result.exit_code == 2 and "no source index" in error_line(result.stderr) and not (tmp_path / "x").exists()
    export(packed, "nanotron", tmp_path / "x")


def test_mds_shards_with_sources_close_as_mdswriter_closes_them(
    parts_packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sources' JSON text counts toward the shard size as MDSWriter counts it (with the column's 4-byte size): a
    small limit makes many shards, each under it, and every sample still decodes to its row and sources."""
    from packcli.export import mds

    monkeypatch.setattr(mds, "SIZE_LIMIT", 1 << 14)
    export(parts_packed, "mds", tmp_path / "mds", "--sources")
    index = json.loads((tmp_path / "mds" / "index.json").read_text())
    assert len(index["shards"]) > 10
    for shard in index["shards"]:
        data = (tmp_path / "mds" / shard["raw_data"]["basename"]).read_bytes()
        count = int(np.frombuffer(data, np.uint32, 1)[0])
        offsets = np.frombuffer(data, np.uint32, count + 1, 4)
        config = json.dumps({key: value for key, value in shard.items() if key not in ("samples", "raw_data", "zip_data")}, sort_keys=True)  # fmt: skip
        counted = 8 + len(config) + int(np.sum(np.diff(offsets) + 4))
        assert counted <= 1 << 14 or count == 1
    samples = decode_mds_sources(tmp_path / "mds")
    assert [sources for sources, _ in samples] == row_sources(parts_packed)
