"""`packcli pack` with the fast tokenizer backend (auto) and with `--tokenizer-backend hf`, against the HF floor
(floor.py: read + tokenize with Hugging Face tokenizers only) and the I/O floor (io_floor.py: read + parse the
same JSON Lines and write as many bytes as the shards, hashed; no tokenizer): gcide with GPT-2 and Tekken, the
CPython standard library and the skewed corpus with Tekken. Each figure from a fresh process, the four commands
interleaved corpus after corpus, medians of the rounds, in wall and in CPU seconds; peak RSS of each pack. Then `--partitions 4 --workers 2`
with the fast backend against one process on gcide (uncompressed) with Tekken. Last, the fixed cost and the rate at the
margin: gcide (uncompressed) once and three times over, packed (auto) and through the HF floor, so that what every
run pays once (start-up, building the tokenizers) is told apart from what each further copy of the corpus costs."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from common import REPO, SHARED, python, run_measured, shared, table
from skewed import build_skewed

ROUNDS = 3


def pack_args(corpus: Path, tokenizer: Path, out: Path, *extra: str) -> list[str]:
    return python(
        "-m", "packcli", "pack", str(corpus), "--tokenizer", str(tokenizer), "--out", str(out), "--overwrite",
        "--quiet", "--max-len", "4096", *extra,
    )  # fmt: skip


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    gcide, cpython = shared("data/gcide.jsonl.gz"), shared("data/cpython_stdlib.jsonl")
    gpt2, tekken = shared("tokenizers/gpt2/tokenizer.json"), shared("tokenizers/tekken/tokenizer.json")
    if not (gcide and cpython and gpt2 and tekken):
        return
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "packed"
        skewed = build_skewed(SHARED / "data", Path(tmp) / "skewed.jsonl")
        cases = [("gcide", gcide, "gpt2", gpt2), ("gcide", gcide, "tekken", tekken)]
        cases += [("cpython", cpython, "tekken", tekken), ("skewed", skewed, "tekken", tekken)]
        kinds = ("auto", "hf", "hf floor", "io floor")
        seconds: dict[tuple[int, str], list[float]] = {(k, kind): [] for k in range(len(cases)) for kind in kinds}
        cpu: dict[tuple[int, str], list[float]] = {(k, kind): [] for k in range(len(cases)) for kind in kinds}
        peak: dict[tuple[int, str], list[int]] = {(k, kind): [] for k in range(len(cases)) for kind in kinds[:2]}
        shard_bytes: dict[int, int] = {}
        for _ in range(ROUNDS):
            for k, (_, corpus, _, tokenizer) in enumerate(cases):
                for kind in kinds[:2]:
                    shutil.rmtree(out, ignore_errors=True)
                    took, used, mib = run_measured(pack_args(corpus, tokenizer, out, "--tokenizer-backend", kind))
                    seconds[k, kind].append(took)
                    cpu[k, kind].append(used)
                    peak[k, kind].append(mib)
                    manifest = json.loads((out / "manifest.json").read_text())
                    assert manifest["tokenizer"]["backend"] == ("gigatoken" if kind == "auto" else "hf")
                    shard_bytes[k] = sum(shard["bytes"] for shard in manifest["shards"])
                floor = python(str(REPO / "bench" / "floor.py"), str(corpus), str(tokenizer))
                io = python(
                    str(REPO / "bench" / "io_floor.py"), str(corpus), str(shard_bytes[k]), str(Path(tmp) / "io.bin")
                )
                for kind, command in (("hf floor", floor), ("io floor", io)):
                    took, used, _ = run_measured(command)
                    seconds[k, kind].append(took)
                    cpu[k, kind].append(used)
        rows = []
        for k, (name, _, tokenizer_name, _) in enumerate(cases):
            auto, hf, floor, io = (median(seconds[k, kind]) for kind in kinds)
            rows.append(
                [
                    f"{name} / {tokenizer_name}",
                    f"{auto:.2f}",
                    f"{hf:.2f}",
                    f"{floor:.2f}",
                    f"{io:.2f}",
                    f"{floor / auto:.1f}x",
                    f"{auto / io:.2f}",
                    f"{floor / hf:.2f}",
                    f"{median(peak[k, 'auto']):.0f} / {median(peak[k, 'hf']):.0f}",
                ]
            )
        print(
            f"pack (auto = gigatoken) vs pack --tokenizer-backend hf vs the floors, seconds, median of {ROUNDS} interleaved"
        )
        table(
            ["corpus / tokenizer", "auto s", "hf s", "HF floor s", "I/O floor s", "floor/auto", "auto/I/O",
             "floor/hf", "peak MiB auto / hf"],
            rows,
        )  # fmt: skip
        print(f"\nthe same runs' CPU seconds (user + system), median of {ROUNDS}: steadier than wall time here")
        rows = []
        for k, (name, _, tokenizer_name, _) in enumerate(cases):
            auto, hf, floor, io = (median(cpu[k, kind]) for kind in kinds)
            rows.append(
                [f"{name} / {tokenizer_name}", f"{auto:.2f}", f"{hf:.2f}", f"{floor:.2f}", f"{io:.2f}",
                 f"{floor / auto:.1f}x", f"{auto / io:.2f}", f"{floor / hf:.2f}"]
            )  # fmt: skip
        table(["corpus / tokenizer", "auto", "hf", "HF floor", "I/O floor", "floor/auto", "auto/I/O", "floor/hf"], rows)
        for k, (name, _, tokenizer_name, _) in enumerate(cases):
            runs = "  ".join(f"{kind}: " + " ".join(f"{s:.2f}" for s in seconds[k, kind]) for kind in kinds)
            print(f"  runs {name}/{tokenizer_name}: {runs}")

        plain = Path(tmp) / "gcide.jsonl"
        plain.write_bytes(gzip.decompress(gcide.read_bytes()))
        partitions(plain, tekken, Path(tmp))
        margin(plain, tekken, Path(tmp))
    print(f"load average (1, 5, 15 min) at the start {load_before}, at the end {os.getloadavg()} (2 cores)")


def partitions(plain: Path, tekken: Path, tmp: Path) -> None:
    """One process against --partitions 4 --workers 2 (gcide uncompressed: a compressed file is one piece)."""
    out = tmp / "parted"
    one: list[tuple[float, float, int]] = []
    parted: list[tuple[float, float, int]] = []
    for _ in range(ROUNDS):
        shutil.rmtree(out, ignore_errors=True)
        one.append(run_measured(pack_args(plain, tekken, out)))
        shutil.rmtree(out, ignore_errors=True)
        parted.append(run_measured(pack_args(plain, tekken, out, "--partitions", "4", "--workers", "2")))
    (one_s, one_cpu), (parted_s, parted_cpu) = (
        (median([r[0] for r in runs]), median([r[1] for r in runs])) for runs in (one, parted)
    )
    print(
        f"\ngcide (uncompressed) / tekken, fast backend: one process {one_s:.2f} s ({one_cpu:.2f} CPU s), "
        f"--partitions 4 --workers 2 {parted_s:.2f} s ({parted_cpu:.2f} CPU s, the workers' included): "
        f"{parted_s / one_s:.2f}x the time, {parted_cpu / one_cpu:.2f}x the CPU; runs "
        f"{' '.join(f'{r[0]:.2f}' for r in one)} / {' '.join(f'{r[0]:.2f}' for r in parted)}"
    )


def margin(plain: Path, tekken: Path, tmp: Path) -> None:
    """pack (auto), the HF floor and the I/O floor on gcide once and three times over: seconds per further copy,
    and the fixed cost (one copy's time less a copy at the margin)."""
    triple = tmp / "gcide3.jsonl"
    triple.write_bytes(plain.read_bytes() * 3)
    out = tmp / "margin"
    kinds = ("auto", "hf floor", "io floor")
    wall: dict[tuple[str, int], list[float]] = {(kind, copies): [] for kind in kinds for copies in (1, 3)}
    cpu: dict[tuple[str, int], list[float]] = {key: [] for key in wall}
    for _ in range(ROUNDS):
        for copies, corpus in ((1, plain), (3, triple)):
            shutil.rmtree(out, ignore_errors=True)
            commands = {"auto": pack_args(corpus, tekken, out)}
            for kind in kinds:
                if kind == "hf floor":
                    commands[kind] = python(str(REPO / "bench" / "floor.py"), str(corpus), str(tekken))
                elif kind == "io floor":  # as many bytes as the pack just wrote
                    shards = json.loads((out / "manifest.json").read_text())["shards"]
                    size = str(sum(shard["bytes"] for shard in shards))
                    commands[kind] = python(str(REPO / "bench" / "io_floor.py"), str(corpus), size, str(tmp / "io.bin"))
                took, used, _ = run_measured(commands[kind])
                wall[kind, copies].append(took)
                cpu[kind, copies].append(used)
    rows = []
    for name, figures in (("wall s", wall), ("CPU s", cpu)):
        per_copy = {kind: (median(figures[kind, 3]) - median(figures[kind, 1])) / 2 for kind in kinds}
        fixed = {kind: median(figures[kind, 1]) - per_copy[kind] for kind in kinds}
        rows.append(
            [name, *(f"{per_copy[kind]:.2f}" for kind in kinds),
             f"{per_copy['hf floor'] / per_copy['auto']:.1f}x", f"{per_copy['auto'] / per_copy['io floor']:.2f}",
             *(f"{fixed[kind]:.2f}" for kind in kinds)]
        )  # fmt: skip
    print(
        f"\ngcide (uncompressed) / tekken, once and three times over, median of {ROUNDS}: the cost of each further copy"
        " and what is paid once"
    )
    table(
        ["figure", "auto per copy", "HF floor per copy", "I/O floor per copy", "HF floor/auto", "auto/I/O",
         "auto fixed", "HF floor fixed", "I/O floor fixed"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
