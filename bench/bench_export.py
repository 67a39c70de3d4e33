"""Export figures on gcide packed at 2048 tokens: the time of `packcli export --to F` for each format (in process:
verify, the rewrite it feeds, then the publication), against copying the shards' bytes to a new directory
(read + write + fsync, the least any export must do), and with hashing the shards' bytes (sha256, in memory:
the part of verify no vectorising shortens). Target: within 2x of the copy. Rounds are interleaved (copy,
verify, then each format) and each figure is the median of the rounds, since this machine's timings drift; the
load average is printed before and after, as other work on the machine moves every figure.

Then what bridge's Parquet costs by codec: the same row groups written with each codec Megatron-Bridge's reader
(pyarrow) takes, the time against the same copy, and the file's size (the export writes zstd at pyarrow's default
level)."""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from common import shared, table

from packcli.export import FORMATS, export_output
from packcli.export.bridge import SCHEMA, bridge_row_group
from packcli.export.reading import row_batch
from packcli.format.shards import read_shard
from packcli.options import PackOptions
from packcli.report.verify import verify_output
from packcli.run.driver import pack_corpus

ROUNDS = 7
CODECS = [("zstd", None), ("zstd", 3), ("zstd", -1), ("lz4", None), ("snappy", None), ("none", None)]


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


def load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def bridge_groups(packed: Path) -> list[pa.Table]:
    """The Parquet row groups the bridge export writes for ``packed`` (one shard)."""
    (shard,) = sorted(packed.glob("shard-*.arrow"))
    batches, first_row = [], 0
    for batch in read_shard(shard).to_batches():
        batches.append(row_batch(0, first_row, batch))
        first_row += batch.num_rows
    return [bridge_row_group(batch, 1, 0)[0] for batch in batches]


def write_parquet(groups: list[pa.Table], path: Path, codec: str, level: int | None) -> None:
    with pq.ParquetWriter(
        path, SCHEMA, compression=codec, compression_level=level, use_dictionary=False, write_statistics=False
    ) as writer:
        for group in groups:
            writer.write_table(group)


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
        print(f"  load average before: {load()}")
        groups = bridge_groups(packed)
        shard_bytes = [path.read_bytes() for path in sorted(packed.glob("shard-*.arrow"))]
        names = ["copy", "sha256", "verify", *FORMATS, *map(str, CODECS)]
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_number in range(ROUNDS):
            times["copy"].append(timed(lambda n=round_number: copy_shards(packed, root / f"copy-{n}")))
            times["sha256"].append(timed(lambda: [hashlib.sha256(data).hexdigest() for data in shard_bytes]))
            times["verify"].append(timed(lambda: verify_output(packed)))
            for fmt in FORMATS:
                out = root / f"{fmt}-{round_number}"
                times[fmt].append(timed(lambda fmt=fmt, out=out: export_output(packed, fmt, out)))
                shutil.rmtree(out)
            for codec in CODECS:
                path = root / "codec.parquet"
                times[str(codec)].append(timed(lambda path=path, codec=codec: write_parquet(groups, path, *codec)))
            shutil.rmtree(root / f"copy-{round_number}")
        print(f"  load average after:  {load()}")
        copy = statistics.median(times["copy"])
        rows = [["copy the shards' bytes", f"{copy:.3f}", "1.00"]]
        sha256 = statistics.median(times["sha256"])
        rows.append(["sha256 of the shards' bytes (in memory)", f"{sha256:.3f}", f"{sha256 / copy:.2f}"])
        verify = statistics.median(times["verify"])
        rows.append(["verify alone (within every export)", f"{verify:.3f}", f"{verify / copy:.2f}"])
        for fmt in FORMATS:
            seconds = statistics.median(times[fmt])
            rows.append([f"export --to {fmt}", f"{seconds:.3f}", f"{seconds / copy:.2f}"])
        table([f"what (median of {ROUNDS} rounds)", "seconds", "x copy"], rows)
        print()
        rows = []
        for codec, level in CODECS:
            seconds = statistics.median(times[str((codec, level))])
            write_parquet(groups, root / "codec.parquet", codec, level)
            megabytes = (root / "codec.parquet").stat().st_size / 2**20
            name = codec + ("" if level is None else f" level {level}")
            rows.append([name, f"{seconds:.3f}", f"{seconds / copy:.2f}", f"{megabytes:.1f}"])
        table(["bridge Parquet alone, by codec", "seconds", "x copy", "MiB"], rows)


if __name__ == "__main__":
    main()
