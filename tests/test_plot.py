"""stats --plot: a real picture file of sensible size, and one clear error naming the extra without matplotlib."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def output(tmp_path: Path) -> Path:
    # Documents of 2 to 60 words, so rows hold several documents of different lengths.
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": " word" * (2 + (i * 7) % 59)} for i in range(300)])
    result = runner.invoke(app, ["pack", str(corpus), "--max-len", "128", "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.stderr
    return tmp_path / "out"


def test_plot_png_and_svg(tmp_path: Path, output: Path) -> None:
    png = tmp_path / "stats.png"
    result = runner.invoke(app, ["stats", str(output), "--plot", str(png)])
    assert result.exit_code == 0, result.stderr
    assert f"plot written to {png}" in result.stdout
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert 600 <= width <= 1600 and 400 <= height <= 1200
    assert 20_000 < len(data) < 500_000
    svg = tmp_path / "stats.svg"
    assert runner.invoke(app, ["stats", str(output), "--plot", str(svg), "--json"]).exit_code == 0
    text = svg.read_text()
    assert "<svg" in text and "block-causal mask of row" in text and "max_len 128" in text
    assert "a typical row: the median fill, " in text and "packed document lengths (split pieces apart)" in text


def test_plot_on_a_raw_corpus(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": " word" * n} for n in (3, 40, 200, 90, 12, 500)])
    png = tmp_path / "raw.png"
    result = runner.invoke(app, ["stats", str(corpus), "--max-len", "128", "--plot", str(png), "-q"])
    assert result.exit_code == 0, result.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC
    svg = tmp_path / "raw.svg"
    assert runner.invoke(app, ["stats", str(corpus), "--max-len", "128", "--plot", str(svg), "-q"]).exit_code == 0
    assert "input document lengths, before overflow" in svg.read_text()


def test_plot_file_name_must_be_a_picture(tmp_path: Path, output: Path) -> None:
    result = runner.invoke(app, ["stats", str(output), "--plot", str(tmp_path / "stats.txt")])
    assert result.exit_code == 2 and "must end in .png, .svg, .pdf" in result.stderr


def test_missing_matplotlib_names_the_extra(tmp_path: Path, output: Path) -> None:
    # matplotlib made unimportable in a child interpreter, as on an install without the plot extra
    code = "import sys; sys.modules['matplotlib'] = None; from packcli.cli import main; main()"
    args = [sys.executable, "-c", code, "stats", str(output), "--plot", str(tmp_path / "p.png")]
    result = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ), timeout=120, check=False)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "error: stats --plot needs matplotlib, which is not installed: pip install 'packcli[plot]'"
    )
    assert not (tmp_path / "p.png").exists()


def test_plot_with_a_model_config_draws_its_panels(tmp_path: Path, output: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        '{"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, '
        '"vocab_size": 50257}'
    )
    svg = tmp_path / "stats.svg"
    args = ["stats", str(output), "--plot", str(svg), "--model-config", str(config), "--world-size", "2"]
    result = runner.invoke(app, [*args, "--batch-size", "1"])
    assert result.exit_code == 0, result.output
    text = svg.read_text()
    assert "FLOPs per layout" in text and "step imbalance" in text and "block-causal mask of row" in text
    png = tmp_path / "stats.png"
    assert runner.invoke(app, [*args[:3], str(png), *args[4:]]).exit_code == 0
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    assert 600 <= width <= 1600 and 400 <= height <= 1200
