"""The command line through typer's CliRunner: exit codes, one-line errors, --json, nothing half-written."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import SAMPLE, error_line, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def test_pack_json_prints_one_object(tmp_path: Path, tiny_corpus: Path) -> None:
    result = invoke("pack", str(tiny_corpus), "--max-len", "1024", "--out", str(tmp_path / "o"), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "packed" and summary["sequences"] > 0 and summary["max_len"] == 1024
    again = invoke("pack", str(tiny_corpus), "--max-len", "1024", "--out", str(tmp_path / "o"), "--json")
    assert json.loads(again.stdout)["status"] == "up-to-date"
    human = invoke("pack", str(tiny_corpus), "--max-len", "1024", "--out", str(tmp_path / "o"))
    assert "up to date" in human.stdout


def test_pack_human_summary(tmp_path: Path, tiny_corpus: Path) -> None:
    result = invoke("pack", str(tiny_corpus), "--max-len", "256", "--out", str(tmp_path / "o"), "--quiet")
    assert result.exit_code == 0
    assert "sequences of max_len 256" in result.stdout and "split documents:" in result.stdout


def test_strategies_lists_each_with_one_line() -> None:
    result = invoke("strategies")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines][:3] == ["bfd", "ffd", "greedy"]
    assert "Best-fit decreasing" in lines[0]


def bad_inputs(tmp: Path) -> list[tuple[list[str], int, str]]:
    (tmp / "badjson.jsonl").write_text('{"text": "a"}\n{"text": "b"\n')
    (tmp / "nofield.jsonl").write_text('{"text": "a"}\n{"body": "b"}\n')
    (tmp / "nonstr.jsonl").write_text('{"text": "a"}\n{"text": ["b"]}\n')
    (tmp / "utf8.jsonl").write_bytes(b'{"text": "a"}\n{"text": "\xc3\x28"}\n')
    (tmp / "empty.jsonl").write_text("")
    (tmp / "tok.json").write_text('{"model": 1}')
    whole = gzip.compress(b"".join(b'{"text": "document %d"}\n' % i for i in range(20000)))
    (tmp / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    good = str(write_jsonl(tmp / "good.jsonl", [{"text": "fine"}]))
    return [
        (["badjson.jsonl"], 1, "badjson.jsonl:2: invalid JSON"),
        (["nofield.jsonl"], 1, "nofield.jsonl:2: record has no field 'text'"),
        (["nonstr.jsonl"], 1, "nonstr.jsonl:2: field 'text' is an array, not a string"),
        (["utf8.jsonl"], 1, "utf8.jsonl:2: invalid UTF-8"),
        (["empty.jsonl"], 1, "empty.jsonl: no documents"),
        (["missing.jsonl"], 1, "missing.jsonl: no such file or directory"),
        (["cut.jsonl.gz"], 1, "cut.jsonl.gz: the compressed data is damaged or cut short"),
        ([good, "--tokenizer", "tok.json"], 1, "tok.json: not a valid tokenizer.json"),
        ([good, "--tokenizer", "absent/tokenizer"], 1, "no hub model of that name in the local cache"),
        ([good, "--max-len", "0"], 2, "--max-len"),
        ([good, "--strategy", "magic"], 2, "unknown strategy 'magic'; available: bfd, ffd, greedy"),
        # what to do next: a strategy of one's own reaches the command line through an entry point
        ([good, "--strategy", "magic"], 2, "an entry point in the 'packcli.strategies' group (docs/strategies.md)"),
        ([good, "--overflow", "fold"], 2, "'split', 'truncate', 'drop'"),
        ([good, "--shard-size", "lots"], 2, "cannot read size 'lots'"),
    ]


def test_every_bad_input_gets_one_line_and_its_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args, code, message in bad_inputs(tmp_path):
        result = invoke("pack", *args, "--out", "out")
        assert result.exit_code == code, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert error_line(result.stderr), result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert not (tmp_path / "out").exists()
        assert not list(tmp_path.glob(".out.packcli-*"))


def test_stats_names_the_one_input_that_holds_no_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As pack does: the error names the file, not only "no documents"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n")
    result = invoke("stats", "empty.jsonl")
    assert result.exit_code == 1, result.output
    assert f"error: {tmp_path / 'empty.jsonl'}: no documents" in error_line(result.stderr), result.stderr


def test_an_error_naming_a_file_with_a_line_break_in_its_name_is_still_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name holding a line break (or another control character) is written escaped, as Python writes it in a
    string: the error stays one line that a log or CI step reads whole, and still names the file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two\nlines.jsonl").write_text('{"text": "a"}\n{"text": "b"\n')
    for name, said in (
        ("two\nlines.jsonl", "two\\nlines.jsonl:2: invalid JSON"),
        ("gone\r.jsonl", "gone\\r.jsonl: no such"),
    ):
        result = invoke("pack", name, "--out", "out")
        assert result.exit_code == 1 and error_line(result.stderr) and "\r" not in result.stderr, result.stderr
        assert error_line(result.stderr) and said in result.stderr, result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["two\nlines.jsonl"]


def test_skip_bad_records_counts_and_warns(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"text": "a"}\n{"text": 1}\nnot json\n{"text": "b"}\n')
    result = invoke("pack", str(path), "--skip-bad-records", "--out", str(tmp_path / "o"), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["bad_records"] == 2
    assert result.stderr.count("warning: skipped bad record") == 2


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    """Without --debug the error is one line and a plain exit 1; with it, the error itself propagates, traceback and
    all (a real process prints it: Python's own handler), and no one-line message replaces it."""
    import traceback

    from packcli.errors import PackcliError

    missing = str(tmp_path / "missing.jsonl")
    plain = invoke("pack", missing)
    assert plain.exit_code == 1 and isinstance(plain.exception, SystemExit)
    assert error_line(plain.stderr) == f"error: {missing}: no such file or directory"
    debug = invoke("pack", missing, "--debug")
    assert debug.exit_code == 1 and isinstance(debug.exception, PackcliError) and debug.stderr == ""
    assert debug.exc_info is not None
    frames = traceback.extract_tb(debug.exc_info[2])
    raised_in = Path(frames[-1].filename).parts
    assert "packcli" in raised_in and "cli" not in raised_in  # down to where the input was looked for, below the CLI


def test_help_answers() -> None:
    result = invoke("pack", "--help")
    assert result.exit_code == 0 and "--max-len" in result.stdout and "Examples" in result.stdout


def run_with_terminal_stderr(args: list[str]) -> tuple[str, str]:
    """Run packcli with stderr on a pseudo-terminal (as in a shell); returns (stdout, what the terminal showed)."""
    import os
    import pty
    import subprocess
    import sys

    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "packcli", *args], stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process is done with it
            break
        if not chunk:
            break
        shown += chunk
    stdout = process.communicate()[0]
    os.close(controller)
    assert process.returncode == 0
    return stdout.decode(), shown.decode(errors="replace")


def test_progress_shows_on_a_terminal_and_not_with_quiet(tmp_path: Path) -> None:
    stdout, shown = run_with_terminal_stderr(["pack", str(SAMPLE), "--out", str(tmp_path / "a")])
    assert "tokenizing" in shown and "docs" in shown and "tok/s" in shown
    assert stdout.startswith("packed ")
    _, quiet = run_with_terminal_stderr(["pack", str(SAMPLE), "--out", str(tmp_path / "b"), "--quiet"])
    assert "tokenizing" not in quiet


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda path: None, "no such file or directory"),
        (lambda path: path.symlink_to(path.parent / "nowhere"), "a link to nothing"),
        (lambda path: path.symlink_to(path), "a loop of symbolic links"),
    ],
    ids=["missing", "dangling", "loop"],
)
def test_a_path_naming_nothing_says_why_in_every_command(tmp_path: Path, make: object, said: str) -> None:
    """verify, show and export said "no manifest.json: not a packcli output" of a path that is not there, and pack
    and stats "no such file or directory" of a link loop: each now says which of the three it is."""
    path = tmp_path / "packed"
    make(path)  # type: ignore[operator]
    for args in (
        ["pack", str(path), "--out", str(tmp_path / "o")],
        ["stats", str(path)],
        ["verify", str(path)],
        ["show", str(path)],
        ["export", str(path), "--to", "megatron", "--out", str(tmp_path / "e")],
    ):
        result = invoke(*args)
        assert result.exit_code == 1 and error_line(result.stderr) == f"error: {path}: {said}", (args, result.stderr)


def test_an_output_path_holding_a_line_break_is_one_line_in_every_report(tmp_path: Path, tiny_corpus: Path) -> None:
    """pack's summary, its up-to-date and dry-run lines, verify's OK and summary, export's line, show's and stats'
    headers printed such a path over two lines (the error lines already wrote it ``\\n``); each writes it so now."""
    out, exported = tmp_path / "a\nb", tmp_path / "e\nx"
    shown, shown_export = f"{tmp_path}/a\\nb", f"{tmp_path}/e\\nx"
    packed = invoke("pack", str(tiny_corpus), "--max-len", "512", "--out", str(out), "--quiet")
    assert packed.exit_code == 0 and packed.stdout.splitlines()[0].endswith(f"shard in {shown}"), packed.stdout
    again = invoke("pack", str(tiny_corpus), "--max-len", "512", "--out", str(out), "--quiet")
    assert again.stdout.splitlines()[0].startswith(f"{shown} is up to date"), again.stdout
    verified = invoke("verify", str(out))
    assert verified.exit_code == 0 and verified.stdout.startswith(f"{shown}: OK ("), verified.stdout
    assert len(verified.stdout.splitlines()) == 1
    export = invoke("export", str(out), "--to", "megatron", "--out", str(exported), "--quiet")
    assert export.exit_code == 0 and export.stdout.splitlines()[-1].endswith(f"into {shown_export}"), export.stdout
    header = invoke("show", str(out)).stdout.splitlines()[0]
    assert header.startswith(f"{shown} row 0 of "), header
    dry = invoke("pack", str(tiny_corpus), "--max-len", "512", "--out", str(out), "--dry-run")
    assert f"{shown} is up to date: the run would do nothing" in dry.stdout.splitlines(), dry.stdout
    stats = invoke("stats", str(out))
    assert stats.exit_code == 0 and stats.stdout.splitlines()[0].startswith(f"{shown}  strategy bfd"), stats.stdout
    summary = tmp_path / "verify.md"
    assert invoke("verify", str(out), "--summary", str(summary)).exit_code == 0
    assert f"`{shown}`" in summary.read_text(), summary.read_text()
