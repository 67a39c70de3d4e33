"""Reading inputs: formats, discovery, bad records named by file and line, empty texts counted."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_jsonl

from packcli.errors import BadRecordError, PackcliError
from packcli.read.fields import Field, ReadCounts
from packcli.read.inputs import find_inputs, read_records


def texts_of(path: Path, skip: bool = False, field: str = "text") -> tuple[list[str], ReadCounts, list[str]]:
    counts, warnings = ReadCounts(), []
    batches = read_records(path, [Field(field)], counts, skip, warnings.append)
    texts = [text for batch in batches for text in batch.columns[0]]
    return texts, counts, warnings


RECORDS = [
    {"text": "alpha", "id": 1},
    {"text": "", "id": 2},
    {"text": "gamma\nwith <|endoftext|>", "meta": {"x": [1]}},
]


@pytest.mark.parametrize("name", ["a.jsonl", "a.json", "a.jsonl.gz"])
def test_jsonl_formats(tmp_path: Path, name: str) -> None:
    path = write_jsonl(tmp_path / name, RECORDS, compress=name.endswith(".gz"))
    texts, counts, _ = texts_of(path)
    assert texts == ["alpha", "", "gamma\nwith <|endoftext|>"]  # empty texts are the documents' concern
    assert counts.bad_records == 0


def test_zstd_json_array_parquet_arrow(tmp_path: Path) -> None:
    table = pa.table({"text": ["one", "two", ""], "n": [1, 2, 3]})
    zst = tmp_path / "a.jsonl.zst"
    with pa.output_stream(str(zst), compression="zstd") as out:
        out.write(b'{"text": "one"}\n{"text": "two"}\n')
    (tmp_path / "b.json").write_text('[{"text": "one"}, {"text": "two"}]')
    pq.write_table(table, tmp_path / "c.parquet")
    with pa.ipc.new_stream(str(tmp_path / "d.arrow"), table.schema) as writer:
        writer.write_table(table)
    with pa.ipc.new_file(str(tmp_path / "e.arrow"), table.schema) as writer:
        writer.write_table(table)
    for path in sorted(tmp_path.iterdir()):
        assert [text for text in texts_of(path)[0] if text] == ["one", "two"], path


def test_find_inputs_dirs_globs_and_errors(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    b = write_jsonl(tmp_path / "sub" / "b.jsonl", RECORDS)
    a = write_jsonl(tmp_path / "a.jsonl", RECORDS)
    (tmp_path / "notes.txt").write_text("not an input")
    assert find_inputs([str(tmp_path)]).files == [a.resolve(), b.resolve()]
    assert find_inputs([str(tmp_path / "**" / "*.jsonl"), str(a)]).files == [a.resolve(), b.resolve()]
    with pytest.raises(PackcliError, match="no such file"):
        find_inputs([str(tmp_path / "missing.jsonl")])
    with pytest.raises(PackcliError, match="unsupported input format"):
        find_inputs([str(tmp_path / "notes.txt")])
    with pytest.raises(PackcliError, match="matches this pattern"):
        find_inputs([str(tmp_path / "*.parquet")])


BAD_LINES = [
    (b'{"text": "ok"}\n\n{"text": "broken"\n', 3, "invalid JSON"),
    (b'{"text": "ok"}\n{"body": "x"}\n', 2, "no field 'text'"),
    (b'{"text": "ok"}\n{"text": 5}\n', 2, "is int, not a string"),
    (b'{"text": "ok"}\n{"text": null}\n', 2, "field 'text' is null"),
    (b'{"text": "ok"}\n{"text": "a\xffb"}\n', 2, "invalid UTF-8"),
    (b'{"text": "ok"}\n[1, 2]\n', 2, "not an object"),
]


@pytest.mark.parametrize("content,line,message", BAD_LINES)
def test_bad_record_names_file_and_line(tmp_path: Path, content: bytes, line: int, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(BadRecordError, match=message) as info:
        texts_of(path)
    assert (info.value.path, info.value.line) == (str(path), line)
    assert str(info.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("content,line,message", BAD_LINES)
def test_skip_bad_records_counts_them(tmp_path: Path, content: bytes, line: int, message: str) -> None:
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(content + b'{"text": "after"}\n'))
    texts, counts, warnings = texts_of(path, skip=True)
    assert texts == ["ok", "after"]
    assert counts.bad_records == 1 and len(warnings) == 1 and f":{line}: " in warnings[0]


def test_bad_record_after_many_good_ones_keeps_every_good_one(tmp_path: Path) -> None:
    good = [{"text": f"document {i} " + "x" * 200} for i in range(30_000)]  # several pyarrow blocks
    path = write_jsonl(tmp_path / "big.jsonl", [*good, {"text": 7}, {"text": "last"}])
    texts, counts, _ = texts_of(path, skip=True)
    assert texts == [r["text"] for r in good] + ["last"]
    assert counts.bad_records == 1


def test_parquet_without_the_field_and_with_nulls(tmp_path: Path) -> None:
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(PackcliError, match=r"no column 'text' \(columns: body\); use --text-field"):
        texts_of(tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": ["x", None, "z"]}), tmp_path / "b.parquet")
    with pytest.raises(BadRecordError, match=r"b\.parquet:2: field 'text' is null"):
        texts_of(tmp_path / "b.parquet")
    assert texts_of(tmp_path / "b.parquet", skip=True)[0] == ["x", "z"]
    assert texts_of(tmp_path / "a.parquet", field="body")[0] == ["x"]
