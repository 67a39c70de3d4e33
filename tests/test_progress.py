"""Progress on stderr: plain lines outside a terminal (a real subprocess, stderr a pipe), none with --quiet."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE, write_jsonl

from packcli.cli.progress import INTERVAL_ENV, PlainReporter, make_reporter
from packcli.errors import UsageError
from packcli.util.progress import SilentReporter


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_every_interval_and_at_each_stage() -> None:
    stream, clock = io.StringIO(), Clock()
    reporter = PlainReporter(interval=5, stream=stream, clock=clock)
    reporter.start(2_000_000)
    clock.now += 1
    reporter.advance(100_000, 10, 1000)  # within the interval: no line
    clock.now += 4
    reporter.advance(500_000, 50, 1_000_000)  # 5 s in: a quarter of the bytes, 0.2M tokens/s, 15 s to go
    clock.now += 2
    reporter.advance(600_000, 60, 1_200_000)
    reporter.stage("packing")
    reporter.close()
    assert stream.getvalue().splitlines() == [
        "packcli: tokenizing  50 documents  0.20M tokens/s  25% of 2.0 MB  ETA 0:00:15",
        "packcli: packing (7.0 s)",
    ]


def test_a_short_run_prints_nothing() -> None:
    stream, clock = io.StringIO(), Clock()
    reporter = PlainReporter(interval=5, stream=stream, clock=clock)
    reporter.start(1000)
    clock.now += 1
    reporter.advance(1000, 3, 30)
    reporter.stage("packing")
    reporter.stage("writing")
    assert stream.getvalue() == ""


def test_reporter_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_reporter(quiet=True), SilentReporter)
    assert isinstance(make_reporter(quiet=False), PlainReporter)  # pytest's stderr is not a terminal
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(UsageError, match="PACKCLI_PROGRESS_INTERVAL must be a number of seconds"):
        make_reporter(quiet=False)


def run_packcli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, INTERVAL_ENV: "0"}  # a line at every batch: the sample is read in a few 1 MB batches
    return subprocess.run(
        [sys.executable, "-m", "packcli", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_pack_logs_progress_without_a_terminal(tmp_path: Path) -> None:
    packed = run_packcli("pack", str(SAMPLE), "--max-len", "1024", "--out", str(tmp_path / "out"))
    assert packed.returncode == 0, packed.stderr
    lines = packed.stderr.splitlines()
    progress = [line for line in lines if line.startswith("packcli: tokenizing  ")]
    assert len(progress) >= 2 and progress[-1].startswith("packcli: tokenizing  198 documents  ")
    assert all(re.search(r" [0-9.]+M tokens/s  \d+% of 748.5 kB  ETA \d:\d\d:\d\d$", line) for line in progress)
    assert [line.split(" (")[0] for line in lines if line.startswith(("packcli: packing", "packcli: writing"))] == [
        "packcli: packing",
        "packcli: writing",
    ]
    assert packed.stdout.startswith("packed 198 documents, split into 1,559 pieces")


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "small.jsonl", [{"text": "a few words " * n} for n in range(1, 40)])


def test_raw_stats_logs_its_stages(small: Path) -> None:
    stats = run_packcli("stats", str(small), "--max-len", "64", "--json")
    assert stats.returncode == 0, stats.stderr
    assert "packcli: comparing strategies (" in stats.stderr and "packcli: max_len candidates (" in stats.stderr
    assert stats.stdout.startswith("{")


def test_quiet_prints_nothing_on_stderr(tmp_path: Path, small: Path) -> None:
    packed = run_packcli("pack", str(small), "--max-len", "64", "--out", str(tmp_path / "out"), "--quiet")
    assert packed.returncode == 0 and packed.stderr == "" and packed.stdout.startswith("packed 39 documents")
    stats = run_packcli("stats", str(small), "--max-len", "64", "--quiet")
    assert stats.returncode == 0 and stats.stderr == "" and "choosing --max-len" in stats.stdout
