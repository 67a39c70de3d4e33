"""Partitioned runs against one process on gcide, uncompressed (45 MB of plain JSON Lines, 126k documents): wall
time, peak memory summed over every process of the run (the driver, its workers, and Ray's own processes: PSS,
sampled every 50 ms, so shared pages count once), and sequences.

Targets (issue 11, on 2 cores): `--partitions 4 --workers 2` within 1.15x of one process's wall time; sequences
within 0.1% of one global packing (the single process); `--engine ray --partitions 4` within 2x + 20 s of local.
Each figure is the best of ROUNDS runs, the three commands interleaved; the wall-time ratio is also given as the
median over rounds of each round's own ratio (the runs side by side), which a noisy machine disturbs least.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import python, shared, table

ROUNDS = 3
SAMPLE_S = 0.05


def tree_memory_mib(root: int) -> tuple[float, float]:
    """The summed PSS (MiB) of ``root`` and every process descended from it, now; and ``root``'s own."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        parents[int(stat.parent.name)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier and pid not in tree]
        tree.update(children)
        frontier = children
    kib = {}
    for pid in tree:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        kib[pid] = next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return sum(kib.values()) / 1024, kib.get(root, 0) / 1024


def measure(args: list[str]) -> tuple[float, float, float]:
    """Run a command to its end; its wall seconds, the peak of its process tree's summed memory and the peak of
    its own (the driver's), in MiB."""
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    peak = driver = 0.0
    while process.poll() is None:
        total, own = tree_memory_mib(process.pid)
        peak, driver = max(peak, total), max(driver, own)
        time.sleep(SAMPLE_S)
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(args)}")
    return seconds, peak, driver


def main() -> None:
    corpus = shared("data/gcide.jsonl.gz")
    if corpus is None:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        ray_flags = None
        print("  (the Ray run is skipped: install the ray extra, pip install 'packcli[ray]')")
    else:
        ray_flags = ["--engine", "ray", "--partitions", "4"]
    runs = {"one process": [], "local, 4 partitions, 2 workers": ["--partitions", "4", "--workers", "2"]}
    if ray_flags is not None:
        runs["ray, 4 partitions"] = ray_flags
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "gcide.jsonl"
        plain.write_bytes(gzip.decompress(corpus.read_bytes()))
        size_mb = plain.stat().st_size / 1e6
        best: dict[str, tuple[float, float, float]] = {}
        sequences: dict[str, int] = {}
        walls: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(ROUNDS):
            for name, flags in runs.items():
                out = Path(tmp) / "out"
                shutil.rmtree(out, ignore_errors=True)
                pack = ["-m", "packcli", "pack", str(plain), "--max-len", "4096", "--out", str(out), "--quiet"]
                figures = measure(python(*pack, *flags))
                walls[name].append(figures[0])
                earlier = best.get(name, figures)
                best[name] = (min(earlier[0], figures[0]), min(earlier[1], figures[1]), min(earlier[2], figures[2]))
                sequences[name] = json.loads((out / "manifest.json").read_text())["totals"]["sequences"]
    single = sequences["one process"]
    print(f"gcide uncompressed ({size_mb:.1f} MB), max_len 4096, best of {ROUNDS}")
    table(
        ["run", "wall s", "peak MiB, all processes", "driver MiB", "sequences", "vs one packing"],
        [
            [name, f"{s:.2f}", f"{peak:.0f}", f"{driver:.0f}", sequences[name], f"{sequences[name] / single - 1:+.4%}"]
            for name, (s, peak, driver) in best.items()
        ],
    )
    local = best["local, 4 partitions, 2 workers"][0]
    per_round = [part / one for part, one in zip(walls["local, 4 partitions, 2 workers"], walls["one process"])]
    print(
        f"\nlocal partitions / one process, wall time: {local / best['one process'][0]:.2f}x best against best, "
        f"{statistics.median(per_round):.2f}x the median of the rounds' own ratios "
        f"({', '.join(f'{ratio:.2f}' for ratio in per_round)}) (target <= 1.15x)"
    )
    if "ray, 4 partitions" in best:
        ray_s = best["ray, 4 partitions"][0]
        print(
            f"ray / local, wall time: {ray_s / local:.2f}x; ray - (2 x local) = {ray_s - 2 * local:+.1f} s (target <= 20 s)"
        )


if __name__ == "__main__":
    main()
