"""Helpers shared by the benchmarks: the shared corpora, timing a child process with its peak memory, tables."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PACKCLI_SHARED", REPO.parent / "shared"))


def shared(relative: str) -> Path | None:
    """A file of ../shared, or None (and a note) when this checkout has none."""
    path = SHARED / relative
    if not path.exists():
        print(f"  (skipped: {path} is missing; the shared corpora come with CI, not with a clone)")
        return None
    return path


def run_child(args: list[str]) -> tuple[float, int]:
    """Run a command; return its wall seconds and peak RSS in MiB (from wait4, that child only)."""
    seconds, _, mib = run_measured(args)
    return seconds, mib


def run_measured(args: list[str]) -> tuple[float, float, int]:
    """Run a command; return its wall seconds, CPU seconds (user + system, from wait4: steadier than wall time on
    a shared machine) and peak RSS in MiB."""
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(args)}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def table(header: list[str], rows: list[list[object]]) -> None:
    """Print an aligned plain-text table."""
    cells = [header, *[[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for k, row in enumerate(cells):
        print("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
        if k == 0:
            print("  " + "  ".join("-" * width for width in widths))


def texts_of(corpus: Path) -> list[str]:
    """Every record's ``text`` of a (possibly gzipped) JSON Lines corpus."""
    opener = gzip.open if corpus.name.endswith(".gz") else open
    with opener(corpus, "rt", encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines if line.strip()]


def batches(texts: list[str], characters: int = 1 << 20) -> list[list[str]]:
    """``texts`` in batches of about ``characters`` characters, as `pack` reads them (about 1 MB)."""
    out: list[list[str]] = [[]]
    size = 0
    for text in texts:
        out[-1].append(text)
        size += len(text)
        if size >= characters:
            out.append([])
            size = 0
    return [batch for batch in out if batch]
