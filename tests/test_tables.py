"""Parquet and Arrow IPC inputs: columns checked, batches by row group or record batch with their progress position,
bad values named by their 1-based row, conversion while reading, and Hugging Face ``save_to_disk`` folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Field, FieldBatch
from packcli.read.tables import read_arrow, read_parquet

TEXT = [Field("text")]


def read_all(
    path: Path, fields: list[Field] = TEXT, skip: bool = False, convert: Any = None
) -> tuple[list[FieldBatch], list[BadRecordError]]:
    """The batches of a Parquet or Arrow file, and the bad records skipped (raised unless ``skip``)."""
    rejected: list[BadRecordError] = []

    def reject(exc: BadRecordError) -> None:
        if not skip:
            raise exc
        rejected.append(exc)

    read = read_parquet if path.suffix == ".parquet" else read_arrow
    return list(read(path, fields, reject, convert)), rejected


def batches(path: Path, fields: list[Field] = TEXT, skip: bool = False, convert: Any = None) -> list[FieldBatch]:
    return read_all(path, fields, skip, convert)[0]


def write_arrow(path: Path, table: pa.Table, stream: bool = True, max_chunksize: int | None = None) -> Path:
    opener = pa.ipc.new_stream if stream else pa.ipc.new_file
    with opener(str(path), table.schema) as writer:
        writer.write_table(table, max_chunksize=max_chunksize)
    return path


def test_parquet_row_groups_are_batches_with_rising_positions(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(10)], "n": list(range(10))}), path, row_group_size=4)
    found = batches(path)
    assert [batch.columns[0] for batch in found] == [["t0", "t1", "t2", "t3"], ["t4", "t5", "t6", "t7"], ["t8", "t9"]]
    positions = [batch.position for batch in found]
    assert positions == sorted(positions) and positions[-1] == path.stat().st_size


@pytest.mark.parametrize("stream", [True, False])
def test_arrow_stream_and_file_formats_and_large_strings(tmp_path: Path, stream: bool) -> None:
    table = pa.table({"text": pa.array(["a", "b", "c"], type=pa.large_string()), "id": [1, 2, 3]})
    path = write_arrow(tmp_path / "a.arrow", table, stream, max_chunksize=2)
    found = batches(path)
    assert [batch.columns[0] for batch in found] == [["a", "b"], ["c"]]
    assert found[-1].position <= path.stat().st_size


def test_a_bad_value_is_named_by_its_row_across_batches(tmp_path: Path) -> None:
    table = pa.table({"text": ["a", "b", None, "d", "e"]})
    path = write_arrow(tmp_path / "a.arrow", table, max_chunksize=2)
    with pytest.raises(BadRecordError, match=r"a\.arrow:3: field 'text' is null"):
        batches(path)
    found, rejected = read_all(path, skip=True)
    assert [text for batch in found for text in batch.columns[0]] == ["a", "b", "d", "e"]
    assert [exc.line for exc in rejected] == [3]


def test_columns_are_checked_before_any_row(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [1, 2], "body": ["x", "y"]}), path)
    with pytest.raises(PackcliError, match=r"column 'text' is int64, not a string"):
        batches(path)
    with pytest.raises(PackcliError, match=r"no column 'prompt' \(columns: text, body\); use --prompt-field"):
        batches(path, [Field("prompt", flag="--prompt-field")])
    (tmp_path / "b.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(PackcliError, match=r"b\.arrow: cannot read as Arrow IPC"):
        batches(tmp_path / "b.arrow")


def test_a_string_that_is_not_utf8_is_a_bad_record(tmp_path: Path) -> None:
    raw = pa.array([b"fine", b"bad \xff byte", b"also fine"], type=pa.binary())
    strings = raw.view(pa.string())  # Arrow IPC writers need not check UTF-8
    path = write_arrow(tmp_path / "a.arrow", pa.table({"text": strings}))
    with pytest.raises(BadRecordError, match=r"a\.arrow:2: invalid UTF-8 at byte 5"):
        batches(path)
    assert batches(path, skip=True)[0].columns == [["fine", "also fine"]]


def test_messages_are_checked_and_converted_row_by_row(tmp_path: Path) -> None:
    chats = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        [{"role": "robot", "content": "x"}],
    ]
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.table({"messages": chats}), path)
    field = [Field("messages", "messages", "--messages-field")]
    with pytest.raises(BadRecordError, match=r"chat\.parquet:2: message 1 has unknown role 'robot'"):
        batches(path, field)
    found = batches(path, field, skip=True, convert=lambda values: len(values[0]))
    assert found[0].columns == [[2]]


def test_a_saved_hugging_face_dataset_is_packed_from_its_arrow_files(tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    texts = [f"saved document {i}" for i in range(50)]
    dataset = Dataset.from_dict({"text": texts, "id": list(range(50))})
    dataset.save_to_disk(str(tmp_path / "saved"), num_shards=2)
    runner = CliRunner()
    result = runner.invoke(app, ["pack", str(tmp_path / "saved"), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["input_documents"], summary["unread_files"], summary["bad_records"]) == (50, 0, 0)
    assert "warning" not in result.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [Path(entry["path"]).name for entry in manifest["inputs"]] == [
        "data-00000-of-00002.arrow",
        "data-00001-of-00002.arrow",
    ]

    DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(tmp_path / "splits"))
    result = runner.invoke(app, ["pack", str(tmp_path / "splits"), "--out", str(tmp_path / "out2")])
    assert result.exit_code == 1
    assert "is a Hugging Face DatasetDict (splits: test, train); pass one split's folder" in result.stderr
    result = runner.invoke(app, ["pack", str(tmp_path / "splits" / "train"), "--out", str(tmp_path / "out2"), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["input_documents"] == 50


def test_a_cut_arrow_stream_names_the_file(tmp_path: Path) -> None:
    whole = write_arrow(tmp_path / "whole.arrow", pa.table({"text": ["x" * 1000] * 400}), max_chunksize=100)
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(PackcliError, match=r"cut\.arrow: the Arrow data is damaged or cut short after 1 record batch"):
        batches(cut)


TEXTS = ["first", "second", None, "first", "third"]  # a null is a bad record whatever the column's type
STRING_COLUMNS = {
    "large_string": pa.array(TEXTS, pa.large_string()),
    "string_view": pa.array(TEXTS, pa.string_view()),  # polars writes text so
    "dictionary": pa.array(TEXTS)
    .dictionary_encode()
    .cast(pa.dictionary(pa.int16(), pa.string())),  # pandas Categorical
    "large_dictionary": pa.array(TEXTS, pa.large_string()).dictionary_encode(),
}


@pytest.mark.parametrize("kind", sorted(STRING_COLUMNS))
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_every_kind_of_string_column_is_read_as_a_plain_one(tmp_path: Path, kind: str, suffix: str) -> None:
    """A ``string_view`` or ``dictionary<string>`` text column was refused ("column 'text' is dictionary<...>, not a
    string"): polars writes the one, pandas' Categorical comes back from Parquet as the other. Each is read as its
    plain string values, into the same shards; a column of another type is still refused."""
    runner = CliRunner()
    shards = {}
    for name, column in (("plain", pa.array(TEXTS)), (kind, STRING_COLUMNS[kind])):
        path = tmp_path / f"{name}{suffix}"
        table = pa.table({"text": column, "prompt": column, "response": column})
        pq.write_table(table, path) if suffix == ".parquet" else write_arrow(path, table, max_chunksize=2)
        assert [text for batch in batches(path, skip=True) for text in batch.columns[0]] == [
            "first",
            "second",
            "first",
            "third",
        ]
        for flags in (["--skip-bad-records"], ["--prompt-field", "prompt", "--response-field", "response"]):
            out = tmp_path / f"out-{name}-{flags[0]}"
            result = runner.invoke(app, ["pack", str(path), "--out", str(out), "--skip-bad-records", *flags])
            assert result.exit_code == 0, result.stderr
            shards[name, flags[0]] = (out / "shard-00000.arrow").read_bytes()
    for flags in ("--skip-bad-records", "--prompt-field"):
        assert shards[kind, flags] == shards["plain", flags]
    numbers = tmp_path / f"numbers{suffix}"
    table = pa.table({"text": pa.array([1, 2]).dictionary_encode()})
    pq.write_table(table, numbers) if suffix == ".parquet" else write_arrow(numbers, table)
    with pytest.raises(PackcliError, match=r"column 'text' is .*int64.*, not a string"):
        batches(numbers)


def test_a_stream_cut_at_a_record_batch_boundary_is_said_to_be_maybe_cut(tmp_path: Path) -> None:
    """An Arrow IPC stream cut exactly after a record batch read as whole (exit 0, half its rows, verify OK): the
    format lets a stream end without its end-of-stream marker, but every pyarrow writer (``datasets``' among them)
    writes one, so a file without it is named in a warning, and still read."""
    table = pa.table({"text": [f"doc {i}" for i in range(200)]})
    sink = pa.BufferOutputStream()
    ends = []
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=20):
            writer.write_batch(batch)
            ends.append(sink.tell())
    whole = tmp_path / "whole.arrow"
    whole.write_bytes(sink.getvalue().to_pybytes())
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(whole.read_bytes()[: ends[4]])
    runner = CliRunner()
    result = runner.invoke(app, ["pack", str(cut), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["input_documents"] == 100
    warning = f"{cut}: no end-of-stream marker: it may be cut short after 5 record batch(es)"
    assert result.stderr.count(warning) == 1, result.stderr
    result = runner.invoke(app, ["pack", str(tmp_path / "*.arrow"), "--out", str(tmp_path / "both"), "--json"])
    assert result.exit_code == 0 and result.stderr.count("no end-of-stream marker") == 1, result.stderr
    assert str(whole) not in result.stderr
    file_format = write_arrow(tmp_path / "file.arrow", table, stream=False)  # its footer says where it ends
    result = runner.invoke(app, ["pack", str(file_format), "--out", str(tmp_path / "file"), "--json"])
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
