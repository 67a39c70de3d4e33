"""Reading inputs: formats, discovery, bad records named by file and line, empty texts counted."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import error_line, shared_path, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
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
    (b'{"text": "ok"}\n{"text": 5}\n', 2, "is a number, not a string"),
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


def mixed_directory(root: Path) -> Path:
    """The issue's folder: one file per compression and spelling, plus files packcli does not read."""
    import bz2
    import lzma

    data = root / "data"
    data.mkdir()
    body = {name: "".join(f'{{"text": "{name} {i}"}}\n' for i in range(3)).encode() for name in "abcde"}
    (data / "a.jsonl.gz").write_bytes(gzip.compress(body["a"]))
    (data / "b.jsonl.bz2").write_bytes(bz2.compress(body["b"]))
    (data / "c.JSONL").write_bytes(body["c"])
    (data / "d.ndjson").write_bytes(body["d"])
    (data / "e.jsonl.xz").write_bytes(lzma.compress(body["e"]))
    (data / "README.md").write_text("about the corpus")
    (data / "sub").mkdir()
    (data / "sub" / "table.csv").write_text("text\nx\n")
    return data


def test_a_mixed_directory_is_read_whole_and_what_is_not_read_is_named(tmp_path: Path) -> None:
    data = mixed_directory(tmp_path)
    warnings: list[str] = []
    found = find_inputs([str(data)], warnings.append)
    assert [path.name for path in found.files] == ["a.jsonl.gz", "b.jsonl.bz2", "c.JSONL", "d.ndjson", "e.jsonl.xz"]
    assert found.unread == [data / "README.md", data / "sub" / "table.csv"]
    assert len(warnings) == 1 and "2 file(s) found in the inputs are not read" in warnings[0]
    assert f"{data / 'README.md'}, {data / 'sub' / 'table.csv'}" in warnings[0]
    for path in found.files:
        assert len(texts_of(path)[0]) == 3, path

    result = CliRunner().invoke(app, ["pack", str(data), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["input_documents"], summary["unread_files"]) == (15, 2)
    assert "README.md" in result.stderr and "table.csv" in result.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["totals"]["unread_files"] == 2


def test_a_pipe_or_a_broken_link_found_in_the_inputs_is_named_not_read(tmp_path: Path) -> None:
    """A pipe named like a corpus (``b.jsonl``) found by a directory walk or a glob is not opened (a run waited on it
    forever), nor is a link to nowhere (a raw ``[Errno 2]``): each is counted and named as a file not read, as a
    glob did not (it dropped them silently)."""
    import os

    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [{"text": "alpha"}])
    os.mkfifo(data / "b.jsonl")
    (data / "c.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (data / "d.jsonl").symlink_to(data / "d.jsonl")  # a loop of links
    for spec in (str(data), str(data / "*.jsonl")):
        warnings: list[str] = []
        found = find_inputs([spec], warnings.append)
        assert found.files == [data / "a.jsonl"], spec
        assert found.unread == [data / "b.jsonl", data / "c.jsonl", data / "d.jsonl"], spec
        assert len(warnings) == 1 and "3 file(s) found in the inputs are not read" in warnings[0], warnings
        assert f"{data / 'd.jsonl'} (a loop of symbolic links)" in warnings[0], warnings
        assert f"{data / 'b.jsonl'} (a pipe, a device or a socket)" in warnings[0], warnings  # its format is read
        assert f"{data / 'c.jsonl'} (a link to nothing)" in warnings[0], warnings


def test_a_directory_of_only_files_not_read_names_them_and_why(tmp_path: Path) -> None:
    """The error said only "holds no file packcli reads": a pipe named ``b.jsonl`` and a link to nothing, which
    look read, went unnamed where nothing else was there (the warning names them only beside a file read)."""
    import os

    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "b.jsonl")
    (data / "c.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    for spec in (str(data), str(data / "*.jsonl")):
        with pytest.raises(PackcliError) as raised:
            find_inputs([spec])
        said = str(raised.value)
        assert f"not read: {data / 'b.jsonl'} (a pipe, a device or a socket)" in said, said
        assert f"{data / 'c.jsonl'} (a link to nothing)" in said, said


def test_a_file_url_is_read_as_its_path(tmp_path: Path) -> None:
    """``file://`` URLs name local files, directories and globs as plain paths do (the docs say so; an input
    ``file:///...`` was looked for as a relative path ``file:/...`` and not found), percent-escapes decoded; a
    ``?`` or ``#`` is part of the name, never a query or fragment dropped from it."""
    data = tmp_path / "data dir"
    data.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        write_jsonl(data / name, [{"text": name}])
    url = f"file://{tmp_path}/data%20dir"
    for spec, plain in ((url, data), (f"{url}/a.jsonl", data / "a.jsonl"), (f"{url}/*.jsonl", data / "*.jsonl")):
        assert find_inputs([spec]).files == find_inputs([str(plain)]).files, spec
    result = CliRunner().invoke(app, ["stats", url, "--max-len", "64", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["input_documents"] == 2, result.output
    odd = write_jsonl(data / "q?#1.jsonl", [{"text": "odd"}])  # ? and # are a file name's, as in a store's key
    assert find_inputs([f"{url}/q?#1.jsonl"]).files == [odd]


def test_an_output_inside_an_input_directory_is_never_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "corpus.jsonl", RECORDS)
    runner = CliRunner()
    other = write_jsonl(tmp_path / "other.jsonl", RECORDS)  # an output of another corpus, kept beside this one
    assert runner.invoke(app, ["pack", str(other), "--out", str(data / "packed")]).exit_code == 0
    staging = data / ".old.packcli-partial"  # a dead run's staging directory
    staging.mkdir()
    write_jsonl(staging / "leftover.jsonl", RECORDS)
    warnings: list[str] = []
    assert find_inputs([str(data)], warnings.append).files == [(data / "corpus.jsonl").resolve()]
    assert sorted(warnings) == [
        f"skipping {data / '.old.packcli-partial'}: a packcli output, not input",
        f"skipping {data / 'packed'}: a packcli output, not input",
    ]
    result = runner.invoke(app, ["pack", str(data), "--out", str(tmp_path / "again"), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["input_documents"] == 2  # RECORDS: 2 texts, 1 empty
    assert find_inputs([str(data / "*")]).files == [(data / "corpus.jsonl").resolve()]  # a glob's match too
    result = runner.invoke(app, ["pack", str(data / "packed"), "--out", str(tmp_path / "o3")])
    assert result.exit_code == 1 and "packed: is a packcli output, not a corpus" in result.stderr


def test_a_directory_holding_a_manifest_json_packcli_did_not_write_is_read_as_input(tmp_path: Path) -> None:
    """A corpus directory shipping a ``manifest.json`` of its own was skipped by a walk as "a packcli output", its
    files never read; named, it was refused as one, and ``stats`` took it for one. Only a manifest packcli wrote
    (or a directory holding shards beside a manifest it cannot read: a damaged output) makes an output."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    corpus = write_jsonl(data / "sub" / "corpus.jsonl", RECORDS)
    listing = data / "sub" / "manifest.json"  # another tool's, here an array of records: read as one input
    listing.write_text(json.dumps([{"text": "a record the listing holds"}]))
    expected = sorted([corpus.resolve(), listing.resolve()])
    for spec in (data, data / "sub", data / "*"):
        warnings: list[str] = []
        assert find_inputs([str(spec)], warnings.append).files == expected and warnings == [], spec
    result = CliRunner().invoke(app, ["stats", str(data / "sub"), "--max-len", "64", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["input_documents"] == 3, result.output
    result = CliRunner().invoke(app, ["verify", str(data / "sub")])  # "format version None is not supported"
    assert result.exit_code == 1 and error_line(result.stderr) == (
        f"error: {data / 'sub'}: is not a packcli output: its manifest.json names no packcli_version"
    ), result.stderr
    out = tmp_path / "outputs" / "out"
    assert CliRunner().invoke(app, ["pack", str(corpus), "--out", str(out)]).exit_code == 0
    (out / "manifest.json").write_text("{")  # damaged: its shards still make it an output
    (tmp_path / "outputs" / "more.jsonl").write_bytes((data / "sub" / "corpus.jsonl").read_bytes())
    warnings = []
    find_inputs([str(tmp_path / "outputs")], warnings.append)
    assert warnings == [f"skipping {out}: a packcli output, not input"]


@pytest.mark.parametrize(
    ("listing", "documents"),
    [({"tool": "other", "files": ["shard-00000.arrow"]}, None), ([{"text": "a record the listing holds"}], 3)],
)
def test_another_tools_manifest_beside_a_file_named_like_a_shard_is_no_packcli_output(
    tmp_path: Path, listing: object, documents: int | None
) -> None:
    """A file named like a shard (shard-00000.arrow, another tool's Arrow) beside another tool's manifest.json made a
    "damaged packcli output": verify, show, export and pack --out said "format version None is not supported ...
    upgrade packcli" (of an array, "manifest is not a JSON object"), a walk skipped the directory, and stats took it
    for an output. A manifest.json that parses and names no packcli_version is another tool's, shards beside it or
    not: refused as an output, read as input (stats reads the records of the array and the Arrow file)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps(listing))
    with pa.ipc.new_stream(data / "shard-00000.arrow", pa.schema([("text", pa.string())])) as writer:
        writer.write_table(pa.table({"text": ["one record", "and another"]}))
    said = f"{data}: is not a packcli output: its manifest.json names no packcli_version"
    for command in (["verify"], ["show"], ["export", "--to", "megatron", "--out", str(tmp_path / "e")]):
        result = CliRunner().invoke(app, [command[0], str(data), *command[1:]])
        assert result.exit_code == 1 and error_line(result.stderr) == f"error: {said}", (command, result.stderr)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": f"record {k}"} for k in range(20)])
    for extra in ([], ["--overwrite"], ["--partitions", "2"]):
        result = CliRunner().invoke(app, ["pack", str(corpus), "--out", str(data), *extra])
        assert result.exit_code == 1, result.output
        assert "but is not a packcli output (its manifest.json names no packcli_version)" in error_line(result.stderr)
    listed = sorted((data / name).resolve() for name in ("manifest.json", "shard-00000.arrow"))
    assert find_inputs([str(data)]).files == listed
    if documents is not None:
        result = CliRunner().invoke(app, ["stats", str(data), "--max-len", "64", "--json"])
        assert result.exit_code == 0 and json.loads(result.stdout)["input_documents"] == documents, result.output


def strict_json(raw: bytes) -> Any:
    """``raw`` parsed as a strict JSON reader parses it (Rust's serde_json, pyarrow): UTF-8 whose strings hold no
    lone surrogate (Python's json.loads takes ``"\\udce9"``, they refuse it)."""
    parsed = json.loads(raw.decode("utf-8"))
    json.dumps(parsed, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError on a lone surrogate
    return parsed


def test_an_input_named_in_no_utf8_is_recorded_with_its_bytes_escaped_in_valid_json(tmp_path: Path) -> None:
    """A file named b'caf\\xe9.jsonl' (Latin-1, valid on Linux) reached manifest.json, its sources sidecar and a
    mixed run's ``sources`` as "caf\\udce9.jsonl", a lone surrogate strict JSON readers refuse. Such a name is
    recorded as Python's backslashreplace writes its bytes, "caf\\\\xe9.jsonl"; a UTF-8 name as it is."""
    data = tmp_path / "data"
    data.mkdir()
    latin = data / os.fsdecode(b"caf\xe9.jsonl")
    try:
        write_jsonl(latin, RECORDS)
    except (OSError, UnicodeEncodeError):  # a file system that holds only UTF-8 names (macOS)
        pytest.skip("this file system refuses a name that is not UTF-8")
    write_jsonl(data / "th\u00e9.jsonl", RECORDS)  # UTF-8: recorded as it is
    out, mixed = tmp_path / "out", tmp_path / "mixed"
    assert CliRunner().invoke(app, ["pack", str(data), "--max-len", "64", "--out", str(out)]).exit_code == 0
    manifest = strict_json((out / "manifest.json").read_bytes())
    assert [entry["path"] for entry in manifest["inputs"]] == [
        str(data / "caf\\xe9.jsonl"),
        str(data / "th\u00e9.jsonl"),
    ]
    sidecar = out / manifest["shards"][0]["sidecars"]["sources"]["file"]
    names = pa.ipc.open_stream(sidecar).read_all().schema.metadata[b"packcli.inputs"]
    assert strict_json(names) == [str(data / "caf\\xe9.jsonl"), str(data / "th\u00e9.jsonl")]
    result = CliRunner().invoke(
        app, ["pack", str(latin), str(data / "th\u00e9.jsonl"), "--weights", "1,1", "--out", str(mixed)]
    )
    assert result.exit_code == 0, result.output
    assert strict_json((mixed / "manifest.json").read_bytes())["sources"][0]["path"] == str(data / "caf\\xe9.jsonl")


def test_symlinked_directories_are_followed_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "inner").mkdir(parents=True)
    write_jsonl(data / "inner" / "a.jsonl", RECORDS)
    (data / "inner" / "loop").symlink_to(data, target_is_directory=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    write_jsonl(outside / "b.jsonl", RECORDS)
    (data / "linked").symlink_to(outside, target_is_directory=True)
    assert find_inputs([str(data)]).files == [(data / "inner" / "a.jsonl").resolve(), (outside / "b.jsonl").resolve()]


def test_a_glob_names_what_it_matches_but_packcli_does_not_read(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", RECORDS)
    (tmp_path / "a.txt").write_text("x")
    warnings: list[str] = []
    found = find_inputs([str(tmp_path / "a.*")], warnings.append)
    assert found.files == [a.resolve()] and found.unread == [tmp_path / "a.txt"] and "a.txt" in warnings[0]


def test_a_file_named_twice_is_read_once_however_it_is_spelled(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}])
    (tmp_path / "link.jsonl").symlink_to(a)
    (tmp_path / "hard.jsonl").hardlink_to(a)
    found = find_inputs([str(a), str(tmp_path / "link.jsonl"), str(tmp_path / "hard.jsonl"), str(tmp_path)])
    assert found.files == [a.resolve()]


def test_a_glob_never_reads_the_files_of_a_packcli_output(tmp_path: Path) -> None:
    """A recursive glob read the shards (and the manifest) of an earlier output as input, with no warning: only a
    directory it matched was checked. A file it matches inside an output is skipped, the output named once as a
    walk names it; a shard named on the command line is refused in one line."""
    data = tmp_path / "g"
    data.mkdir()
    write_jsonl(data / "corpus.jsonl", RECORDS)
    runner = CliRunner()
    assert runner.invoke(app, ["pack", str(data / "**" / "*.jsonl"), "--out", str(data / "packed")]).exit_code == 0
    skipped = f"skipping {data / 'packed'}: a packcli output, not input"
    for pattern in ("**/*", "**", "*"):
        warnings: list[str] = []
        found = find_inputs([str(data / pattern)], warnings.append)
        assert found.files == [(data / "corpus.jsonl").resolve()] and found.unread == [], pattern
        assert warnings == [skipped], (pattern, warnings)
    for pattern in ("**/*.arrow", "*/*.json", "packed/*"):
        warnings = []
        with pytest.raises(PackcliError, match=r"no file that packcli reads .* matches this pattern"):
            find_inputs([str(data / pattern)], warnings.append)
        assert warnings == [skipped], (pattern, warnings)
    result = runner.invoke(app, ["pack", str(data / "**" / "*"), "--out", str(tmp_path / "again"), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["unread_files"] == 0, result.output
    assert f"skipping {data / 'packed'}: a packcli output, not input" in result.stderr
    shard = data / "packed" / "shard-00000.arrow"
    result = runner.invoke(app, ["pack", str(shard), "--ids-field", "input_ids", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {shard}: is part of a packcli output ({data / 'packed'}), not a corpus; pass the files it was "
        "packed from (a trainer reads an output through packcli.torch or packcli export)"
    ]
    link = tmp_path / "elsewhere.arrow"  # a link kept outside the output, to one of its shards
    link.symlink_to(shard)
    result = runner.invoke(app, ["pack", str(link), "--ids-field", "input_ids", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and error_line(result.stderr).startswith(
        f"error: {link}: is part of a packcli output ({data / 'packed'}), not a corpus"
    )


def test_a_link_in_an_input_directory_to_a_file_of_an_output_is_skipped_by_a_walk_and_a_glob(tmp_path: Path) -> None:
    """A link kept in an ordinary input directory to a shard of a packcli output elsewhere was read
    as input by a directory walk or a glob; only such a link named on the command line was refused. Each is skipped,
    named with the output it leads into."""
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    out = tmp_path / "packed"
    assert CliRunner().invoke(app, ["pack", str(corpus), "--out", str(out)]).exit_code == 0
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "corpus.jsonl", RECORDS)
    (data / "sub").mkdir()
    (data / "linked.arrow").symlink_to(out / "shard-00000.arrow")
    (data / "sub" / "relative.arrow").symlink_to(Path("..", "..", "packed", "shard-00000.arrow"))
    skipped = [
        f"skipping {data / name}: a link into a packcli output ({out}), not input"
        for name in ("linked.arrow", "sub/relative.arrow")
    ]
    for spec in (data, data / "*", data / "**" / "*", data / "**" / "*.arrow"):
        warnings: list[str] = []
        if spec.name == "*.arrow":
            with pytest.raises(PackcliError, match=r"no file that packcli reads .* matches this pattern"):
                find_inputs([str(spec)], warnings.append)
            assert warnings == skipped, warnings
            continue
        found = find_inputs([str(spec)], warnings.append)
        assert found.files == [(data / "corpus.jsonl").resolve()] and found.unread == [], spec
        assert warnings == skipped, (spec, warnings)


def test_a_link_in_an_input_directory_to_a_staging_or_resume_area_is_skipped(tmp_path: Path) -> None:
    """A link to a directory was judged by its own name: one to a run's resume area (``.NAME.packcli-resume``) was
    walked, its run.json read as input. It is judged by where it leads, as a walk judges the area itself."""
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "corpus.jsonl", RECORDS)
    area = tmp_path / ".out.packcli-resume"
    area.mkdir()
    (area / "run.json").write_text("{not json")
    (data / "resume").symlink_to(area, target_is_directory=True)
    warnings: list[str] = []
    assert find_inputs([str(data)], warnings.append).files == [(data / "corpus.jsonl").resolve()]
    assert warnings == [f"skipping {data / 'resume'}: a packcli output, not input"]


def test_a_glob_walks_a_loop_of_links_once_and_counts_each_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a link to a parent directory a ``**`` went some 40 levels deep (two such links: forever), counting
    each link to nothing found there again at each level (83 files not read where a walk counts 2)."""
    data = tmp_path / "ln"
    (data / "sub").mkdir(parents=True)
    write_jsonl(data / "sub" / "a.jsonl", RECORDS)
    for name in ("loop", "again"):
        (data / "sub" / name).symlink_to("..", target_is_directory=True)
    (data / "broken.jsonl").symlink_to("nowhere.jsonl")
    (data / "self.jsonl").symlink_to("self.jsonl")
    expected = [data / "broken.jsonl", data / "self.jsonl"]
    for spec in (str(data), str(data / "**" / "*.jsonl"), str(data / "**"), str(data / "*" / "**" / "*.jsonl")):
        found = find_inputs([spec])
        assert found.files == [(data / "sub" / "a.jsonl").resolve()], spec
        assert [path.name for path in found.unread] == ["broken.jsonl", "self.jsonl"], spec  # ln/*/**: via a link
    assert find_inputs([str(data), str(data / "**" / "*")]).unread == expected  # each once, across inputs too
    monkeypatch.chdir(data)  # a relative pattern, spelled as given
    assert find_inputs(["**/*.jsonl"]).unread == [Path("broken.jsonl"), Path("self.jsonl")]


def test_a_recursive_glob_matches_what_glob_matches_where_no_link_loops(tmp_path: Path) -> None:
    """The loop-safe ``**`` matches what ``glob.glob`` matches in a tree without loops: hidden names, links to
    directories elsewhere, a final ``**`` and ``**/``, a pattern after it, two of them."""
    import glob

    from packcli.read.walk import _glob

    data = tmp_path / "d"
    for directory in ("a/b/c", "a/.hidden/c", "x/c", "elsewhere/c"):
        (tmp_path / directory if directory.startswith("elsewhere") else data / directory).mkdir(parents=True)
    for file in ("a/b/c/1.jsonl", "a/.hidden/c/2.jsonl", "x/c/3.jsonl", "a/.4.jsonl", "x/5.txt"):
        (data / file).write_text("{}\n")
    (tmp_path / "elsewhere" / "c" / "6.jsonl").write_text("{}\n")
    (data / "x" / "out").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (data / "dangling").symlink_to(tmp_path / "none")
    for pattern in ("**", "**/", "**/*.jsonl", "**/c/*", "*/**/c/**", "a/**/.*", "**/c/**/*.jsonl", "x/**/6*"):
        spec = str(data / pattern)
        assert sorted(_glob(spec)) == sorted(glob.glob(spec, recursive=True)), pattern


def test_a_tokenizer_and_a_template_named_in_no_utf8_are_recorded_in_valid_json(tmp_path: Path) -> None:
    """The tokenizer's path (the manifest's ``options.tokenizer`` and ``tokenizer.name``) and a ``--chat-template``
    file's reached manifest.json as lone surrogates, as input names did: they are recorded the same way."""
    tokenizer = tmp_path / os.fsdecode(b"tok\xe9")
    try:
        tokenizer.mkdir()
    except (OSError, UnicodeEncodeError):  # a file system that holds only UTF-8 names (macOS)
        pytest.skip("this file system refuses a name that is not UTF-8")
    (tokenizer / "tokenizer.json").write_bytes(shared_path("tokenizers/gpt2/tokenizer.json").read_bytes())
    template = tmp_path / os.fsdecode(b"chat\xe9.jinja")
    template.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    chats = write_jsonl(tmp_path / "chats.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    out = tmp_path / "out"
    args = ["pack", str(chats), "--messages-field", "messages", "--loss-on", "all", "--max-len", "64"]
    result = CliRunner().invoke(
        app, [*args, "--tokenizer", str(tokenizer), "--chat-template", str(template), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    manifest = strict_json((out / "manifest.json").read_bytes())
    assert manifest["options"]["tokenizer"] == manifest["tokenizer"]["name"] == str(tmp_path / "tok\\xe9")
    assert manifest["options"]["chat_template"] == str(tmp_path / "chat\\xe9.jinja")
    again = CliRunner().invoke(
        app, [*args, "--tokenizer", str(tokenizer), "--chat-template", str(template), "--out", str(out)]
    )
    assert again.exit_code == 0 and "is up to date" in again.output, again.output


def test_an_output_named_in_no_utf8_is_written(tmp_path: Path) -> None:
    """An --out whose name is not UTF-8 ended in "unexpected UnicodeEncodeError" (its scratch key encoded the path as
    UTF-8), writing nothing (then a sidecar's pyarrow file, and reading a shard back, refused the name); it is
    written, and verify, stats and show read it."""
    out = tmp_path / os.fsdecode(b"out\xe9")
    try:
        out.mkdir()
        out.rmdir()
    except (OSError, UnicodeEncodeError):  # a file system that holds only UTF-8 names (macOS)
        pytest.skip("this file system refuses a name that is not UTF-8")
    data = write_jsonl(tmp_path / "a.jsonl", RECORDS)
    result = CliRunner().invoke(app, ["pack", str(data), "--max-len", "64", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for command in ("verify", "stats", "show"):
        read = CliRunner().invoke(app, [command, str(out)])
        assert read.exit_code == 0, (command, read.output)


def test_a_manifest_naming_packcli_version_only_nested_is_another_tools(tmp_path: Path) -> None:
    """A directory whose manifest.json names packcli_version only inside another key (a tool listing its
    dependencies) was taken for a packcli output by the input walk, its files left out with a warning, while verify
    said it is none: both now ask for the key where packcli writes it, at the top level."""
    corpus = tmp_path / "corpus"
    (corpus / "tool").mkdir(parents=True)
    write_jsonl(corpus / "x.jsonl", RECORDS[:1])
    write_jsonl(corpus / "tool" / "data.jsonl", RECORDS[2:])
    manifest = {"generator": {"deps": {"packcli_version": "0.3.0"}}}
    (corpus / "tool" / "manifest.json").write_text(json.dumps(manifest, indent=2))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["pack", str(corpus / "**" / "*.jsonl"), "--max-len", "64", "--out", str(out)])
    assert result.exit_code == 0 and "skipping" not in result.stderr, result.output
    assert json.loads((out / "manifest.json").read_text())["totals"]["documents"] == 2
    verify = CliRunner().invoke(app, ["verify", str(corpus / "tool")])
    assert verify.exit_code == 1 and "is not a packcli output" in verify.stderr, verify.output


def test_the_json_that_pack_and_export_print_or_write_records_a_name_in_no_utf8(tmp_path: Path) -> None:
    """`pack --json`'s ``out`` and an export's ``export.json`` ``source.path`` held a non-UTF-8 output's name as a
    lone surrogate, which strict JSON readers refuse, as manifest.json no longer does: they record it the same way."""
    out, exported = tmp_path / os.fsdecode(b"out\xe9"), tmp_path / os.fsdecode(b"exp\xe9")
    try:
        out.mkdir()
        out.rmdir()
    except (OSError, UnicodeEncodeError):  # a file system that holds only UTF-8 names (macOS)
        pytest.skip("this file system refuses a name that is not UTF-8")
    data = write_jsonl(tmp_path / "a.jsonl", RECORDS)
    packed = CliRunner().invoke(app, ["pack", str(data), "--max-len", "64", "--out", str(out), "--json"])
    assert packed.exit_code == 0, packed.output
    assert strict_json(packed.stdout.encode("utf-8", "surrogateescape"))["out"] == str(tmp_path / "out\\xe9")
    result = CliRunner().invoke(app, ["export", str(out), "--to", "megatron", "--out", str(exported), "--json"])
    assert result.exit_code == 0, result.output
    assert strict_json(result.stdout.encode("utf-8", "surrogateescape"))["out"] == str(tmp_path / "exp\\xe9")
    record = strict_json((exported / "export.json").read_bytes())
    assert record["source"]["path"] == str(tmp_path / "out\\xe9")
