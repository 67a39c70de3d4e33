"""`packcli pack` against its floor (read + tokenize only) on short documents (gcide), long ones (CPython) and a
skewed mix (five huge documents among both, built by skewed.py), and peak memory as the corpus grows 4x. Each
figure comes from a fresh process; floor and pack alternate, corpus after corpus, and the median of the rounds
counts."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from common import REPO, SHARED, python, run_child, shared, table
from skewed import build_skewed

ROUNDS = 3


def pack_args(inputs: list[Path], out: Path) -> list[str]:
    return python(
        "-m",
        "packcli",
        "pack",
        *map(str, inputs),
        "--out",
        str(out),
        "--overwrite",
        "--quiet",
        "--max-len",
        "4096",
    )


def floor_args(corpus: Path) -> list[str]:
    return python(str(REPO / "bench" / "floor.py"), str(corpus))


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        gcide, cpython = shared("data/gcide.jsonl.gz"), shared("data/cpython_stdlib.jsonl")
        corpora = [path for path in (gcide, cpython) if path]
        if gcide and cpython:
            corpora.append(build_skewed(SHARED / "data", Path(tmp) / "skewed.jsonl"))
        floor_s: dict[Path, list[float]] = {corpus: [] for corpus in corpora}
        pack_s: dict[Path, list[float]] = {corpus: [] for corpus in corpora}
        pack_mib: dict[Path, list[float]] = {corpus: [] for corpus in corpora}
        for _ in range(ROUNDS):
            for corpus in corpora:
                floor_s[corpus].append(run_child(floor_args(corpus))[0])
                shutil.rmtree(out, ignore_errors=True)
                seconds, mib = run_child(pack_args([corpus], out))
                pack_s[corpus].append(seconds)
                pack_mib[corpus].append(mib)
        rows = [
            [
                corpus.name,
                median(floor_s[corpus]),
                median(pack_s[corpus]),
                f"{statistics.median(floor_s[corpus]) / statistics.median(pack_s[corpus]):.2f}",
                " ".join(f"{s:.2f}" for s in floor_s[corpus]),
                " ".join(f"{s:.2f}" for s in pack_s[corpus]),
                f"{statistics.median(pack_mib[corpus]):.0f}",
            ]
            for corpus in corpora
        ]
        print(
            f"pack vs floor (read + tokenize only), bundled GPT-2 tokenizer, max_len 4096, seconds "
            f"(median of {ROUNDS}, interleaved)"
        )
        table(["corpus", "floor s", "pack s", "speed vs floor", "floor runs", "pack runs", "pack peak MiB"], rows)

        corpus = gcide
        if corpus is not None:  # how to use the cores: the tokenizer's threads, or worker processes
            threads_s, processes_s = [], []
            for _ in range(ROUNDS):
                threads_s.append(run_child(floor_args(corpus))[0])
                processes_s.append(run_child(python(str(REPO / "bench" / "floor_processes.py"), str(corpus), "2"))[0])
            threads, processes = statistics.median(threads_s), statistics.median(processes_s)
            print(
                f"\ntokenizing gcide on all cores: the tokenizer's batch call (threads) {threads:.2f} s, "
                f"2 worker processes {processes:.2f} s ({processes / threads:.2f}x the time)"
            )

        corpus = gcide
        if corpus is None:
            return
        copies = []
        for k in range(4):
            copy = Path(tmp) / f"gcide-{k}.jsonl.gz"
            shutil.copyfile(corpus, copy)
            copies.append(copy)
        shutil.rmtree(out, ignore_errors=True)
        _, once = run_child(pack_args(copies[:1], out))
        shutil.rmtree(out, ignore_errors=True)
        _, four = run_child(pack_args(copies, out))
        print(
            f"\npeak RSS packing gcide once: {once} MiB; four copies (4x the tokens): {four} MiB; ratio {four / once:.2f}"
        )


if __name__ == "__main__":
    main()
