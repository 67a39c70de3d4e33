"""Partitioned runs against one process on gcide, uncompressed (45 MB of plain JSON Lines, 126k documents), GPT-2,
``--max-len 2048``: wall time, CPU time (user + system of the run and every process it waited for: its workers),
peak memory summed over every process of the run (the driver, its workers, and Ray's own processes: PSS, sampled
every 50 ms, so shared pages count once), and sequences.

Targets (issues 11 and 41, on 2 cores): `--partitions 4 --workers 2` within 1.15x of one process, in wall time and
in CPU time (with the fast backend a one-process run is short, so what each worker pays once shows: its start,
imports and tokenizer builds); sequences within 0.1% of one global packing (the single process); `--engine ray
--partitions 4` within 2x + 20 s of local. Each figure is the best of ROUNDS runs, the three commands interleaved;
the ratios are also given as the median over rounds of each round's own ratio (the runs side by side), which a
noisy machine disturbs least.
"""

from __future__ import annotations

import gzip
import json
import os
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


def measure(args: list[str]) -> tuple[float, float, float, float]:
    """Run a command to its end; its wall seconds, CPU seconds (its own and its waited-for descendants', from
    wait4), the peak of its process tree's summed memory and the peak of its own (the driver's), in MiB."""
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    peak = driver = 0.0
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        total, own = tree_memory_mib(process.pid)
        peak, driver = max(peak, total), max(driver, own)
        time.sleep(SAMPLE_S)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(args)}")
    return seconds, usage.ru_utime + usage.ru_stime, peak, driver


LOCAL = "local, 4 partitions, 2 workers"


def main() -> None:
    corpus, tokenizer = shared("data/gcide.jsonl.gz"), shared("tokenizers/gpt2/tokenizer.json")
    if corpus is None or tokenizer is None:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        ray_flags = None
        print("  (the Ray run is skipped: install the ray extra, pip install 'packcli[ray]')")
    else:
        ray_flags = ["--engine", "ray", "--partitions", "4"]
    runs = {"one process": [], LOCAL: ["--partitions", "4", "--workers", "2"]}
    if ray_flags is not None:
        runs["ray, 4 partitions"] = ray_flags
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "gcide.jsonl"
        plain.write_bytes(gzip.decompress(corpus.read_bytes()))
        size_mb = plain.stat().st_size / 1e6
        rounds: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in runs}
        sequences: dict[str, int] = {}
        for _ in range(ROUNDS):
            for name, flags in runs.items():
                out = Path(tmp) / "out"
                shutil.rmtree(out, ignore_errors=True)
                pack = ["-m", "packcli", "pack", str(plain), "--max-len", "2048", "--tokenizer", str(tokenizer)]
                rounds[name].append(measure(python(*pack, "--out", str(out), "--quiet", *flags)))
                sequences[name] = json.loads((out / "manifest.json").read_text())["totals"]["sequences"]
    best = {name: [min(figures) for figures in zip(*measured)] for name, measured in rounds.items()}
    single = sequences["one process"]
    print(f"gcide uncompressed ({size_mb:.1f} MB), GPT-2, max_len 2048, best of {ROUNDS}")
    table(
        ["run", "wall s", "CPU s", "peak MiB, all processes", "driver MiB", "sequences", "vs one packing"],
        [
            [name, f"{s:.2f}", f"{cpu:.2f}", f"{peak:.0f}", f"{driver:.0f}", sequences[name], f"{gap:+.4%}"]
            for name, (s, cpu, peak, driver) in best.items()
            for gap in [sequences[name] / single - 1]
        ],
    )
    for figure, column in (("wall time", 0), ("CPU time", 1)):
        ratios = [part[column] / one[column] for part, one in zip(rounds[LOCAL], rounds["one process"])]
        print(
            f"local partitions / one process, {figure}: {best[LOCAL][column] / best['one process'][column]:.2f}x "
            f"best against best, {statistics.median(ratios):.2f}x the median of the rounds' own ratios "
            f"({', '.join(f'{ratio:.2f}' for ratio in ratios)}) (target <= 1.15x)"
        )
    if "ray, 4 partitions" in best:
        ray_s, local = best["ray, 4 partitions"][0], best[LOCAL][0]
        print(
            f"ray / local, wall time: {ray_s / local:.2f}x; ray - (2 x local) = {ray_s - 2 * local:+.1f} s (target <= 20 s)"
        )


if __name__ == "__main__":
    main()
