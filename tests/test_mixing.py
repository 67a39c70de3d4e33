"""Weighted mixing to a token budget: two real corpora mixed through the CLI, each output document traced back to
its source by hash (not by the manifest); the pure draw under hypothesis; bad input."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE, error_line, read_jsonl, shared_path, write_jsonl
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import packcli
from packcli.cli import app
from packcli.encode.store import TokenStore
from packcli.encode.tokenizer import load_tokenizer
from packcli.errors import PackcliError
from packcli.format.shards import read_shard
from packcli.option_text import parse_count
from packcli.options import PackOptions
from packcli.packing.mixing import interleave, mix, quotas, sample_to_budget
from packcli.report.stats import packed_stats
from packcli.report.verify import verify_output
from packcli.run.driver import pack_corpus
from packcli.run.setup import set_up
from packcli.run.sources import Source, mixed_stream

runner = CliRunner()
EOS = 50256
MAX_LEN = 4096


def digest(tokens: list[int]) -> bytes:
    return hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).digest()


def piece_owners(sources: dict[str, list[str]], max_len: int) -> dict[bytes, str]:
    """Hash of every piece a document of each source can become (split at max_len) -> the source's name."""
    tokenizer = load_tokenizer().tokenizer
    owners: dict[bytes, str] = {}
    for name, texts in sources.items():
        for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False):
            ids = [*encoding.ids, EOS]
            for start in range(0, len(ids), max_len):
                key = digest(ids[start : start + max_len])
                assert owners.setdefault(key, name) == name, "a piece is in both sources: cannot tell them apart"
    return owners


def output_pieces(out: Path) -> list[list[int]]:
    pieces = []
    for path in sorted(out.glob("shard-*.arrow")):
        table = read_shard(path)
        for ids, cu in zip(table.column("input_ids").to_pylist(), table.column("cu_seqlens").to_pylist()):
            pieces += [ids[a:b] for a, b in zip(cu, cu[1:])]
    return pieces


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.glob("shard-*.arrow"))}


def test_two_real_corpora_at_70_30_with_the_second_repeated(tmp_path: Path) -> None:
    small = shared_path("data/bigbench_sft.jsonl")  # ~330k tokens: 30% of 2M needs it 1.8 times
    budget = 2_000_000
    args = ["pack", str(SAMPLE), str(small), "--weights", "0.7,0.3", "--target-tokens", "2M", "--json"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())

    # Trace every output piece to its source by hash, independently of the manifest.
    owners = piece_owners(
        {"sample": [r["text"] for r in read_jsonl(SAMPLE)], "bigbench": [r["text"] for r in read_jsonl(small)]},
        MAX_LEN,
    )
    pieces = output_pieces(tmp_path / "a")
    traced: Counter[str] = Counter()
    copies: Counter[bytes] = Counter()
    for piece in pieces:
        key = digest(piece)
        traced[owners[key]] += len(piece)  # KeyError: a piece that is in neither source
        copies[key] += 1
    tokens = sum(traced.values())
    assert abs(tokens - budget) <= 0.01 * budget
    assert abs(traced["sample"] / tokens - 0.7) <= 0.01 * 0.7
    assert abs(traced["bigbench"] / tokens - 0.3) <= 0.01 * 0.3
    repeated = [key for key, count in copies.items() if count > 1 and owners[key] == "bigbench"]
    assert len(repeated) > 1000  # 1.8 passes: most bigbench documents appear twice

    # The manifest agrees with the trace, and its per-source figures add up to the totals.
    sample_entry, bigbench_entry = manifest["sources"]
    assert (sample_entry["output_tokens"], bigbench_entry["output_tokens"]) == (traced["sample"], traced["bigbench"])
    totals = manifest["totals"]
    assert sum(s["output_tokens"] for s in manifest["sources"]) == totals["tokens"] == tokens
    assert sum(s["output_documents"] for s in manifest["sources"]) == totals["documents"] == len(pieces)
    assert bigbench_entry["input_documents"] == 2232 and bigbench_entry["passes"] == 1
    assert 1.5 < bigbench_entry["repeats"] < 2 and sample_entry["repeats"] < 1 and sample_entry["passes"] == 0
    assert totals["input_tokens"] == totals["tokens"] + totals["truncated_tokens"] + totals["dropped_tokens"]
    assert summary["sources"] == manifest["sources"]
    assert verify_output(tmp_path / "a").ok
    stats = packed_stats(tmp_path / "a")
    assert [s["tokens"] for s in stats["sources"]] == [traced["sample"], traced["bigbench"]]

    # Deterministic: the same command gives the same bytes.
    again = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b") != {}


def corpus(path: Path, words: list[str], count: int) -> Path:
    """Short real-word documents, distinct per source."""
    return write_jsonl(path, [{"text": f"{words[k % len(words)]} number {k}."} for k in range(count)])


def test_summary_says_which_source_was_repeated_and_a_directory_is_one_source(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    corpus(folder / "a.jsonl", ["apple", "pear"], 30)
    corpus(folder / "b.jsonl", ["plum", "fig"], 30)
    small = corpus(tmp_path / "small.jsonl", ["walnut"], 10)
    result = runner.invoke(
        app,
        ["pack", str(folder), str(small), "--weights", "1,1", "--target-tokens", "600", "--out", str(tmp_path / "o")],
    )
    assert result.exit_code == 0, result.output
    assert f"source {small}: " in result.stdout and "repeated" in result.stdout.split(f"source {small}: ")[1]
    sources = json.loads((tmp_path / "o" / "manifest.json").read_text())["sources"]
    assert [s["files"] for s in sources] == [2, 1] and sources[0]["input_documents"] == 60
    assert sources[1]["passes"] >= 4 and sources[0]["repeats"] <= 1
    assert all(abs(s["share"] - 0.5) < 0.01 for s in sources)


def test_default_budget_repeats_nothing_and_target_alone_keeps_natural_proportions(tmp_path: Path) -> None:
    big, small = corpus(tmp_path / "big.jsonl", ["oak"], 200), corpus(tmp_path / "small.jsonl", ["elm"], 40)
    default = pack_corpus([str(big), str(small)], PackOptions(max_len=64, weights=(0.5, 0.5)), tmp_path / "d")
    entries = default.manifest["sources"]
    assert entries[1]["repeats"] == 1.0 and entries[0]["repeats"] < 1  # the small source limits the budget
    assert entries[0]["output_tokens"] == pytest.approx(entries[1]["output_tokens"], rel=0.01)
    natural = pack_corpus([str(big), str(small)], PackOptions(max_len=64, target_tokens=5000), tmp_path / "n")
    shares = [s["share"] for s in natural.manifest["sources"]]
    inputs = [s["input_tokens"] for s in natural.manifest["sources"]]
    assert shares == pytest.approx([inputs[0] / sum(inputs), inputs[1] / sum(inputs)], abs=0.01)
    assert natural.manifest["totals"]["tokens"] == pytest.approx(5000, rel=0.01)


@pytest.mark.parametrize("overflow", ["drop", "truncate"])
def test_shares_are_output_tokens_and_overflow_is_counted_once(tmp_path: Path, overflow: str) -> None:
    long_docs = write_jsonl(tmp_path / "long.jsonl", [{"text": " word" * (10 + 40 * (k % 3))} for k in range(30)])
    short = corpus(tmp_path / "short.jsonl", ["ash"], 50)
    options = PackOptions(max_len=32, overflow=overflow, weights=(0.5, 0.5), target_tokens=3000)  # type: ignore[arg-type]
    manifest = pack_corpus([str(long_docs), str(short)], options, tmp_path / "o").manifest
    totals, sources = manifest["totals"], manifest["sources"]
    assert [s["share"] for s in sources] == pytest.approx([0.5, 0.5], abs=0.01)
    assert totals["input_tokens"] == totals["tokens"] + totals["truncated_tokens"] + totals["dropped_tokens"]
    if overflow == "drop":  # 20 of the 30 long documents are over 32 tokens: each counted once, none drawn
        assert totals["dropped_documents"] == 20
    else:
        assert totals["truncated_documents"] >= 20 and totals["dropped_documents"] == 0
    assert sum(s["output_tokens"] for s in sources) == totals["tokens"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--weights", "0.7"], "--weights has 1 value(s) for 2 input(s)"),
        (["--weights", "0.7,-0.3"], "--weights must not be negative"),
        (["--weights", "0,0"], "--weights are all zero"),
        (["--weights", "0.7,x"], "cannot read --weights '0.7,x'"),
        (["--weights", "1_0,1"], "cannot read --weights '1_0,1'"),  # Python's float() read it as 10
        (["--weights", "\u0661,1"], "cannot read --weights '\u0661,1'"),  # an Arabic-Indic one, read as 1
        # past a float's range: 1e400 was echoed as "inf,1", naming no weight the user wrote; 1e-400 read as 0 and
        # left its input out
        (["--weights", "1e400,1"], "--weights '1e400' is beyond what a float holds (at most about 1.797e308)"),
        (["--weights", "1.8e308,1"], "--weights '1.8e308' is beyond what a float holds (at most about 1.797e308)"),
        (["--weights", "1,nan"], "--weights 'nan' is not a number: give weights such as 0.7,0.3"),
        (["--weights", "1e-400,1"], "--weights '1e-400' reads as 0, which would leave its input out: write 0"),
        (["--weights", "-1e-400,1"], "--weights must not be negative, got '-1e-400'"),
        (["--weights", "1,1", "--target-tokens", "lots"], "--target-tokens 'lots' is not a size"),
        (["--weights", "1,1", "--target-tokens", "0"], "--target-tokens must be at least 1"),
        (["--target-tokens", "2.5"], "--target-tokens '2.5' is not a whole number of tokens: give one such as 2 or 3"),
        (["--target-tokens", "0.5"], "--target-tokens '0.5' is not a whole number of tokens: give one such as 1\n"),
        (["--target-tokens", "1.0001k"], "--target-tokens '1.0001k' is not a whole number of tokens"),
    ],
)
def test_bad_mixing_options_are_one_line_usage_errors(tmp_path: Path, extra: list[str], message: str) -> None:
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 5), corpus(tmp_path / "b.jsonl", ["box"], 5)
    result = runner.invoke(app, ["pack", str(a), str(b), *extra, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert error_line(result.stderr) and message in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_mixture_is_drawn_whatever_its_size_and_one_no_memory_holds_fails_where_it_allocates(tmp_path: Path) -> None:
    """No estimate of the run's memory refuses a mixture up front (a model fitted on one machine refused runs that
    fit elsewhere and passed runs that did not): a million draws are drawn, and 10**18 tokens from a few short
    documents fail in the allocation itself, the ``MemoryError`` the command line says in one line (below)."""
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 5), corpus(tmp_path / "b.jsonl", ["box"], 5)
    sources = [Source(str(a), [a]), Source(str(b), [b])]
    lengths = np.full(10, 3, dtype=np.int64)
    stream = mixed_stream(sources, np.array([5, 5]), lengths, PackOptions(max_len=64, target_tokens=3_000_000))
    assert len(stream.documents) == 1_000_000
    with pytest.raises(MemoryError):
        mixed_stream(sources, np.array([5, 5]), lengths, PackOptions(max_len=64, target_tokens=10**18))


def test_a_target_whose_shards_no_disk_here_holds_is_refused_before_reading(tmp_path: Path) -> None:
    """1000T tokens are at least 8 PB of shards: refused in one line before any record is read, not after hours of
    writing into a full disk."""
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 5), corpus(tmp_path / "b.jsonl", ["box"], 5)
    result = runner.invoke(app, ["pack", str(a), str(b), "--target-tokens", "1000T", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr), result.stderr
    assert "--target-tokens 1,000,000,000,000,000 makes at least 8,000,000.0 GB of shards" in result.stderr
    assert f"free where they are written ({tmp_path})" in result.stderr and "MemoryError" not in result.stderr
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.packcli-*"))
    with pytest.raises(PackcliError, match=r"^target_tokens=1,000,000,000,000,000 makes at least 8,000,000\.0 GB"):
        packcli.pack(
            [str(a), str(b)], max_len=4096, target_tokens=10**15, out=str(tmp_path / "o")
        )  # named as Python spells it


def test_a_target_too_large_for_a_float_is_said_exactly(tmp_path: Path) -> None:
    """The bytes a target needs are an integer: said without the rounding of a float (it printed
    799,999,999,999,999,868,928.0 GB for 799,999,999,999,999,999,992)."""
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 5), corpus(tmp_path / "b.jsonl", ["box"], 5)
    target = ["--target-tokens", "99999999999999999999B"]
    result = runner.invoke(app, ["pack", str(a), str(b), *target, "--out", str(tmp_path / "o")])
    assert result.exit_code == 1, result.output
    assert "makes at least 799,999,999,999,999,999,992.0 GB of shards (8 bytes a token)" in result.stderr


EMPTY_INPUT = "it holds none (no record, or only empty ones, counted as empty documents)"


@pytest.mark.parametrize(
    ("records", "options", "why"),
    [
        ([{"text": ""}, {"text": ""}], [], EMPTY_INPUT),
        ([{"text": ""}, {"text": ""}], ["--overflow", "drop"], EMPTY_INPUT),
        (
            [{"text": "word " * 50}],
            ["--max-len", "16", "--overflow", "drop"],
            "its 1 document(s) are all too long for --max-len 16 with --overflow drop",
        ),
    ],
)
def test_an_input_that_gives_no_document_is_said_to_be_so(
    tmp_path: Path, records: list[dict[str, str]], options: list[str], why: str
) -> None:
    """An input that gives the output nothing under a positive weight says why: its records are all empty, or (under
    --overflow drop) its documents all too long; it spoke of documents too long for --max-len under --overflow drop
    whatever the policy and whatever the reason."""
    a = corpus(tmp_path / "a.jsonl", ["yew"], 5)
    given = write_jsonl(tmp_path / "given.jsonl", records)
    result = runner.invoke(
        app, ["pack", str(a), str(given), "--weights", "1,1", *options, "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr) == (
        f"error: {given}: no document of this input can go into the output: {why}; give it weight 0 or fix it"
    )


def test_how_files_are_grouped_into_sources_is_part_of_the_run_identity(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    for name in "abc":
        corpus(folder / f"{name}.jsonl", ["yew"], 5)
    options = PackOptions(weights=(1.0, 1.0))
    by_folder = set_up([str(folder / "[ab].jsonl"), str(folder / "c.jsonl")], options)
    by_file = set_up([str(folder / "a.jsonl"), str(folder / "[bc].jsonl")], options)
    assert by_folder.files == by_file.files  # the same files in the same order, grouped otherwise
    assert by_folder.fingerprint() != by_file.fingerprint() and by_folder.cache_key() == by_file.cache_key()


def test_a_file_in_two_inputs_is_refused(tmp_path: Path) -> None:
    a = corpus(tmp_path / "a.jsonl", ["yew"], 5)
    result = runner.invoke(app, ["pack", str(a), str(tmp_path), "--weights", "1,1", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "is in two inputs" in result.stderr


@pytest.mark.parametrize("second", ["a.jsonl", "./a.jsonl", "link.jsonl", "hard.jsonl"])
def test_the_same_file_given_twice_is_refused_naming_both_spellings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: str
) -> None:
    corpus(tmp_path / "a.jsonl", ["yew"], 5)
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "a.jsonl")
    (tmp_path / "hard.jsonl").hardlink_to(tmp_path / "a.jsonl")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["pack", "a.jsonl", second, "--weights", "1,1", "--out", "o"])
    assert result.exit_code == 2, result.output
    assert f"is in two inputs, 'a.jsonl' (input 1) and '{second}' (input 2)" in result.stderr
    assert error_line(result.stderr) and not (tmp_path / "o").exists()


@pytest.mark.parametrize("target", [[], ["--target-tokens", "200"]])
def test_huge_weights_normalise_without_overflow(tmp_path: Path, target: list[str]) -> None:
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 20), corpus(tmp_path / "b.jsonl", ["box"], 20)
    args = ["pack", str(a), str(b), "--weights", "1e308,1e308", *target, "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    sources = json.loads((tmp_path / "o" / "manifest.json").read_text())["sources"]
    assert [source["weight"] for source in sources] == [0.5, 0.5]
    assert [source["share"] for source in sources] == pytest.approx([0.5, 0.5], abs=0.05)
    assert quotas([100, 100], [1e308, 1e308], 50) == [25, 25]
    assert quotas([100, 100], [1e308, 5e307], None) == [100, 50]


def test_the_token_store_gathers_a_document_more_than_once(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens")
    store.append(np.arange(10, dtype=np.int32))
    store.finish()
    starts, lengths = np.array([0, 0, 3, 3, 0]), np.array([3, 3, 2, 2, 3])
    assert store.gather(starts, lengths).tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4, 0, 1, 2]
    store.remove()


# The pure draw: every document from its source, shares within one document of the quota.

source_lengths = st.lists(st.integers(0, 300), min_size=1, max_size=40).filter(lambda ls: sum(ls) > 0)


@given(
    st.lists(st.tuples(source_lengths, st.integers(0, 5)), min_size=1, max_size=5).filter(
        lambda sources: any(weight for _, weight in sources)
    ),
    st.one_of(st.none(), st.integers(1, 20_000)),
    st.integers(0, 2**32),
)
def test_draws_stay_in_their_source_and_meet_their_quota(
    sources: list[tuple[list[int], int]], budget: int | None, seed: int
) -> None:
    lengths = [np.array(ls, dtype=np.int64) for ls, _ in sources]
    weights = [float(weight) for _, weight in sources]
    draws = mix(lengths, weights, budget, seed)
    wanted = quotas([int(ls.sum()) for ls in lengths], weights, budget)
    for source, draw, quota in zip(lengths, draws, wanted):
        assert draw.quota == quota
        indices = draw.documents
        assert np.all((indices >= 0) & (indices < len(source))) and np.all(source[indices] > 0)
        assert draw.tokens == int(source[indices].sum()) <= quota
        total = int(source.sum())
        assert draw.passes == quota // total
        counts = np.bincount(indices, minlength=len(source))
        assert np.all(counts[source > 0] >= draw.passes) and np.all(counts <= draw.passes + 1)
        if quota % total:
            assert quota - draw.tokens < int(source.max())  # short by less than one document
        else:
            assert draw.tokens == quota
    if budget is not None:
        scale = budget / sum(weights)
        assert all(abs(quota - weight * scale) <= 0.5 for quota, weight in zip(wanted, weights))
    else:  # the largest budget that repeats nothing: one source is used whole, none more than once
        assert all(draw.tokens <= int(ls.sum()) for draw, ls in zip(draws, lengths))
        assert any(draw.passes == 1 and w > 0 for draw, w in zip(draws, weights))
    again = mix(lengths, weights, budget, seed)
    assert all(np.array_equal(a.documents, b.documents) for a, b in zip(draws, again))


@given(st.lists(st.integers(0, 50), min_size=1, max_size=60), st.integers(0, 2000), st.integers(0, 2**16))
def test_the_sample_is_the_one_by_one_walk(lengths: list[int], budget: int, seed: int) -> None:
    array = np.array(lengths, dtype=np.int64)
    taken = sample_to_budget(array, budget, np.random.default_rng(seed))
    order, left, expected = np.random.default_rng(seed).permutation(np.flatnonzero(array)), budget, []
    for document in order.tolist():
        if lengths[document] <= left:
            expected.append(document)
            left -= lengths[document]
    assert taken.tolist() == expected


@given(st.lists(st.integers(0, 30), min_size=1, max_size=6))
def test_interleave_spreads_each_source_over_the_stream(counts: list[int]) -> None:
    source, index = interleave(counts)
    assert sorted(zip(source.tolist(), index.tolist())) == [(s, k) for s, c in enumerate(counts) for k in range(c)]
    total = sum(counts)
    for s, count in enumerate(counts):
        assert index[source == s].tolist() == list(range(count))  # each source keeps its draw order
        seen = np.cumsum(source == s)
        expected = np.arange(1, total + 1) * count / max(total, 1)
        # Every prefix holds about the source's share: within 1/2 for its own rounding, plus what ties with the
        # other sources can shift (a source-by-source concatenation is off by up to count * (1 - count / total)).
        assert np.all(np.abs(seen - expected) <= 1 + len(counts) * count / max(total, 1) + 1e-9)


weight_values = st.floats(0, 1e308, allow_subnormal=True) | st.sampled_from([5e-324, 1e-321, 1e-320, 2.2e-308, 1e308])


@given(
    st.lists(st.tuples(st.integers(1, 10**9), weight_values), min_size=1, max_size=5).filter(
        lambda sources: any(weight for _, weight in sources)
    )
)
def test_the_default_budget_repeats_no_source_whatever_the_weights_magnitude(sources: list[tuple[int, float]]) -> None:
    """Without --target-tokens, one source is used exactly once and none is repeated, even when the weights are so
    small (subnormal) that a total divided by one is infinite: 1e-320,1e-321 once repeated the second source."""
    totals, weights = [total for total, _ in sources], [weight for _, weight in sources]
    wanted = quotas(totals, weights, None)
    assert all(quota <= total for quota, total in zip(wanted, totals))
    assert any(quota == total for quota, total, weight in zip(wanted, totals, weights) if weight > 0)
    assert all(quota == 0 for quota, weight in zip(wanted, weights) if weight == 0)


def test_subnormal_weights_through_the_cli_repeat_nothing(tmp_path: Path) -> None:
    big, small = corpus(tmp_path / "big.jsonl", ["yew"], 40), corpus(tmp_path / "small.jsonl", ["box"], 3)
    out = tmp_path / "o"
    result = runner.invoke(app, ["pack", str(big), str(small), "--weights", "1e-320,1e-321", "--out", str(out)])
    assert result.exit_code == 0, result.output
    sources = json.loads((out / "manifest.json").read_text())["sources"]
    assert [source["passes"] for source in sources] == [0, 1] and sources[1]["repeats"] == 1.0
    assert "repeated" not in result.stderr


@pytest.mark.parametrize("weights", ["-0,1", "-0.0e-400,1"])  # -1e-400 is refused (above)
def test_a_negative_zero_weight_is_zero_in_the_manifest_and_the_summary(tmp_path: Path, weights: str) -> None:
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 20), corpus(tmp_path / "b.jsonl", ["box"], 20)
    result = runner.invoke(app, ["pack", str(a), str(b), "--weights", weights, "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    manifest = (tmp_path / "o" / "manifest.json").read_text()
    assert "-0.0" not in manifest and "-0.0%" not in result.stderr
    assert [source["weight"] for source in json.loads(manifest)["sources"]] == [0.0, 1.0]


def test_a_count_is_read_exactly() -> None:
    """A fraction, not a float: a count beyond 2**53 keeps its last digit, and 1.5B is 1,500,000,000."""
    assert parse_count("9007199254740993") == 9007199254740993
    assert [parse_count(text) for text in ("1.5B", "3M", "3 m", "0.001k", "1_000")] == [
        1_500_000_000,
        3 * 10**6,
        3 * 10**6,
        1,
        1000,
    ]


def test_a_positive_weight_too_small_for_one_document_is_said_not_shown_as_zero(tmp_path: Path) -> None:
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 20), corpus(tmp_path / "b.jsonl", ["box"], 20)
    result = runner.invoke(app, ["pack", str(a), str(b), "--weights", "1e-9,1", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    first = json.loads((tmp_path / "o" / "manifest.json").read_text())["sources"][0]
    assert first["weight"] == pytest.approx(1e-9) and first["output_tokens"] == 0
    line = next(line for line in result.output.splitlines() if "source " in line and "a.jsonl" in line)
    assert "(weight <0.1%)" in line and "nothing drawn: its share is less than any of its documents" in line


def test_a_weight_of_zero_is_said_to_leave_its_source_out(tmp_path: Path) -> None:
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 20), corpus(tmp_path / "b.jsonl", ["box"], 20)
    result = runner.invoke(app, ["pack", str(a), str(b), "--weights", "1,0", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "source " in line and "b.jsonl" in line)
    assert line.endswith("(weight 0.0%); left out: its weight is 0"), line  # not "sampled down to 0.0%"


@pytest.mark.parametrize("weights", ["1e308,1e308", "1e-9,1", "7,3"])
def test_dry_run_gives_the_weights_the_run_writes(tmp_path: Path, weights: str) -> None:
    """``--dry-run`` once divided by the weights' sum: 1e308,1e308 (whose sum is infinite) read 0.0,0.0."""
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 20), corpus(tmp_path / "b.jsonl", ["box"], 20)
    args = ["pack", str(a), str(b), "--weights", weights, "--out", str(tmp_path / "o")]
    planned = runner.invoke(app, [*args, "--dry-run", "--json"])
    assert planned.exit_code == 0, planned.output
    assert runner.invoke(app, args).exit_code == 0
    written = json.loads((tmp_path / "o" / "manifest.json").read_text())["sources"]
    assert [source["weight"] for source in json.loads(planned.stdout)["sources"]] == [s["weight"] for s in written]


@pytest.mark.parametrize("key", ["output_tokens", "output_documents"])
def test_verify_holds_the_sources_to_the_totals(tmp_path: Path, key: str) -> None:
    """docs/cli.md: the sources' output_documents and output_tokens add up to the totals. verify once passed a
    manifest whose sources did not."""
    a, b = corpus(tmp_path / "a.jsonl", ["yew"], 20), corpus(tmp_path / "b.jsonl", ["box"], 20)
    out = tmp_path / "o"
    assert runner.invoke(app, ["pack", str(a), str(b), "--weights", "1,1", "--out", str(out)]).exit_code == 0
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["sources"][0][key] += 7
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 1
    total = "tokens" if key == "output_tokens" else "documents"
    assert f"manifest sources: {key} add up to {manifest['totals'][total] + 7}, totals.{total} is" in result.output


def test_a_run_the_system_gives_too_little_memory_ends_in_one_line_saying_so(tmp_path: Path) -> None:
    """Under a limit of the system (``ulimit -v``: address space), a mixture that needs about 10 GiB fails to
    allocate. That is one line saying the command ran out of memory and what to do, exit 1, nothing written: not an
    "unexpected MemoryError"."""
    import resource
    import subprocess
    import sys

    def three_gigabytes() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    tiny = corpus(tmp_path / "tiny.jsonl", ["yew"], 10)
    out = tmp_path / "o"
    args = [sys.executable, "-m", "packcli", "pack", str(tiny), "--target-tokens", "480M", "--out", str(out)]
    ended = subprocess.run(args, capture_output=True, text=True, preexec_fn=three_gigabytes, timeout=120)
    assert ended.returncode == 1, ended.stderr
    assert error_line(ended.stderr).startswith("error: out of memory ("), ended.stderr
    assert "give the command more memory, or less to do" in ended.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["tiny.jsonl"]
