"""A reader that closes standard output before the command is done with it (``packcli show out | head -1``): every
command ends quietly by SIGPIPE, as coreutils and git do (exit status 141 in a shell), with no error line, no
traceback and no ``Exception ignored`` line; a pack still publishes its whole output first.

Each test runs the real process with its standard output a pipe whose reader is already closed, so that its first
write to it (or the flush of what it buffered) meets the closed pipe at once: no timing involved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROGRESS_PREFIX, error_line
from typer.testing import CliRunner

from packcli.cli import app


def with_stdout_closed(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m packcli ARGS``, its standard output a pipe nobody reads any more."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        command = [sys.executable, "-m", "packcli", *args]
        return subprocess.run(command, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    finally:
        os.close(writer)


def assert_ended_quietly_by_sigpipe(result: subprocess.CompletedProcess[str]) -> None:
    said = [line for line in result.stderr.splitlines() if not line.startswith(PROGRESS_PREFIX)]
    assert (result.returncode, said) == (-signal.SIGPIPE, []), result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["strategies"],  # a few lines, buffered: met at the flush once the command is done
        ["--help"],  # printed while the command line is parsed, before any command runs
        ["show", "{out}"],  # rich's console (stats, show), while the command runs
    ],
    ids=["strategies", "help", "show"],
)
def test_a_closed_stdout_ends_the_command_quietly_by_sigpipe(packed_text: Path, args: list[str]) -> None:
    assert_ended_quietly_by_sigpipe(with_stdout_closed(*(arg.format(out=packed_text) for arg in args)))


def test_a_pack_whose_stdout_is_closed_publishes_its_whole_output(tmp_path: Path, tiny_corpus: Path) -> None:
    """The summary is printed once the output is in place: a closed stdout ends the command after it, not midway."""
    out = tmp_path / "out"
    result = with_stdout_closed("pack", str(tiny_corpus), "--max-len", "512", "--out", str(out), "--json", "--quiet")
    assert_ended_quietly_by_sigpipe(result)
    verified = CliRunner().invoke(app, ["verify", str(out), "--json"])
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"], verified.output
    assert json.loads((out / "manifest.json").read_text())["totals"]["documents"] > 0


def test_a_stdout_closed_from_the_start_is_one_error_line_before_anything_is_done(
    tmp_path: Path, tiny_corpus: Path
) -> None:
    """``packcli pack ... >&-``: nowhere to print to is an error said at once (exit 1), not an unexpected
    AttributeError once the output is written, and no file the command opens takes standard output's place."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "packcli", "pack", str(tiny_corpus), "--max-len", "512", "--out", str(out)]
    result = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.close(1),  # the shell's >&-
    )
    assert result.returncode == 1, result.stderr
    assert "standard output is closed" in error_line(result.stderr)
    assert not out.exists()


def test_a_stderr_closed_from_the_start_is_as_if_sent_to_dev_null(tmp_path: Path, tiny_corpus: Path) -> None:
    """``packcli pack ... --json 2>&-``: the run goes on as with ``2>/dev/null`` (no 'unexpected AttributeError' at
    its first progress line), and nothing meant for stderr lands in standard output's JSON."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "packcli", "pack", str(tiny_corpus), "--max-len", "512", "--out", str(out)]
    result = subprocess.run(
        [*command, "--json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.close(2),  # the shell's 2>&-
    )
    assert result.returncode == 0
    assert json.loads(result.stdout)["documents"] > 0
    assert (out / "manifest.json").is_file()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_pack_whose_stdout_is_full_says_so_and_that_its_output_is_complete(tmp_path: Path, tiny_corpus: Path) -> None:
    """``packcli pack ... --json > /dev/full``: the output is published before the summary is printed, so the
    error names standard output and says the output is complete (exit 1), not a bare 'No space left on device'."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "packcli", "pack", str(tiny_corpus), "--max-len", "512", "--out", str(out)]
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [*command, "--json", "--quiet"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300, check=False
        )
    assert result.returncode == 1, result.stderr
    said = error_line(result.stderr)
    assert said.startswith("error: cannot write standard output (No space left on device)"), said
    assert f"{out} was published and is complete" in said, said
    verified = CliRunner().invoke(app, ["verify", str(out), "--json"])
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"], verified.output


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    "args", [["strategies"], ["verify", "{out}"], ["stats", "{out}"]], ids=["print", "verify", "rich"]
)
def test_a_full_stdout_is_named_in_the_one_error_line(packed_text: Path, args: list[str]) -> None:
    """``packcli stats OUT > /dev/full``: one line naming standard output as what failed (exit 1), whether the text
    went through print or rich's console, not a bare '[Errno 28] No space left on device'."""
    command = [sys.executable, "-m", "packcli", *(arg.format(out=packed_text) for arg in args)]
    with open("/dev/full", "w") as full:
        result = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    assert result.returncode == 1, result.stderr
    assert error_line(result.stderr) == "error: cannot write standard output (No space left on device)", result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_stdout_after_an_up_to_date_pack_or_an_export_says_what_was_done(
    tmp_path: Path, tiny_corpus: Path
) -> None:
    """What a full standard output adds is what the run did: an up-to-date pack published nothing, an export wrote
    its output."""
    out, exported = tmp_path / "out", tmp_path / "exported"
    pack = [sys.executable, "-m", "packcli", "pack", str(tiny_corpus), "--max-len", "512", "--out", str(out), "--quiet"]
    assert subprocess.run(pack, capture_output=True, timeout=300, check=False).returncode == 0
    export = [sys.executable, "-m", "packcli", "export", str(out), "--to", "megatron", "--out", str(exported)]
    for command, done in ((pack, f"{out} is up to date"), (export, f"{exported} was written and is complete")):
        with open("/dev/full", "w") as full:
            result = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
        assert result.returncode == 1, result.stderr
        assert error_line(result.stderr) == f"error: cannot write standard output (No space left on device); {done}"


def test_an_ascii_stdout_gets_escapes_not_an_error(packed_text: Path) -> None:
    """``PYTHONIOENCODING=ascii packcli stats OUT``: the bars and rules rich and stats draw come out as escapes
    (exit 0), not as 'unexpected UnicodeEncodeError'."""
    command = [sys.executable, "-m", "packcli", "stats", str(packed_text)]
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert "unexpected" not in result.stderr and result.stdout.isascii()


def test_show_json_on_an_ascii_stdout_is_still_json(tmp_path: Path) -> None:
    """``PYTHONIOENCODING=ascii packcli show OUT --json``: text the stream cannot encode is written as JSON's own
    escapes, so the line still parses and gives the text back, not the stream's ``\\xe9`` (which is no JSON)."""
    text = "caf\u00e9 \u4e2d\u6587 \U0001f600 and more text"
    corpus = tmp_path / "caf\u00e9.jsonl"  # --source names it
    corpus.write_text(json.dumps({"text": text}) + "\n")
    out = tmp_path / "out"
    assert (
        CliRunner().invoke(app, ["pack", str(corpus), "--max-len", "512", "--out", str(out), "--quiet"]).exit_code == 0
    )
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for args in (["--row", "0"], ["--source", f"{corpus}:1"]):
        command = [sys.executable, "-m", "packcli", "show", str(out), "--json", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=env)
        assert result.returncode == 0, result.stderr
        assert "caf\u00e9" in json.dumps(json.loads(result.stdout), ensure_ascii=False), result.stdout
