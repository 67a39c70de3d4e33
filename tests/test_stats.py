"""stats: figures checked against values computed by hand or independently, on real packed outputs and raw corpora."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import (
    REPO,
    SAMPLE,
    documented_names,
    error_line,
    json_keys,
    run_writing_no_file_over,
    shared_path,
    write_jsonl,
)
from s3_server import S3Server, put_output
from tokenizers import Tokenizer
from typer.testing import CliRunner

from packcli.cli import app
from packcli.format.manifest import TOTALS
from packcli.options import PackOptions
from packcli.report.max_len import candidate_max_lens, overflow_costs
from packcli.report.padding import baselines
from packcli.report.stats import Measured, measure_output, packed_stats, sequence_stats
from packcli.run.analysis import measure_corpus
from packcli.run.driver import pack_corpus

runner = CliRunner()


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    # " hello" is one GPT-2 token; with EOS the documents are 5, 3, 4, 2 and 6 tokens long.
    return write_jsonl(tmp_path / "small.jsonl", [{"text": " hello" * (n - 1)} for n in (5, 3, 4, 2, 6)])


@pytest.fixture
def paragraphs(tmp_path: Path) -> Path:
    """Real text of many lengths: every paragraph of the demo sample's Python modules as a document (12,124)."""
    records = []
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        for line in handle:
            records += [{"text": part} for part in json.loads(line)["text"].split("\n\n") if part.strip()]
    return write_jsonl(tmp_path / "paragraphs.jsonl", records)


def test_packed_stats_by_hand(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "out")
    stats = packed_stats(tmp_path / "out", batch_size=2)
    # bfd, max_len 8: 6 | 5 | 4 opens three sequences; 3 joins the 5 (room 3), 2 joins the 6 (room 2).
    assert (stats["documents"], stats["tokens"], stats["sequences"]) == (5, 20, 3)
    assert stats["lower_bound_sequences"] == 3 and stats["gap_to_lower_bound"] == 0
    assert stats["packing"] == {"efficiency": 20 / 24, "padding_tokens": 4}
    assert stats["pad_to_max_len"] == {"efficiency": 20 / 40, "padding_tokens": 20}
    # sorted longest first, batches of 2: [6, 5] -> 12 slots, [4, 3] -> 8, [2] -> 2: 22 slots
    assert stats["length_grouped"] == {"batch_size": 2, "efficiency": 20 / 22, "padding_tokens": 2}
    random_slots = 20 + stats["pad_to_longest"]["padding_tokens"]
    assert 22 <= random_slots <= 40 and stats["pad_to_longest"]["seed"] == 0
    assert stats["compute_saved"] == {
        "vs_pad_to_max_len": 40 / 24,
        "vs_pad_to_longest": random_slots / 24,
        "vs_length_grouped": 22 / 24,
    }
    assert stats["documents_per_sequence"] == {"mean": 5 / 3, "max": 2}
    assert stats["steps_per_epoch"] == {"batch_size": 2, "steps": 2, "steps_drop_last": 1}
    assert sum(stats["histograms"]["document_length"]["counts"]) == 5
    assert stats["histograms"]["sequence_fill"]["counts"][-1] == 2  # two full sequences
    assert stats["split_documents"] == 0 and stats["strategy"] == "bfd"
    assert stats["input_documents"] == 5 and stats["input_tokens"] == 20


def test_padding_docstring_example() -> None:
    # packcli/report/padding.py: lengths 6, 1, 5, 2, max_len 8, batches of 2; seed 1 draws the order 6, 1, 5, 2.
    figures = baselines(np.array([6, 1, 5, 2]), 8, 2, seed=1)
    assert figures["pad_to_max_len"]["padding_tokens"] == 32 - 14
    assert figures["pad_to_longest"]["padding_tokens"] == 22 - 14
    assert figures["length_grouped"]["padding_tokens"] == 16 - 14


def test_random_batches_match_the_expected_epoch(tmp_path: Path, paragraphs: Path) -> None:
    """The seeded random-batch figure against an independent computation over the output's document lengths: the
    exact expectation of each batch's longest document when batches are drawn at random without replacement."""
    pack_corpus([str(paragraphs)], PackOptions(max_len=1024), tmp_path / "out")
    cu = pa.ipc.open_stream(pa.memory_map(str(tmp_path / "out" / "shard-00000.arrow"))).read_all().column("cu_seqlens")
    lengths = np.concatenate([np.diff(np.array(row, dtype=np.int64)) for row in cu.to_pylist()])
    batch = 8
    ordered, n = sorted(lengths.tolist()), len(lengths)
    # P(longest of a random batch is the i-th shortest) = (C(i, b) - C(i-1, b)) / C(n, b)
    expected_longest = sum(
        length * (math.comb(i, batch) - math.comb(i - 1, batch)) for i, length in enumerate(ordered, start=1)
    ) / math.comb(n, batch)
    expected = int(lengths.sum()) / (n * expected_longest)
    for seed in (0, 1):
        stats = packed_stats(tmp_path / "out", batch_size=batch, seed=seed)
        assert stats["documents"] == n > 10_000
        assert abs(stats["pad_to_longest"]["efficiency"] - expected) < 0.005, (seed, expected)
    assert stats["pad_to_longest"]["efficiency"] < 0.6 < stats["length_grouped"]["efficiency"]
    assert stats["compute_saved"]["vs_pad_to_longest"] > 1.5
    measured = measure_output(tmp_path / "out")  # the row the plot draws: several documents of distinct lengths
    row = measured.example_row()
    lengths = measured.row_lengths(row)
    fills = np.sort(
        np.add.reduceat(measured.lengths, np.cumsum(measured.documents_per_row) - measured.documents_per_row)
    )
    assert lengths.sum() == fills[(len(fills) - 1) // 2]  # a typical row: the median fill, not the worst
    assert len(lengths) == measured.documents_per_row[row] >= 2 and lengths.sum() <= 1024
    assert len(set((lengths[lengths >= 32]).tolist())) >= 2


def test_the_row_the_plot_draws_is_one_of_the_median_fill() -> None:
    """Not the row of the most documents (80 of 128 tokens here) but a typical one: of the median fill, then the
    most documents, then the most distinct lengths."""
    lengths = np.array([10, 20, 30, 20, 64, 64, 60, 68, 100, 28, 5])
    measured = Measured({"max_len": 128}, lengths, np.array([4, 2, 2, 2, 1]), lengths)
    assert measured.example_row() == 2 and measured.row_lengths(2).tolist() == [60, 68]


def test_percentiles_match_numpy(tmp_path: Path) -> None:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle][:60]  # 60 Python modules, 20 to 40,000 tokens
    corpus = write_jsonl(tmp_path / "modules.jsonl", [{"text": text} for text in texts])
    figures = measure_corpus([str(corpus)], PackOptions(max_len=1024)).figures
    tokenizer = Tokenizer.from_str(
        gzip.decompress((REPO / "packcli/assets/gpt2/tokenizer.json.gz").read_bytes()).decode()
    )
    tokenizer.encode_special_tokens = True
    lengths = np.array(
        [len(encoding.ids) + 1 for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    )
    for q in (50, 90, 99):
        assert figures["lengths"][f"p{q}"] == np.percentile(lengths, q, method="inverted_cdf")
    assert figures["lengths"]["max"] == lengths.max() and figures["lengths"]["tokens"] == lengths.sum()
    assert figures["input_tokens"] == lengths.sum() and figures["input_documents"] == len(lengths) == 60
    candidates = [candidate["max_len"] for candidate in figures["max_len_candidates"]]
    assert 1024 in candidates and candidates == sorted(candidates)
    assert any(m >= figures["lengths"]["p99"] > m // 2 for m in candidates)
    for candidate in figures["max_len_candidates"]:
        over = lengths[lengths > candidate["max_len"]]
        assert candidate["truncate"]["tokens_lost"] == int((over - candidate["max_len"]).sum())
        assert candidate["drop"]["tokens_lost"] == int(over.sum())
        assert candidate["split"]["pieces"] == int(np.ceil(lengths / candidate["max_len"]).sum())
        assert candidate["split"]["sequences"] >= math.ceil(lengths.sum() / candidate["max_len"])


def test_overflow_costs_docstring_example() -> None:
    # packcli/report/lengths.py: lengths 3, 5, 9, 20 at max_len 8.
    costs = overflow_costs(np.array([3, 5, 9, 20]), 8, "bfd")
    assert costs["truncate"]["tokens_lost"] == 13 and costs["drop"]["tokens_lost"] == 29
    assert costs["documents_over"] == 2 and costs["split"]["pieces"] == 7
    assert costs["split"]["sequences"] == 5  # 37 tokens: [8] [8] [8] [5 3] [4 1 ...]: ceil(37 / 8) = 5
    assert candidate_max_lens(p99=628, given=4096) == [256, 512, 1024, 2048, 4096]
    assert candidate_max_lens(p99=1024, given=1024) == [256, 512, 1024, 2048]


def test_overflow_counts_reach_stats(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=4, overflow="drop"), tmp_path / "out")  # type: ignore[arg-type]  # a name works too
    stats = packed_stats(tmp_path / "out")
    assert stats["dropped_documents"] == 2 and stats["documents"] == 3 and stats["tokens"] == 9
    assert stats["dropped_tokens"] == 11 and stats["overflow"] == "drop"


def test_every_manifest_total_is_a_known_name(tmp_path: Path, small_corpus: Path) -> None:
    result = pack_corpus([str(small_corpus)], PackOptions(max_len=4), tmp_path / "out")
    assert set(result.manifest["totals"]) <= set(TOTALS)
    stats = packed_stats(tmp_path / "out")
    assert all(stats[key] == value for key, value in result.manifest["totals"].items())


def test_sequence_stats_on_no_padding() -> None:
    stats = sequence_stats(np.array([4, 4]), np.array([1, 1]), 4, 8)
    assert stats["packing"]["efficiency"] == 1.0 and stats["pad_to_longest"]["padding_tokens"] == 0


def test_raw_corpus_compares_every_strategy(small_corpus: Path) -> None:
    stats = measure_corpus([str(small_corpus)], PackOptions(max_len=8), batch_size=2).figures
    assert set(stats["strategies"]) >= {"bfd", "ffd", "greedy"}
    assert stats["strategies"]["bfd"]["sequences"] == 3 == stats["sequences"]
    # greedy in input order: [5, 3] [4, 2] [6]
    assert stats["strategies"]["greedy"]["sequences"] == 3
    assert stats["strategies"]["greedy"]["documents_per_sequence"]["max"] == 2


def test_stats_cli_json_and_report(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "out")
    result = runner.invoke(app, ["stats", str(tmp_path / "out"), "--json", "--batch-size", "2"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["length_grouped"]["padding_tokens"] == 2
    human = runner.invoke(app, ["stats", str(tmp_path / "out")])
    assert human.exit_code == 0 and "every document alone, padded to max_len" in human.stdout
    assert human.stdout.splitlines()[1].strip().startswith("packing needs") and "sequence fill" in human.stdout
    assert "packed document lengths (tokens; a split document's pieces counted apart)" in human.stdout
    raw = runner.invoke(app, ["stats", str(small_corpus), "--max-len", "8"])
    assert raw.exit_code == 0 and "greedy" in raw.stdout and "choosing --max-len" in raw.stdout
    missing = runner.invoke(app, ["stats", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "no such file" in missing.stderr
    mixed = runner.invoke(app, ["stats", str(tmp_path / "out"), "--max-len", "16", "--no-eos"])
    assert mixed.exit_code == 2 and "--max-len, --no-eos: for a raw corpus" in mixed.stderr


def test_tables_are_not_wrapped_in_a_pipe(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "out")
    lines = runner.invoke(
        app, ["stats", str(small_corpus), "--max-len", "8"], env={"COLUMNS": "80"}
    ).stdout.splitlines()
    assert any("random batches of 8, each padded to its longest" in line for line in lines)
    assert any(line.strip().startswith("packing needs") and "against" in line for line in lines)
    assert any("overflow (split)" in line and "empty texts skipped" in line for line in lines)
    assert max(map(len, lines)) > 80


def test_loss_warning_in_tokens_and_percent(tmp_path: Path, small_corpus: Path) -> None:
    dropped = runner.invoke(
        app, ["pack", str(small_corpus), "--max-len", "4", "--overflow", "drop", "--out", str(tmp_path / "d"), "-q"]
    )
    assert dropped.exit_code == 0
    assert (
        "warning: --overflow drop left out 2 documents longer than --max-len 4: 11 of 20 input tokens lost (55.00%)"
        in dropped.stderr
    )
    # the tokens are the kept ones: said apart from the documents dropped, by pack and by stats alike
    assert dropped.stdout.startswith("packed 3 of 5 documents (2 dropped), 9 tokens, into 3 sequences of max_len 4")
    headline = "3 of 5 documents (2 dropped), 9 tokens, 3 sequences"
    assert headline in runner.invoke(app, ["stats", str(tmp_path / "d")]).stdout
    raw_dropped = runner.invoke(app, ["stats", str(small_corpus), "--max-len", "4", "--overflow", "drop", "-q"])
    assert headline in raw_dropped.stdout, raw_dropped.stdout
    # what to run next names the pack's own options: a fine-tuning corpus has no 'text' field for a bare stats
    assert "`packcli stats CORPUS` with this run's other options shows what other --max-len" in dropped.stderr
    truncated = runner.invoke(
        app, ["pack", str(small_corpus), "--max-len", "4", "--overflow", "truncate", "--out", str(tmp_path / "t")]
    )
    assert "--overflow truncate cut 2 documents to --max-len 4: 3 of 20 input tokens lost (15.00%)" in truncated.stderr
    stats = runner.invoke(app, ["stats", str(tmp_path / "t")])
    assert "3 of 20 input tokens lost (15.00%)" in stats.stderr and "(15.00% of the input tokens)" in stats.stdout
    raw = runner.invoke(app, ["stats", str(small_corpus), "--max-len", "4", "--overflow", "drop", "--json"])
    assert "11 of 20 input tokens lost (55.00%)" in raw.stderr and json.loads(raw.stdout)["dropped_tokens"] == 11
    kept = runner.invoke(
        app, ["pack", str(small_corpus), "--max-len", "5", "--overflow", "drop", "--out", str(tmp_path / "k")]
    )
    assert "left out 1 document longer than --max-len 5: 6 of 20 input tokens lost (30.00%)" in kept.stderr
    split = runner.invoke(app, ["pack", str(small_corpus), "--max-len", "4", "--out", str(tmp_path / "s")])
    assert "lost" not in split.stderr
    assert split.stdout.startswith("packed 5 documents, split into 7 pieces (20 tokens), into 5 sequences of max_len 4")
    assert "1 shard in" in split.stdout and "  split documents: 2" in split.stdout


def test_stats_tokenization_is_reused_by_pack(tmp_path: Path, small_corpus: Path) -> None:
    first = measure_corpus([str(small_corpus)], PackOptions(max_len=8)).figures
    cache_entry = Path(first["tokenization_cache"])
    assert cache_entry.is_dir()
    again = measure_corpus([str(small_corpus)], PackOptions(max_len=16)).figures  # another max_len: same tokens
    assert again["tokenization_cache"] == first["tokenization_cache"] and again["sequences"] == 2
    reused = pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "reused")
    assert reused.from_cache and not cache_entry.exists()  # pack consumed the entry
    fresh = pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "fresh")
    assert not fresh.from_cache
    for name in ("shard-00000.arrow",):
        assert (tmp_path / "reused" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()
    assert reused.manifest["totals"] == fresh.manifest["totals"]


CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
COMPARED = (
    "documents",
    "tokens",
    "sequences",
    "input_documents",
    "input_tokens",
    "split_documents",
    "truncated_tokens",
    "dropped_documents",
    "dropped_tokens",
    "bad_records",
)


@pytest.fixture
def records(tmp_path: Path) -> Path:
    """Records carrying every field the record flags name, of several lengths."""
    rows = []
    for n in (3, 9, 20, 40, 5, 100):
        words = " ".join(["packing"] * n)
        chat = [{"role": "user", "content": f"Say it {n} times."}, {"role": "assistant", "content": words}]
        rows.append(
            {"text": words, "body": words + " end", "prompt": f"Say it {n} times.", "response": words, "messages": chat}
        )
    return write_jsonl(tmp_path / "records.jsonl", rows)


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--no-eos"],
        ["--eos-token", "!"],
        ["--text-field", "body"],
        ["--overflow", "truncate"],
        ["--strategy", "greedy"],
        ["--window", "2"],
        ["--seed", "3"],
        ["--prompt-field", "prompt", "--response-field", "response"],
        ["--messages-field", "messages"],
        ["--messages-field", "messages", "--loss-on", "all", "--overflow", "split"],
        ["--messages-field", "messages", "--chat-template", "TEMPLATE"],
    ],
)
def test_raw_stats_takes_the_record_flags_of_pack(tmp_path: Path, records: Path, flags: list[str]) -> None:
    """Every record flag reaches raw stats: its figures equal those of the pack run with the same flags."""
    (tmp_path / "t.jinja").write_text(CHAT_TEMPLATE)
    flags = [str(tmp_path / "t.jinja") if flag == "TEMPLATE" else flag for flag in flags]
    common = [str(records), "--max-len", "64", *flags, "--json", "-q"]
    stats = runner.invoke(app, ["stats", *common])
    assert stats.exit_code == 0, stats.stderr
    packed = runner.invoke(app, ["pack", *common, "--out", str(tmp_path / "out")])
    assert packed.exit_code == 0, packed.stderr
    figures, totals = json.loads(stats.stdout), json.loads(packed.stdout)
    assert {key: figures[key] for key in COMPARED} == {key: totals.get(key, 0) for key in COMPARED}
    plain = json.loads(runner.invoke(app, ["stats", str(records), "--max-len", "64", "--json", "-q"]).stdout)
    if flags[:1] == ["--seed"]:
        assert figures["pad_to_longest"]["seed"] == 3
    elif flags[:1] == ["--eos-token"]:  # another EOS id, the same lengths: other tokens, so another cache entry
        assert figures["tokenization_cache"] != plain["tokenization_cache"]
    elif flags:
        changed = ("input_tokens", "sequences", "strategy", "truncated_tokens", "dropped_tokens")
        assert any(figures[key] != plain[key] for key in changed), flags


def test_raw_stats_bos_and_bad_records(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "one two"}\n{"text": 3}\n{"text": "three four five"}\n')
    failed = runner.invoke(app, ["stats", str(corpus), "--max-len", "8"])
    assert failed.exit_code == 1 and f"{corpus}:2: field 'text' is a number, not a string" in failed.stderr
    skipped = runner.invoke(app, ["stats", str(corpus), "--max-len", "8", "--skip-bad-records", "--json"])
    assert skipped.exit_code == 0 and json.loads(skipped.stdout)["bad_records"] == 1
    no_bos = runner.invoke(app, ["stats", str(corpus), "--max-len", "8", "--skip-bad-records", "--bos"])
    assert no_bos.exit_code == 2 and "has no BOS token" in no_bos.stderr  # the bundled GPT-2 has none


@pytest.mark.shared
def test_raw_stats_bos_with_a_tokenizer_that_has_one(tmp_path: Path) -> None:
    tokenizer = shared_path("tokenizers/tekken")
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "one two"}, {"text": "three four five"}])
    args = ["stats", str(corpus), "--max-len", "8", "--tokenizer", str(tokenizer), "--json", "-q"]
    plain, with_bos = (json.loads(runner.invoke(app, args + extra).stdout) for extra in ([], ["--bos"]))
    assert with_bos["input_tokens"] == plain["input_tokens"] + 2


def test_a_packing_that_costs_more_says_more(tmp_path: Path) -> None:
    one = write_jsonl(tmp_path / "one.jsonl", [{"text": " hello" * 4}])  # 5 tokens with EOS, in a row of 8
    pack_corpus([str(one)], PackOptions(max_len=8), tmp_path / "out")
    human = runner.invoke(app, ["stats", str(tmp_path / "out")])
    assert human.exit_code == 0 and "packing needs 1.60x more compute than random batches" in human.stdout


def test_a_negative_seed_is_a_usage_error_on_an_output_as_on_a_raw_corpus(tmp_path: Path, small_corpus: Path) -> None:
    pack_corpus([str(small_corpus)], PackOptions(max_len=8), tmp_path / "out")
    for target in (tmp_path / "out", small_corpus):
        result = runner.invoke(app, ["stats", str(target), "--seed", "-1"])
        assert result.exit_code == 2, result.output
        assert "--seed" in result.stderr and "unexpected" not in result.stderr


def test_stats_with_no_path_and_no_packed_output_here_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bare ``packcli stats`` reads ./packed; where there is none it says to pack first or name a path, as ``verify``
    and ``show`` do, rather than report a corpus file that does not exist."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 1
    assert error_line(result.stderr) == (
        "error: packed: no packcli output here (run packcli pack first, or name an output or a corpus)"
    )


def test_every_key_of_stats_json_on_an_output_is_documented(packed_sft: Path) -> None:
    """``stats --json`` on a packed output, with a gate, gives only keys docs/stats.md's ``--json`` table names."""
    result = runner.invoke(app, ["stats", str(packed_sft), "--json", "--max-gap", "100%"])
    assert result.exit_code == 0, result.output
    assert json_keys(json.loads(result.stdout)) - documented_names("stats.md", "## `--json`") == set()


def test_one_document_is_counted_in_the_singular(tmp_path: Path) -> None:
    """'packed 1 documents' and '1 documents, 3 tokens, 1 sequences' read as typos in a CI log; counts agree."""
    corpus = write_jsonl(tmp_path / "one.jsonl", [{"text": "hello world"}])
    out = tmp_path / "o"
    packed = runner.invoke(app, ["pack", str(corpus), "--out", str(out)])
    assert packed.exit_code == 0, packed.output
    assert packed.stdout.startswith("packed 1 document (3 tokens) into 1 sequence of max_len 4,096"), packed.stdout
    shown = runner.invoke(app, ["stats", str(out)], env={"COLUMNS": "200"})
    assert "  1 document, 3 tokens, 1 sequence (lower bound 1, gap 0)" in shown.stdout, shown.stdout


def test_two_outputs_are_refused_as_stats_reads_one_at_a_time(tmp_path: Path, small_corpus: Path) -> None:
    """`packcli stats a b` with packed outputs (comparing two packings) read them as a corpus and said 'is a packcli
    output, not a corpus; pass the files it was packed from', exit 1: a usage error saying to run it per output."""
    outs = [str(tmp_path / name) for name in ("a", "b")]
    for out in outs:
        assert runner.invoke(app, ["pack", str(small_corpus), "--out", out, "--max-len", "8", "-q"]).exit_code == 0
    for paths in (outs, [outs[0], str(small_corpus)]):
        result = runner.invoke(app, ["stats", *paths])
        assert result.exit_code == 2, result.stderr
        assert error_line(result.stderr) == (
            f"error: {outs[0]}: stats reads one packed output at a time, or raw corpus files: run it once per output"
        )


def test_stats_of_an_output_url_copies_no_shard_to_local_disk(
    s3_server: S3Server, packed_text: Path, tmp_path: Path
) -> None:
    """``stats`` of an output in the store streams its shards: a process that can write no file as large as a
    shard, its $TMPDIR empty after, gives the figures of the local output (it copied the output to $TMPDIR first)."""
    url = put_output(s3_server, packed_text)
    smallest = min(shard["bytes"] for shard in json.loads((packed_text / "manifest.json").read_text())["shards"])
    result = run_writing_no_file_over(smallest // 2, tmp_path / "tmp", "stats", url, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(runner.invoke(app, ["stats", str(packed_text), "--json"]).stdout)
    assert not list((tmp_path / "tmp").iterdir())


def test_stats_of_an_output_without_position_ids_are_those_of_the_output_with_them(
    packed_text: Path, tiny_corpus: Path, tmp_path: Path
) -> None:
    """``stats`` reads the document boundaries, never the positions: ``--no-position-ids`` changes no figure."""
    args = ["pack", str(tiny_corpus), "--max-len", "512", "--shard-size", "100KB", "--no-position-ids", "--quiet"]
    assert runner.invoke(app, [*args, "--out", str(tmp_path / "lean")]).exit_code == 0
    figures = [runner.invoke(app, ["stats", str(out), "--json"]) for out in (packed_text, tmp_path / "lean")]
    assert all(result.exit_code == 0 for result in figures), figures[1].output
    assert json.loads(figures[0].stdout) == json.loads(figures[1].stdout)
