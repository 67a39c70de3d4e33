"""Export figures on gcide packed at 2048 tokens: the time of `packcli export --to F` for each format (in process:
verify, then the streaming rewrite, then the publication), against copying the shards' bytes to a new directory
(read + write + fsync, the least any export must do). Target: within 2x of the copy. Rounds are interleaved (copy,
then each format) and each figure is the median of the rounds, since this machine's timings drift."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import shared, table

from packcli.export import FORMATS, export_output
from packcli.options import PackOptions
from packcli.pipeline import pack_corpus
from packcli.report.verify import verify_output

ROUNDS = 3


def copy_shards(packed: Path, target: Path) -> None:
    target.mkdir()
    for shard in sorted(packed.glob("shard-*.arrow")):
        copied = target / shard.name
        shutil.copyfile(shard, copied)
        with open(copied, "rb") as handle:
            os.fsync(handle.fileno())


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    corpus = shared("data/gcide.jsonl.gz")
    if corpus is None:
        return
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        root = Path(scratch)
        packed = root / "packed"
        result = pack_corpus([str(corpus)], PackOptions(max_len=2048), packed)
        totals = result.manifest["totals"]
        size = sum(shard["bytes"] for shard in result.manifest["shards"])
        print(f"  gcide packed: {totals['tokens']:,} tokens, {totals['sequences']:,} rows, {size / 2**20:.1f} MiB")
        times: dict[str, list[float]] = {name: [] for name in ["copy", "verify", *FORMATS]}
        for round_number in range(ROUNDS):
            times["copy"].append(timed(lambda n=round_number: copy_shards(packed, root / f"copy-{n}")))
            times["verify"].append(timed(lambda: verify_output(packed)))
            for fmt in FORMATS:
                out = root / f"{fmt}-{round_number}"
                times[fmt].append(timed(lambda fmt=fmt, out=out: export_output(packed, fmt, out)))
                shutil.rmtree(out)
            shutil.rmtree(root / f"copy-{round_number}")
        copy = statistics.median(times["copy"])
        rows = [["copy the shards' bytes", f"{copy:.2f}", "1.00"]]
        verify = statistics.median(times["verify"])
        rows.append(["verify alone (part of every export)", f"{verify:.2f}", f"{verify / copy:.2f}"])
        for fmt in FORMATS:
            seconds = statistics.median(times[fmt])
            rows.append([f"export --to {fmt}", f"{seconds:.2f}", f"{seconds / copy:.2f}"])
        table(["what (median of 3 rounds)", "seconds", "x copy"], rows)


if __name__ == "__main__":
    main()
