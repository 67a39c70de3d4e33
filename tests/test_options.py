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
