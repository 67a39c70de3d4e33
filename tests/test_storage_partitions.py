"""Partitioned runs whose inputs and output are in an S3-protocol store (moto's server on 127.0.0.1): each part is
built on the worker's scratch and its shards uploaded once, under the run prefix the output lists them under (the
commit writes only the manifest), and the output has the same shards as the same partitioned pack on disk; a run
killed with ``kill -9`` leaves its committed parts in the store and the rerun resumes from them, reading none of
their shards, to the same bytes; and a Ray cluster of two nodes on this machine, each with its own scratch, sharing
nothing but the store, writes the local engine's bytes."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import error_line, listed_files, sample_lines
from s3_server import S3Server, object_keys
from test_processes import command_line, descendants, small_files
from test_storage_outputs import wait_until_stale
from typer.testing import CliRunner

from packcli.cli import app
from packcli.run.parts import PartsArea
from packcli.storage.urls import location

runner = CliRunner()
PARTITIONS = ["--max-len", "512", "--partitions", "4"]
PART_MANIFEST = re.compile(r"packcli-run-[^/]+/part-\d+/manifest\.json")


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 lines of the bundled sample (about 1 MB of real text): four partitions of a second or so each."""
    path = tmp_path_factory.mktemp("corpus") / "slice.jsonl"
    path.write_bytes(sample_lines(60))
    return path


@pytest.fixture(scope="module")
def reference(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same partitioned pack from disk to disk."""
    out = tmp_path_factory.mktemp("reference") / "packed"
    result = invoke("pack", str(corpus), *PARTITIONS, "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    return out


def uploaded(s3_server: S3Server, corpus: Path) -> tuple[Any, str]:
    """A fresh bucket holding the corpus: (the filesystem, the bucket's URL)."""
    fs, bucket = s3_server.filesystem(), s3_server.bucket()
    fs.put_file(str(corpus), f"{bucket}/corpus/{corpus.name}")
    return fs, bucket


def assert_same_shards(fs: Any, out: str, reference: Path) -> dict[str, Any]:
    """The output at ``out`` holds the reference's shards, byte for byte, under one run prefix; returns its
    manifest."""
    mine = json.loads((reference / "manifest.json").read_text())
    theirs = json.loads(fs.cat(f"{out}/manifest.json"))
    run = theirs["shards"][0]["file"].split("/")[0]
    assert run.startswith("packcli-run-")
    assert [shard["file"] for shard in theirs["shards"]] == [f"{run}/{shard['file']}" for shard in mine["shards"]]
    for there, here in zip(theirs["shards"], mine["shards"]):
        assert there["sha256"] == here["sha256"] and there["bytes"] == here["bytes"]
        assert fs.cat(f"{out}/{there['file']}") == (reference / here["file"]).read_bytes()
    # the run prefix; the input's URL, and so the plan's hash and the fingerprint
    differ = ("shards", "inputs", "fingerprint", "partitions")
    assert theirs["partitions"]["count"] == mine["partitions"]["count"]
    assert {**theirs, **{key: mine[key] for key in differ}} == mine
    assert object_keys(fs, out) == sorted(["manifest.json", *listed_files(theirs)])  # parts gone
    return dict(theirs)


@pytest.mark.xdist_group("ray")  # not a Ray test: it shares ``reference`` with the Ray test, built once
def test_a_partitioned_run_from_and_to_a_store_is_the_partitioned_run_on_disk(
    s3_server: S3Server, corpus: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs, bucket = uploaded(s3_server, corpus)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))  # the workers build their parts there
    out = f"{bucket}/packed"
    with s3_server.recorded() as requests:
        result = invoke("pack", f"{bucket}/corpus/", *PARTITIONS, "--workers", "2", "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["partitions"] == 4
    manifest = assert_same_shards(fs, out, reference)
    for name in listed_files(manifest):  # each shard and sidecar written once, where the output lists it
        writes = [key for method, key in requests if method in ("PUT", "POST") and key.endswith(name.split("/")[1])]
        assert writes == [f"{out.removeprefix('s3://')}/{name}"], (name, writes)
    assert not list(scratch.iterdir())
    for report in (["verify", "--json"], ["stats", "--json"]):
        there, here = invoke(*report, out), invoke(*report, str(reference))
        assert there.exit_code == 0, there.output
        assert json.loads(there.stdout) == json.loads(here.stdout)
    again = invoke("pack", f"{bucket}/corpus/", *PARTITIONS, "--out", out, "--quiet", "--json")
    assert json.loads(again.stdout)["status"] == "up-to-date" and json.loads(fs.cat(f"{out}/manifest.json")) == manifest


def killed_once_a_part_is_committed(fs: Any, out: str, args: list[str]) -> list[str]:
    """Run ``pack ARGS`` on one worker; kill -9 the driver and its worker once a part is committed under ``out``;
    the committed parts' manifests, by their keys relative to ``out`` (``packcli-run-.../part-NNNNN/manifest.json``).
    Where the poll came late (a loaded machine) and every part was committed, the last part's manifest is removed:
    what a kill just before its commit leaves, so some part is always left to pack again."""
    command = [sys.executable, "-m", "packcli", "pack", *args, "--workers", "1", "--quiet"]
    process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL)

    def committed() -> list[str]:
        return [name for name in object_keys(fs, out) if PART_MANIFEST.fullmatch(name)] if fs.exists(out) else []

    deadline = time.monotonic() + 120
    while not committed() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before the moment under test"
    os.killpg(process.pid, signal.SIGKILL)  # the driver and its worker
    process.wait()
    done = committed()
    if len(done) == int(PARTITIONS[-1]):
        fs.rm(f"{out}/{done.pop()}")
    return done


@pytest.mark.xdist_group("ray")  # not a Ray test: it shares ``reference`` with the Ray test, built once
def test_a_partitioned_run_killed_mid_way_resumes_from_the_parts_in_the_store(
    s3_server: S3Server, corpus: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resumed run reuses the committed parts, trusting their manifests and their shards' sizes in a listing
    (it reads none of their shards), and leaves nothing of the dead run in this node's scratch."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    monkeypatch.setenv("PACKCLI_LOCK_STALE_S", "1")  # the dead run's lock is taken over a second after its last beat
    fs, bucket = uploaded(s3_server, corpus)
    out = f"{bucket}/packed"
    args = [f"{bucket}/corpus/", *PARTITIONS, "--out", out]
    done = killed_once_a_part_is_committed(fs, out, args)
    assert 1 <= len(done) < 4 and "manifest.json" not in object_keys(fs, out)
    run, part = done[0].split("/")[:2]
    shards = [name for key in done for name in listed_files(json.loads(fs.cat(f"{out}/{key}")))]
    assert all(fs.exists(f"{out}/{run}/{name}") for name in shards)  # where the output will list them

    # the kill may also come after a part's commit and before its scratch is removed: what that leaves, the rerun
    # removes too
    left = PartsArea(location(f"{out}/{run}")).build_path(int(part.split("-")[1]))
    left.mkdir(parents=True, exist_ok=True)
    (left / "part-00000-shard-00000.arrow").write_bytes(b"staged")
    wait_until_stale(fs, f"{out}/.packcli-lock")
    with s3_server.recorded() as requests:
        resumed = invoke("pack", *args, "--quiet", "--json")  # takes over the dead run's lock, reuses its parts
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["partitions_reused"] == len(done)
    assert [key for method, key in requests if method == "GET" and key.endswith(tuple(shards))] == []
    manifest = assert_same_shards(fs, out, reference)
    assert manifest["shards"][0]["file"].startswith(f"{run}/")  # the dead run's prefix, resumed
    assert not list(scratch.iterdir()), "the dead run's scratch outlived the resumed run"


@pytest.fixture(scope="module")
def ray_cluster(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Two Ray nodes on this machine (two CPUs each), each with its own scratch directory (``PACKCLI_SCRATCH`` in
    its raylet's environment, so in its workers'), the test process connected as the driver; the scratch
    directories. Every Ray process is gone when the module ends. (Module scope: the other Ray tests start their own
    local Ray in this process, one connection at a time.)"""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packcli[ray]')")
    from ray.cluster_utils import Cluster

    scratches = [tmp_path_factory.mktemp(f"node{k}-scratch") for k in range(2)]
    node = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
    cluster = Cluster(shutdown_at_exit=True)
    try:
        cluster.add_node(**node, include_dashboard=False, env_vars={"PACKCLI_SCRATCH": str(scratches[0])})
        cluster.add_node(**node, env_vars={"PACKCLI_SCRATCH": str(scratches[1])})
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        yield scratches
    finally:
        ray.shutdown()
        cluster.shutdown()
    deadline = time.monotonic() + 30
    while ray_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ray_processes(), "Ray processes outlived the cluster"


def ray_processes() -> list[int]:
    """The processes under this one whose command line is Ray's (its daemons, workers and actors)."""
    return [pid for pid in descendants(os.getpid()) if "ray" in command_line(pid).lower()]


@pytest.mark.ray
def test_a_ray_cluster_sharing_nothing_but_the_store_writes_the_local_engines_bytes(
    ray_cluster: list[Path], s3_server: S3Server, corpus: Path, reference: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    fs, bucket = uploaded(s3_server, corpus)
    out = f"{bucket}/packed"
    monkeypatch.setenv("PACKCLI_SCRATCH", str(tmp_path / "driver-scratch"))  # the driver's own: no node sees it
    before = [scratch.stat().st_mtime_ns for scratch in ray_cluster]
    time.sleep(0.01)
    args = ["pack", f"{bucket}/corpus/", *PARTITIONS, "--engine", "ray", "--workers", "2", "--out", out]
    result = invoke(*args, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    assert_same_shards(fs, out, reference)  # the local engine's bytes
    after = [scratch.stat().st_mtime_ns for scratch in ray_cluster]
    assert all(b > a for a, b in zip(before, after)), "a node's scratch was not used: its parts were built elsewhere"
    assert not [path for scratch in ray_cluster for path in scratch.iterdir()]  # each part's scratch removed
    verified = invoke("verify", out)
    assert verified.exit_code == 0, verified.output


def test_parts_a_committed_run_left_are_removed_by_the_next_run_unless_a_live_run_holds_the_lock(
    s3_server: S3Server, corpus: Path
) -> None:
    fs, bucket = uploaded(s3_server, corpus)
    out = f"{bucket}/packed"
    args = ["pack", f"{bucket}/corpus/", *PARTITIONS, "--workers", "1", "--out", out, "--quiet", "--json"]
    packed = invoke(*args)
    assert packed.exit_code == 0, packed.output
    manifest = json.loads(fs.cat(f"{out}/manifest.json"))
    parts = f"{out}/{manifest['shards'][0]['file'].split('/')[0]}"

    def died_while_removing_the_parts() -> None:  # what the driver leaves when it dies after its commit
        fs.pipe(f"{parts}/run.json", json.dumps({"fingerprint": manifest["fingerprint"]}).encode())
        fs.pipe(f"{parts}/part-00003/manifest.json", b"{}")

    died_while_removing_the_parts()
    live = {"host": socket.gethostname(), "pid": os.getpid(), "run": "packcli-run-live", "heartbeat": time.time()}
    fs.pipe(f"{out}/.packcli-lock", json.dumps(live).encode())  # a live run holds the output: its parts stay
    held = invoke(*args)
    assert held.exit_code == 0 and json.loads(held.stdout)["status"] == "up-to-date", held.output
    assert fs.exists(f"{parts}/run.json")
    fs.rm_file(f"{out}/.packcli-lock")

    again = invoke(*args)  # up to date, and no run is live: the dead run's parts go
    assert again.exit_code == 0 and json.loads(again.stdout)["status"] == "up-to-date", again.output
    assert json.loads(fs.cat(f"{out}/manifest.json")) == manifest
    assert object_keys(fs, out) == sorted(["manifest.json", *listed_files(manifest)])

    died_while_removing_the_parts()
    replaced = invoke("pack", f"{bucket}/corpus/", "--max-len", "256", "--out", out, "--overwrite", "--quiet")
    assert replaced.exit_code == 0, replaced.output
    assert not fs.exists(parts) and ".packcli-lock" not in object_keys(fs, out)
    verified = invoke("verify", out)
    assert verified.exit_code == 0, verified.output


def test_a_full_scratch_disk_in_a_partitioned_run_to_a_store_is_one_line(
    s3_server: S3Server, corpus: Path, tmp_path: Path
) -> None:
    fs, bucket = uploaded(s3_server, corpus)
    out = f"{bucket}/packed"
    command = [sys.executable, "-m", "packcli", "pack", f"{bucket}/corpus/", *PARTITIONS, "--workers", "1"]
    result = subprocess.run(
        [*command, "--out", out, "--quiet"],
        preexec_fn=small_files,  # the workers' token stores on the scratch disk fill it
        capture_output=True,
        text=True,
        env={**os.environ, "PACKCLI_SCRATCH": str(tmp_path)},
    )
    assert result.returncode == 1, result.stderr
    assert error_line(result.stderr) and "Errno" not in result.stderr, result.stderr
    assert error_line(result.stderr).startswith(f"error: cannot write {out}: File too large; nothing was published"), (
        result.stderr
    )
    assert f"kept in {out}/packcli-run-" in result.stderr
    assert "manifest.json" not in object_keys(fs, out) and ".packcli-lock" not in object_keys(fs, out)


def test_no_resume_area_outlives_a_later_run_on_the_output(
    s3_server: S3Server, corpus: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The parts a killed partitioned run left are removed by the next plain run on the output, packing or up to
    date, which says so with their size; nothing is left that the manifest does not list, in the store or in
    node-local scratch (the killed part's token store stayed there for good)."""
    monkeypatch.setenv("PACKCLI_LOCK_STALE_S", "1")  # the dead run's lock is taken over a second after its last beat
    scratch = tmp_path / "scratch"
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    fs, bucket = uploaded(s3_server, corpus)
    out = f"{bucket}/packed"
    plain = ["pack", f"{bucket}/corpus/", "--max-len", "256", "--out", out, "--json"]
    for later, extra in (("packed", []), ("up-to-date", ["--overwrite"])):
        done = killed_once_a_part_is_committed(fs, out, [f"{bucket}/corpus/", *PARTITIONS, "--out", out, *extra])
        assert done
        parts = f"{out}/{done[0].split('/')[0]}"
        wait_until_stale(fs, f"{out}/.packcli-lock")
        left = {name: info["size"] for name, info in fs.find(parts, detail=True).items()}
        result = invoke(*plain)
        assert result.exit_code == 0 and json.loads(result.stdout)["status"] == later, result.output
        said = f"warning: removing {parts} ({len(left):,} file(s), {sum(left.values()):,} bytes): the parts of an"
        assert said in result.stderr, result.stderr
        manifest = json.loads(fs.cat(f"{out}/manifest.json"))
        assert object_keys(fs, out) == sorted(["manifest.json", *listed_files(manifest)])
        assert sorted(path.name for path in scratch.iterdir()) == [], later


def test_the_parts_an_earlier_packcli_left_under_packcli_resume_are_removed_saying_so(
    s3_server: S3Server, corpus: Path
) -> None:
    """An earlier packcli kept a partitioned run's parts under ``packcli-resume/``: a run now takes them for another
    run's parts (removed, said with their size), not for another tool's objects (refused)."""
    fs, bucket = uploaded(s3_server, corpus)
    out = f"{bucket}/packed"
    fs.pipe(f"{out}/packcli-resume/run.json", b'{"fingerprint": "earlier"}')
    fs.pipe(f"{out}/packcli-resume/part-00000/part-00000-shard-00000.arrow", b"shard")
    result = invoke("pack", f"{bucket}/corpus/", *PARTITIONS, "--workers", "1", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    said = f"warning: removing {out}/packcli-resume (2 file(s), 31 bytes): the parts of an unfinished run of other"
    assert said in result.stderr, result.stderr
    manifest = json.loads(fs.cat(f"{out}/manifest.json"))
    assert object_keys(fs, out) == sorted(["manifest.json", *listed_files(manifest)])
