"""The engines: Ray gives the local engine's bytes; a missing Ray, an unreachable cluster and misused flags are one
line each. One local Ray (2 CPUs, a small object store) is started for the whole module: starting Ray takes
several seconds, so the tests that need it are few and marked ``ray``."""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SAMPLE, error_line, read_jsonl, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.engines.local import LocalEngine
from packcli.errors import BadRecordError, PackcliError

runner = CliRunner()


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def files_of(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = [record["text"] for record in read_jsonl(SAMPLE)][:60]
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "sample.jsonl", [{"text": text} for text in texts])


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packcli[ray]')")
    ray.init(address="local", num_cpus=2, object_store_memory=80 * 2**20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.ray
def test_ray_and_local_engines_write_identical_bytes(corpus: Path, tmp_path: Path, local_ray: None) -> None:
    outs = {}
    for engine in ("local", "ray"):
        outs[engine] = tmp_path / engine
        result = invoke(
            "pack", str(corpus), "--max-len", "512", "--partitions", "4", "--engine", engine,
            "--out", str(outs[engine]), "--json",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["partitions"] == 4
    assert files_of(outs["ray"]) == files_of(outs["local"])  # shards and their sidecars (source index, pieces)
    names = list(files_of(outs["ray"]))
    assert len([name for name in names if ".arrow." not in name]) == 5
    assert len([name for name in names if name.endswith(".arrow.sources")]) == 4


@pytest.mark.ray
def test_a_failing_partition_on_ray_names_file_and_line(tmp_path: Path, local_ray: None) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"text": "fine"}\n' * 30 + '{"text": 3}\n' + '{"text": "fine"}\n' * 9)
    result = invoke(
        "pack", str(corpus), "--partitions", "2", "--engine", "ray", "--out", str(tmp_path / "out"), "--quiet"
    )
    assert result.exit_code == 1 and error_line(result.stderr)
    assert f"{corpus}:31: " in result.stderr and "partition 1 of 2" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.ray
def test_a_job_that_runs_out_of_memory_on_ray_is_its_own_error_not_rays_page(local_ray: None) -> None:
    """An actor's job that raises (a MemoryError: an allocation the node could not give) reaches the driver as that
    error and its own message, which the CLI says in one line as it does for the local engine: not Ray's wrapper,
    whose text is a page (colour codes, the actor's pid and ip, the remote traceback)."""
    import ray

    from packcli.engines.ray import _result

    @ray.remote
    def allocate() -> None:
        raise MemoryError("Unable to allocate 1.19 GiB for an array with shape (160000000,) and data type int64")

    with pytest.raises(MemoryError) as raised:
        _result(ray, allocate.remote())
    assert type(raised.value) is MemoryError and str(raised.value).startswith("Unable to allocate 1.19 GiB")


def run_packcli(*args: str, prelude: str = "pass") -> subprocess.CompletedProcess[str]:
    """packcli in a fresh interpreter (``prelude`` runs first), capturing its output."""
    code = f"import sys; {prelude}; from packcli.cli import main; sys.argv = ['packcli', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_engine_ray_without_ray_installed_is_one_line(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_packcli(
        "pack", str(corpus), "--partitions", "2", "--engine", "ray", "--out", str(out),
        prelude="sys.modules['ray'] = None",  # what an interpreter without Ray sees: import ray fails
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == ""
    assert (
        error_line(result.stderr) == "error: --engine ray needs ray, which is not installed: pip install 'packcli[ray]'"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.ray
def test_unreachable_ray_address_is_one_line(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packcli[ray]')")
    out = tmp_path / "out"
    result = run_packcli(
        "pack", str(corpus), "--partitions", "2", "--engine", "ray", "--ray-address", "127.0.0.1:9", "--out", str(out)
    )
    assert result.returncode == 1 and error_line(result.stderr)
    assert error_line(result.stderr).startswith("error: cannot reach Ray at 127.0.0.1:9: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--engine", "ray"], "--engine ray runs partitions: add --partitions P or --partition-size SIZE"),
        (["--partitions", "2", "--ray-address", "h:1"], "--ray-address needs --engine ray"),
        (["--partitions", "2", "--engine", "spark"], "unknown engine 'spark'; choose one of local, ray"),
        (["--partitions", "2", "--partition-size", "1MB"], "use either --partitions or --partition-size"),
    ],
)
def test_misused_engine_flags_are_usage_errors(corpus: Path, tmp_path: Path, flags: list[str], message: str) -> None:
    result = invoke("pack", str(corpus), *flags, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and message in result.stderr
    assert not (tmp_path / "out").exists()


def packcli_errors() -> list[PackcliError]:
    """One instance of every PackcliError class packcli raises, each with a path, a line and its own fields."""
    from packcli.encode.crosscheck import TokenizerMismatch
    from packcli.errors import BadRecordError, MissingExtraError, UsageError
    from packcli.report.gates import GateFailed

    mismatch = TokenizerMismatch("fastokens", 3, 7, 11, 12)
    mismatch.path, mismatch.line = "c.jsonl", 5
    return [
        PackcliError("bad", "c.jsonl", 5),
        UsageError("--max-len 0: give a positive number", "c.jsonl", 5),
        BadRecordError("invalid JSON", "c.jsonl", 5),
        MissingExtraError("needs ray", "c.jsonl", 5),
        GateFailed("fill 0.5 below 0.9", "c.jsonl", 5),
        mismatch,
    ]


@pytest.mark.parametrize("error", packcli_errors(), ids=lambda error: type(error).__name__)
def test_a_job_error_crosses_a_process_with_its_file_line_and_exit_code(error: PackcliError) -> None:
    """A job raises; its engine re-raises the error in the driver after pickling it across processes: the class,
    message, file, line, exit code and a subclass's own fields arrive as they left."""
    error.partition = 2  # what the job adds: the driver names the partition
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) == f"c.jsonl:5: {error.message}"
    assert (back.path, back.line, back.exit_code, back.partition) == ("c.jsonl", 5, error.exit_code, 2)
    assert back.__dict__.keys() == error.__dict__.keys()


def test_an_os_error_crosses_a_process_with_its_errno_and_file() -> None:
    error = OSError(errno.ENOSPC, "No space left on device", "/out/.staging/shard-00000.arrow")
    error.partition = 1  # type: ignore[attr-defined]
    back = pickle.loads(pickle.dumps(error))
    assert (back.errno, back.strerror, back.filename, back.partition) == (
        errno.ENOSPC,
        "No space left on device",
        "/out/.staging/shard-00000.arrow",
        1,
    )


def note_start(shipped: Path, threads: int | None) -> int:
    """A worker's start: appends a line to the file it was shipped; its state is the pid that started it."""
    with shipped.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    return os.getpid()


def fail_odd(started_by: int, job: int) -> tuple[int, int]:
    """A job: its number and the pid that ran its worker's start, or for an odd number a data error naming its
    file and line."""
    if job % 2:
        raise BadRecordError(f"record {job} is bad", "c.jsonl", job)
    return job, started_by


def test_the_local_engine_starts_once_and_its_workers_share_it(tmp_path: Path) -> None:
    """One worker runs ``start`` (the tokenizer builds) and the others are forked from it: a run pays it once."""
    started = tmp_path / "started"
    results: list[tuple[int, int]] = []
    with LocalEngine(2) as engine:
        engine.run([0, 2, 4, 6], fail_odd, results.append, note_start, started)
    assert sorted(job for job, _ in results) == [0, 2, 4, 6]
    assert len(started.read_text().splitlines()) == 1
    assert {pid for _, pid in results} == {int(started.read_text())}  # a forked worker has the state it made


def test_the_local_engine_raises_the_first_failed_job_in_job_order(tmp_path: Path) -> None:
    results: list[tuple[int, int]] = []
    with pytest.raises(BadRecordError) as raised, LocalEngine(2) as engine:
        engine.run([0, 3, 1, 2], fail_odd, results.append, note_start, tmp_path / "started")
    assert (raised.value.path, raised.value.line, raised.value.exit_code) == ("c.jsonl", 3, 1)
    assert {job for job, _ in results} <= {0, 2}


_START_METHOD_SCRIPT = """
import sys, threading
from pathlib import Path
from packcli.engines.local import LocalEngine


def command_line(state, job):
    return Path("/proc/self/cmdline").read_bytes()


def workers_command_lines(fork):
    lines = []
    with LocalEngine(2, fork=fork) as engine:
        engine.run([0, 1, 2], command_line, lines.append, None, None)
    return set(lines)


if __name__ == "__main__":
    mine = Path("/proc/self/cmdline").read_bytes()
    print("fork", workers_command_lines(True) == {mine})
    print("declined", workers_command_lines(False) == {mine})
    stop = threading.Event()
    waiting = threading.Thread(target=stop.wait)
    waiting.start()
    print("threaded", workers_command_lines(True) == {mine})
    stop.set()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the local engine forks its first worker on Linux only")
def test_the_first_worker_is_forked_from_a_driver_with_no_other_thread_else_spawned(tmp_path: Path) -> None:
    """A forked worker runs with the driver's command line and imports; a spawned one is a fresh interpreter. The
    engine forks only when its caller allows it (no tokenizer pool started) and no other thread of Python runs."""
    script = tmp_path / "start_method.py"
    script.write_text(_START_METHOD_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["fork True", "declined False", "threaded False"]


def test_a_process_that_encoded_spawns_its_partition_workers(corpus: Path, tmp_path: Path) -> None:
    """A process whose tokenizer pool may run (it packed before) does not fork it into workers: the pool's threads
    would stay behind (Hugging Face then disables its parallelism, saying so on stderr; gigatoken would hang)."""
    from packcli.encode.tokenizer import encoding_started
    from packcli.options import PackOptions
    from packcli.run.driver import _engine

    result = invoke("pack", str(corpus), "--max-len", "512", "--out", str(tmp_path / "plain"), "--quiet")
    assert result.exit_code == 0, result.output
    assert encoding_started()
    engine = _engine(PackOptions(max_len=512, partitions=2), fork_workers=True)
    assert isinstance(engine, LocalEngine) and not engine.fork


_SAY_FORK = (
    "import packcli.engines.local as local; init = local.LocalEngine.__init__; "
    "local.LocalEngine.__init__ = lambda self, workers, fork=False: "
    "(print('fork', fork, file=sys.stderr), init(self, workers, fork))[1]"
)


def test_packcli_s_own_command_forks_its_first_worker_and_a_python_caller_s_process_does_not(
    corpus: Path, tmp_path: Path
) -> None:
    """The command's process holds only packcli's threads and pools; a Python caller's may hold a tokenizer pool
    packcli cannot see (Hugging Face's, after the caller encoded, hangs in a forked child when
    TOKENIZERS_PARALLELISM is set), so ``packcli.pack`` spawns."""
    result = run_packcli(
        "pack", str(corpus), "--max-len", "512", "--partitions", "2", "--out", str(tmp_path / "cli"), "--quiet",
        prelude=_SAY_FORK,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "fork True" in result.stderr.splitlines()
    code = (
        f"import sys; {_SAY_FORK}; import packcli; "
        f"packcli.pack({str(corpus)!r}, max_len=512, out={str(tmp_path / 'api')!r}, partitions=2)"
    )
    api = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert api.returncode == 0, api.stderr
    assert "fork False" in api.stderr.splitlines()
    assert files_of(tmp_path / "cli") == files_of(tmp_path / "api")


_ENCODED_THEN_INVOKED = """
import os, sys
os.environ["TOKENIZERS_PARALLELISM"] = "true"
{say_fork}
from tokenizers import Tokenizer
from typer.testing import CliRunner
from packcli.cli import app, main
from packcli.encode.tokenizer import load_tokenizer
if __name__ == "__main__":  # a spawned worker imports this script
    Tokenizer.from_str(load_tokenizer(None).source).encode_batch(["the caller's own text"] * 2000)
    how, args = sys.argv[1], ["pack", sys.argv[2], "--max-len", "512", "--partitions", "2", "--workers", "2",
                              "--tokenizer-backend", "hf", "--out", sys.argv[3], "--quiet"]
    if how == "runner":
        result = CliRunner().invoke(app, args)
        print("exit", result.exit_code)
        print(result.output)  # the runner's stderr too
    else:  # the console entry point's function, called by the caller's own script
        sys.argv[1:] = args
        try:
            main()
        except SystemExit as exc:
            print("exit", exc.code or 0)
"""


@pytest.mark.parametrize("how", ["runner", "main"])
def test_the_command_invoked_in_a_python_caller_s_process_spawns_its_first_worker(
    corpus: Path, tmp_path: Path, how: str
) -> None:
    """The app invoked in a caller's process (typer's CliRunner, as a test suite does, or the entry point's
    ``main()`` called from the caller's script), after the caller encoded with Hugging Face with
    TOKENIZERS_PARALLELISM set, is not packcli's own command: a forked worker would inherit the caller's tokenizer
    pool without its threads and hang on its first encode. Only the ``packcli`` program forks."""
    script = tmp_path / "caller.py"
    script.write_text(_ENCODED_THEN_INVOKED.format(say_fork=_SAY_FORK))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(script), how, str(corpus), str(out)], capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, result.stderr
    said = result.stdout.splitlines() + result.stderr.splitlines()
    assert "exit 0" in said and "fork False" in said, result.stdout + result.stderr
    assert (out / "manifest.json").is_file()


_TERMINATED_WORKER_SCRIPT = """
import os, signal, sys, time
from packcli.engines.local import LocalEngine
from packcli.errors import PackcliError
from packcli.util.signals import ending_by_signal


def terminate_self(state, job):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    return "survived"


if __name__ == "__main__":
    results = []
    with ending_by_signal():  # as packcli's main installs it: the driver's SIGTERM unwinds the driver
        try:
            with LocalEngine(1, fork=sys.argv[1] == "fork") as engine:
                engine.run([0], terminate_self, results.append, None, None)
            print("survived", results)
        except PackcliError as exc:
            print("ended:", exc)
"""


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_worker_sent_sigterm_ends_and_the_driver_says_so(tmp_path: Path, start: str) -> None:
    """A worker ends on SIGTERM as a process does by default, however it was started: a forked one does not keep
    the driver's handler, which would hold the signal back for good (the driver forks inside a block that holds
    signals)."""
    script = tmp_path / "terminated_worker.py"
    script.write_text(_TERMINATED_WORKER_SCRIPT)
    result = subprocess.run([sys.executable, str(script), start], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ended: a worker process died"), result.stdout
