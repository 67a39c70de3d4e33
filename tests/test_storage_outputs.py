"""Outputs on an S3-protocol store (moto's server on 127.0.0.1): the same shards as on disk under a run prefix,
the manifest written last as the commit, up to date on a rerun, --overwrite only over a packcli output, one writer
at a time (a lock object created only if absent, two real processes), a run killed mid-upload leaving nothing a
reader takes for an output and its rerun cleaning up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import error_line, listed_files, sample_lines
from s3_server import S3Server, object_keys
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import PackcliError
from packcli.format.manifest import read_manifest, shard_path
from packcli.storage import location
from packcli.storage.lock import ObjectLock

runner = CliRunner()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 20 lines (long documents, about 120k tokens) of the bundled sample: small, real text."""
    path = tmp_path_factory.mktemp("corpus") / "slice.jsonl"
    path.write_bytes(sample_lines(20))
    return path


def pack(*args: str) -> Any:
    return runner.invoke(app, ["pack", *args, "--quiet", "--json"])


def test_remote_output_is_the_local_output_under_a_run_prefix(
    s3_server: S3Server, corpus: Path, tmp_path: Path
) -> None:
    fs, bucket = s3_server.filesystem(), s3_server.bucket()
    out, source = f"{bucket}/packed", f"{bucket}/corpus/{corpus.name}"
    fs.put_file(str(corpus), source)
    local = pack(str(corpus), "--max-len", "256", "--out", str(tmp_path / "local"))
    remote = pack(source, "--max-len", "256", "--out", out)  # s3:// to s3://
    assert local.exit_code == 0 and remote.exit_code == 0, remote.stderr
    assert json.loads(remote.stdout)["status"] == "packed"
    mine, theirs = (
        json.loads((tmp_path / "local" / "manifest.json").read_text()),
        json.loads(fs.cat(f"{out}/manifest.json")),
    )
    names = object_keys(fs, out)
    run = names[-1].split("/")[0]
    assert run.startswith("packcli-run-") and names == sorted(
        ["manifest.json", *(f"{run}/{name}" for name in listed_files(mine))]  # shards and sidecars
    )
    assert [shard["file"] for shard in theirs["shards"]] == [f"{run}/{shard['file']}" for shard in mine["shards"]]
    for shard in mine["shards"]:
        assert fs.cat(f"{out}/{run}/{shard['file']}") == (tmp_path / "local" / shard["file"]).read_bytes()
    assert theirs["inputs"] == [{"path": source, "bytes": corpus.stat().st_size}]
    differ = ("shards", "inputs", "fingerprint")  # the run prefix; the input's URL, and so the fingerprint
    assert {**theirs, **{key: mine[key] for key in differ}} == mine
    assert read_manifest(location(out)) == theirs
    again = pack(source, "--max-len", "256", "--out", out)
    assert json.loads(again.stdout)["status"] == "up-to-date" and object_keys(fs, out) == names
    planned = pack(source, "--max-len", "256", "--out", out, "--dry-run")
    assert json.loads(planned.stdout)["status"] == "up-to-date", planned.stderr
    for report in (["stats", "--json"], ["show", "--row", "3", "--json"], ["verify", "--json"]):
        there, here = (runner.invoke(app, [*report, target]) for target in (out, str(tmp_path / "local")))
        assert there.exit_code == 0, there.stderr
        remote_figures, local_figures = json.loads(there.stdout), json.loads(here.stdout)
        if "shard" in local_figures:  # show names the row's shard: under the run prefix in the store
            assert remote_figures.pop("shard") == f"{run}/{local_figures.pop('shard')}"
            for figures, name in ((remote_figures, source), (local_figures, str(corpus))):
                for document in figures["documents"]:  # each from its input as the run named it: URL, path
                    assert document["source"].pop("input") == name
                    assert document["source"].pop("text").startswith(f"{name}:")
        assert remote_figures == local_figures
    for source, directory in ((out, "from-store"), (str(tmp_path / "local"), "from-disk")):
        exported = runner.invoke(app, ["export", source, "--to", "megatron", "--out", str(tmp_path / directory)])
        assert exported.exit_code == 0, exported.stderr
    for name in ("tokens.bin", "tokens.idx"):  # an output in the store exports as its local twin
        assert (tmp_path / "from-store" / name).read_bytes() == (tmp_path / "from-disk" / name).read_bytes()
    record = json.loads((tmp_path / "from-store" / "export.json").read_text())
    assert record["source"] == {"path": out, "fingerprint": theirs["fingerprint"]}
    again = runner.invoke(app, ["export", out, "--to", "megatron", "--out", str(tmp_path / "from-store")])
    assert again.exit_code == 0 and "up to date" in again.stdout, again.stderr
    damaged = f"{out}/{theirs['shards'][0]['file']}"
    content = bytearray(fs.cat(damaged))
    content[len(content) // 2] ^= 0xFF
    fs.pipe_file(damaged, bytes(content))
    verified = runner.invoke(app, ["verify", out])
    assert verified.exit_code == 1 and "sha256 differs from the manifest" in verified.stderr
    refused = runner.invoke(app, ["export", out, "--to", "nanotron", "--out", str(tmp_path / "from-damaged")])
    assert refused.exit_code == 1 and "fails verify" in refused.stderr and "sha256 differs" in refused.stderr
    assert not [path for path in tmp_path.iterdir() if "from-damaged" in path.name]  # nor its staging


def test_overwrite_replaces_only_a_packcli_output(s3_server: S3Server, corpus: Path) -> None:
    fs, bucket = s3_server.filesystem(), s3_server.bucket()
    out = f"{bucket}/packed"
    assert pack(str(corpus), "--max-len", "256", "--out", out).exit_code == 0
    first_run = object_keys(fs, out)[-1].split("/")[0]
    refused = pack(str(corpus), "--max-len", "128", "--out", out)
    assert refused.exit_code == 1 and "pass --overwrite" in refused.stderr
    replaced = pack(str(corpus), "--max-len", "128", "--out", out, "--overwrite")
    assert replaced.exit_code == 0, replaced.stderr
    names = object_keys(fs, out)
    assert not any(name.startswith(first_run) for name in names) and "manifest.json" in names
    assert json.loads(fs.cat(f"{out}/manifest.json"))["max_len"] == 128
    fs.pipe_file(f"{bucket}/data/notes.txt", b"mine")
    foreign = pack(str(corpus), "--max-len", "128", "--out", f"{bucket}/data", "--overwrite")
    assert foreign.exit_code == 1 and "'notes.txt', which is not part of a packcli output" in foreign.stderr
    assert fs.cat(f"{bucket}/data/notes.txt") == b"mine"


def test_the_lock_object_keeps_a_second_run_out_and_a_dead_holder_does_not(s3_server: S3Server, corpus: Path) -> None:
    out = s3_server.bucket() + "/packed"
    held = ObjectLock(f"{out}/.packcli-lock", "packcli-run-test")
    assert held.acquire()
    try:
        assert not ObjectLock(f"{out}/.packcli-lock", "packcli-run-other").acquire()  # created only if absent
        refused = pack(str(corpus), "--max-len", "256", "--out", out)
        assert refused.exit_code == 1 and f"in use by pid {os.getpid()}" in refused.stderr
    finally:
        held.release()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"host": os.uname().nodename, "pid": int(dead.stdout), "run": "packcli-run-gone", "token": "0" * 32}
    fs = s3_server.filesystem()
    # a pid gone from this host name says nothing (a run in another container has the host's name): the lock lives
    # by its heartbeat
    fs.pipe_file(f"{out}/.packcli-lock", json.dumps({**holder, "heartbeat": time.time()}).encode())
    refused = pack(str(corpus), "--max-len", "256", "--out", out)
    assert refused.exit_code == 1 and f"in use by pid {dead.stdout.strip()}" in refused.stderr, refused.stderr
    fs.pipe_file(f"{out}/.packcli-lock", json.dumps({**holder, "heartbeat": time.time() - 601}).encode())
    taken_over = pack(str(corpus), "--max-len", "256", "--out", out)
    assert taken_over.exit_code == 0, taken_over.stderr
    assert ".packcli-lock" not in object_keys(fs, out)


def stale_lock(fs: Any, url: str) -> None:
    """Put at ``url`` the lock of a run whose heartbeat stopped an hour ago."""
    holder = {"host": "gone", "pid": 1, "run": "packcli-run-gone", "token": "0" * 32, "heartbeat": time.time() - 3600}
    fs.pipe_file(url, json.dumps(holder).encode())


def acquire_together(lock: ObjectLock, start: Any) -> bool:
    """Try to take ``lock`` once every other thread at the barrier ``start`` is ready to."""
    start.wait()
    return lock.acquire()


def test_of_the_runs_that_take_over_one_stale_lock_exactly_one_gets_it(s3_server: S3Server) -> None:
    """Four acquirers read the same stale lock together, round after round: one takes it over (a conditional write
    on the stale version), the others see it held; none removes the lock another has just taken."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    fs, url = s3_server.filesystem(), s3_server.bucket() + "/packed/.packcli-lock"
    for _ in range(5):
        stale_lock(fs, url)
        locks = [ObjectLock(url, f"packcli-run-{k}") for k in range(4)]
        together = Barrier(len(locks))
        with ThreadPoolExecutor(len(locks)) as pool:
            won = list(pool.map(acquire_together, locks, [together] * len(locks)))
        assert won.count(True) == 1, won
        winner = locks[won.index(True)]
        assert json.loads(fs.cat(url))["token"] == winner.token
        assert all(
            lock.seen is not None and lock.seen.get("token") == winner.token for lock in locks if lock is not winner
        ), [lock.seen for lock in locks]
        winner.check()
        winner.release()
        assert not fs.exists(url)


def test_a_lock_is_released_and_committed_under_only_while_it_names_this_run(s3_server: S3Server) -> None:
    """A run whose lock another run took (after a stall past the stale time) removes nothing on release, and its
    check before the commit fails in one line."""
    fs, url = s3_server.filesystem(), s3_server.bucket() + "/packed/.packcli-lock"
    held = ObjectLock(url, "packcli-run-first")
    assert held.acquire()
    other = {"host": "h", "pid": 1, "run": "packcli-run-second", "token": "f" * 32, "heartbeat": time.time()}
    fs.pipe_file(url, json.dumps(other).encode())  # what the run that took it over wrote
    with pytest.raises(PackcliError) as lost:
        held.check()
    assert str(lost.value) == f"lost the output's lock {url}: another run took it over; this run published nothing"
    held.release()
    assert json.loads(fs.cat(url)) == other


def test_a_heartbeat_that_fails_is_retried_and_one_that_cannot_renew_in_time_loses_the_lock(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PACKCLI_LOCK_STALE_S", "6")  # a heartbeat every 0.6 s
    fs, url = s3_server.filesystem(), s3_server.bucket() + "/packed/.packcli-lock"
    warnings: list[str] = []
    losses: list[bool] = []
    held = ObjectLock(url, "packcli-run-first", warn=warnings.append, on_lost=lambda: losses.append(True))
    assert held.acquire()
    try:
        with store_refusing_every_key(s3_server):
            wait_until(lambda: bool(warnings))  # a renewal refused
        assert warnings[0].startswith(f"cannot renew the lock {url} (") and "retrying" in warnings[0], warnings
        renewed_after = time.time()
        wait_until(lambda: json.loads(fs.cat(url))["heartbeat"] > renewed_after)  # the next beat renews it: kept
        held.check()
        assert not losses and held.lost is None
    finally:
        held.release()
    assert not fs.exists(url)

    monkeypatch.setenv("PACKCLI_LOCK_STALE_S", "1")
    held = ObjectLock(url, "packcli-run-second", on_lost=lambda: losses.append(True))
    assert held.acquire()
    with store_refusing_every_key(s3_server):
        wait_until(lambda: bool(losses))  # refused for longer than the stale time
    assert losses == [True] and held.lost is not None and "\n" not in held.lost
    assert held.lost.startswith(f"lost the output's lock {url}: not renewed for "), held.lost
    with pytest.raises(PackcliError, match=r"^lost the output's lock"):
        held.check()
    held.release()  # lost: another run may hold it now, so it is left


def wait_until(condition: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def wait_until_stale(fs: Any, url: str) -> None:
    """Wait until the lock at ``url`` (of a run killed with ``PACKCLI_LOCK_STALE_S=1``) is stale."""
    wait_until(lambda: time.time() - float(json.loads(fs.cat(url))["heartbeat"]) > 1.5)


def test_a_run_whose_lock_is_taken_stops_in_one_line_and_publishes_nothing(s3_server: S3Server, corpus: Path) -> None:
    """The run's lock is taken over while it packs (another run found it stale): the heartbeat finds it taken and
    stops the run, or the check before the commit does; one line either way, no manifest, the other run's lock
    left as it is."""
    fs, out = s3_server.filesystem(), s3_server.bucket() + "/packed"
    run = subprocess.Popen(
        command(str(corpus), "--max-len", "64", "--shard-size", "24KB", "--out", out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PACKCLI_LOCK_STALE_S": "2"},
    )
    wait_until(lambda: fs.exists(f"{out}/.packcli-lock") or run.poll() is not None)
    assert run.poll() is None, "the run ended before the moment under test"
    other = {"host": "h", "pid": 1, "run": "packcli-run-second", "token": "f" * 32, "heartbeat": time.time() + 60}
    fs.pipe_file(f"{out}/.packcli-lock", json.dumps(other).encode())
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1 and stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"error: lost the output's lock {out}/.packcli-lock: another run took it over"), stderr
    assert object_keys(fs, out) == [".packcli-lock"] and json.loads(fs.cat(f"{out}/.packcli-lock")) == other


def test_rounds_of_four_overwrites_over_a_stale_lock_leave_one_output_and_nothing_unlisted(
    s3_server: S3Server, corpus: Path
) -> None:
    fs, out = s3_server.filesystem(), s3_server.bucket() + "/packed"
    for _ in range(2):
        stale_lock(fs, f"{out}/.packcli-lock")
        results = concurrent_runs(out, corpus, ("64", "128", "256", "512"))
        assert any(code == 0 for code, _, _ in results), results
        for code, _, stderr in results:
            assert code == 0 or (code == 1 and "in use by" in error_line(stderr)), stderr
        manifest = read_manifest(location(out))
        assert object_keys(fs, out) == sorted(["manifest.json", *listed_files(manifest)])
        verified = runner.invoke(app, ["verify", out])
        assert verified.exit_code == 0, verified.stderr


def test_an_up_to_date_rerun_removes_nothing_it_did_not_write_under_a_run_prefix(
    s3_server: S3Server, corpus: Path
) -> None:
    """Objects another tool put under ``packcli-run-*/`` prefixes are no run's shards: an up-to-date rerun leaves
    them, and ``--overwrite`` refuses the output, naming one, as it does any object packcli did not write."""
    fs, out = s3_server.filesystem(), s3_server.bucket() + "/packed"
    assert pack(str(corpus), "--max-len", "256", "--out", out).exit_code == 0
    run = object_keys(fs, out)[-1].split("/")[0]
    foreign = [f"{run}/notes.txt", "packcli-run-mine/data.bin"]
    for name in foreign:
        fs.pipe_file(f"{out}/{name}", b"not packcli's")
    before = object_keys(fs, out)
    again = pack(str(corpus), "--max-len", "256", "--out", out)
    assert again.exit_code == 0 and json.loads(again.stdout)["status"] == "up-to-date", again.stderr
    assert object_keys(fs, out) == before
    replaced = pack(str(corpus), "--max-len", "128", "--out", out, "--overwrite")
    assert replaced.exit_code == 1 and "which is not part of a packcli output" in replaced.stderr, replaced.stderr
    assert f"'{foreign[0]}'" in replaced.stderr and object_keys(fs, out) == before


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "packcli", "pack", *args, "--quiet", "--json"]


def concurrent_runs(out: str, corpus: Path, sizes: tuple[str, ...] = ("256", "128")) -> list[tuple[int, str, str]]:
    """Packs of other options (one per ``--max-len`` of ``sizes``) started together on one output URL, each with
    ``--overwrite``: (exit code, stdout, stderr) of each."""
    runs = [
        subprocess.Popen(
            command(str(corpus), "--max-len", size, "--out", out, "--overwrite"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for size in sizes
    ]
    return [(run.wait(180), *run.communicate()) for run in runs]


def test_two_concurrent_processes_leave_one_whole_output(s3_server: S3Server, corpus: Path) -> None:
    out = s3_server.bucket() + "/packed"
    results = concurrent_runs(out, corpus)
    assert sorted(code for code, _, _ in results) in ([0, 0], [0, 1])
    for code, _, stderr in results:
        assert code == 0 or "in use by pid" in stderr
    manifest = read_manifest(location(out))
    winner = {json.loads(stdout)["max_len"] for code, stdout, _ in results if code == 0}
    assert manifest["max_len"] in winner
    verified = runner.invoke(app, ["verify", out])
    assert verified.exit_code == 0, verified.stderr


def test_a_run_killed_mid_upload_leaves_no_output_and_the_rerun_cleans_up(
    s3_server: S3Server, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rerun removes the dead run's objects in the store and its staged shards in this node's scratch."""
    fs, out = s3_server.filesystem(), s3_server.bucket() + "/packed"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    monkeypatch.setenv("PACKCLI_LOCK_STALE_S", "1")  # the dead run's lock is taken over a second after its last beat
    run = subprocess.Popen(command(str(corpus), "--max-len", "64", "--shard-size", "24KB", "--out", out))
    deadline = time.monotonic() + 120
    while not any("/packcli-run-" in name for name in fs.find(out)) and time.monotonic() < deadline:
        assert run.poll() is None, "the run ended before it uploaded"
        time.sleep(0.02)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    left = object_keys(fs, out)
    assert "manifest.json" not in left and any(name.startswith("packcli-run-") for name in left)
    with pytest.raises(PackcliError, match="not a packcli output"):
        read_manifest(location(out))
    assert [path.name for path in scratch.iterdir()]  # the dead run's staging
    wait_until_stale(fs, f"{out}/.packcli-lock")
    rerun = pack(str(corpus), "--max-len", "64", "--shard-size", "24KB", "--out", out)
    assert rerun.exit_code == 0, rerun.stderr
    manifest = read_manifest(location(out))
    assert object_keys(fs, out) == sorted(["manifest.json", *listed_files(manifest)])
    assert not list(scratch.iterdir()), "the dead run's staged shards outlived the rerun"


def test_the_loader_reads_an_output_url_through_a_bounded_cache(
    s3_server: S3Server, corpus: Path, tmp_path: Path
) -> None:
    torch_module = pytest.importorskip("packcli.torch", reason="needs the torch extra")
    fs, bucket = s3_server.filesystem(), s3_server.bucket()
    for size in ("256", "128"):
        assert pack(str(corpus), "--max-len", size, "--out", f"{bucket}/p{size}").exit_code == 0
    assert pack(str(corpus), "--max-len", "256", "--out", str(tmp_path / "local")).exit_code == 0
    cache = tmp_path / "cache"

    def rows(dataset: Any) -> list[list[int]]:
        return [row["input_ids"].tolist() for row in dataset]

    expected = rows(torch_module.PackedDataset(tmp_path / "local", seed=3))
    assert rows(torch_module.PackedDataset(f"{bucket}/p256", seed=3, cache_dir=cache)) == expected
    fs.rm(f"{bucket}/p256/packcli-run-*", recursive=True)  # the copy is complete: no shard is fetched again
    assert rows(torch_module.PackedDataset(f"{bucket}/p256", seed=3, cache_dir=cache)) == expected
    batches = torch_module.loader(f"{bucket}/p128", batch_size=2, cache_dir=cache)
    assert batches.dataset.num_rows > 0 and len(list(cache.iterdir())) == 2
    size = sum(path.stat().st_size for path in batches.dataset.path.rglob("*") if path.is_file())
    torch_module.PackedDataset(f"{bucket}/p128", cache_dir=cache, cache_limit=size)  # the other copy must go
    assert list(cache.iterdir()) == [batches.dataset.path]
    with pytest.raises(PackcliError, match="exceed the cache limit"):
        torch_module.PackedDataset(f"{bucket}/p128", cache_dir=tmp_path / "tiny", cache_limit=100)
    with pytest.raises(PackcliError, match="give cache_dir"):
        torch_module.PackedDataset(f"{bucket}/p128")
    (tmp_path / "a-file").write_text("not a directory")
    for beside in (tmp_path / "a-file", tmp_path / "a-file" / "under"):  # a file, or a path through one
        with pytest.raises(PackcliError, match=r"^cache_dir=.*a-file(/under)? is not a directory"):
            torch_module.PackedDataset(f"{bucket}/p128", cache_dir=beside)


@pytest.fixture(scope="module")
def two_outputs(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two small outputs in the store (the sample's first 4 lines, packed at --max-len 256 and 128)."""
    corpus = tmp_path_factory.mktemp("small") / "small.jsonl"
    corpus.write_bytes(sample_lines(4))
    urls = [f"{s3_server.bucket()}/cached{size}" for size in (256, 128)]
    for url, size in zip(urls, ("256", "128")):
        assert pack(str(corpus), "--max-len", size, "--shard-size", "40KB", "--out", url).exit_code == 0
    return urls


def store_bytes(url: str) -> int:
    return sum(int(shard["bytes"]) for shard in read_manifest(location(url))["shards"])


@pytest.mark.xdist_group("two-outputs")  # under make test: ``two_outputs`` built once
def test_a_cached_copy_in_use_is_never_evicted_and_a_limit_it_leaves_no_room_under_is_refused(
    two_outputs: list[str], tmp_path: Path
) -> None:
    torch_module = pytest.importorskip("packcli.torch", reason="needs the torch extra")
    cache, (first_url, second_url) = tmp_path / "cache", two_outputs
    first = torch_module.PackedDataset(first_url, cache_dir=cache, shuffle=False)
    expected = [row["input_ids"].tolist() for row in first]
    with pytest.raises(PackcliError, match=r"in use") as refused:  # another loader, or a rank, reads that copy
        torch_module.loader(second_url, batch_size=2, cache_dir=cache, cache_limit=store_bytes(second_url))
    assert "\n" not in str(refused.value)
    assert (first.path / "manifest.json").is_file()
    again = torch_module.PackedDataset(first_url, cache_dir=cache, shuffle=False)  # a spawned worker reopens it
    assert again.path == first.path and [row["input_ids"].tolist() for row in again] == expected
    del first, again  # no longer read: now it may go
    second = torch_module.PackedDataset(second_url, cache_dir=cache, cache_limit=store_bytes(second_url))
    assert [path.name for path in cache.iterdir()] == [second.path.name]


@pytest.mark.xdist_group("two-outputs")  # under make test: ``two_outputs`` built once
def test_loaders_filling_one_cache_together_each_get_the_whole_copy(two_outputs: list[str], tmp_path: Path) -> None:
    torch_module = pytest.importorskip("packcli.torch", reason="needs the torch extra")
    from concurrent.futures import ThreadPoolExecutor

    from packcli.util.files import file_sha256

    cache = tmp_path / "cache"
    with ThreadPoolExecutor(4) as pool:  # threads of one process: the same pid, each its own temporary names
        paths = list(pool.map(lambda _: torch_module.PackedDataset(two_outputs[0], cache_dir=cache).path, range(4)))
    assert len(set(paths)) == 1 and [path.name for path in cache.iterdir()] == [paths[0].name]
    manifest = read_manifest(paths[0])
    assert [file_sha256(paths[0] / shard["file"]) for shard in manifest["shards"]] == [
        shard["sha256"] for shard in manifest["shards"]
    ]
    assert not [path for path in paths[0].rglob("*.part")]


def test_a_cached_copy_is_held_to_the_manifest_just_read_and_what_differs_is_fetched_again(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The loader's local copy of an output URL is checked on every open against the output's manifest: a shard of
    the copy changed in place (a flipped byte: a silently wrong id), cut short (a refusal whose fix was to delete the
    copy) or removed is fetched again, and so is an output repacked at the URL with the same fingerprint (other shards), its old
    shards removed; each time a warning says so. An intact copy reads no shard from the store."""
    from packcli.loader.local_copy import readable_output
    from packcli.util.files import file_sha256

    def cached_output(url: Path, cache: Path) -> Path:
        local, in_use = readable_output(url, cache)
        assert in_use is not None
        in_use.release()
        return local

    fs, bucket = s3_server.filesystem(), s3_server.bucket()
    corpus = tmp_path / "small.jsonl"
    corpus.write_bytes(sample_lines(4))
    url, other = f"{bucket}/out", f"{bucket}/other"
    for target, size in ((url, "256"), (other, "128")):
        assert pack(str(corpus), "--max-len", size, "--shard-size", "40KB", "--out", target).exit_code == 0
    cache = tmp_path / "cache"
    copy = cached_output(location(url), cache)

    def intact() -> bool:
        listed = read_manifest(copy)["shards"]
        files = sorted(str(path.relative_to(copy)) for path in copy.rglob("*.arrow"))
        sums = [file_sha256(shard_path(copy, shard["file"])) == shard["sha256"] for shard in listed]
        return all(sums) and files == sorted(shard["file"] for shard in listed)

    shard = shard_path(copy, read_manifest(copy)["shards"][0]["file"])
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    fetched = shard.stat().st_mtime_ns
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(fetched + 10**9, fetched + 10**9))  # as any later write leaves it, on a clock of coarse ticks
    with pytest.warns(UserWarning, match=rf"^{url}: the local copy in {copy} differs from the output .*1 shard"):
        assert cached_output(location(url), cache) == copy
    assert intact()
    shard.write_bytes(shard.read_bytes()[:-8])
    with pytest.warns(
        UserWarning, match=r"1 shard\(s\) changed, cut short or missing in it\): what differs is fetched again$"
    ):
        cached_output(location(url), cache)
    assert intact()
    shard.unlink()
    with pytest.warns(UserWarning, match=r"1 shard\(s\) changed, cut short or missing in it"):
        cached_output(location(url), cache)
    assert intact()
    shards = [f"{url}/{entry['file']}" for entry in read_manifest(location(url))["shards"]]
    fs.rm(shards)
    written = (copy / "manifest.json").stat().st_ino
    assert cached_output(location(url), cache) == copy  # intact: checked without a byte of a shard (none is there)
    assert (copy / "manifest.json").stat().st_ino == written  # nor written again
    theirs = read_manifest(location(other))
    theirs["fingerprint"] = read_manifest(copy)["fingerprint"]  # repacked at the URL: same fingerprint, other bytes
    for entry in theirs["shards"]:
        fs.copy(f"{other}/{entry['file']}", f"{url}/{entry['file']}")
    fs.pipe(f"{url}/manifest.json", json.dumps(theirs).encode())
    with pytest.warns(
        UserWarning, match=r"differs from the output \(its manifest is another: the output was written again since\)"
    ):
        assert cached_output(location(url), cache) == copy
    assert read_manifest(copy) == theirs and intact()


def test_a_shard_name_may_hold_one_run_prefix_and_nothing_else(tmp_path: Path) -> None:
    assert shard_path(tmp_path, "packcli-run-1-ab/shard-00000.arrow") == tmp_path / "packcli-run-1-ab/shard-00000.arrow"
    assert shard_path(tmp_path, "shard-00000.arrow") == tmp_path / "shard-00000.arrow"
    for name in ("other/shard-00000.arrow", "packcli-run-1/../x.arrow", "packcli-run-1/a/b.arrow", "../x", "/x"):
        with pytest.raises(PackcliError, match="leaves the output directory"):
            shard_path(tmp_path, name)


def test_a_lock_object_that_cannot_be_read_is_held_until_it_is_stale_by_its_age(
    s3_server: S3Server, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import packcli.storage.lock as lock

    out = s3_server.bucket() + "/packed"
    fs = s3_server.filesystem()
    for body in (b'["not", "a", "holder"]', b'{"pid": 1, "heartbeat": "soon"}', b'{"host": "n'):
        fs.pipe_file(f"{out}/.packcli-lock", body)  # a live run's lock, caught half written or damaged
        refused = pack(str(corpus), "--max-len", "256", "--out", out)
        assert refused.exit_code == 1 and "in use by" in refused.stderr, refused.stderr
        assert "cannot be read" in refused.stderr and fs.cat(f"{out}/.packcli-lock") == body

    monkeypatch.setattr(lock, "STALE_S", 1.0)  # the store's modification time says its writer stopped long ago
    time.sleep(1.5)
    taken_over = pack(str(corpus), "--max-len", "256", "--out", out)
    assert taken_over.exit_code == 0, taken_over.stderr
    assert ".packcli-lock" not in object_keys(fs, out)


def test_a_prefix_holding_only_a_folder_marker_is_an_empty_prefix(s3_server: S3Server, corpus: Path) -> None:
    """A folder made in a store's console is a zero-byte object named with a trailing slash: no object of the
    output, where a run refused the prefix as holding ''. (The prefix itself, which s3fs lists when an object appears
    under it while it looks, was the same '' to the loser of two runs started together.)"""
    fs, out = s3_server.filesystem(), s3_server.bucket() + "/packed"
    fs.pipe(out.removeprefix("s3://") + "/", b"")
    result = runner.invoke(app, ["pack", str(corpus), "--max-len", "64", "--out", out, "--quiet"])
    assert result.exit_code == 0, result.stderr
    assert runner.invoke(app, ["verify", out]).exit_code == 0


def test_an_output_url_that_cannot_be_written_is_named_as_given(s3_server: S3Server, corpus: Path) -> None:
    """A missing bucket, or no s3fs installed: the error names the --out URL, not the lock object under it."""
    bucket = f"packcli-missing-{os.getpid()}"
    missing = f"s3://{bucket}/packed"
    for partitioned in ([], ["--partitions", "2"]):  # a partitioned run looks at the output first: it lists it
        result = pack(str(corpus), "--out", missing, *partitioned)
        assert result.exit_code == 1, result.stderr
        assert error_line(result.stderr).startswith(f"error: {missing}: cannot "), result.stderr
        assert result.stderr.endswith(f": the bucket {bucket} does not exist (packcli creates no bucket)\n")
    out = s3_server.bucket() + "/packed"
    code = "import sys; sys.modules['s3fs'] = None; from packcli.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "pack", str(corpus), "--out", out], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and error_line(done.stderr).startswith(f"error: the URL {out} needs "), done.stderr


def test_a_target_no_scratch_holds_is_refused_naming_the_scratch_directory(
    s3_server: S3Server, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards for a store are written to node-local scratch first: the room there is what the refusal measures and
    names, not the directory above it."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    result = pack(str(corpus), "--target-tokens", "1000T", "--out", f"{s3_server.bucket()}/huge")
    assert result.exit_code == 1, result.output
    assert f"free where they are written ({scratch});" in result.stderr, result.stderr


@contextmanager
def store_refusing_every_key(server: S3Server) -> Iterator[None]:
    """The server checks credentials (it knows no key, so every request is refused, 403, as a store refuses a wrong
    key) until the block ends."""

    def authenticate_after(requests: str) -> None:
        url, plain = f"{server.endpoint}/moto-api/reset-auth", {"Content-Type": "text/plain"}
        request = urllib.request.Request(url, data=requests.encode(), headers=plain)
        with urllib.request.urlopen(request, timeout=10):
            pass

    authenticate_after("0")
    try:
        yield
    finally:
        authenticate_after("inf")


def test_wrong_credentials_are_one_line_naming_the_url_never_a_missing_output(
    s3_server: S3Server, corpus: Path
) -> None:
    """A store that refuses the key: every command says access denied, naming the URL, exit 1; none takes the
    refusal for an absent manifest ("not a packcli output") or an empty prefix."""
    out = s3_server.bucket() + "/packed"
    assert pack(str(corpus), "--max-len", "64", "--out", out).exit_code == 0
    with store_refusing_every_key(s3_server):
        results = {
            "verify": runner.invoke(app, ["verify", out]),
            "stats": runner.invoke(app, ["stats", out]),
            "show": runner.invoke(app, ["show", out, "--row", "0"]),
            "pack from": pack(f"{out}/corpus.jsonl", "--out", f"{out}-2"),
            "pack to": pack(str(corpus), "--max-len", "64", "--out", out),
        }
    for command, result in results.items():
        assert result.exit_code == 1, (command, result.output)
        said = error_line(result.stderr)
        assert "access denied" in said and "check the credentials" in said, (command, said)


def test_an_output_url_that_is_an_object_is_refused_saying_so(s3_server: S3Server, corpus: Path) -> None:
    """``--out`` naming an object (not a prefix) is refused as a file is for a directory, naming the URL, and the
    object is left as it was."""
    fs, bucket = s3_server.filesystem(), s3_server.bucket()
    fs.pipe_file(f"{bucket}/notes.txt", b"mine")
    for extra in ([], ["--partitions", "2"]):
        result = pack(str(corpus), "--max-len", "64", "--out", f"{bucket}/notes.txt", "--overwrite", *extra)
        assert result.exit_code == 1, result.output
        assert error_line(result.stderr) == (
            f"error: {bucket}/notes.txt: is an object, not a prefix: an output URL names a prefix to write "
            "the output under; choose another --out"
        )
    assert object_keys(fs, bucket) == ["notes.txt"] and fs.cat(f"{bucket}/notes.txt") == b"mine"


def test_a_packcli_scratch_that_is_a_file_is_one_line_before_any_work(
    s3_server: S3Server, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PACKCLI_SCRATCH`` naming a file: refused in one line naming the variable (not a raw ``[Errno 20]`` of a
    staging path, nor a partition's failure), for an output URL or a directory, plain or partitioned."""
    scratch = tmp_path / "scratch"
    scratch.write_text("a file")
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    expected = (
        f"error: PACKCLI_SCRATCH={scratch} is not a directory: name a directory on node-local disk, or unset it\n"
    )
    for out in (f"{s3_server.bucket()}/packed", str(tmp_path / "out")):
        for partitioned in ([], ["--partitions", "2"]):
            result = pack(str(corpus), "--max-len", "64", "--out", out, *partitioned)
            assert (result.exit_code, result.stderr) == (1, expected), result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["scratch"]


@pytest.mark.parametrize("kind", ["under a file", "a dangling link"])
def test_a_packcli_scratch_that_cannot_be_a_directory_is_one_line_naming_it(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``PACKCLI_SCRATCH`` that does not exist and cannot be made (a path under a file, a link to nowhere): one line
    naming the variable and why, before any work (was a raw ``[Errno 20]``/``[Errno 17]`` of a part's scratch)."""
    (tmp_path / "file").write_text("a file")
    if kind == "a dangling link":
        (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "scratch")
    scratch = tmp_path / ("file/scratch" if kind == "under a file" else "link")
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    result = pack(str(corpus), "--max-len", "64", "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and error_line(result.stderr), result.output
    assert error_line(result.stderr).startswith(f"error: PACKCLI_SCRATCH={scratch} cannot be made a directory ("), (
        result.stderr
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file", "link"][: 1 + (kind == "a dangling link")]


def test_an_output_url_on_a_store_without_conditional_writes_is_refused_before_any_work(corpus: Path) -> None:
    """The lock keeps two runs apart only through conditional writes (S3's): a store packcli makes none on is
    refused in one line naming the --out URL, before a lock object or a shard is written."""
    fsspec = pytest.importorskip("fsspec")
    out = "memory://packcli-no-conditions/packed"
    result = pack(str(corpus), "--max-len", "64", "--out", out)
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith(
        f"error: {out}: packcli makes the conditional writes that keep two runs apart on s3:// stores only, not "
        "memory://"
    ), result.stderr
    assert not fsspec.filesystem("memory").exists("/packcli-no-conditions")


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan"])
def test_a_lock_stale_time_that_is_no_positive_number_is_one_line(
    s3_server: S3Server, corpus: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PACKCLI_LOCK_STALE_S", value)
    out = s3_server.bucket() + "/packed"
    result = pack(str(corpus), "--max-len", "64", "--out", out)
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"error: PACKCLI_LOCK_STALE_S={value} is not a positive number of seconds; unset it for 600\n"
    ), result.stderr
    assert object_keys(s3_server.filesystem(), out) == []
