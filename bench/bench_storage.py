"""`packcli pack` of gcide from and to an S3-protocol store (moto's server on 127.0.0.1, started here) against the
same pack from and to local files: the cost of reading inputs through fsspec, staging, uploading the shards and
committing the manifest. Each figure comes from a fresh process; local and store runs alternate, and the median of
the rounds counts. The target: the store run within 1.5x of the local one. A third row puts the local output's
files into the store with s3fs alone, the least any pack to the store adds to a local pack (moto runs on this
machine, so its own work competes for the same cores)."""

from __future__ import annotations

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

from common import python, run_child, shared, table

ROUNDS = 3
ENVIRONMENT = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def pack_args(source: str, out: str) -> list[str]:
    return python("-m", "packcli", "pack", source, "--out", out, "--overwrite", "--quiet", "--max-len", "4096")


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

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir("bench")
        fs.put_file(str(gcide), f"bench/corpus/{gcide.name}")
        local_s: list[float] = []
        store_s: list[float] = []
        put_s: list[float] = []
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "packed"
            for _ in range(ROUNDS):
                shutil.rmtree(out, ignore_errors=True)
                local_s.append(run_child(pack_args(str(gcide), str(out)))[0])
                if fs.exists("bench/packed"):
                    fs.rm("bench/packed", recursive=True)
                store_s.append(run_child(pack_args(f"s3://bench/corpus/{gcide.name}", "s3://bench/packed"))[0])
                start = time.perf_counter()
                for path in sorted(out.iterdir()):
                    fs.put_file(str(path), f"bench/put/{path.name}")
                put_s.append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait()
    local, store, put = statistics.median(local_s), statistics.median(store_s), statistics.median(put_s)
    print(f"pack gcide, local files vs s3:// on moto's server (127.0.0.1), max_len 4096, seconds (median of {ROUNDS})")
    table(
        ["run", "median s", "runs", "vs local"],
        [
            ["local -> local", f"{local:.2f}", " ".join(f"{s:.2f}" for s in local_s), "1.00"],
            ["s3 -> s3", f"{store:.2f}", " ".join(f"{s:.2f}" for s in store_s), f"{store / local:.2f}"],
            ["put the output alone", f"{put:.2f}", " ".join(f"{s:.2f}" for s in put_s), f"{put / local:.2f}"],
        ],
    )


if __name__ == "__main__":
    main()
