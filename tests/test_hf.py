"""``packcli.pack()``: a datasets.Dataset (or IterableDataset, or files) in, the output written as ``pack`` writes
it, and a datasets.Dataset memory-mapped from the shards out; ``import packcli`` does not import datasets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from fractions import Fraction
from functools import partial
from pathlib import Path

import datasets
import numpy as np
import pytest
from typer.testing import CliRunner

import packcli
from packcli.cli import app
from packcli.errors import PackcliError, UsageError
from tests.conftest import SAMPLE, read_jsonl, shared_path, write_jsonl


def shard_hashes(out: Path) -> list[str]:
    return [shard["sha256"] for shard in json.loads((out / "manifest.json").read_text())["shards"]]


@pytest.fixture(scope="module")
def records() -> list[dict[str, str]]:
    return [{"text": record["text"]} for record in read_jsonl(SAMPLE)[:10]]


def test_a_dataset_and_a_jsonl_file_of_the_same_texts_give_the_same_shards(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    from_file = packcli.pack(write_jsonl(tmp_path / "a.jsonl", records), max_len=128, out=tmp_path / "file")
    dataset = datasets.Dataset.from_list([{**record, "id": n} for n, record in enumerate(records)])
    from_dataset = packcli.pack(dataset, max_len=128, out=tmp_path / "dataset")
    assert shard_hashes(tmp_path / "file") == shard_hashes(tmp_path / "dataset")
    assert from_dataset.column_names == ["input_ids", "position_ids", "cu_seqlens"]
    assert from_dataset[:] == from_file[:]
    # memory-mapped from the shard itself, not copied
    assert [Path(f["filename"]).parent for f in from_dataset.cache_files] == [tmp_path / "dataset"]
    streamed = packcli.pack(dataset.to_iterable_dataset(), max_len=128, out=tmp_path / "iterable")
    assert shard_hashes(tmp_path / "iterable") == shard_hashes(tmp_path / "file") and len(streamed) == len(from_file)


def test_the_same_dataset_again_is_up_to_date_and_a_bad_record_is_named_by_its_row(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "packed"
    packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    manifest = (out / "manifest.json").stat()
    again = packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    assert (out / "manifest.json").stat().st_mtime_ns == manifest.st_mtime_ns  # nothing rewritten
    assert len(again) > 0
    assert [entry["path"] for entry in json.loads((out / "manifest.json").read_text())["inputs"]] == ["<dataset>"]
    with pytest.raises(PackcliError, match=r"other inputs|another"):
        packcli.pack(datasets.Dataset.from_list(records[:5]), max_len=128, out=out)
    bad = datasets.Dataset.from_list([*records[:3], {"text": ""}, {"text": None}])
    with pytest.raises(PackcliError) as caught:
        packcli.pack(bad, max_len=128, out=tmp_path / "bad")
    assert str(caught.value).startswith("<dataset>:") and "dataset.arrow" not in str(caught.value)


def test_fine_tuning_columns_and_options_pass_through(tmp_path: Path) -> None:
    rows = read_jsonl(shared_path("data/bigbench_sft.jsonl"))[:20]
    dataset = datasets.Dataset.from_list([{"q": row["prompt"], "a": row["response"]} for row in rows])
    with pytest.warns(packcli.PackcliDataLossWarning, match="^overflow drop left out "):  # fine-tuning drops
        packed = packcli.pack(
            dataset, max_len=512, out=tmp_path / "sft", prompt_field="q", response_field="a", strategy="ffd", seed=3
        )
    manifest = json.loads((tmp_path / "sft" / "manifest.json").read_text())
    assert manifest["strategy"] == "ffd" and manifest["options"]["seed"] == 3
    assert "labels" in packed.column_names
    assert (
        sum(sum(label != -100 for label in row) for row in packed["labels"]) == manifest["totals"]["supervised_tokens"]
    )


def test_bad_options_and_columns_are_one_clear_error(records: list[dict[str, str]], tmp_path: Path) -> None:
    dataset = datasets.Dataset.from_list(records)
    with pytest.raises(UsageError, match="unknown pack option"):
        packcli.pack(dataset, max_len=128, out=tmp_path / "x", max_length=3)
    with pytest.raises(UsageError, match="no column 'body'"):
        packcli.pack(dataset, max_len=128, out=tmp_path / "x", text_field="body")
    with pytest.raises(
        UsageError, match=r"one dataset, not a dict of splits \(train\): pass one, e.g. source\['train'\]"
    ):
        packcli.pack(datasets.DatasetDict({"train": dataset}), max_len=128, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_import_packcli_does_not_import_datasets() -> None:
    code = "import sys, packcli; print('datasets' in sys.modules, callable(packcli.pack), 'datasets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True", "False"]


def test_a_first_batch_of_none_texts_is_bad_records_not_a_crash(records: list[dict[str, str]], tmp_path: Path) -> None:
    # a column that is all None in the first thousand rows is Arrow type null there: the dataset's own features
    # give the column its type, so the Nones are bad records (counted) and the texts after them packed
    dataset = datasets.Dataset.from_list([{"text": None}] * 1000 + records)
    with pytest.warns(packcli.PackcliDataLossWarning, match=r"^1,000 bad records skipped \(skip_bad_records=True\)"):
        packed = packcli.pack(dataset, max_len=128, out=tmp_path / "packed", skip_bad_records=True)
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert manifest["totals"]["bad_records"] == 1000 and manifest["totals"]["input_documents"] == len(records)
    assert len(packed) == manifest["totals"]["sequences"]
    with pytest.raises(PackcliError, match=r"^<dataset>:1: "):
        packcli.pack(dataset, max_len=128, out=tmp_path / "strict")


def test_a_streamed_column_that_changes_type_is_one_error_naming_the_row(tmp_path: Path) -> None:
    def changing() -> Iterator[dict[str, object]]:
        yield from ({"text": None} for _ in range(1000))
        yield {"text": "a text after a thousand Nones"}

    streamed = datasets.IterableDataset.from_generator(changing)
    with pytest.raises(PackcliError, match=r"^<dataset>:1001: column 'text' is string here, null in the rows before"):
        packcli.pack(streamed, max_len=128, out=tmp_path / "packed")
    assert not (tmp_path / "packed").exists()

    def number_after_texts() -> Iterator[dict[str, object]]:
        yield from ({"text": f"text {n}"} for n in range(1000))
        yield {"text": 5}  # once cast to the text "5" and packed

    streamed = datasets.IterableDataset.from_generator(number_after_texts)
    with pytest.raises(PackcliError, match=r"^<dataset>:1001: column 'text' is int64 here, string in the rows before"):
        packcli.pack(streamed, max_len=128, out=tmp_path / "packed")


def test_an_empty_dataset_is_refused_as_an_empty_file_is(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(PackcliError) as from_file:
        packcli.pack(tmp_path / "empty.jsonl", max_len=128, out=tmp_path / "a")
    with pytest.raises(PackcliError) as from_dataset:
        packcli.pack(datasets.Dataset.from_dict({"text": []}), max_len=128, out=tmp_path / "b")
    assert str(from_dataset.value) == str(from_file.value).replace(str(tmp_path / "empty.jsonl"), "<dataset>")
    assert "no documents" in str(from_dataset.value)


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("max_len", "128", "max_len must be a whole number, got '128'"),
        ("max_len", 128.5, "max_len must be a whole number, got 128.5"),
        ("max_len", True, "max_len must be a whole number, got True"),
        ("seed", 1.5, "seed must be a whole number, got 1.5"),
        ("shuffle", "no", "shuffle must be True or False, got 'no'"),
        ("text_field", 3, "text_field must be a string, got 3"),
        # None only where the field documents it as a meaning (tokenizer=None: the bundled GPT-2)
        *((name, None, f"{name} must be True or False, got None") for name in ("eos", "bos", "shuffle")),
        ("position_ids", None, "position_ids must be True or False, got None"),
        ("skip_bad_records", None, "skip_bad_records must be True or False, got None"),
        ("max_len", None, "max_len must be a whole number, got None"),
        ("seed", None, "seed must be a whole number, got None"),
        ("shard_size", None, "shard_size must be a whole number or text such as '512MiB', got None"),
        ("text_field", None, "text_field must be a string, got None"),
        ("weights", 1, "weights must be a list of numbers or text such as '0.7,0.3', got 1"),
        ("weights", [], "weights takes one weight per input, got none"),
        ("weights", [True], "weights must be a list of numbers or text such as '0.7,0.3', got [True]"),
        ("weights", ["1"], "weights must be a list of numbers or text such as '0.7,0.3', got ['1']"),
    ],
)
def test_an_option_of_the_wrong_type_is_a_usage_error_naming_it(
    records: list[dict[str, str]], tmp_path: Path, option: str, value: object, words: str
) -> None:
    given = {"max_len": 128, option: value}
    with pytest.raises(UsageError, match=f"^{re.escape(words)}$"):
        packcli.pack(datasets.Dataset.from_list(records), out=tmp_path / "x", **given)  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("weights", "words"),
    [
        (
            [float("inf"), 1],
            "weights inf is beyond what a float holds (at most about 1.797e308): give weights such as 0.7,0.3",
        ),
        ([1, float("nan")], "weights nan is not a number: give weights such as 0.7,0.3"),
        (
            [10**400, 1],
            "weights 100000000000000000...0000000000000000000 is beyond what a float holds (at most about 1.797e308): give weights "
            "such as 0.7,0.3",
        ),
        (
            [Fraction(1, 10**400), 1],
            "weights Fraction(1, 1...0000000000000) reads as 0, which would leave its input out: write 0 for "
            "that, or a weight of at least 5e-324",
        ),
    ],
)
def test_a_weight_a_float_cannot_hold_is_a_usage_error_naming_it_as_given(
    records: list[dict[str, str]], tmp_path: Path, weights: list[object], words: str
) -> None:
    """inf and nan were refused as "got inf,1" whatever was given, an int past a float's range raised
    OverflowError, and a Fraction below a float's smallest read as 0, leaving its input out without a word."""
    inputs = [write_jsonl(tmp_path / name, records) for name in ("a.jsonl", "b.jsonl")]
    with pytest.raises(UsageError, match=f"^{re.escape(words)}$"):
        packcli.pack(inputs, max_len=128, out=tmp_path / "x", weights=weights)
    assert not (tmp_path / "x").exists()


def test_numpy_integers_are_taken_as_plain_ones(records: list[dict[str, str]], tmp_path: Path) -> None:
    packcli.pack(datasets.Dataset.from_list(records), max_len=np.int64(128), out=tmp_path / "x", seed=np.int32(2))
    options = json.loads((tmp_path / "x" / "manifest.json").read_text())["options"]
    assert (options["max_len"], options["seed"]) == (128, 2)


def test_an_output_url_is_refused_not_written_to_a_local_folder_named_after_it(
    records: list[dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"^packcli\.pack\(\) returns the output memory-mapped: out must be a local"):
        packcli.pack(datasets.Dataset.from_list(records), max_len=128, out="s3://bucket/packed")
    assert list(tmp_path.iterdir()) == []  # it once packed into ./s3:/bucket/packed


def test_a_dataset_is_not_cut_into_partitions_as_standard_input_is_not(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    """A dataset is spooled to a local temporary file, as standard input is: workers on other machines cannot read
    it, and it is cut otherwise than the same records in a file (a partitioned dataset gave other shards than the
    same JSON Lines). So it is refused as `-` is, and partitions=1 on the local engine is the plain run."""
    dataset = datasets.Dataset.from_list(records)
    for options in ({"partitions": 2}, {"partition_size": "1MiB"}, {"partitions": 1, "engine": "ray"}):
        with pytest.raises(UsageError, match=r"^a dataset cannot be cut into partitions or sent to workers \("):
            packcli.pack(dataset, max_len=128, out=tmp_path / "x", **options)
    assert not (tmp_path / "x").exists()
    packcli.pack(dataset, max_len=128, out=tmp_path / "one", partitions=1)
    packcli.pack(dataset, max_len=128, out=tmp_path / "plain")
    assert shard_hashes(tmp_path / "one") == shard_hashes(tmp_path / "plain")


def test_a_returned_dataset_keeps_its_rows_when_the_output_is_repacked_in_place(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "packed"
    first = packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    rows = first[:]
    second = packcli.pack(datasets.Dataset.from_list(records[:4]), max_len=64, out=out, overwrite=True)
    assert first[:] == rows  # its shard was replaced, not rewritten: the mapping still holds the old file
    assert len(second) == json.loads((out / "manifest.json").read_text())["totals"]["sequences"] != len(first)
    assert max(len(row) for row in second["input_ids"]) <= 64


def test_a_stream_that_fails_midway_leaves_no_output_and_no_spool(
    records: list[dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing() -> Iterator[dict[str, str]]:
        yield from records * 150  # past the first batches written to the spool
        raise ConnectionError("the source went away")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(ConnectionError, match="the source went away"):
        packcli.pack(datasets.IterableDataset.from_generator(failing), max_len=128, out=tmp_path / "packed")
    assert not (tmp_path / "packed").exists() and list((tmp_path / "tmp").iterdir()) == []


def test_the_cache_files_a_map_writes_beside_the_shards_go_with_the_output_they_were_derived_from(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "packed"
    packed = packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    lengths = packed.map(lambda row: {"n": len(row["input_ids"])}).filter(lambda row: row["n"] > 1)
    cached = sorted(path.name for path in out.glob("cache-*.arrow"))
    assert len(cached) >= 2 and len(lengths) > 0  # datasets writes its map and filter results beside the shards
    assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0  # the output is still whole
    repacked = packcli.pack(datasets.Dataset.from_list(records[:4]), max_len=64, out=out, overwrite=True)
    assert list(out.glob("cache-*.arrow")) == []  # derived from the replaced shards: stale, so gone with them
    again = repacked.map(lambda row: {"n": len(row["input_ids"])})
    assert again["n"] == [len(row) for row in repacked["input_ids"]] and max(again["n"]) <= 64
    (out / "notes.txt").write_text("mine")
    with pytest.raises(PackcliError, match=r"notes\.txt"):  # any other file still stops a replacement
        packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out, overwrite=True)


def test_errors_name_keyword_arguments_not_command_line_flags(records: list[dict[str, str]], tmp_path: Path) -> None:
    """A Python caller is told what to pass to pack(), not which flag to type."""
    out = tmp_path / "packed"
    packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    with pytest.raises(PackcliError) as other:
        packcli.pack(datasets.Dataset.from_list(records), max_len=256, out=out)
    assert "pass overwrite=True to replace it" in str(other.value) and "--" not in str(other.value)
    with pytest.raises(UsageError) as bad:
        packcli.pack(datasets.Dataset.from_list(records), max_len=0, out=tmp_path / "x")
    assert str(bad.value) == "max_len must be at least 1, got 0"
    path = write_jsonl(tmp_path / "a.jsonl", records)
    with pytest.raises(UsageError) as partitions:
        packcli.pack(path, max_len=128, out=tmp_path / "y", partitions=7)
    assert re.search(r"ask for partitions=\d+, which", str(partitions.value)) and "--" not in str(partitions.value)
    other_path = write_jsonl(tmp_path / "b.jsonl", records)
    with pytest.raises(UsageError, match=r"^cannot read weights '1,x': give one number per input"):
        packcli.pack([path, other_path], max_len=128, out=tmp_path / "z", weights="1,x")


def test_weights_and_counts_are_taken_as_text_as_the_command_line_takes_them(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    a, b = write_jsonl(tmp_path / "a.jsonl", records), write_jsonl(tmp_path / "b.jsonl", records[:5])
    packcli.pack([a, b], max_len=128, out=tmp_path / "api", weights="0.7,0.3", target_tokens="2k")
    result = CliRunner().invoke(
        app, ["pack", str(a), str(b), "--max-len", "128", "--weights", "0.7,0.3", "--target-tokens", "2k",
              "--out", str(tmp_path / "cli")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert shard_hashes(tmp_path / "api") == shard_hashes(tmp_path / "cli")


def test_a_file_name_in_a_message_is_never_rewritten_as_a_keyword(
    records: list[dict[str, str]], tmp_path: Path
) -> None:
    """Only flags become keyword arguments: a file of the user's whose name holds ``--overwrite`` is named as it is."""
    out = tmp_path / "packed"
    packcli.pack(datasets.Dataset.from_list(records), max_len=128, out=out)
    (out / "notes--overwrite.txt").write_text("mine")
    with pytest.raises(PackcliError, match=r"'notes--overwrite\.txt'"):
        packcli.pack(datasets.Dataset.from_list(records), max_len=64, out=out, overwrite=True)


@pytest.mark.parametrize("position_ids", [True, False])
def test_the_returned_dataset_goes_through_packcli_s_collators_as_the_loader_s_rows_do(
    tmp_path: Path, position_ids: bool
) -> None:
    """A Trainer given the returned dataset and ``collate_padded`` or ``collate_varlen`` gets the batches the
    loader builds from the same rows, labels included; only ``row_index``, the loader's own count, is absent. With
    ``position_ids=False`` (``--no-position-ids``) the rows hold no positions and the collators rebuild them."""
    from packcli.torch import PackedDataset, collate_padded, collate_varlen

    pairs = [{"prompt": f"Q{n}: what is {n} squared? A:", "response": f" {n * n}."} for n in range(40)]
    returned = packcli.pack(
        datasets.Dataset.from_list(pairs), max_len=64, out=tmp_path / "p", prompt_field="prompt",
        response_field="response", shuffle=False, position_ids=position_ids,
    )  # fmt: skip
    assert ("position_ids" in returned.column_names) is position_ids
    loader_rows = list(PackedDataset(tmp_path / "p", shuffle=False))
    assert len(returned) == len(loader_rows) > 1
    for collate in (partial(collate_padded, max_len=64, pad_id=50256), partial(collate_varlen, pad_id=50256)):
        from_dataset = collate([returned[0], returned[1]])
        from_loader = collate(loader_rows[:2])
        assert "row_index" not in from_dataset and sorted(from_dataset) == sorted(set(from_loader) - {"row_index"})
        for key, value in from_dataset.items():
            assert (
                value.tolist() == from_loader[key].tolist() if hasattr(value, "tolist") else value == from_loader[key]
            )


def test_pack_warns_of_every_loss_the_command_line_warns_of(tmp_path: Path) -> None:
    """Overflow drop (or truncate) losing more than 1% of the tokens: the command line warns even with --quiet;
    pack() raises a warning of its own category, worded with keyword arguments, on the first run and when up to
    date; a run that loses nothing warns of nothing."""
    chats = [{"text": f"question {n}: " + "word " * (300 if n % 4 == 0 else 20)} for n in range(12)]
    corpus = write_jsonl(tmp_path / "c.jsonl", chats)
    quiet = CliRunner().invoke(app, ["pack", str(corpus), "--max-len", "64", "--overflow", "drop", "--quiet",
                                     "--out", str(tmp_path / "cli")])  # fmt: skip
    said = quiet.stderr.removeprefix("warning: ").strip()
    assert quiet.exit_code == 0 and said.startswith("--overflow drop left out 3 documents longer than --max-len 64")
    dataset = datasets.Dataset.from_list(chats)
    for _ in range(2):  # packed, then up to date
        with pytest.warns(packcli.PackcliDataLossWarning) as caught:
            packcli.pack(dataset, max_len=64, out=tmp_path / "api", overflow="drop")
        [message] = [str(w.message) for w in caught]
        assert message.startswith("overflow drop left out 3 documents longer than max_len=64: 915 of 1,140 input")
        assert said.startswith("--overflow drop left out 3 documents longer than --max-len 64: 915 of 1,140 input")
        assert caught[0].filename == __file__ and issubclass(caught[0].category, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packcli.pack(dataset, max_len=64, out=tmp_path / "kept")  # split keeps every token


def test_pack_of_a_directory_warns_of_the_files_it_does_not_read(tmp_path: Path) -> None:
    """A directory holding files packcli does not read: the command line names them in a warning; pack() said
    nothing (the manifest alone counted them in unread_files)."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    write_jsonl(inputs / "a.jsonl", [{"text": f"document {n} " + "word " * 20} for n in range(8)])
    (inputs / "notes.txt").write_text("not a corpus\n")
    (inputs / "table.csv").write_text("a,b\n1,2\n")
    with pytest.warns(packcli.PackcliDataLossWarning) as caught:
        packcli.pack(inputs, max_len=64, out=tmp_path / "api")
    [message] = [str(w.message) for w in caught]
    assert message.startswith("2 files found in the inputs not read (packcli reads .jsonl")
