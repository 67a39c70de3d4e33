"""What people read first: help texts with every default and no type noise, error texts that name the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import UsageError
from packcli.option_text import parse_size

runner = CliRunner()


def test_bare_packcli_prints_help_once() -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 0 and "Usage:" in result.stdout and "stats" in result.stdout and "show" in result.stdout
    assert result.stdout.count("Usage:") == 1 and result.stdout.count("Commands") == 1, result.stdout


@pytest.mark.parametrize("command", ["pack", "stats", "show", "verify", "strategies"])
def test_help_shows_defaults_without_type_noise(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout
    if command in ("pack", "stats"):
        assert "[default: (split; drop for fine-tuning records)]" in result.stdout
        assert "[default: (bundled GPT-2)]" in result.stdout
        assert "[default: (the tokenizer directory's, else built-in ChatML)]" in result.stdout


@pytest.mark.parametrize("command", ["pack", "stats", "show", "verify", "strategies", "export"])
def test_every_help_text_is_shown_whole(command: str) -> None:
    """Help is rendered as rich markup, where a bracketed word not escaped (``packcli[ray]``, ``[default: ...]``)
    is taken for a style and vanishes from the screen: each option's help, escapes undone, is on it word for word."""
    import typer.main

    shown = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "1000"}).stdout.split())
    options = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    helps = [" ".join(option.help.replace("\\[", "[").split()) for option in options if getattr(option, "help", None)]
    assert helps and [text for text in helps if text not in shown] == []


def test_each_commands_quiet_says_what_it_silences_in_that_command() -> None:
    """export has no progress and no loss to report: its --quiet speaks of its own warnings, not pack's."""
    pack, export = (
        " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout.split())
        for command in ("pack", "export")
    )
    assert "a loss of over 1% of the tokens is still reported" in pack
    assert "loss" not in export and "split documents" in export


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512MiB", 512 * 2**20),
        ("64MB", 64 * 10**6),
        ("0.5GB", 5 * 10**8),
        ("1TB", 10**12),
        ("1.5TiB", 3 * 2**39),
        ("4096", 4096),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["1XB", "GB", "-1MB", "1e3", ""])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(UsageError, match="cannot read size"):
        parse_size(text)


def test_shard_size_fraction_reaches_the_manifest(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "one two three"}])
    result = runner.invoke(app, ["pack", str(corpus), "--shard-size", "0.5GB", "--out", str(tmp_path / "o"), "-q"])
    assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["options"]["shard_size"] == 500_000_000


def test_a_list_per_line_is_named(tmp_path: Path) -> None:
    corpus = tmp_path / "lists.jsonl"
    corpus.write_text("[1, 2]\n[3]\n")
    result = runner.invoke(app, ["pack", str(corpus), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1  # JSON Lines whose first line is a list: a bad record, as on any line
    assert (
        f"error: {corpus}:1: record is an array, not an object" in result.stderr and "Extra data" not in result.stderr
    )
    one = tmp_path / "one.jsonl"
    one.write_text('{"text": "fine"}\n"just a string"\n')
    result = runner.invoke(app, ["pack", str(one), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and f"{one}:2: record is a string, not an object" in result.stderr


def test_the_default_tokenizer_is_named(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "one"}])
    for args in (["pack", "--out", str(tmp_path / "o")], ["stats", "--max-len", "8"]):
        result = runner.invoke(app, [*args, str(corpus), "--eos-token", "<nope>"])
        assert result.exit_code == 2
        assert "EOS token '<nope>' is not in the vocabulary of tokenizer gpt2 (bundled)" in result.stderr
        assert "None" not in result.stderr


@pytest.mark.parametrize("command", ["pack", "stats"])
def test_the_backend_help_names_the_fast_backends_in_the_order_auto_tries_them(command: str) -> None:
    """``--tokenizer-backend auto`` tries gigatoken first, then fastokens (docs/cli.md, the manifest): the help named
    fastokens alone."""
    from packcli.encode.backends import FAST_BACKENDS

    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert f"({', then '.join(FAST_BACKENDS)})" in " ".join(result.stdout.split()), result.stdout
