"""The source index: every packed document names its input, line (or row) and piece k of n, in each shard's
``sources`` sidecar, on every engine and worker count alike; ``verify`` checks it, ``show`` prints it and
``show --source FILE:LINE`` finds where a record went."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import error_line, output_rows
from s3_server import S3Server, put_output
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer

# under make test (-n 2 --dist loadgroup) the module keeps to one worker: ``outputs`` (four packs, two of them
# starting partition workers) is built once, not once on each worker
pytestmark = pytest.mark.xdist_group("provenance")
runner = CliRunner()
FILLER = "the quick brown fox jumps over the lazy dog " * 3


def marked(name: str, number: int) -> str:
    """A record's text that says where it is: its first words are its file and line (or row)."""
    return f"{name} {number}: " + FILLER * (number % 3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """JSON Lines with blank lines, an empty text and a bad record (skipped with --skip-bad-records), and a Parquet
    file of several row groups with an empty row: what a document's line or row must skip over."""
    root = tmp_path_factory.mktemp("provenance")
    lines = []
    for number in range(1, 61):
        if number % 11 == 0:
            lines.append("")  # a blank line: no record
        elif number == 7:
            lines.append('{"text": "broken')  # a bad record
        elif number == 9:
            lines.append('{"text": ""}')  # an empty document
        else:
            lines.append(json.dumps({"text": marked("a.jsonl", number)}))
    (root / "a.jsonl").write_text("\n".join(lines) + "\n")
    texts = ["" if row == 5 else marked("b.parquet", row) for row in range(1, 41)]
    pq.write_table(pa.table({"text": texts}), root / "b.parquet", row_group_size=8)
    return [root / "a.jsonl", root / "b.parquet"]


ENGINES = {
    "plain": [],
    "partitions, 1 worker": ["--partitions", "3", "--workers", "1"],
    "partitions, 2 workers": ["--partitions", "3", "--workers", "2"],
    "mixed, with repeats": ["--weights", "0.8,0.2", "--target-tokens", "6000"],
}


@pytest.fixture(scope="module")
def outputs(corpus: list[Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    packed = {}
    for engine, options in ENGINES.items():
        out = tmp_path_factory.mktemp("packed") / "out"
        args = ["pack", *map(str, corpus), "--max-len", "24", "--skip-bad-records", "--out", str(out), "--quiet"]
        result = runner.invoke(app, [*args, *options])
        assert result.exit_code == 0, result.output
        packed[engine] = out
    return packed


def documents_with_sources(out: Path) -> list[tuple[list[int], dict[str, Any]]]:
    """Each document (piece) of the output in shard and row order, with its source, read with pyarrow alone."""
    manifest = json.loads((out / "manifest.json").read_text())
    sources = []
    for shard in manifest["shards"]:
        table = pa.ipc.open_stream((out / shard["sidecars"]["sources"]["file"]).read_bytes()).read_all()
        names = json.loads(table.schema.metadata[b"packcli.inputs"])
        sources += [{**entry, "input": names[entry["input"]]} for entry in table.to_pylist()]
    rows = output_rows(out)
    pieces = [row["input_ids"][a:b] for row in rows for a, b in zip(row["cu_seqlens"], row["cu_seqlens"][1:])]
    assert len(pieces) == len(sources)
    return list(zip(pieces, sources))


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_document_names_its_input_line_and_piece(
    outputs: dict[str, Path], corpus: list[Path], engine: str
) -> None:
    decode = load_tokenizer(None).tokenizer.decode
    seen: dict[tuple[str, int], list[int]] = {}
    for tokens, source in documents_with_sources(outputs[engine]):
        name = Path(source["input"]).name
        assert source["input"] == str(corpus[0] if name == "a.jsonl" else corpus[1])
        if source["piece"] == 0:
            assert decode(tokens).startswith(f"{name} {source['record']}: "), (tokens, source)
        seen.setdefault((name, source["record"]), []).append(source["piece"])
        assert 0 <= source["piece"] < source["pieces"]
    assert any(len(pieces) > 1 for pieces in seen.values())
    verified = runner.invoke(app, ["verify", str(outputs[engine])])
    assert verified.exit_code == 0, verified.output
    if engine.startswith("mixed"):  # records drawn again are listed again, each time whole
        assert any(len(pieces) > max(pieces) + 1 for pieces in seen.values())
        for pieces in seen.values():
            assert sorted(set(pieces)) == list(range(max(pieces) + 1))
            assert len(pieces) % (max(pieces) + 1) == 0
        return
    for pieces in seen.values():
        assert sorted(pieces) == list(range(len(pieces)))
    blank_bad_or_empty = {7, 9, *range(11, 61, 11)}
    assert sorted(line for name, line in seen if name == "a.jsonl") == [
        n for n in range(1, 61) if n not in blank_bad_or_empty
    ]
    assert sorted(row for name, row in seen if name == "b.parquet") == [n for n in range(1, 41) if n != 5]


def test_the_source_index_is_the_same_bytes_whatever_the_worker_count(outputs: dict[str, Path]) -> None:
    def sidecars(out: Path) -> dict[str, str]:
        files = sorted(path for path in out.iterdir() if path.name.endswith(".arrow.sources"))
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}

    assert sidecars(outputs["partitions, 1 worker"]) == sidecars(outputs["partitions, 2 workers"])
    assert len(sidecars(outputs["partitions, 1 worker"])) >= 3


def test_show_prints_each_documents_source_and_finds_where_a_record_went(outputs: dict[str, Path]) -> None:
    out = outputs["plain"]
    split = next(source for _, source in documents_with_sources(out) if source["pieces"] > 1)
    name = Path(split["input"]).name
    found = runner.invoke(app, ["show", str(out), "--source", f"{name}:{split['record']}", "--json"])
    assert found.exit_code == 0, found.output
    places = json.loads(found.stdout)
    assert [place["source"]["piece"] for place in places] == list(range(split["pieces"]))
    assert {place["source"]["record"] for place in places} == {split["record"]}
    shown = runner.invoke(app, ["show", str(out), "--row", str(places[-1]["row"])])
    assert shown.exit_code == 0, shown.output
    document = places[-1]["document"]
    expected = f"-- document {document}: "
    line = next(line for line in shown.stdout.splitlines() if line.startswith(expected))
    assert line.endswith(f"from {split['input']}:{split['record']}, piece {split['pieces']} of {split['pieces']}")


def test_verify_and_show_of_an_output_url_read_its_sidecars_from_the_store(
    outputs: dict[str, Path], s3_server: S3Server
) -> None:
    """An output in the store: ``show`` prints each document's source and ``show --source`` finds a record from the
    sidecars' objects (streamed, as the shards are), and ``verify`` checks them there: a sources object damaged in
    the store and a split_pieces object gone are named, the error line naming the URL (they were read with
    ``pa.memory_map``, which a URL fails)."""
    local = outputs["plain"]
    url = put_output(s3_server, local)
    split = next(source for _, source in documents_with_sources(local) if source["pieces"] > 1)
    spec = f"{Path(split['input']).name}:{split['record']}"
    found = runner.invoke(app, ["show", url, "--source", spec, "--json"])
    assert found.exit_code == 0, found.output
    places = json.loads(found.stdout)
    assert places == json.loads(runner.invoke(app, ["show", str(local), "--source", spec, "--json"]).stdout)
    shown = runner.invoke(app, ["show", url, "--row", str(places[-1]["row"])])
    assert shown.exit_code == 0, shown.output
    line = next(
        line for line in shown.stdout.splitlines() if line.startswith(f"-- document {places[-1]['document']}: ")
    )
    assert line.endswith(f"from {split['input']}:{split['record']}, piece {split['pieces']} of {split['pieces']}")
    verified = runner.invoke(app, ["verify", url])
    assert verified.exit_code == 0, verified.output

    fs = s3_server.filesystem()
    shards = json.loads((local / "manifest.json").read_text())["shards"]
    sources = shards[0]["sidecars"]["sources"]["file"]
    data = bytearray(fs.cat(f"{url}/{sources}"))
    data[len(data) // 2] ^= 0xFF
    fs.pipe(f"{url}/{sources}", bytes(data))
    pieces = next(shard for shard in shards if "split_pieces" in shard["sidecars"])["sidecars"]["split_pieces"]
    fs.rm(f"{url}/{pieces['file']}")
    damaged = runner.invoke(app, ["verify", url, "--json"])
    assert damaged.exit_code == 1, damaged.output
    problems = json.loads(damaged.stdout)["problems"]
    assert f"{sources}: sha256 differs from the manifest (the file was changed or damaged)" in problems, problems
    assert any(problem.startswith(f"{pieces['file']}: missing (a sidecar of ") for problem in problems), problems
    assert error_line(damaged.stderr) == f"error: {url}: {len(problems)} problem(s) found", damaged.stderr


@pytest.mark.parametrize(
    ("spec", "code", "phrase"),
    [
        ("a.jsonl:7", 1, "no document comes from a.jsonl:7"),  # the bad record: skipped
        ("a.jsonl:0", 2, "is not FILE:LINE"),
        ("a.jsonl", 2, "is not FILE:LINE"),
        ("a.jsonl:\u0663", 2, "is not FILE:LINE"),  # an Arabic-Indic 3: int() takes it, a line number is ASCII
    ],
)
def test_show_source_names_a_record_that_went_nowhere(
    outputs: dict[str, Path], spec: str, code: int, phrase: str
) -> None:
    result = runner.invoke(app, ["show", str(outputs["plain"]), "--source", spec])
    assert result.exit_code == code
    assert phrase in result.stderr, result.stderr


@pytest.mark.parametrize("shown", [["--row", "0"], ["--row", "3"], ["--positions"]])
def test_show_source_with_a_row_or_positions_is_a_usage_error(outputs: dict[str, Path], shown: list[str]) -> None:
    """--source finds rows; --row and --positions say which row to decode and how: together they were silently
    ignored (the --row asked for never shown)."""
    result = runner.invoke(app, ["show", str(outputs["plain"]), "--source", "a.jsonl:3", *shown])
    assert result.exit_code == 2 and "--source" in result.stderr and shown[0] in result.stderr, result.stderr


def test_standard_input_is_named_as_the_manifest_names_it(corpus: list[Path], tmp_path: Path) -> None:
    """Records piped in are ``<stdin>`` in the source index (never the temporary file they are spooled to), and
    ``show --source '<stdin>:LINE'`` finds them, as does ``-:LINE``, the input as the command named it."""
    out = tmp_path / "out"
    piped = subprocess.run(
        [sys.executable, "-m", "packcli", "pack", "-", "--max-len", "24", "--skip-bad-records", "--out", str(out)],
        input=corpus[0].read_bytes(),
        capture_output=True,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert {Path(source["input"]).name for _, source in documents_with_sources(out)} == {"<stdin>"}
    for spelling in ("<stdin>:3", "-:3"):  # as the manifest names it, or as the command line read it
        found = runner.invoke(app, ["show", str(out), "--source", spelling, "--json"])
        assert found.exit_code == 0, found.output
        assert {place["source"]["text"].split(",")[0] for place in json.loads(found.stdout)} == {"<stdin>:3"}
