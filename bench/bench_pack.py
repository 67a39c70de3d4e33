"""`packcli pack` against its floor (read + tokenize only) on the shared corpora, and peak memory as the corpus
grows 4x. Each figure comes from a fresh process; pack and floor alternate, and the best of the rounds counts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from common import REPO, python, run_child, shared, table

ROUNDS = 2


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


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        for name in ("data/gcide.jsonl.gz", "data/cpython_stdlib.jsonl"):
            corpus = shared(name)
            if corpus is None:
                continue
            floor_s, pack_s = [], []
            for _ in range(ROUNDS):
                floor_s.append(run_child(python(str(REPO / "bench" / "floor.py"), str(corpus)))[0])
                shutil.rmtree(out, ignore_errors=True)
                pack_s.append(run_child(pack_args([corpus], out))[0])
            rows.append(
                [
                    corpus.name,
                    f"{min(floor_s):.2f}",
                    f"{min(pack_s):.2f}",
                    f"{min(floor_s) / min(pack_s):.2f}",
                ]
            )
        print("pack vs floor (read + tokenize only), bundled GPT-2 tokenizer, max_len 4096, seconds")
        table(["corpus", "floor s", "pack s", "speed vs floor"], rows)

        corpus = shared("data/gcide.jsonl.gz")
        if corpus is not None:  # how to use the cores: the tokenizer's threads, or worker processes
            threads = min(run_child(python(str(REPO / "bench" / "floor.py"), str(corpus)))[0] for _ in range(ROUNDS))
            processes = min(
                run_child(python(str(REPO / "bench" / "floor_processes.py"), str(corpus), "2"))[0]
                for _ in range(ROUNDS)
            )
            print(
                f"\ntokenizing gcide on all cores: the tokenizer's batch call (threads) {threads:.2f} s, "
                f"2 worker processes {processes:.2f} s ({processes / threads:.2f}x the time)"
            )

        corpus = shared("data/gcide.jsonl.gz")
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
