"""show: one packed row decoded, checked against the shard read directly with pyarrow and the real tokenizer."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import documented_names, error_line, json_keys, shared_path, write_jsonl
from s3_server import S3Server, put_output
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer

runner = CliRunner()
QUESTIONS = [
    ("What is the capital of France?", " Paris."),
    ("Name a prime number.", " Seven is prime."),
    ("Translate 'chat' from French.", " Cat."),
    ("How many legs has a spider?", " Eight legs, in four pairs."),
    ("Say nothing.", " Fine."),
]


def shard_rows(out: Path) -> pa.Table:
    return pa.ipc.open_stream(pa.memory_map(str(out / "shard-00000.arrow"))).read_all()


@pytest.fixture
def sft_output(tmp_path: Path) -> Path:
    corpus = write_jsonl(tmp_path / "sft.jsonl", [{"prompt": p, "response": r} for p, r in QUESTIONS * 4])
    out = tmp_path / "sft-out"
    args = ["pack", str(corpus), "--prompt-field", "prompt", "--response-field", "response", "--max-len", "48"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    return out


def test_show_marks_exactly_the_supervised_tokens(sft_output: Path) -> None:
    table = shard_rows(sft_output)
    decode = load_tokenizer().tokenizer.decode
    assert table.num_rows >= 3
    for row in range(table.num_rows):
        ids = np.array(table.column("input_ids")[row].as_py())
        supervised = np.array(table.column("labels")[row].as_py()) != -100
        shown = runner.invoke(app, ["show", str(sft_output), "--row", str(row), "--json"])
        assert shown.exit_code == 0, shown.stderr
        decoded = json.loads(shown.stdout)
        marks = np.concatenate(
            [np.full(s["tokens"], s["supervised"]) for d in decoded["documents"] for s in d["segments"]]
        )
        assert marks.tolist() == supervised.tolist() and decoded["supervised_tokens"] == supervised.sum()
        # the human view: the text between the marks is exactly each run of supervised tokens, decoded
        header, legend, body = runner.invoke(app, ["show", str(sft_output), "--row", str(row)]).stdout.split("\n", 2)
        runs = np.split(np.arange(len(ids)), np.flatnonzero(np.diff(supervised.astype(int))) + 1)
        expected = [decode(ids[run].tolist(), skip_special_tokens=False) for run in runs if supervised[run[0]]]
        assert re.findall("⟦(.*?)⟧", body, flags=re.S) == expected
        assert "between ⟦ and ⟧" in legend and f"row {row} of" in header


def test_show_separates_and_numbers_documents(tmp_path: Path) -> None:
    texts = ["The first document.", "A second one, longer than the first.", "Third."]
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": text} for text in texts])
    assert runner.invoke(app, ["pack", str(corpus), "--max-len", "64", "--out", str(tmp_path / "o")]).exit_code == 0
    shown = json.loads(runner.invoke(app, ["show", str(tmp_path / "o"), "--json", "--positions"]).stdout)
    cu = shard_rows(tmp_path / "o").column("cu_seqlens")[0].as_py()
    assert [d["number"] for d in shown["documents"]] == [1, 2, 3]
    assert [d["start"] for d in shown["documents"]] == cu[:-1]
    assert sorted("".join(s["text"] for s in d["segments"]) for d in shown["documents"]) == sorted(
        text + "<|endoftext|>" for text in texts
    )
    for document in shown["documents"]:
        assert [token["position"] for token in document["tokens"]] == list(range(document["length"]))
        assert document["segments"][0]["supervised"] is None
    human = runner.invoke(app, ["show", str(tmp_path / "o")]).stdout
    assert "row 0 of 1 (shard-00000.arrow row 0): 3 documents" in human
    assert [line.split(":")[0] for line in human.splitlines() if line.startswith("-- ")] == [
        "-- document 1",
        "-- document 2",
        "-- document 3",
    ]
    positions = runner.invoke(app, ["show", str(tmp_path / "o"), "--positions"]).stdout
    assert len(re.findall(r"^\s+0\s+\d+\s+'", positions, flags=re.M)) == 3  # each document starts at position 0
    assert re.search(r"^\s+0\s+464\s+'The'\s*$", positions, flags=re.M)  # position, id, token; no supervision


def test_show_errors(tmp_path: Path, sft_output: Path) -> None:
    out_of_range = runner.invoke(app, ["show", str(sft_output), "--row", "1000"])
    assert out_of_range.exit_code == 2 and "--row 1000 is out of range" in out_of_range.stderr
    other = tmp_path / "other.json"
    other.write_text(load_tokenizer().tokenizer.to_str().replace('"<|endoftext|>"', '"<|end|>"', 1))
    wrong = runner.invoke(app, ["show", str(sft_output), "--tokenizer", str(other)])
    assert wrong.exit_code == 1 and "is not the one this output was packed with" in wrong.stderr
    missing = runner.invoke(app, ["show", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "nothing: no such file or directory" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(app, ["show", str(tmp_path / "empty")])
    assert empty.exit_code == 1 and "empty: no manifest.json: not a packcli output" in empty.stderr


def test_control_characters_in_a_document_are_shown_as_escapes_not_acted_on(tmp_path: Path) -> None:
    """A document's ESC sequences, carriage returns and bidi overrides once reached the terminal raw: text
    recoloured, ``hidden\\rshown`` printed as ``hiddenshown``. Now each is its escape; newlines and other unicode
    stay, and --json keeps the text as decoded."""
    text = "red:\x1b[31m alarm\x1b[0m hidden\rshown \u202eevil café 😀\nnext line"
    corpus = write_jsonl(tmp_path / "odd.jsonl", [{"text": text}])
    out = tmp_path / "out"
    assert runner.invoke(app, ["pack", str(corpus), "--max-len", "64", "--out", str(out), "--quiet"]).exit_code == 0
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "red:\\x1b[31m alarm\\x1b[0m hidden\\rshown \\u202eevil café 😀\nnext line<|endoftext|>" in shown.stdout
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", shown.stdout)
    decoded = json.loads(runner.invoke(app, ["show", str(out), "--json"]).stdout)
    assert decoded["documents"][0]["segments"][0]["text"] == text + "<|endoftext|>"


def test_a_file_name_holding_a_line_break_is_shown_on_one_line(tmp_path: Path) -> None:
    """``show --source`` and a row's document header printed such a name over two lines (a line that reads as
    another, in a log or to a script reading lines); the name is written with ``\\n`` now, as errors write it."""
    corpus = write_jsonl(tmp_path / "a\nb.jsonl", [{"text": "one document"}])
    out = tmp_path / "out"
    assert runner.invoke(app, ["pack", str(corpus), "--out", str(out), "--quiet"]).exit_code == 0
    found = runner.invoke(app, ["show", str(out), "--source", f"{corpus}:1"])
    assert found.exit_code == 0, found.output
    assert found.stdout == f"{tmp_path}/a\\nb.jsonl:1: {out} row 0 (shard-00000.arrow row 0), document 1\n"
    header = runner.invoke(app, ["show", str(out)]).stdout.splitlines()[1]
    assert header.endswith(f"from {tmp_path}/a\\nb.jsonl:1"), header


def test_every_key_of_show_json_is_documented(packed_sft: Path) -> None:
    """``show --json`` (with and without ``--positions``) gives only keys docs/stats.md's show section names."""
    documented = documented_names("stats.md", "## `packcli show`")
    for extra in ([], ["--positions"]):
        result = CliRunner().invoke(app, ["show", str(packed_sft), "--row", "1", "--json", *extra])
        assert result.exit_code == 0, result.output
        assert json_keys(json.loads(result.stdout)) - documented == set()


def test_ids_packed_without_a_tokenizer_are_not_decoded_with_a_guess(tmp_path: Path) -> None:
    """An output of token ids packed without a tokenizer records none: show does not decode it with the bundled
    GPT-2 as if it were (text the ids never meant); it asks for the tokenizer (exit 2), and decodes with the one
    given."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [40, 1842, 257, 3797]}])
    out = tmp_path / "out"
    packed = runner.invoke(app, ["pack", str(corpus), "--ids-field", "ids", "--max-len", "8", "--out", str(out)])
    assert packed.exit_code == 0, packed.output
    guessed = runner.invoke(app, ["show", str(out)])
    assert guessed.exit_code == 2 and error_line(guessed.stderr), guessed.output
    assert "packed from token ids without a tokenizer" in guessed.stderr and "--tokenizer" in guessed.stderr
    bundled = tmp_path / "gpt2.json"
    bundled.write_text(load_tokenizer().tokenizer.to_str())
    given = runner.invoke(app, ["show", str(out), "--tokenizer", str(bundled), "--json"])
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["documents"][0]["segments"][0]["text"] == "I love a cat"


def test_ids_outside_the_given_tokenizer_s_vocabulary_are_refused_not_shown_as_nothing(tmp_path: Path) -> None:
    """Ids packed without a tokenizer may run past the vocabulary of the one given to show: decoding would drop
    them (a document of four tokens shown as three); show refuses in one line naming the first such id
    and the vocabulary (exit 2)."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [40, 1842, 60000, 257]}])
    out = tmp_path / "out"
    packed = runner.invoke(app, ["pack", str(corpus), "--ids-field", "ids", "--max-len", "8", "--out", str(out)])
    assert packed.exit_code == 0, packed.output
    bundled = tmp_path / "gpt2.json"
    bundled.write_text(load_tokenizer().tokenizer.to_str())
    for extra in ([], ["--json"], ["--positions"]):
        shown = runner.invoke(app, ["show", str(out), "--tokenizer", str(bundled), *extra])
        assert shown.exit_code == 2 and shown.stdout == "" and error_line(shown.stderr), shown.output
        assert "token 2 (id 60000)" in shown.stderr and "50,257 ids" in shown.stderr, shown.stderr


def test_show_of_an_output_url_reads_the_one_shard_of_the_row(s3_server: S3Server, packed_text: Path) -> None:
    """``show --row`` on an output in the store reads the shard holding the row and no other shard object, counted
    in the server's own log of requests (it fetched every shard into $TMPDIR first)."""
    url = put_output(s3_server, packed_text)
    shards = json.loads((packed_text / "manifest.json").read_text())["shards"]
    assert len(shards) >= 3
    row = shards[0]["rows"] + shards[1]["rows"]  # the first row of the third shard
    with s3_server.recorded() as requests:
        result = runner.invoke(app, ["show", url, "--row", str(row), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["shard"] == shards[2]["file"]
    read = [key for method, key in requests if method == "GET" and key.endswith(".arrow")]
    assert read and {key.rsplit("/", 1)[-1] for key in read} == {shards[2]["file"]}, requests


def test_a_row_its_shard_lacks_is_one_line_naming_the_shard(packed_text: Path, tmp_path: Path) -> None:
    """A manifest entry that claims more rows than its shard holds: ``show`` of a claimed row is one error naming the
    shard (it was an IndexError's traceback)."""
    out = tmp_path / "packed"
    shutil.copytree(packed_text, out)
    manifest = json.loads((out / "manifest.json").read_text())
    held = manifest["shards"][0]["rows"]
    manifest["shards"][0]["rows"] += 1
    manifest["totals"]["sequences"] += 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["show", str(out), "--row", str(held)])
    assert result.exit_code == 1, result.output
    shard = out / manifest["shards"][0]["file"]
    assert error_line(result.stderr) == (
        f"error: {shard}: holds {held} rows, fewer than its manifest entry says: run packcli verify"
    )


def test_show_positions_of_an_output_without_position_ids_are_rebuilt_from_cu_seqlens(
    tiny_corpus: Path, tmp_path: Path
) -> None:
    """``show --positions`` on a ``--no-position-ids`` output prints what the stored column would have held."""
    shown, row = {}, ""
    for name, extra in (("lean", ["--no-position-ids"]), ("full", [])):
        args = ["pack", str(tiny_corpus), "--max-len", "256", "--out", str(tmp_path / name), "--quiet", *extra]
        assert runner.invoke(app, args).exit_code == 0
        if not row:  # a row of several documents
            row = str(next(k for k, cu in enumerate(shard_rows(tmp_path / name).column("cu_seqlens")) if len(cu) > 3))
        result = runner.invoke(app, ["show", str(tmp_path / name), "--row", row, "--positions", "--json"])
        assert result.exit_code == 0, result.output
        shown[name] = json.loads(result.stdout)
    assert shown["lean"] == shown["full"] and len(shown["lean"]["documents"]) > 1
    for document in shown["lean"]["documents"]:
        assert [token["position"] for token in document["tokens"]] == list(range(document["length"]))
    human = runner.invoke(app, ["show", str(tmp_path / "lean"), "--row", row, "--positions"])
    assert human.exit_code == 0 and len(re.findall(r"^\s+0\s+\d+\s+'", human.stdout, flags=re.M)) == len(
        shown["lean"]["documents"]
    )


def test_show_tells_special_token_text_held_as_text_from_the_special_id(tmp_path: Path) -> None:
    """Under the built-in ChatML a user's literal `<|im_end|>` stays text (several tokens), which decodes exactly as
    the special id does: `show` names such text apart, per document (`--json`: `literal_specials`), and says
    nothing of a document whose special-token text is all special ids."""
    chats = [
        {
            "messages": [
                {"role": "user", "content": "What does <|im_end|> do?"},
                {"role": "assistant", "content": "Ends."},
            ]
        },
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
    ]
    path, out = write_jsonl(tmp_path / "chats.jsonl", chats), tmp_path / "o"
    tokenizer = str(shared_path("tokenizers/qwen"))
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", tokenizer, "--no-shuffle"]
    assert runner.invoke(app, [*args, "--max-len", "256", "--out", str(out)]).exit_code == 0
    shown = runner.invoke(app, ["show", str(out), "--json"])
    assert shown.exit_code == 0, shown.output
    documents = {doc["source"]["record"]: doc for doc in json.loads(shown.stdout)["documents"]}
    assert documents[1]["literal_specials"] == ["<|im_end|>"] and documents[2]["literal_specials"] == []
    printed = runner.invoke(app, ["show", str(out)])
    held = [line for line in printed.stdout.splitlines() if "not a special token" in line]
    assert held == ["   text '<|im_end|>' here is plain text, not a special token"], printed.stdout


def test_a_damaged_shard_or_listing_is_named_as_damage(packed_text: Path, tmp_path: Path) -> None:
    """show said pyarrow's words alone of a shard it could not read (``error: Invalid flatbuffers message.``, no
    file), and took a manifest listing no shard, its totals holding rows, for a usage error (exit 2, '--row 0 is
    out of range'): each is damage now, exit 1, as stats says it."""
    flipped = tmp_path / "flipped"
    shutil.copytree(packed_text, flipped)
    shard = flipped / "shard-00000.arrow"
    data = bytearray(shard.read_bytes())
    data[4] ^= 0xFF  # inside the first message's header
    shard.write_bytes(bytes(data))
    result = runner.invoke(app, ["show", str(flipped), "--row", "0"])
    assert result.exit_code == 1 and error_line(result.stderr).startswith(f"error: {shard}: unreadable shard ("), (
        result.stderr
    )
    emptied = tmp_path / "emptied"
    shutil.copytree(packed_text, emptied)
    manifest = json.loads((emptied / "manifest.json").read_text())
    (emptied / "manifest.json").write_text(json.dumps({**manifest, "shards": []}))
    result = runner.invoke(app, ["show", str(emptied), "--row", "0"])
    assert result.exit_code == 1 and "manifest key 'shards'" in error_line(result.stderr), result.stderr
