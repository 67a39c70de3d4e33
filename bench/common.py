"""Helpers shared by the benchmarks: the shared corpora, timing a child process with its peak memory, tables."""

from __future__ import annotations

import contextlib
import ctypes
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
    """Run a command; return its wall seconds and peak RSS in MiB (that command only; see run_measured)."""
    seconds, _, mib = run_measured(args)
    return seconds, mib


class CommandFailed(SystemExit):
    """A benchmark command exited non-zero: it ends a benchmark, unless the benchmark catches it (a peer's)."""


# Started between this process and the command. A child that subprocess starts (by vfork) takes over this
# process's high-water RSS when it execs, so a large benchmark process would inflate every peak it reads: the
# command is started by this small launcher instead, which passes back on a pipe the command's own peak and wall
# time, and its own CPU, to be taken off (its interpreter start counts in neither figure).
_LAUNCHER = """
import os, resource, sys, time
start = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
own = resource.getrusage(resource.RUSAGE_SELF)
os.write(int(sys.argv[1]), f"{usage.ru_maxrss} {own.ru_utime + own.ru_stime} {wall}".encode())
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_measured(
    args: list[str], log: Path | None = None, env: dict[str, str] | None = None, tree: bool = False
) -> tuple[float, float, int]:
    """Run a command; return its wall seconds, CPU seconds (user + system, from wait4, its waited-for children's
    included: steadier than wall time on a shared machine) and peak RSS in MiB (of its largest process). Its
    output goes to LOG when given (stderr too), else stdout is dropped.

    With TREE, the run ends when every process it started has ended, and their CPU counts too: this process
    becomes their subreaper (Linux), so a descendant orphaned before it is waited for (a multiprocessing
    forkserver and its workers, which outlive the main process) is reaped here, not by init, its CPU lost."""
    if tree:
        _become_subreaper()
    read, write = os.pipe()
    with open(log or os.devnull, "wb") as sink, os.fdopen(read, "rb") as report:
        launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(write), *args]
        process = subprocess.Popen(
            launcher, stdout=sink, stderr=subprocess.STDOUT if log else None, env=env, pass_fds=(write,)
        )
        os.close(write)
        _, status, usage = os.wait4(process.pid, 0)
        peak_text, launcher_cpu, wall = report.read().split() or (b"0", b"0", b"0")
        cpu = usage.ru_utime + usage.ru_stime - float(launcher_cpu)
        seconds, peak = float(wall), int(peak_text)
        start = time.perf_counter()
        while tree:
            try:
                _, _, usage = os.wait4(-1, 0)
            except ChildProcessError:
                break
            cpu, peak = cpu + usage.ru_utime + usage.ru_stime, max(peak, usage.ru_maxrss)
        seconds += time.perf_counter() - start  # the orphans' tail, with TREE
    if os.waitstatus_to_exitcode(status) != 0:
        raise CommandFailed(f"benchmark command failed: {' '.join(args)}" + (f" (output in {log})" if log else ""))
    return seconds, cpu, peak // 1024


def _become_subreaper() -> None:
    """prctl(PR_SET_CHILD_SUBREAPER, 1); where it is missing, orphans' CPU is not counted."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


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
