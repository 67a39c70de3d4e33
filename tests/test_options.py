"""Options: --max-len drives neither time nor memory, and values the int32 columns cannot hold are a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLE, error_line
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import UsageError
from packcli.format.columns import INT32_MAX
from packcli.options import PackOptions

runner = CliRunner()


def test_max_len_must_fit_int32() -> None:
    assert PackOptions(max_len=INT32_MAX).max_len == 2**31 - 1
    for bad in (2**31, 2**32, 2**63):
        with pytest.raises(UsageError, match=r"--max-len must fit the int32 columns \(at most 2,147,483,647\)"):
            PackOptions(max_len=bad)


def test_long_context_max_len_packs_and_verifies(tmp_path: Path, tiny_corpus: Path) -> None:
    """2**20 tokens per sequence: no document is split and bfd reaches the lower bound; a benchmark
    (bench/bench_max_len.py) compares its time and memory with 4096."""
    out = tmp_path / "out"
    result = runner.invoke(app, ["pack", str(tiny_corpus), "--max-len", str(2**20), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["max_len"] == 2**20 and summary["split_documents"] == 0
    assert summary["sequences"] == -(-summary["tokens"] // 2**20)
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


@pytest.mark.parametrize("command", ["pack", "stats"])
@pytest.mark.parametrize("max_len", [2**31, 2**32])
def test_max_len_beyond_int32_is_exit_2_in_one_line(tmp_path: Path, command: str, max_len: int) -> None:
    args = [command, str(SAMPLE), "--max-len", str(max_len)] + (
        ["--out", str(tmp_path / "o")] if command == "pack" else []
    )
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.stderr
    assert (
        error_line(result.stderr)
        == f"error: --max-len must fit the int32 columns (at most 2,147,483,647), got {max_len:,}"
    )
    assert not (tmp_path / "o").exists()


def test_one_parser_takes_text_sizes_counts_and_weights_and_names_options_as_the_caller_writes_them() -> None:
    """``PackOptions.from_values`` is the one parser of the command line's values and ``packcli.pack()``'s keyword
    arguments: "1MiB", "3M" and "0.7,0.3" are parsed, and a message names each option as its caller writes it,
    made so where it is raised (``--max-len`` on the command line, ``max_len`` in Python)."""
    from packcli.errors import keyword_spelling

    parsed = PackOptions.from_values({"shard_size": "1MiB", "target_tokens": "3M", "weights": "0.7,0.3"})
    assert (parsed.shard_size, parsed.target_tokens, parsed.weights) == (2**20, 3_000_000, (0.7, 0.3))
    cases = [
        ({"max_len": 0}, "--max-len must be at least 1, got 0", "max_len must be at least 1, got 0"),
        ({"weights": "1,x"}, "cannot read --weights '1,x'", "cannot read weights '1,x'"),
        ({"target_tokens": "2.5"}, "--target-tokens '2.5' is not a whole", "target_tokens '2.5' is not a whole"),
        ({"eos_id": 2, "ids_field": "ids", "eos": False}, "--eos-id and --no-eos", "eos_id and eos=False"),
        ({"engine": "ray"}, "--engine ray runs partitions: add --partitions P", "engine ray runs partitions: add "),
    ]
    for values, flags, keywords in cases:
        with pytest.raises(UsageError) as refused:
            PackOptions.from_values(values)
        assert str(refused.value).startswith(flags), refused.value
        with keyword_spelling(), pytest.raises(UsageError) as refused:
            PackOptions.from_values(values)
        assert str(refused.value).startswith(keywords) and "--" not in str(refused.value), refused.value


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--eos-token", "hello", "--no-eos"],
            "error: --eos-token and --no-eos contradict each other; pass one of them",
        ),
        (["--eos-token", ""], "error: --eos-token must name a token, got ''"),
    ],
)
def test_an_eos_token_no_eos_is_appended_by_or_an_empty_one_is_a_usage_error(
    tmp_path: Path, tiny_corpus: Path, extra: list[str], message: str
) -> None:
    """``--eos-token hello --no-eos`` recorded hello's id as the EOS no document ends with, and an empty
    ``--eos-token`` was stored as "": both wrote the default shards under another fingerprint, so the output was
    later refused as another run's. Both are refused before a record is read."""
    result = runner.invoke(app, ["pack", str(tiny_corpus), "--max-len", "64", *extra, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert error_line(result.stderr) == message
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--loss-on", "all"], "error: --loss-on needs --prompt-field or --messages-field"),
        (
            ["--prompt-field", "text", "--response-field", "text"],
            "error: --prompt-field and --response-field name the same field 'text'",
        ),
        (
            ["--messages-field", "text", "--tools-field", "text"],
            "error: --tools-field and --messages-field name the same field 'text'",
        ),
        (  # the default --tools-field: the message says how to read no tools
            ["--messages-field", "tools"],
            "error: --tools-field (by default 'tools') and --messages-field name the same field 'tools': pass "
            "--tools-field '' for no tool definitions, or another field",
        ),
    ],
)
def test_fine_tuning_options_that_would_change_nothing_or_read_one_field_twice_are_usage_errors(
    tmp_path: Path, tiny_corpus: Path, extra: list[str], message: str
) -> None:
    """``--loss-on all`` on plain text was accepted and ignored, yet changed the fingerprint (a rerun without it was
    refused as another run's output); one field named as both prompt and response doubled every text, and the
    messages named as tools were passed to the template as tool definitions."""
    result = runner.invoke(app, ["pack", str(tiny_corpus), "--max-len", "64", *extra, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert error_line(result.stderr) == message
    assert not (tmp_path / "o").exists()


def test_weights_are_taken_from_any_sequence_of_real_numbers() -> None:
    """A list, a tuple or a numpy array of numbers (numpy's too) are weights; a bool or a string in them is not
    (the text form is one string, "0.7,0.3")."""
    import numpy as np

    for weights in ([0.7, 0.3], (0.7, 0.3), np.array([0.7, 0.3]), [np.float32(0.5), 1]):
        assert PackOptions.from_values({"weights": weights}).weights == tuple(float(w) for w in weights)


def test_an_eos_token_with_no_eos_is_the_chat_templates_eos_token() -> None:
    """Under ``--messages-field`` the template renders ``eos_token``: ``--eos-token`` names it with ``--no-eos``."""
    values = {"messages_field": "messages", "eos": False, "eos_token": "<|im_end|>"}
    assert PackOptions.from_values(values).eos_token == "<|im_end|>"
