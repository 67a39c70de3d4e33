"""``-`` reads standard input: every format by its first bytes, the same shards as the file, errors named
``<stdin>:LINE``, the same identity for the same bytes, and no spool left behind."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import pty
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, error_line, read_jsonl
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()
RECORDS = read_jsonl(SAMPLE)[:40]
JSONL = "".join(json.dumps(record) + "\n" for record in RECORDS).encode()


@pytest.fixture(autouse=True)
def spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Spools go here, so a test can see that none is left."""
    directory = tmp_path / "spools"
    directory.mkdir()
    monkeypatch.setenv("TMPDIR", str(directory))
    return directory


def pack_stdin(data: bytes, out: Path, *flags: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["pack", "-", "--out", str(out), "--max-len", "1024", *flags], input=data)


def shard_bytes(out: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted(out.glob("*.arrow"))]


def table() -> pa.Table:
    return pa.table({"text": [record["text"] for record in RECORDS]})


def parquet(_: bytes) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table(), sink)
    return sink.getvalue()


def arrow_stream(_: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table().schema) as writer:
        writer.write_table(table())
    return bytes(sink.getvalue())


def arrow_file(_: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table().schema) as writer:
        writer.write_table(table())
    return bytes(sink.getvalue())


def zstd(data: bytes) -> bytes:
    return bytes(pa.compress(data, codec="zstd", asbytes=True))


def json_array(_: bytes) -> bytes:
    return json.dumps(RECORDS).encode()


ENCODINGS: dict[str, Callable[[bytes], bytes]] = {
    "jsonl": lambda data: data,
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "zstd": zstd,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "json array": json_array,
    "parquet": parquet,
    "arrow stream": arrow_stream,
    "arrow file": arrow_file,
}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_format_is_read_by_its_first_bytes(encoding: str, tmp_path: Path, spool_dir: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(JSONL)
    by_path = runner.invoke(app, ["pack", str(corpus), "--out", str(tmp_path / "file"), "--max-len", "1024"])
    assert by_path.exit_code == 0, by_path.stderr
    result = pack_stdin(ENCODINGS[encoding](JSONL), tmp_path / "stdin")
    assert result.exit_code == 0, result.stderr
    assert shard_bytes(tmp_path / "stdin") == shard_bytes(tmp_path / "file")
    manifest = json.loads((tmp_path / "stdin" / "manifest.json").read_text())
    assert [entry["path"] for entry in manifest["inputs"]] == ["<stdin>"]
    assert manifest["totals"]["input_documents"] == len(RECORDS)
    assert list(spool_dir.iterdir()) == []


def test_the_same_bytes_are_up_to_date_and_other_bytes_are_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert pack_stdin(JSONL, out, "--json").exit_code == 0
    again = pack_stdin(JSONL, out, "--json")
    assert json.loads(again.stdout)["status"] == "up-to-date"
    changed = pack_stdin(JSONL + b'{"text": "one more document"}\n', out)
    assert changed.exit_code == 1 and "holds another packcli output" in changed.stderr


def test_stats_of_stdin_leaves_tokens_that_pack_of_stdin_reuses(tmp_path: Path) -> None:
    stats = runner.invoke(app, ["stats", "-", "--max-len", "1024", "--json"], input=JSONL)
    assert stats.exit_code == 0, stats.stderr
    packed = pack_stdin(JSONL, tmp_path / "out", "--json")
    assert json.loads(packed.stdout)["tokenized_from_cache"] is True


def test_a_bad_record_is_named_by_stdin_and_line(tmp_path: Path, spool_dir: Path) -> None:
    result = pack_stdin(JSONL + b'{"text": 7}\n', tmp_path / "out")
    assert result.exit_code == 1
    assert error_line(result.stderr) == f"error: <stdin>:{len(RECORDS) + 1}: field 'text' is a number, not a string"
    assert not (tmp_path / "out").exists() and list(spool_dir.iterdir()) == []


def test_a_cut_compressed_stdin_names_stdin_and_a_line(tmp_path: Path, spool_dir: Path) -> None:
    whole = gzip.compress(JSONL, mtime=0)
    cut = whole[: len(whole) // 2]
    assert len(cut) < 1 << 20
    result = pack_stdin(cut, tmp_path / "out")
    assert result.exit_code == 1 and error_line(result.stderr)
    assert re.match(r"error: <stdin>: the compressed data is damaged or cut short after line \d+: ", result.stderr)
    assert not (tmp_path / "out").exists() and list(spool_dir.iterdir()) == []


def test_stdin_beside_a_file_is_one_source_named_stdin(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_bytes(JSONL)
    result = runner.invoke(
        app,
        ["pack", "-", str(other), "--weights", "1,1", "--out", str(tmp_path / "out"), "--max-len", "1024", "--json"],
        input=JSONL,
    )
    assert result.exit_code == 0, result.stderr
    assert [source["path"] for source in json.loads(result.stdout)["sources"]] == ["<stdin>", str(other)]


def test_a_skipped_record_and_a_dry_run_name_stdin_never_the_spool(tmp_path: Path, spool_dir: Path) -> None:
    skipped = pack_stdin(JSONL + b'{"text": 7}\n', tmp_path / "out", "--skip-bad-records")
    assert skipped.exit_code == 0, skipped.stderr
    assert f"<stdin>:{len(RECORDS) + 1}: field 'text' is a number" in skipped.stderr
    assert str(spool_dir) not in skipped.stderr
    other = tmp_path / "other.jsonl"
    other.write_bytes(JSONL)
    planned = runner.invoke(
        app,
        ["pack", "-", str(other), "--weights", "1,1", "--out", str(tmp_path / "o"), "--dry-run", "--json"],
        input=JSONL,
    )
    assert planned.exit_code == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert [source["path"] for source in plan["sources"]] == ["<stdin>", str(other)]
    assert [entry["path"] for entry in plan["files"]] == ["<stdin>", str(other)]


def test_one_partition_of_stdin_is_the_plain_run(tmp_path: Path, spool_dir: Path) -> None:
    """``--partitions 1`` with ``-`` packs as ``pack -`` does: the same files byte for byte, so each finds the
    other's output up to date, and a dry run gives the same fingerprint."""
    plain = pack_stdin(JSONL, tmp_path / "plain")
    assert plain.exit_code == 0, plain.stderr
    one = pack_stdin(JSONL, tmp_path / "one", "--partitions", "1", "--workers", "2")
    assert one.exit_code == 0, one.stderr
    files = {path.name: path.read_bytes() for path in sorted((tmp_path / "plain").iterdir())}
    assert {path.name: path.read_bytes() for path in sorted((tmp_path / "one").iterdir())} == files
    assert "shard-00000.arrow" in files
    again = pack_stdin(JSONL, tmp_path / "plain", "--partitions", "1", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["status"] == "up-to-date"
    planned = pack_stdin(JSONL, tmp_path / "x", "--partitions", "1", "--dry-run", "--json")
    assert planned.exit_code == 0, planned.stderr
    assert json.loads(planned.stdout)["fingerprint"] == json.loads(files["manifest.json"])["fingerprint"]
    assert list(spool_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["-", "-"], "given more than once"),
        (["-", "--partitions", "2"], "cannot be cut into partitions"),
        (["-", "--partition-size", "1MB"], "cannot be cut into partitions"),
        (["-", "--partitions", "1", "--engine", "ray"], "cannot be cut into partitions"),
    ],
)
def test_usage_errors(arguments: list[str], message: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["pack", *arguments, "--out", str(tmp_path / "out")], input=JSONL)
    assert result.exit_code == 2 and message in result.stderr
    assert not (tmp_path / "out").exists()


def packcli(*args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """``packcli`` in a subprocess with SIGTERM and SIGHUP at their defaults, as a shell or a scheduler starts it."""

    def default_signals() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    return subprocess.Popen([sys.executable, "-m", "packcli", *args], preexec_fn=default_signals, **popen)


def wait_for(found: Callable[[], object], run: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not found() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found() and run.poll() is None


def test_a_terminal_on_stdin_is_a_usage_error(tmp_path: Path) -> None:
    primary, terminal = pty.openpty()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "packcli", "pack", "-", "--out", str(tmp_path / "out")],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(primary)
        os.close(terminal)
    assert process.returncode == 2
    assert "which is a terminal: pipe a corpus in" in process.stderr and not (tmp_path / "out").exists()


def test_a_closed_stdin_is_a_usage_error(tmp_path: Path) -> None:
    process = subprocess.run(
        [sys.executable, "-m", "packcli", "pack", "-", "--out", str(tmp_path / "out")],
        preexec_fn=lambda: os.close(0),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2 and "which is closed" in process.stderr


def test_a_named_pipe_given_as_a_file_says_to_pipe_into_standard_input(tmp_path: Path) -> None:
    """A pipe named as an input (``<(zcat corpus.gz)`` names one, ``/dev/fd/63``) is refused as what it is, exit 2,
    pointing to ``-``: not "no such file or directory" of a path that exists. Nothing is written."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for command in (["pack", str(fifo), "--out", str(tmp_path / "out")], ["stats", str(fifo)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and error_line(result.stderr), result.output
        assert error_line(result.stderr).startswith(
            f"error: {fifo}: is not a regular file or directory (a pipe, a device"
        ), result.stderr
        assert "standard input: `-`" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fifo", "spools"]


def test_a_pipe_in_a_real_process(tmp_path: Path) -> None:
    process = subprocess.run(
        [sys.executable, "-m", "packcli", "pack", "-", "--out", str(tmp_path / "out"), "--max-len", "1024", "--json"],
        input=gzip.compress(JSONL),
        capture_output=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout)["input_documents"] == len(RECORDS)
    assert (tmp_path / "out" / "manifest.json").is_file() and not list(tmp_path.glob("packcli-stdin-*"))


def test_a_killed_runs_spool_stays_in_tmpdir_and_the_next_run_removes_only_its_own(
    tmp_path: Path, spool_dir: Path
) -> None:
    """A run killed outright (kill -9) runs no cleanup: its spool stays in $TMPDIR, for the system's cleaning of it
    (docs/cli.md). The next run spools beside it and removes its own spool only."""
    with packcli("pack", "-", "--out", str(tmp_path / "killed"), stdin=subprocess.PIPE) as killed:
        assert killed.stdin is not None
        killed.stdin.write(JSONL)  # and keep the pipe open: the run waits in the spool
        killed.stdin.flush()
        wait_for(lambda: list(spool_dir.glob("packcli-stdin-*")), killed)
        killed.kill()
        killed.wait()
    left = list(spool_dir.glob("packcli-stdin-*"))
    assert len(left) == 1, "kill -9 leaves the spool"
    assert pack_stdin(JSONL, tmp_path / "out").exit_code == 0
    assert list(spool_dir.iterdir()) == left


def test_a_run_touches_nothing_in_tmpdir_but_its_own_spool(tmp_path: Path, spool_dir: Path) -> None:
    mine = spool_dir / "packcli-stdin-notes"  # the user's own folder, by chance of that name
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "lock").write_text("precious")
    (spool_dir / "packcli-stdin-link").symlink_to(victim)  # a planted link to someone's directory
    planted = spool_dir / "packcli-stdin-planted"
    planted.mkdir(mode=0o700)
    (planted / "lock").symlink_to(victim / "lock")  # a planted lock that points at someone's file
    packed = spool_dir / "packcli-stdin-output"  # an output the user packed there
    assert pack_stdin(JSONL, packed).exit_code == 0
    assert pack_stdin(JSONL, tmp_path / "out").exit_code == 0
    assert (mine / "todo.txt").read_text() == "keep me" and (victim / "lock").read_text() == "precious"
    assert (spool_dir / "packcli-stdin-link").is_symlink() and planted.is_dir()
    assert (packed / "manifest.json").is_file()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_spooling_removes_the_spool(tmp_path: Path, spool_dir: Path, signum: int) -> None:
    with packcli("pack", "-", "--out", str(tmp_path / "out"), stdin=subprocess.PIPE, stderr=subprocess.PIPE) as run:
        assert run.stdin is not None and run.stderr is not None
        run.stdin.write(JSONL)
        run.stdin.flush()
        wait_for(lambda: list(spool_dir.glob("packcli-stdin-*")), run)
        run.send_signal(signum)
        assert run.wait(timeout=120) == -signum  # cleaned up, then ended by the signal as by default
        assert b"Traceback" not in run.stderr.read()
    assert list(spool_dir.iterdir()) == [] and not (tmp_path / "out").exists()


def test_a_signal_while_packing_removes_the_spool_and_the_staging(tmp_path: Path, spool_dir: Path) -> None:
    out = tmp_path / "out"
    assert pack_stdin(JSONL, out).exit_code == 0
    before = shard_bytes(out)
    corpus = tmp_path / "long.jsonl.gz"
    corpus.write_bytes(gzip.compress(b"".join(gzip.decompress(SAMPLE.read_bytes()) for _ in range(4))))
    with (
        corpus.open("rb") as piped,
        packcli("pack", "-", "--out", str(out), "--overwrite", stdin=piped, stderr=subprocess.PIPE) as run,
    ):
        assert run.stderr is not None
        wait_for(lambda: list(tmp_path.glob(".out.packcli-staging-*")), run)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=120) == -signal.SIGTERM
        assert b"Traceback" not in run.stderr.read()
    assert list(spool_dir.iterdir()) == [] and shard_bytes(out) == before
    assert not list(tmp_path.glob(".out.packcli-*"))  # no staging, no lock


def test_stats_of_stdin_reads_stdin_even_beside_an_output_named_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert pack_stdin(JSONL[: JSONL.index(b"\n") + 1], Path("-")).exit_code == 0  # an output called "-"
    result = runner.invoke(app, ["stats", "-", "--max-len", "1024", "--json"], input=JSONL)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["input_documents"] == len(RECORDS)


def test_an_unusable_tmpdir_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    result = pack_stdin(JSONL, tmp_path / "out")
    assert result.exit_code == 1
    assert f"cannot keep standard input in {tmp_path / 'missing'} (TMPDIR)" in result.stderr
