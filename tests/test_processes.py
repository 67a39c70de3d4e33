"""The run as a process: kill -9, Ctrl-C, a full disk, resume after a kill, and Ray's own processes.

Each test drives the real ``packcli`` process (``python -m packcli``): what is under test is how the process and its
workers behave, not a function.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLE, error_line, read_jsonl, shared_path, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()
TEXTS = [record["text"] for record in read_jsonl(SAMPLE)]
PACK = [sys.executable, "-m", "packcli", "pack"]


def ctrl_c_at_default() -> None:
    """In a child before it runs: Ctrl-C at its default, as a terminal's foreground job has it, even where this
    suite was started in the background (where a shell makes its commands ignore SIGINT, and so their children)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (children by /proc, recursively)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                children = [int(child) for child in task.read_text().split()]
            except OSError:
                continue
            found.update(children)
            frontier.extend(children)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def survivors(pids: set[int], within: float = 10.0) -> list[int]:
    """The processes among ``pids`` still alive after waiting up to ``within`` seconds for all to end."""
    deadline = time.monotonic() + within
    while [pid for pid in pids if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[bytes], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the moment under test"


def committed(staging: Path) -> list[Path]:
    return sorted(staging.glob("part-*/manifest.json"))


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample corpus three times as plain JSON Lines (about 7 MB): partitions that take a while each."""
    corpus = tmp_path_factory.mktemp("big") / "big.jsonl"
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()) * 3)
    return corpus


def kill_after_first_commit(command: list[str], staging: Path) -> int:
    """Start a partitioned run with one worker, kill -9 its whole group once a partition is committed, and
    return how many partitions were committed."""
    process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)
    wait_for(lambda: bool(committed(staging)), process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return len(committed(staging))


def test_kill_9_of_the_driver_takes_its_workers_with_it(big: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    command = [*PACK, str(big), "--max-len", "2048", "--partitions", "6", "--workers", "2", "--shard-size", "300kB"]
    process = subprocess.Popen([*command, "--out", str(out), "--quiet"], stderr=subprocess.DEVNULL)
    wait_for(lambda: len(descendants(process.pid)) >= 3, process)  # the resource tracker and two workers
    time.sleep(0.5)
    workers = descendants(process.pid)
    process.kill()  # the driver alone, as an OOM killer or a scheduler does
    process.wait()
    assert not survivors(workers), "worker processes outlived their driver"

    rerun = invoke("pack", str(big), "--max-len", "2048", "--partitions", "6", "--out", str(out), "--json")
    assert rerun.exit_code == 0, rerun.output
    verified = invoke("verify", str(out))
    assert verified.exit_code == 0, verified.output


def test_a_stray_file_in_the_resume_area_never_reaches_the_output(big: Path, tmp_path: Path) -> None:
    out, staging = tmp_path / "out", tmp_path / ".out.packcli-resume"
    args = [str(big), "--max-len", "2048", "--partitions", "4", "--out", str(out)]
    assert kill_after_first_commit([*PACK, *args, "--workers", "1", "--quiet"], staging) >= 1
    part = committed(staging)[0].parent
    shard = sorted(part.glob("part-*-shard-*.arrow"))[0]
    shutil.copy(shard, part / "part-00000-shard-00099.arrow")  # in a committed part, but not in its manifest
    shutil.copy(shard, staging / "part-00000-shard-00098.arrow")  # beside the parts: written by no part
    unfinished = [k for k in range(4) if not (staging / f"part-{k:05d}" / "manifest.json").exists()]
    for k in unfinished:  # a partition the kill caught having made its directory alone: its leftovers go unsaid
        shutil.rmtree(staging / f"part-{k:05d}", ignore_errors=True)
        (staging / f"part-{k:05d}").mkdir()
    resumed = invoke("pack", *args, "--json")
    assert resumed.exit_code == 0, resumed.output
    assert "removing 2 file(s) no committed partition wrote" in resumed.stderr
    assert not (out / "part-00000-shard-00099.arrow").exists() and not (out / "part-00000-shard-00098.arrow").exists()
    verified = invoke("verify", str(out))
    assert verified.exit_code == 0, verified.output


def test_resume_follows_resolved_facts_not_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    source = Path(__import__("packcli").__file__).parent / "assets" / "gpt2" / "tokenizer.json.gz"
    (tokenizer / "tokenizer.json").write_bytes(gzip.decompress(source.read_bytes()))
    corpus = tmp_path / "big.jsonl"
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()) * 2)
    staging = tmp_path / ".out.packcli-resume"
    monkeypatch.chdir(tmp_path)  # and back: a worker left in a removed directory starts no process
    args = ["big.jsonl", "--max-len", "2048", "--partitions", "4", "--out", "out"]
    done = kill_after_first_commit([*PACK, *args, "--workers", "1", "--tokenizer", "tok", "--quiet"], staging)
    assert done >= 1
    resumed = invoke("pack", *args, "--tokenizer", "./tok/", "--json")
    assert resumed.exit_code == 0, resumed.output
    assert "not reusing" not in resumed.stderr
    assert json.loads(resumed.stdout)["partitions_reused"] == done


def test_resume_names_what_changed_in_the_inputs(tmp_path: Path) -> None:
    inputs = tmp_path / "corpus"
    inputs.mkdir()
    for k in range(3):
        (inputs / f"{k}.jsonl").write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    out, staging = tmp_path / "out", tmp_path / ".out.packcli-resume"
    args = [str(inputs), "--max-len", "2048", "--partitions", "6", "--out", str(out)]
    assert kill_after_first_commit([*PACK, *args, "--workers", "1", "--quiet"], staging) >= 1
    write_jsonl(inputs / "3.jsonl", [{"text": text} for text in TEXTS[:5]])
    size = sum(path.stat().st_size for path in staging.rglob("*") if path.is_file())
    resumed = invoke("pack", *args)
    assert resumed.exit_code == 0, resumed.output
    assert "partitions then" not in resumed.stderr
    assert "the inputs changed" in resumed.stderr and "3.jsonl" in resumed.stderr
    assert f"in {staging} ({size:,} bytes, removed): they belong to another run" in resumed.stderr


def test_a_rerun_with_other_bos_or_eos_options_reuses_no_partition_packed_with_the_old_ones(
    big: Path, tmp_path: Path
) -> None:
    """--bos, --no-eos and --eos-token change every document's tokens, so a resumed run given other ones must not
    take a partition packed before them. The fingerprint covers them (the options and the EOS/BOS ids), and the run
    record holds it: such a rerun packs every partition again, saying which options differ; the same options reuse
    what was committed."""
    tokenizer = shared_path("tokenizers/minilm")  # BERT's: a BOS ([CLS]) and other special tokens than its EOS
    out, staging = tmp_path / "out", tmp_path / ".out.packcli-resume"
    args = [str(big), "--max-len", "2048", "--partitions", "4", "--tokenizer", str(tokenizer)]
    done = kill_after_first_commit([*PACK, *args, "--workers", "1", "--out", str(out), "--quiet"], staging)
    assert done >= 1
    changes = {"bos": ["--bos"], "eos": ["--no-eos"], "eos_token": ["--eos-token", "[MASK]"]}
    for option in changes:
        shutil.copytree(staging, tmp_path / f".{option}.packcli-resume")
    for option, extra in changes.items():
        resumed = invoke("pack", *args, *extra, "--out", str(tmp_path / option), "--json")
        assert resumed.exit_code == 0, resumed.output
        assert json.loads(resumed.stdout)["partitions_reused"] == 0, option
        assert f"they belong to another run (options differ: {option}); packing every partition" in resumed.stderr
    same = invoke("pack", *args, "--out", str(out), "--json")
    assert same.exit_code == 0 and json.loads(same.stdout)["partitions_reused"] == done, same.output


def small_files() -> None:
    """In a child process before it starts: every file it (and its workers) writes stops at 64 kB, a disk that
    fills up."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_full_disk_names_the_output(tmp_path: Path, partitioned: bool) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    out = tmp_path / "out"
    extra = ["--partitions", "2", "--workers", "1"] if partitioned else []

    result = subprocess.run(
        [*PACK, str(corpus), "--max-len", "1024", "--out", str(out), "--quiet", *extra],
        preexec_fn=small_files,
        capture_output=True,
        text=True,
        env={**os.environ, "PACKCLI_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 1, result.stderr
    assert error_line(result.stderr) and "Errno" not in result.stderr, result.stderr
    assert error_line(result.stderr).startswith(f"error: cannot write {out}: File too large; nothing was published"), (
        result.stderr
    )
    assert not out.exists()
    staging = tmp_path / ".out.packcli-resume"
    if partitioned:  # the resume area is kept, and said so
        assert staging.is_dir() and f"kept in {staging}" in result.stderr and "resume" in result.stderr
    else:
        assert not staging.exists()


@pytest.mark.parametrize("partitioned", [False, True])
def test_ctrl_c_says_what_it_left(big: Path, tmp_path: Path, partitioned: bool) -> None:
    out = tmp_path / "out"
    extra = ["--partitions", "4", "--workers", "1"] if partitioned else []
    process = subprocess.Popen(
        [*PACK, str(big), "--max-len", "2048", "--out", str(out), *extra],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_at_default,
    )
    staging = tmp_path / ".out.packcli-resume"
    if partitioned:
        wait_for(lambda: bool(committed(staging)), process)
    else:
        wait_for(lambda: any(tmp_path.glob(".out.packcli-staging-*")), process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: interrupted"), stderr
    if partitioned:
        assert str(staging) in last and "resume" in last
    else:
        assert "no output was written" in last
    assert not out.exists()


@pytest.mark.ray
def test_a_local_ray_is_quiet_and_ends_with_its_driver(big: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    command = [*PACK, str(big), "--max-len", "1024", "--engine", "ray", "--partitions", "2", "--quiet"]
    quiet = subprocess.run([*command, "--out", str(tmp_path / "a")], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr

    process = subprocess.Popen([*command, "--out", str(tmp_path / "b")], stderr=subprocess.DEVNULL)
    wait_for(lambda: any("WorkerActor" in command_line(pid) for pid in descendants(process.pid)), process)
    ray_processes = descendants(process.pid)
    process.kill()
    process.wait()
    assert not survivors(ray_processes, within=15), "Ray processes outlived their driver"


def test_stats_on_a_raw_corpus_says_its_tokens_stay_in_the_cache(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": text} for text in TEXTS[:20]])
    cache = tmp_path / "cache"
    result = subprocess.run(
        [sys.executable, "-m", "packcli", "stats", str(corpus), "--max-len", "512", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PACKCLI_CACHE": str(cache)},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert any(cache.iterdir()) and sorted(path.name for path in tmp_path.iterdir()) == ["c.jsonl", "cache"]
    help_text = invoke("stats", "--help").stdout
    assert "tokenization cache" in " ".join(help_text.split()) and "Nothing is written" not in help_text


def test_an_end_of_input_keeps_its_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import packcli.run.driver as driver

    def closed(*args: object, **kwargs: object) -> None:
        raise EOFError("standard input closed while reading the corpus")

    monkeypatch.setattr(driver, "pack_corpus", closed)  # the error as a reader would raise it
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": TEXTS[0]}])
    result = invoke("pack", str(corpus), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert error_line(result.stderr) == "error: standard input closed while reading the corpus"


def test_killing_the_watcher_first_still_leaves_no_worker(big: Path, tmp_path: Path) -> None:
    command = [*PACK, str(big), "--max-len", "2048", "--partitions", "4", "--workers", "2", "--quiet"]
    process = subprocess.Popen([*command, "--out", str(tmp_path / "out")], stderr=subprocess.DEVNULL)
    wait_for(lambda: len(descendants(process.pid)) >= 4, process)  # the watcher, the resource tracker, two workers
    workers = descendants(process.pid)
    watcher = [pid for pid in workers if "packcli.engines.reaper" in command_line(pid)]
    assert watcher, "no watcher process"
    os.kill(watcher[0], signal.SIGKILL)
    time.sleep(0.3)
    process.kill()
    process.wait()
    assert not survivors(workers), "worker processes outlived their driver and its watcher"


def test_ctrl_c_to_the_whole_group_while_workers_start_is_one_line(big: Path, tmp_path: Path) -> None:
    process = subprocess.Popen(  # its own process group, as a terminal's job: Ctrl-C reaches every process in it
        [*PACK, str(big), "--max-len", "2048", "--partitions", "4", "--workers", "2", "--out", str(tmp_path / "o")],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ctrl_c_at_default,
    )
    wait_for(lambda: len(descendants(process.pid)) >= 3, process)  # workers spawned, still importing
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("packcli: ")]  # progress lines aside
    assert lines == [lines[-1]] and lines[-1].startswith("error: interrupted"), stderr


def test_ctrl_c_after_the_output_is_published_does_not_deny_it(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    out = tmp_path / "out"
    for _ in range(3):  # the window between the swap and the exit is short: try a few times
        shutil.rmtree(out, ignore_errors=True)
        process = subprocess.Popen(
            [*PACK, str(corpus), "--out", str(out)], stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_at_default
        )
        deadline = time.monotonic() + 120
        while not (out / "manifest.json").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        if process.returncode == 130:
            # after the swap: "the output is complete", or, between the swap and the summary, just "interrupted"
            assert "no output was written" not in stderr, stderr
            assert "the output is complete" in stderr or stderr.endswith("error: interrupted\n"), stderr
            assert invoke("verify", str(out)).exit_code == 0
            return
    pytest.skip("the run ended before every Ctrl-C: the window after the swap was not hit")


@pytest.mark.ray
def test_ctrl_c_during_ray_is_one_line_and_leaves_no_ray_process(big: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out"
    process = subprocess.Popen(  # its own process group, as a terminal's job: Ctrl-C reaches every process in it
        [*PACK, str(big), "--max-len", "2048", "--engine", "ray", "--partitions", "2", "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for(lambda: any("WorkerActor" in command_line(pid) for pid in descendants(process.pid)), process)
    time.sleep(0.5)  # the driver blocked in Ray: an actor starting, its first call waited for
    started = descendants(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr  # not a crash (-11) nor a SystemError (1)
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("packcli: ")]
    assert lines == [lines[-1]] and lines[-1].startswith("error: interrupted"), stderr
    assert not out.exists()
    assert not survivors(started, within=15), "Ray processes outlived the interrupted run"


def test_a_worker_whose_driver_died_while_it_started_ends_at_once() -> None:
    """Its parent is already another process when it starts watching: it must not wait on that one."""
    code = "from packcli.engines.reaper import die_with_parent; import time; die_with_parent(-1); time.sleep(60)"
    started = time.monotonic()
    finished = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert finished.returncode == 1 and time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("killed", "rerun"),
    [
        ([], []),
        (["--partitions", "2", "--workers", "1"], []),
        (["--partitions", "3", "--workers", "1"], ["--partitions", "2"]),
        ([], ["--partitions", "2"]),
    ],
    ids=["plain", "partitioned-then-plain", "fewer-partitions", "plain-then-partitioned"],
)
def test_a_killed_run_leaves_nothing_in_packcli_scratch_once_rerun(
    big: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killed: list[str], rerun: list[str]
) -> None:
    """A run keeps its token stores in ``$PACKCLI_SCRATCH``; kill -9 leaves them there, and the next run on the
    same output removes them (its staging directory has another name, its scratch must not), whatever it is: a
    plain run after a partitioned one, a partitioned one after a plain one, or one of fewer partitions (a
    partition past its count, or the plain run's store, stayed for good)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    monkeypatch.setenv("PACKCLI_CACHE", str(tmp_path / "cache"))  # tokenized afresh: the store is written
    out = tmp_path / "out"
    command = [*PACK, str(big), "--max-len", "1024", "--out", str(out), "--quiet", *killed]
    process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)
    last = f"-part-{int(killed[1]) - 1:05d}" if killed else ""  # the last partition's: past the rerun's count
    wait_for(lambda: any(scratch.glob(f"packcli-*{last}/tokens*")), process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert list(scratch.iterdir()), "the kill came after the run had cleaned its scratch"

    again = invoke("pack", str(big), "--max-len", "1024", "--out", str(out), "--quiet", *rerun)
    assert again.exit_code == 0, again.output
    assert invoke("verify", str(out)).exit_code == 0
    assert sorted(path.name for path in scratch.iterdir()) == []


@pytest.fixture(scope="module")
def plain_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample as plain JSON Lines (3.3 MB): four partitions of it take long enough to be killed."""
    corpus = tmp_path_factory.mktemp("plain") / "sample.jsonl"
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    return corpus


def four_partitions(corpus: Path) -> list[str]:
    """The partitioned pack of ``plain_sample`` that the tests below kill, and whose bytes their reruns must give."""
    return [str(corpus), "--max-len", "1024", "--partitions", "4", "--workers", "2"]


@pytest.fixture(scope="module")
def uninterrupted(plain_sample: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The files of ``four_partitions`` packed without interruption, by name."""
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    result = invoke("pack", *four_partitions(plain_sample), "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    return files_of(out)


def files_of(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in out.iterdir()}


@pytest.mark.xdist_group("ray")  # not a Ray test: it shares ``uninterrupted`` with the Ray test below, built once
def test_a_run_killed_over_an_output_holding_datasets_caches_is_finished_by_its_rerun(
    plain_sample: Path, uninterrupted: dict[str, bytes], tiny_corpus: Path, tmp_path: Path
) -> None:
    """The output being replaced holds the cache files ``datasets`` wrote beside its shards (a ``map`` and a
    ``filter`` of what ``packcli.pack`` returned); kill -9 of the whole ``--overwrite`` run once a partition is
    committed; the rerun resumes, and leaves the shards of an uninterrupted run, no cache file and nothing beside."""
    import packcli

    out, staging = tmp_path / "out", tmp_path / ".out.packcli-resume"
    rows = packcli.pack(str(tiny_corpus), max_len=256, out=out)
    rows.map(lambda row: {"length": len(row["input_ids"])})
    rows.filter(lambda row: len(row["input_ids"]) > 200)
    caches = sorted(path.name for path in out.glob("cache-*.arrow"))
    assert len(caches) == 2, sorted(path.name for path in out.iterdir())

    args = [*four_partitions(plain_sample), "--overwrite"]
    assert kill_after_first_commit([*PACK, *args, "--out", str(out), "--quiet"], staging) >= 1
    assert sorted(path.name for path in out.glob("cache-*.arrow")) == caches  # the old output is still in place

    resumed = invoke("pack", *args, "--out", str(out), "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["partitions_reused"] >= 1
    assert invoke("verify", str(out)).exit_code == 0
    assert files_of(out) == uninterrupted
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]  # no lock, resume area or debris


@pytest.mark.ray
def test_a_killed_ray_actor_is_one_line_and_the_rerun_on_another_engine_resumes(
    plain_sample: Path, uninterrupted: dict[str, bytes], tmp_path: Path
) -> None:
    """kill -9 of a Ray actor once a partition is committed: one line on stderr, nothing on stdout (where
    ``--json`` writes; Ray echoed its own notice of the dead worker there); the same command on the local engine
    (the engine is not part of the run's identity) reuses the committed partitions and writes the bytes of an
    uninterrupted run."""
    pytest.importorskip("ray")
    out, staging = tmp_path / "out", tmp_path / ".out.packcli-resume"
    args = [*four_partitions(plain_sample), "--json", "--out", str(out)]
    process = subprocess.Popen(
        [*PACK, *args, "--engine", "ray"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: bool(committed(staging)), process)
    actors = [pid for pid in descendants(process.pid) if "WorkerActor" in command_line(pid)]
    assert actors, "no Ray actor process"
    os.kill(actors[0], signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1 and stdout == "", stdout
    assert error_line(stderr).startswith("error: a Ray actor died"), stderr
    assert "rerun the same command to resume" in stderr

    resumed = invoke("pack", *args)
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["partitions_reused"] >= 1
    assert files_of(out) == uninterrupted


def test_no_resume_area_outlives_a_later_run_on_the_output(plain_sample: Path, tmp_path: Path) -> None:
    """The parts a killed partitioned run left beside the output are removed by the next plain run on it, packing
    or up to date, which says so with their size; nothing is left beside the output."""
    out, staging = tmp_path / "out", tmp_path / ".out.packcli-resume"
    plain = ["pack", str(plain_sample), "--max-len", "1024", "--out", str(out), "--json"]
    for later, extra in (("packed", []), ("up-to-date", ["--overwrite"])):
        partitioned = [*PACK, *four_partitions(plain_sample), "--out", str(out), "--quiet", *extra]
        assert kill_after_first_commit(partitioned, staging) >= 1
        left = [path.stat().st_size for path in staging.rglob("*") if path.is_file()]
        result = invoke(*plain)
        assert result.exit_code == 0 and json.loads(result.stdout)["status"] == later, result.output
        said = f"warning: removing {staging} ({len(left):,} file(s), {sum(left):,} bytes): the parts of an"
        assert said in result.stderr, result.stderr
        assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
