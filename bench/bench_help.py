"""How long `packcli --help` takes, beside the interpreter's own start and the imports a command pays for: help
must stay instant, so nothing heavy is imported before a command runs (tests/test_imports.py checks which modules;
this prints the seconds). Each figure is a fresh process; best and median of the rounds."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from common import python, run_child, table

ROUNDS = 10
PACKCLI = str(Path(sys.executable).with_name("packcli"))  # the console script, as a user runs it


def main() -> None:
    commands = {
        "python -c pass (interpreter start)": python("-c", "pass"),
        "packcli --help": [PACKCLI, "--help"],
        "packcli --version": [PACKCLI, "--version"],
        "packcli pack --help": [PACKCLI, "pack", "--help"],
        "import numpy, pyarrow, tokenizers (what a command adds)": python("-c", "import numpy, pyarrow, tokenizers"),
    }
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    for _ in range(ROUNDS):  # interleaved, so load from other processes spreads over every command
        for name, args in commands.items():
            runs[name].append(run_child(args))
    rows = [
        [
            name,
            f"{min(s for s, _ in timings):.3f}",
            f"{statistics.median(s for s, _ in timings):.3f}",
            max(rss for _, rss in timings),
        ]
        for name, timings in runs.items()
    ]
    print(f"Command start-up, seconds over {ROUNDS} fresh processes each")
    table(["command", "best s", "median s", "peak RSS MiB"], rows)
    help_s = min(s for s, _ in runs["packcli --help"])
    start_s = min(s for s, _ in runs["python -c pass (interpreter start)"])
    print(f"  packcli --help: {help_s:.3f} s, {help_s / start_s:.1f}x a bare interpreter start")


if __name__ == "__main__":
    main()
