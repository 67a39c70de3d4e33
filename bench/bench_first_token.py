"""What a `packcli pack` pays before its first token: a fresh process per run, whose backend's first ``encode``
prints the wall seconds since the process started and the process' CPU seconds so far, as it is called (imports,
set-up, the tokenizer builds, the first batch read) and as its ids come back (what that call imports: gigatoken's
array library, awkward; and the first batch's encoding), with the default backend, on the 10-40 MB shared corpora
with GPT-2 and Tekken; median of ROUNDS interleaved. The issue's target: under 0.5 s.

`python bench_first_token.py` measures this tree; with PACKCLI_TREE=DIR, another checkout's packcli (a before
and after, on the same machine and minute). Each process imports packcli from bytecode, as an installed packcli
does (pip compiles it on install): a cache of the bench's own (PYTHONPYCACHEPREFIX), written by a first round that
is not counted, so a checkout is measured the same way under PYTHONDONTWRITEBYTECODE, which would otherwise compile
every packcli module in every process (about 0.1 CPU s). FIRST_TOKEN_FROM_SOURCES=1: as that checkout runs.

Beside each case, the floor its dependencies set (:func:`floor_child`): a fresh process doing only the third-party
work a run with the default backend cannot start without (the interpreter, numpy, pyarrow and tokenizers imported,
the cross-check's Hugging Face build, gigatoken's build and the first encode, which imports awkward), so that what
packcli adds is read off as the difference."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import REPO, python, shared, table

ROUNDS = 3
CASES = [("gcide.jsonl.gz", "gpt2"), ("gcide.jsonl.gz", "tekken"), ("cpython_stdlib.jsonl", "tekken")]


def since_start() -> float:
    """Wall seconds since this process started (Linux: its start time in /proc, in clock ticks since boot)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def child(arguments: list[str]) -> None:
    """Run ``packcli pack arguments``; the first encode of any backend (of some text) runs, prints the times as it
    was called and as it returned (and the CPU seconds of the phases before, see PHASES), and ends the process.
    Nothing but packcli.cli is imported before packcli's entry point runs, as in a real run: the timing wrappers go
    into the other modules as they are imported (:class:`Wrapping`)."""
    times: dict[str, Any] = {"hf_build": 0.0, "gigatoken_build": 0.0}

    def timed(encode: Any) -> Any:
        def first(self: object, texts: list[str], *args: Any, **kwargs: Any) -> object:
            if not texts:  # a worker's import_arrays, not a batch
                return encode(self, texts, *args, **kwargs)
            times["called"] = now()
            encode(self, texts, *args, **kwargs)
            print(json.dumps({**times, "returned": now()}), flush=True)
            os._exit(0)

        return first

    def counted(function: Any, key: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            before = now()["cpu"]
            try:
                return function(*args, **kwargs)
            finally:
                times[key] = times.get(key, 0.0) + now()["cpu"] - before
                times.setdefault(f"{key}_end", now())

        return call

    def backends(module: Any) -> None:
        for cls in (module.HFBackend, module.FastBackend):
            cls.encode = timed(cls.encode)
        module.HFBackend.build = counted(module.HFBackend.build, "hf_build")

    def gigatoken(module: Any) -> None:
        module.GigatokenBackend.encode = timed(module.GigatokenBackend.encode)
        module.load_gigatoken = counted(module.load_gigatoken, "gigatoken_build")

    def driver(module: Any) -> None:
        module.set_up = counted(module.set_up, "set_up")

    sys.meta_path.insert(
        0,
        Wrapping(
            {
                "packcli.encode.backends": backends,
                "packcli.encode.gigatoken_backend": gigatoken,
                "packcli.run.driver": driver,
            }
        ),
    )
    from packcli.cli import main

    times["imported"] = now()
    sys.argv = ["packcli", "pack", *arguments]
    main()


class Wrapping(importlib.abc.MetaPathFinder):
    """Runs ``wrap[name](module)`` on each of these modules as soon as it is imported."""

    def __init__(self, wrap: dict[str, Callable[[Any], None]]) -> None:
        self.wrap = wrap

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.wrap:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        execute, wrap = spec.loader.exec_module, self.wrap[name]

        def exec_module(module: Any) -> None:
            execute(module)
            wrap(module)

        spec.loader.exec_module = exec_module
        return spec


def floor_child(tokenizer: str) -> None:
    """The dependencies' floor for ``tokenizer`` (a tokenizer.json): print the CPU seconds of the third-party work
    before a first token, phase by phase. Taking the added tokens out of the file for gigatoken (as packcli does, so
    that special-token text stays text) is not counted: it is packcli's work, not a dependency's."""
    phases: dict[str, float] = {}
    mark = now()["cpu"]
    phases["start"] = mark

    def phase(name: str) -> None:
        nonlocal mark
        phases[name] = now()["cpu"] - mark
        mark = now()["cpu"]

    import numpy  # noqa: F401
    import pyarrow.json  # noqa: F401
    import tokenizers

    phase("imports")
    source = Path(tokenizer).read_text()
    tokenizers.Tokenizer.from_str(source)
    phase("hf_build")
    spec = json.loads(source)
    spec["added_tokens"] = []
    stripped = json.dumps(spec)
    import gigatoken

    mark = now()["cpu"]  # the stripping above is not counted
    built = gigatoken.Tokenizer.from_json(stripped)
    phase("gigatoken_build")
    built.encode_batch(["The first document of a corpus, and a few words more."] * 64, parallel=False)
    phase("first_encode")
    print(json.dumps({**phases, "total": sum(phases.values())}), flush=True)


def now() -> dict[str, float]:
    """Wall seconds since this process started and its CPU seconds so far."""
    times = os.times()
    return {"wall": since_start(), "cpu": times.user + times.system}


# The CPU seconds before the first ids, phase by phase, from a child's figures.
PHASES: list[tuple[str, Any]] = [
    ("start, import packcli.cli", lambda f: f["imported"]["cpu"]),
    ("CLI parse, pack's imports, set-up", lambda f: f["set_up_end"]["cpu"] - f["imported"]["cpu"]),
    ("Hugging Face build (cross-check)", lambda f: f["hf_build"]),
    ("gigatoken build", lambda f: f["gigatoken_build"]),
    (
        "the rest, to the first encode",
        lambda f: f["called"]["cpu"] - f["set_up_end"]["cpu"] - f["hf_build"] - f["gigatoken_build"],
    ),
    ("first encode: import awkward, 1st batch", lambda f: f["returned"]["cpu"] - f["called"]["cpu"]),
]

# The same phases of the dependencies' floor (floor_child's keys).
FLOOR_PHASES = [
    ("start, numpy, pyarrow, tokenizers imports", lambda f: f["start"] + f["imports"]),
    ("Hugging Face build (cross-check)", lambda f: f["hf_build"]),
    ("gigatoken build", lambda f: f["gigatoken_build"]),
    ("first encode: import awkward, 64 texts", lambda f: f["first_encode"]),
]


def main() -> None:
    tree = Path(os.environ.get("PACKCLI_TREE", REPO))
    rows, figures = [], {case: [] for case in CASES}
    floors: dict[str, list[dict[str, float]]] = {name: [] for _, name in CASES}
    from_sources = os.environ.get("FIRST_TOKEN_FROM_SOURCES") == "1"
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        if not from_sources:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = f"{tmp}/bytecode"
        warm_up = 0 if from_sources else 1  # a first round that writes the bytecode, not counted
        for k in range(warm_up + ROUNDS):
            for corpus, name in CASES:
                data, tokenizer = shared(f"data/{corpus}"), shared(f"tokenizers/{name}")
                if data is None or tokenizer is None:
                    return
                args = [str(data), "--tokenizer", str(tokenizer), "--out", f"{tmp}/out", "--overwrite", "--quiet"]
                quiet: dict[str, Any] = {"capture_output": True, "text": True, "check": True}
                result = subprocess.run(python(__file__, "--child", *args, "--max-len", "4096"), env=env, **quiet)
                floor = subprocess.run(python(__file__, "--floor", str(tokenizer / "tokenizer.json")), **quiet)
                if k >= warm_up:
                    figures[corpus, name].append(json.loads(result.stdout.splitlines()[-1]))
                    floors[name].append(json.loads(floor.stdout.splitlines()[-1]))
    for (corpus, name), values in figures.items():
        medians = [
            f"{statistics.median(value[moment][key] for value in values):.2f}"
            for moment in ("called", "returned")
            for key in ("wall", "cpu")
        ]
        floor = statistics.median(value["total"] for value in floors[name])
        beyond = statistics.median(value["returned"]["cpu"] for value in values) - floor
        rows.append([f"{corpus} / {name}", *medians, f"{floor:.2f}", f"{beyond:.2f}"])
    imports = "packcli compiled from its sources" if from_sources else "packcli from bytecode"
    print(
        f"before the first token, {tree}, {imports}: median of {ROUNDS} fresh processes, load {os.getloadavg()[0]:.1f}"
    )
    table(
        ["corpus / tokenizer", "called: wall s", "CPU s", "ids back: wall s", "CPU s", "floor CPU s", "beyond it"],
        rows,
    )
    phases = [
        [label, *(f"{statistics.median(map(part, values)):.2f}" for values in figures.values())]
        for label, part in PHASES
    ]
    table(["CPU s, phase by phase", *(f"{corpus.split('.')[0]} / {name}" for corpus, name in figures)], phases)
    names = list(floors)
    floor_rows = [
        [label, *(f"{statistics.median(map(part, floors[name])):.2f}" for name in names)]
        for label, part in FLOOR_PHASES
    ]
    floor_rows.append(["in all", *(f"{statistics.median(v['total'] for v in floors[name]):.2f}" for name in names)])
    table(["the dependencies' floor, CPU s", *names], floor_rows)
    print("target: under 0.5 s before the first token (issue 41); the floor is what no packcli code can take off")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "--floor":
        floor_child(sys.argv[2])
    else:
        main()
