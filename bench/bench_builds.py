"""What every `packcli pack` with the fast backend pays before its first token: the imports (awkward too, which
gigatoken returns its ids in), the default fast backend's build of the tokenizer (gigatoken, from the tokenizer.json
without its added tokens, as packcli builds it) and Hugging Face's (which the cross-check needs), in wall and CPU
seconds and peak memory; fastokens' build beside them (the fast backend before gigatoken). Each case is a fresh
process (median of 3 rounds, interleaved): the imports alone, then each build alone, then the two a run makes, in
its order. Against it, the HF floor (floor.py) on the CPython library with Tekken."""

from __future__ import annotations

import statistics
import sys

from common import REPO, python, run_measured, shared, table

ROUNDS = 3
CASES = {
    "imports": "",
    "HF build": "h",
    "gigatoken build": "g",
    "fastokens build": "f",
    "HF + gigatoken (a run's)": "hg",
    "HF + fastokens (before)": "hf",
}


def child(steps: str, tokenizer_json: str) -> None:
    """Import what a pack imports, then build the tokenizers ``steps`` names (h: Hugging Face, g: gigatoken,
    f: fastokens)."""
    import awkward  # noqa: F401 (gigatoken's first encode imports it)
    import fastokens
    import gigatoken
    import tokenizers

    import packcli.cli  # the command line's imports
    import packcli.run.driver  # noqa: F401 (and a pack's)
    from packcli.encode.gigatoken_backend import without_added_tokens

    with open(tokenizer_json, encoding="utf-8") as handle:
        source = handle.read()
    builds = {
        "h": lambda: tokenizers.Tokenizer.from_str(source),
        "g": lambda: gigatoken.Tokenizer.from_json(without_added_tokens(source)),
        "f": lambda: fastokens.Tokenizer.from_json_str(source),
    }
    built = [builds[step]() for step in steps]
    assert len(built) == len(steps)


def gil_share(tokenizer_json: str) -> None:
    """How much a Python thread runs while each build runs beside it, against the same thread alone: a build that
    holds the GIL leaves it nearly nothing, so building on a helper thread beside other Python work gains no time."""
    import threading
    import time

    import gigatoken
    import tokenizers

    from packcli.encode.gigatoken_backend import without_added_tokens

    with open(tokenizer_json, encoding="utf-8") as handle:
        source = handle.read()

    def spins_per_second(work: object) -> float:
        count, done = [0], [False]

        def spin() -> None:
            while not done[0]:
                count[0] += 1

        thread = threading.Thread(target=spin)
        start = time.perf_counter()
        thread.start()
        if callable(work):
            work()
        else:
            time.sleep(0.5)
        done[0] = True
        thread.join()
        return count[0] / (time.perf_counter() - start)

    alone = spins_per_second(None)
    hf = spins_per_second(lambda: tokenizers.Tokenizer.from_str(source))
    giga = spins_per_second(lambda: gigatoken.Tokenizer.from_json(without_added_tokens(source)))
    print(
        f"a Python thread beside the build, share of its rate alone: HF {hf / alone:.1%}, gigatoken {giga / alone:.1%}"
    )


def main() -> None:
    cpython = shared("data/cpython_stdlib.jsonl")
    tokenizers = {name: shared(f"tokenizers/{name}/tokenizer.json") for name in ("gpt2", "tekken")}
    if cpython is None or None in tokenizers.values():
        return
    rows = []
    for name, path in tokenizers.items():
        wall: dict[str, list[float]] = {case: [] for case in CASES}
        cpu: dict[str, list[float]] = {case: [] for case in CASES}
        peak: dict[str, list[int]] = {case: [] for case in CASES}
        for _ in range(ROUNDS):
            for case, steps in CASES.items():
                took, used, mib = run_measured(python(__file__, "--child", steps or "-", str(path)))
                wall[case].append(took)
                cpu[case].append(used)
                peak[case].append(mib)
        imports, imports_cpu = statistics.median(wall["imports"]), statistics.median(cpu["imports"])
        for case in CASES:
            seconds, used = statistics.median(wall[case]), statistics.median(cpu[case])
            over = f"{seconds - imports:.2f} | {used - imports_cpu:.2f}"
            rows.append([name, case, f"{seconds:.2f} | {used:.2f}", over, statistics.median(peak[case])])
    table(["tokenizer", "process", "wall s | CPU s", "over the imports' process", "peak MiB"], rows)
    floors = [run_measured(python(str(REPO / "bench" / "floor.py"), str(cpython), str(tokenizers["tekken"])))[0]]
    floors += [run_measured(python(str(REPO / "bench" / "floor.py"), str(cpython), str(tokenizers["tekken"])))[0]]
    floor = statistics.median(floors)
    print(f"HF floor, CPython / Tekken: {floor:.2f} s; a pack 4x faster must end within {floor / 4:.2f} s")
    gil_share(str(tokenizers["tekken"]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2].strip("-"), sys.argv[3])
    else:
        main()
