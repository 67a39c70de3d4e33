"""Pre-tokenized input (--ids-field): ids from a real tokenizer on real text, written as JSONL, Parquet and Arrow,
packed as given and read back exactly; EOS rules; bad ids named by file and line; labels; the run identity."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, error_line, read_jsonl, shared_path, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer
from packcli.format.shards import read_shard
from packcli.options import PackOptions
from packcli.report.stats import packed_stats
from packcli.report.verify import verify_output
from packcli.run.driver import pack_corpus
from packcli.run.setup import set_up

# under make test (-n 2 --dist loadgroup) the module keeps to one worker: ``documents`` (the sample encoded) is
# built once, not once on each worker
pytestmark = pytest.mark.xdist_group("pretokenized")
runner = CliRunner()
GPT2_EOS = 50256


@pytest.fixture(scope="module")
def documents() -> list[list[int]]:
    """The bundled sample's texts as GPT-2 ids (the real tokenizer on real text), a few of them over 2048."""
    tokenizer = load_tokenizer().tokenizer
    texts = [record["text"] for record in read_jsonl(SAMPLE)][:80]
    return [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


def rows(out: Path, column: str = "input_ids") -> list[tuple[list[int], list[int]]]:
    """(values, cu_seqlens) of every row, in shard order."""
    out_rows = []
    for path in sorted(out.glob("shard-*.arrow")):
        table = read_shard(path)
        out_rows += list(zip(table.column(column).to_pylist(), table.column("cu_seqlens").to_pylist()))
    return out_rows


def unpacked(out: Path, max_len: int) -> list[list[int]]:
    """The packed documents in row order, split pieces joined again (a piece of max_len continues the next)."""
    flat_pieces = [ids[a:b] for ids, cu in rows(out) for a, b in zip(cu, cu[1:])]
    joined: list[list[int]] = []
    carry: list[int] = []
    for piece in flat_pieces:
        carry += piece
        if len(piece) < max_len:
            joined.append(carry)
            carry = []
    return [*joined, carry] if carry else joined


def write_table(path: Path, documents: list[list[int]], value_type: pa.DataType) -> Path:
    table = pa.table({"input_ids": pa.array(documents, type=pa.list_(value_type)), "n": list(range(len(documents)))})
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=25)
    else:
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table, max_chunksize=30)
    return path


def test_jsonl_round_trip_in_order_packs_the_ids_as_given(tmp_path: Path, documents: list[list[int]]) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", [{"input_ids": ids, "id": k} for k, ids in enumerate(documents)])
    options = PackOptions(max_len=2048, ids_field="input_ids", strategy="greedy", shuffle=False)
    result = pack_corpus([str(path)], options, tmp_path / "out")
    assert unpacked(tmp_path / "out", 2048) == documents  # no EOS: none asked for, no tokenizer given
    assert any(len(ids) > 2048 for ids in documents) and result.manifest["totals"]["split_documents"] > 0
    tokenizer = result.manifest["tokenizer"]
    assert tokenizer["ran"] is False and tokenizer["name"] is None and tokenizer["vocab_size"] is None
    assert tokenizer["eos_id"] is None
    assert result.manifest["totals"]["tokens"] == sum(map(len, documents))
    assert verify_output(tmp_path / "out").ok
    assert packed_stats(tmp_path / "out")["tokens"] == sum(map(len, documents))


@pytest.mark.parametrize(("name", "value_type"), [("ids.parquet", pa.int32()), ("ids.arrow", pa.int64())])
def test_parquet_and_arrow_round_trip_with_eos(
    tmp_path: Path, documents: list[list[int]], name: str, value_type: pa.DataType
) -> None:
    path = write_table(tmp_path / name, documents, value_type)
    out = tmp_path / "out"
    flags = ["--ids-field", "input_ids", "--eos-id", str(GPT2_EOS), "--max-len", "65536", "--out", str(out)]
    result = runner.invoke(app, ["pack", str(path), *flags])
    assert result.exit_code == 0, result.output
    packed = sorted(tuple(ids[a:b]) for ids, cu in rows(out) for a, b in zip(cu, cu[1:]))
    assert packed == sorted(tuple([*ids, GPT2_EOS]) for ids in documents)  # bfd, shuffled rows: the same multiset
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["eos_id"] == GPT2_EOS and manifest["tokenizer"]["ran"] is False
    assert verify_output(out).ok


def test_a_tokenizer_gives_the_eos_and_the_vocabulary_bound(tmp_path: Path, documents: list[list[int]]) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": ids} for ids in documents[:10]])
    gpt2 = shared_path("tokenizers/gpt2/tokenizer.json")
    base = PackOptions(max_len=65536, ids_field="ids", tokenizer=str(gpt2), strategy="greedy", shuffle=False)
    with_eos = pack_corpus([str(path)], base, tmp_path / "eos")
    assert unpacked(tmp_path / "eos", 65536) == [[*ids, GPT2_EOS] for ids in documents[:10]]
    assert with_eos.manifest["tokenizer"]["vocab_size"] == 50257 and with_eos.manifest["tokenizer"]["ran"] is False
    no_eos = dataclasses.replace(base, eos=False)
    pack_corpus([str(path)], no_eos, tmp_path / "none")
    assert unpacked(tmp_path / "none", 65536) == documents[:10]
    # Ids of a bigger vocabulary (tekken: 131,072) are refused against GPT-2's, naming file and line.
    tekken = load_tokenizer(str(shared_path("tokenizers/tekken/tokenizer.json"))).tokenizer
    big = [encoding.ids for encoding in tekken.encode_batch_fast(["plain words", "Grüße, 東京!", "नमस्ते दुनिया"])]
    bad = write_jsonl(tmp_path / "tekken.jsonl", [{"ids": ids} for ids in big])
    line = 1 + next(k for k, ids in enumerate(big) if max(ids) >= 50257)
    assert line == 3
    result = runner.invoke(app, ["pack", str(bad), "--ids-field", "ids", "--tokenizer", str(gpt2)])
    assert result.exit_code == 1
    assert (
        error_line(result.stderr).startswith(f"error: {bad}:{line}: field 'ids' holds ")
        and "vocabulary size 50257" in result.stderr
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, -5, 3], "field 'ids' holds -5 at position 1"),
        ([1, 2**31], "holds 2147483648 at position 1"),
        ([1.5, 2], "is not a list of ints"),
        (["1", "2"], "is not a list of ints"),
        ([[1, 2], [3]], "is not a list of ints"),
        ([1, False, 3], "holds false at position 1: a token id is a number, not true or false"),
        ([True, 2], "holds true at position 0"),
        ("1 2 3", "is a string, not a list of token ids"),
        (None, "is null"),
    ],
)
def test_a_bad_id_is_an_error_naming_file_and_line(tmp_path: Path, value: object, message: str) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [5, 6]}, {"ids": [7]}, {"ids": value}, {"ids": [8]}])
    result = runner.invoke(app, ["pack", str(path), "--ids-field", "ids", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr).startswith(f"error: {path}:3: ") and message in result.stderr
    assert error_line(result.stderr) and not (tmp_path / "o").exists()
    skipped = runner.invoke(
        app, ["pack", str(path), "--ids-field", "ids", "--skip-bad-records", "--out", str(tmp_path / "s"), "--json"]
    )
    assert skipped.exit_code == 0 and json.loads(skipped.stdout)["bad_records"] == 1


def test_a_column_of_strings_is_named_by_row(tmp_path: Path) -> None:
    path = tmp_path / "text.parquet"
    pq.write_table(pa.table({"ids": ["not", "ids"]}), path)
    result = runner.invoke(app, ["pack", str(path), "--ids-field", "ids", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and error_line(result.stderr).startswith(f"error: {path}:1: field 'ids' is a string")


def test_labels_become_the_labels_column(tmp_path: Path, documents: list[list[int]]) -> None:
    records = []
    for ids in documents[:30]:
        ids = ids[:300]
        cut = len(ids) // 3  # the first third is the "prompt": no loss taken there
        records.append({"ids": ids, "labels": [-100] * cut + ids[cut:]})
    records.append({"ids": [11, 12], "labels": [-100, -100]})  # nothing supervised: counted as empty
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    options = PackOptions(max_len=1024, ids_field="ids", labels_field="labels", eos_id=GPT2_EOS, shuffle=False)
    result = pack_corpus([str(path)], options, tmp_path / "o")
    expected = {
        tuple([*r["ids"], GPT2_EOS]): [*r["labels"], GPT2_EOS] for r in records[:-1]
    }  # EOS supervised: it ends a supervised stretch
    got = {}
    for (ids, cu), (labels, _) in zip(rows(tmp_path / "o"), rows(tmp_path / "o", "labels")):
        for a, b in zip(cu, cu[1:]):
            got[tuple(ids[a:b])] = labels[a:b]
    assert got == expected
    assert result.manifest["totals"]["empty_documents"] == 1
    assert result.manifest["totals"]["supervised_tokens"] == sum(
        sum(x != -100 for x in r["labels"]) + 1 for r in records[:-1]
    )
    assert verify_output(tmp_path / "o").ok


def test_labels_that_disagree_with_the_ids_are_bad_records(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "sft.jsonl", [{"ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"ids": [1, 2], "labels": [-100, 3]}]
    )
    result = runner.invoke(app, ["pack", str(path), "--ids-field", "ids", "--labels-field", "labels"])
    assert result.exit_code == 1 and error_line(result.stderr).startswith(
        f"error: {path}:2: field 'labels' holds 3 at position 1"
    )
    short = write_jsonl(tmp_path / "short.jsonl", [{"ids": [5, 6, 7], "labels": [-100, 6]}])
    result = runner.invoke(app, ["pack", str(short), "--ids-field", "ids", "--labels-field", "labels"])
    assert result.exit_code == 1 and "holds 2 labels for 3 ids" in result.stderr


def test_a_boolean_label_is_a_bad_record_not_the_id_1(tmp_path: Path) -> None:
    records = [{"ids": [5, 1, 7], "labels": [-100, 1, 7]}, {"ids": [5, 1], "labels": [-100, True]}]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    args = ["pack", str(path), "--ids-field", "ids", "--labels-field", "labels", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and error_line(result.stderr).startswith(
        f"error: {path}:2: field 'labels' holds true at position 1"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ids-field", "ids", "--prompt-field", "p", "--response-field", "r"], "--prompt-field does not combine"),
        (["--ids-field", "ids", "--messages-field", "m"], "--messages-field does not combine"),
        (["--labels-field", "labels"], "--labels-field is for pre-tokenized records"),
        (["--eos-id", "2"], "--eos-id is for pre-tokenized records"),
        (["--ids-field", "ids", "--eos-id", "2", "--no-eos"], "contradict"),
        (["--ids-field", "ids", "--eos-id", str(2**31)], "--eos-id must be in [0, 2^31)"),
        (["--ids-field", "ids", "--bos"], "--bos with --ids-field needs --tokenizer"),
        (["--ids-field", "ids", "--loss-on", "all"], "--loss-on is for chat records"),
    ],
)
def test_flags_that_do_not_combine_are_usage_errors(tmp_path: Path, flags: list[str], message: str) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [1, 2]}])
    result = runner.invoke(app, ["pack", str(path), *flags, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and error_line(result.stderr)


def test_the_run_identity_covers_what_decides_the_bytes(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [1, 2], "other": [3, 4], "labels": [-100, 2]}])

    def keys(**options: object) -> tuple[str, str]:
        setup = set_up([str(path)], PackOptions(**options))  # type: ignore[arg-type]
        assert setup.tokenizer is None or "tokenizer" in options  # no tokenizer loaded unless asked for
        return setup.fingerprint(), setup.cache_key()

    base = keys(ids_field="ids")
    assert keys(ids_field="ids") == base
    variants = [
        keys(ids_field="other"),
        keys(ids_field="ids", eos_id=7),
        keys(ids_field="ids", labels_field="labels"),
        keys(ids_field="ids", tokenizer=str(shared_path("tokenizers/gpt2/tokenizer.json"))),
    ]
    for fingerprint, cache_key in variants:
        assert fingerprint != base[0] and cache_key != base[1]
    assert len({v[0] for v in variants}) == len(variants)
    fingerprint, cache_key = keys(ids_field="ids", seed=3)  # the row order changes, the tokens do not
    assert fingerprint != base[0] and cache_key == base[1]


HUGE = b"7" * 5000  # beyond the 4,300 digits Python's json turns into an int


@pytest.mark.parametrize("name", ["ids.jsonl", "ids.json"])
def test_a_huge_number_beside_the_ids_leaves_them_ids(tmp_path: Path, name: str) -> None:
    """A record holding an int of over 4,300 digits in a field packcli does not read was read again with every int
    a float, so its ids (and in a .json array, every record's) were refused as 'not a list of ints'."""
    records = [b'{"ids": [5, 6], "n": ' + HUGE + b"}", b'{"ids": [7]}']
    path = tmp_path / name
    path.write_bytes(b"[" + b",".join(records) + b"]" if name.endswith(".json") else b"\n".join(records) + b"\n")
    result = runner.invoke(app, ["pack", str(path), "--ids-field", "ids", "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["input_documents"], summary["bad_records"], summary["tokens"]) == (2, 0, 3)


def test_a_huge_token_id_is_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "ids.jsonl"
    path.write_bytes(b'{"ids": [5, ' + HUGE + b"]}\n" + b'{"ids": [7]}\n')
    result = runner.invoke(app, ["pack", str(path), "--ids-field", "ids", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert error_line(result.stderr) == f"error: {path}:1: field 'ids' is not a list of ints (token ids)"
    flags = ["--ids-field", "ids", "--skip-bad-records", "--out", str(tmp_path / "s"), "--json"]
    skipped = runner.invoke(app, ["pack", str(path), *flags])
    assert skipped.exit_code == 0 and json.loads(skipped.stdout)["bad_records"] == 1
