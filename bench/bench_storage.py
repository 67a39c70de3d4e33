"""`packcli pack` of gcide from and to an S3-protocol store (moto's server on 127.0.0.1, started here) against the
same pack from and to local files, plain and in 4 partitions: the cost of reading inputs through fsspec, staging,
uploading the shards and committing the manifest. Each figure comes from a fresh process; local and store runs
alternate, and the median of the rounds counts. Beside them the same server's ``fs.put`` of the local output's
directory (s3fs alone, its files sent concurrently): a pack to the store can at best be a local pack plus that put,
so ``s3 -> s3 / (local + put)`` is the share of the store run that packcli's own upload path costs above the least
(each shard written once: a partitioned run uploads its parts where the output lists them). moto runs on this
machine, so its own work competes for the same cores.

Then a resume: a 16-partition run to ``s3://`` whose last partition fails (its input's last line is not JSON) has
committed 15 parts; the rerun reuses them, trusting their manifests and the shard sizes of one listing, then packs
the 16th again (which fails again: the run is timed up to there). Against it: one listing of the run prefix, and
reading every committed byte (what a resume cost when it hashed each committed shard).

Last, the read of one large object (256 MiB) through ``open_object`` in 1 MiB reads, as a reader of inputs or the
loader's copy streams it, against s3fs's ``cat_file`` of it whole: wall and CPU seconds (the reading process alone,
moto's apart) and peak memory, which holds at most ``READ_BLOCK`` of the stream beside the interpreter's own.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import python, run_child, shared, table

from packcli.run.parts import PartsArea
from packcli.storage.urls import location

ROUNDS = 3
ENVIRONMENT = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


LARGE_BYTES = 256 << 20
RESUME_PARTITIONS = 16
PARTITIONED = ["--partitions", "4", "--workers", "2"]


def pack_args(source: str, out: str, *flags: str) -> list[str]:
    return python("-m", "packcli", "pack", source, "--out", out, "--overwrite", "--quiet", "--max-len", "4096", *flags)


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                return server, endpoint
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("moto's S3 server did not start")


def main() -> None:
    gcide = shared("data/gcide.jsonl.gz")
    if gcide is None:
        return
    server, endpoint = start_server()
    os.environ.update(ENVIRONMENT, AWS_ENDPOINT_URL=endpoint)
    try:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        fs.mkdir("bench")
        fs.put_file(str(gcide), f"bench/corpus/{gcide.name}")
        against_local(fs, gcide, "plain", [])
        with tempfile.TemporaryDirectory() as tmp:  # partitions cut plain JSON Lines only
            plain = Path(tmp) / "gcide.jsonl"
            plain.write_bytes(gzip.decompress(gcide.read_bytes()))
            fs.put_file(str(plain), f"bench/corpus/{plain.name}")
            against_local(fs, plain, "uncompressed, 4 partitions, 2 workers", PARTITIONED)
            resume(fs, plain)
        large_read(fs)
    finally:
        server.terminate()
        server.wait()


def against_local(fs: Any, gcide: Path, name: str, flags: list[str]) -> None:
    """Print the local pack of ``gcide``, the store pack of its copy in ``bench/corpus/`` and the put of the local
    output, medians of ROUNDS."""
    local_s: list[float] = []
    store_s: list[float] = []
    put_s: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        for _ in range(ROUNDS):
            shutil.rmtree(out, ignore_errors=True)
            local_s.append(run_child(pack_args(str(gcide), str(out), *flags))[0])
            for prefix in ("bench/packed", "bench/put"):
                if fs.exists(prefix):
                    fs.rm(prefix, recursive=True)
            source = f"s3://bench/corpus/{gcide.name}"
            store_s.append(run_child(pack_args(source, "s3://bench/packed", *flags))[0])
            start = time.perf_counter()
            fs.put(f"{out}/", "bench/put", recursive=True)
            put_s.append(time.perf_counter() - start)
    local, store, put = statistics.median(local_s), statistics.median(store_s), statistics.median(put_s)
    print(f"pack gcide ({name}), local files vs s3:// on moto's server (127.0.0.1), max_len 4096, median of {ROUNDS}")
    table(
        ["run", "median s", "runs", "vs local"],
        [
            ["local -> local", f"{local:.2f}", " ".join(f"{s:.2f}" for s in local_s), "1.00"],
            ["s3 -> s3", f"{store:.2f}", " ".join(f"{s:.2f}" for s in store_s), f"{store / local:.2f}"],
            ["fs.put of the output", f"{put:.2f}", " ".join(f"{s:.2f}" for s in put_s), f"{put / local:.2f}"],
        ],
    )
    print(f"  s3 -> s3 / (local + put): {store / (local + put):.2f}x\n")


def resume(fs: Any, plain: Path) -> None:
    """Print the resume of a 16-partition run to s3:// with 15 parts committed, against listing them and reading
    their bytes."""
    lines = plain.read_bytes().splitlines(keepends=True)
    lines[-1] = b"{not json\n"  # the last partition's last line: it fails after the 15 others committed
    fs.pipe("bench/broken/gcide.jsonl", b"".join(lines))
    if fs.exists("bench/resumed"):
        fs.rm("bench/resumed", recursive=True)
    args = ["-m", "packcli", "pack", "s3://bench/broken/gcide.jsonl", "--out", "s3://bench/resumed", "--quiet"]
    args += ["--max-len", "4096", "--partitions", str(RESUME_PARTITIONS), "--workers", "1"]
    first = subprocess.run(python(*args), capture_output=True, text=True)
    assert first.returncode != 0 and f"the {RESUME_PARTITIONS - 1} partition(s) committed" in first.stderr, first.stderr
    run = next(name for name in fs.ls("bench/resumed", refresh=True) if "packcli-run-" in name)
    record = json.loads(fs.cat(f"{run}/run.json"))
    resume_s, check_s, list_s, read_s = [], [], [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        again = subprocess.run(python(*args), capture_output=True, text=True)
        resume_s.append(time.perf_counter() - start)
        assert f"the {RESUME_PARTITIONS - 1} partition(s) committed" in again.stderr, again.stderr
        start = time.perf_counter()  # the rerun's own check of the committed parts, in this process
        reused = PartsArea(location(f"s3://{run}")).resume(record, RESUME_PARTITIONS, print)
        check_s.append(time.perf_counter() - start)
        assert len(reused) == RESUME_PARTITIONS - 1, reused
        start = time.perf_counter()
        listed = fs.find(run, detail=True)
        list_s.append(time.perf_counter() - start)
        shards = [name for name in listed if name.endswith(".arrow")]
        start = time.perf_counter()
        committed = sum(len(data) for data in fs.cat(shards).values())
        read_s.append(time.perf_counter() - start)
    resumed, check, listing, reading = (statistics.median(s) for s in (resume_s, check_s, list_s, read_s))
    print(
        f"resume of a {RESUME_PARTITIONS}-partition run to s3:// with {RESUME_PARTITIONS - 1} parts committed "
        f"({len(listed)} objects, {committed / 1e6:.1f} MB of shards), median of {ROUNDS}"
    )
    table(
        ["step", "median s", "runs"],
        [
            ["rerun: reuse 15, pack the 16th (fails)", f"{resumed:.2f}", " ".join(f"{s:.2f}" for s in resume_s)],
            ["its check of the 15 committed parts", f"{check:.3f}", " ".join(f"{s:.3f}" for s in check_s)],
            ["one listing of the run prefix", f"{listing:.3f}", " ".join(f"{s:.3f}" for s in list_s)],
            ["reading every committed shard", f"{reading:.2f}", " ".join(f"{s:.2f}" for s in read_s)],
        ],
    )


def large_read(fs: Any) -> None:
    """Print the read of a LARGE_BYTES object through ``open_object`` against ``cat_file``, medians of ROUNDS, each
    in a fresh process, which says its CPU seconds and peak memory (``VmHWM``: the child's own, where ``wait4``'s
    peak is this process's, the child being a vfork of it)."""
    fs.pipe("bench/large.bin", os.urandom(1 << 20) * (LARGE_BYTES >> 20))
    streamed = (
        "from packcli.storage.objects import open_object\n"
        "with open_object('s3://bench/large.bin') as stream:\n"
        "    total = sum(len(block) for block in iter(lambda: stream.read(1 << 20), b''))\n"
    )
    whole = "import s3fs\ntotal = len(s3fs.S3FileSystem(skip_instance_cache=True).cat_file('bench/large.bin'))\n"
    said = (
        f"assert total == {LARGE_BYTES}\nimport re, time\n"
        "peak = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print(time.process_time(), int(peak) / 1024)"
    )
    rows = []
    for name, code in (("open_object, 1 MiB reads", streamed), ("s3fs cat_file, whole", whole)):
        runs = []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            child = subprocess.run(python("-c", code + said), capture_output=True, text=True, check=True)
            runs.append((time.perf_counter() - start, *map(float, child.stdout.split())))
        wall, cpu, peak = (statistics.median(run[k] for run in runs) for k in range(3))
        rows.append([name, f"{wall:.2f}", f"{cpu:.2f}", f"{LARGE_BYTES / wall / 1e6:.0f}", f"{peak:.0f}"])
    print(f"\nread of one {LARGE_BYTES >> 20} MiB object from s3:// on moto's server, median of {ROUNDS}")
    table(["read", "wall s", "CPU s", "MB/s", "peak MiB"], rows)


if __name__ == "__main__":
    main()
