"""Which fast backend `auto` takes, on evidence: gigatoken and fastokens against Hugging Face tokenizers (the
reference), through packcli's own backends (the calls `pack` makes), with GPT-2, Tekken and Qwen.

1. Exactness, every document of every shared corpus: the documents whose ids differ from Hugging Face's
   (special-token text kept as text, as packcli encodes documents), and how many documents hold special-token text.
2. Build, a fresh process per (library, tokenizer), interleaved, median of ROUNDS: the build alone after the
   library's import (wall and CPU seconds, user + system of all its threads), and the process' peak RSS.
3. Encoding on two threads (RAYON_NUM_THREADS=2), a fresh process per (library, tokenizer): every gcide text in
   batches of about 1 MB, first pass (a pack encodes each text once), in MB of UTF-8 per wall and per CPU second.

`python bench_fast_backends.py [exact|build|encode]` runs one part (default: all three)."""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, SHARED, batches, python, shared, table, texts_of

ROUNDS = 3
TOKENIZERS = ("gpt2", "tekken", "qwen")
CORPORA = ("gcide.jsonl.gz", "cpython_stdlib.jsonl", "bigbench_sft.jsonl")
LIBRARIES = ("hf", "fastokens", "gigatoken")
SHARED_DATA = SHARED / "data"


def backend(library: str, tokenizer: Path) -> object:
    """packcli's backend of ``library`` for ``tokenizer``, encoding documents (special-token text as text)."""
    from packcli.encode.backends import FAST_BACKENDS, HFBackend
    from packcli.encode.tokenizer import load_tokenizer

    loaded = load_tokenizer(str(tokenizer))
    return HFBackend(loaded.tokenizer) if library == "hf" else FAST_BACKENDS[library](loaded, False)[0]


def exactness() -> None:
    import numpy as np

    from packcli.encode.tokenizer import load_tokenizer

    rows: list[list[object]] = []
    for name in TOKENIZERS:
        path = shared(f"tokenizers/{name}")
        assert path is not None
        loaded = load_tokenizer(str(path))
        specials = [token.content for token in loaded.tokenizer.get_added_tokens_decoder().values()]
        holding = re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True))))
        encoders = {library: backend(library, path) for library in LIBRARIES}
        for corpus in CORPORA:
            texts = texts_of(SHARED_DATA / corpus)
            ids: dict[str, list[list[int]]] = {library: [] for library in LIBRARIES}
            for batch in batches(texts):
                for library, encoder in encoders.items():
                    tokens, lengths = encoder.ids(encoder.encode(batch))  # type: ignore[attr-defined]
                    ids[library] += [part.tolist() for part in np.split(tokens, np.cumsum(lengths)[:-1])]
            differ = [sum(a != b for a, b in zip(ids[library], ids["hf"])) for library in LIBRARIES[1:]]
            rows.append([f"{corpus} / {name}", len(texts), sum(bool(holding.search(t)) for t in texts), *differ])
            print(f"  {rows[-1]}", flush=True)
    print("documents whose ids differ from Hugging Face's (special-token text as text), every document")
    table(["corpus / tokenizer", "documents", "with special text", "fastokens differ", "gigatoken differ"], rows)


def child_build(library: str, tokenizer: str) -> None:
    """Import all three libraries (so every case starts from the same memory), then build ``tokenizer`` with
    ``library`` as packcli does; print the build's wall and CPU seconds and the process' peak RSS."""
    import fastokens
    import gigatoken
    import tokenizers

    from packcli.encode.gigatoken_backend import without_added_tokens

    builds = {
        "hf": tokenizers.Tokenizer.from_str,
        "fastokens": fastokens.Tokenizer.from_json_str,
        "gigatoken": lambda source: gigatoken.Tokenizer.from_json(without_added_tokens(source)),
    }
    source = Path(tokenizer).read_text(encoding="utf-8")
    start, cpu = time.perf_counter(), time.process_time()
    builds[library](source)
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": used, "mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def child_encode(library: str, tokenizer: str) -> None:
    """Encode every gcide text once through packcli's backend of ``library``; print MB per wall and CPU second."""
    texts = texts_of(SHARED_DATA / "gcide.jsonl.gz")
    megabytes = sum(len(text.encode("utf-8")) for text in texts) / 1e6
    encoder = backend(library, Path(tokenizer))
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches(texts):
        encoder.ids(encoder.encode(batch))  # type: ignore[attr-defined]
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": used, "mb": megabytes}))


def measured(part: str, library: str, name: str) -> dict[str, float]:
    path = shared(f"tokenizers/{name}/tokenizer.json")
    env = {**os.environ, "RAYON_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "true", "PYTHONPATH": str(REPO)}
    args = python(__file__, f"child-{part}", library, str(path))
    return dict(json.loads(subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout))


def builds() -> None:
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(ROUNDS):
        for name in TOKENIZERS:
            for library in LIBRARIES:
                figures.setdefault((name, library), []).append(measured("build", library, name))
    rows = [
        [name, *(f"{median(figures[name, library], key)}" for library in LIBRARIES for key in ("wall", "cpu", "mib"))]
        for name in TOKENIZERS
    ]
    print(f"build alone in a fresh process (after importing all three): wall s, CPU s, peak MiB; median of {ROUNDS}")
    table(["tokenizer", *(f"{library} {key}" for library in LIBRARIES for key in ("wall", "CPU", "MiB"))], rows)


def encoding() -> None:
    rows = []
    for name in TOKENIZERS:
        for library in LIBRARIES[1:]:
            result = measured("encode", library, name)
            rows.append([f"gcide / {name}", library, f"{result['mb'] / result['wall']:.1f}"])
            rows[-1].append(f"{result['mb'] / result['cpu']:.1f}")
    print("encoding every gcide text once on 2 threads (first pass), MB of UTF-8 per wall s and per CPU s")
    table(["corpus / tokenizer", "backend", "MB / wall s", "MB / CPU s"], rows)


def median(values: list[dict[str, float]], key: str) -> str:
    middle = statistics.median(value[key] for value in values)
    return f"{middle:.0f}" if key == "mib" else f"{middle:.2f}"


def main() -> None:
    if shared("tokenizers/qwen/tokenizer.json") is None or shared("data/gcide.jsonl.gz") is None:
        return
    parts = sys.argv[1:] or ["exact", "build", "encode"]
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    for part in parts:
        {"exact": exactness, "build": builds, "encode": encoding}[part]()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1].startswith("child-"):
        {"child-build": child_build, "child-encode": child_encode}[sys.argv[1]](sys.argv[2], sys.argv[3])
    else:
        main()
