"""`make bench`: every benchmark, each in its own process, printing its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = [
    "bench_strategies.py",
    "bench_max_len.py",
    "bench_pack.py",
    "bench_backends.py",
    "bench_encode.py",
    "bench_builds.py",
    "bench_first_token.py",
    "bench_fast_backends.py",
    "bench_loader.py",
    "bench_balance.py",
    "bench_help.py",
    "bench_mixing.py",
    "bench_partitions.py",
    "bench_storage.py",
    "bench_export.py",
    "bench_real_size.py",
    "bench_peers.py",
]


def main() -> None:
    here = Path(__file__).parent
    for name in BENCHES:
        print(f"\n== {name}", flush=True)
        subprocess.run([sys.executable, str(here / name)], check=True, cwd=here)


if __name__ == "__main__":
    main()
