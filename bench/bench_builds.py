"""What every `packcli pack` with the fast backend pays before its first token: the imports, fastokens' build of the
tokenizer and Hugging Face's (which the cross-check needs), in seconds and in peak memory. Each case is a fresh
process (median of 3 rounds, interleaved): the imports alone, then each build alone, then both in the order a run
makes them. Against it, the HF floor (floor.py) on the CPython library with Tekken, whose quarter is what a pack 4x
faster than that floor could take in all, against the least a pack that builds both tokenizers takes before its
first token: its imports and the longer build (were the two built side by side on the two cores)."""

from __future__ import annotations

import statistics
import sys

from common import REPO, python, run_measured, shared, table

ROUNDS = 3
CASES = {
    "imports": "",
    "HF build": "h",
    "fastokens build": "f",
    "both (a run's order)": "hf",
}


def child(steps: str, tokenizer_json: str) -> None:
    """Import what a pack imports, then build the tokenizers ``steps`` names (h: Hugging Face, f: fastokens)."""
    import fastokens
    import tokenizers

    import packcli.cli  # the command line's imports
    import packcli.run.driver  # noqa: F401 (and a pack's)

    with open(tokenizer_json, encoding="utf-8") as handle:
        source = handle.read()
    built = [
        tokenizers.Tokenizer.from_str(source) if step == "h" else fastokens.Tokenizer.from_json_str(source)
        for step in steps
    ]
    assert len(built) == len(steps)


def main() -> None:
    cpython = shared("data/cpython_stdlib.jsonl")
    tokenizers = {name: shared(f"tokenizers/{name}/tokenizer.json") for name in ("gpt2", "tekken")}
    if cpython is None or None in tokenizers.values():
        return
    rows, least = [], 0.0
    for name, path in tokenizers.items():
        wall: dict[str, list[float]] = {case: [] for case in CASES}
        peak: dict[str, list[int]] = {case: [] for case in CASES}
        for _ in range(ROUNDS):
            for case, steps in CASES.items():
                took, _, mib = run_measured(python(__file__, "--child", steps or "-", str(path)))
                wall[case].append(took)
                peak[case].append(mib)
        imports = statistics.median(wall["imports"])
        builds = [statistics.median(wall[case]) - imports for case in ("HF build", "fastokens build")]
        least = imports + max(builds)  # the two builds side by side on two cores, nothing else: the last, Tekken
        for case in CASES:
            seconds = statistics.median(wall[case])
            rows.append([name, case, f"{seconds:.2f}", f"{seconds - imports:.2f}", statistics.median(peak[case])])
    table(["tokenizer", "process", "wall s", "over the imports' process", "peak MiB"], rows)
    floors = [run_measured(python(str(REPO / "bench" / "floor.py"), str(cpython), str(tokenizers["tekken"])))[0]]
    floors += [run_measured(python(str(REPO / "bench" / "floor.py"), str(cpython), str(tokenizers["tekken"])))[0]]
    floor = statistics.median(floors)
    print(f"HF floor, CPython / Tekken: {floor:.2f} s; a pack 4x faster must end within {floor / 4:.2f} s")
    print(f"the imports and the longer of the two builds alone (Tekken, builds side by side): {least:.2f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2].strip("-"), sys.argv[3])
    else:
        main()
