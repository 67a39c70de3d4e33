"""The corpus the peer benchmark runs on, built once under the bench's scratch from text on this machine.

Three sizes. `tiny` (the first 5,000 gcide records, to try the bench out); `small` (the default, so that `make
bench` stays practical): gcide once, 126,237 short documents, 47 MB of JSON Lines. `real`
(PACKCLI_BENCH_PEERS_SIZE=real): what users pack, about 330 MB of text (386 MB of JSON Lines): gcide seven times
over, then long code (the `.py` files of the installed Python packages, in path order, up to 30 MB) and long prose
(the `.md`, `.rst` and `.txt` files of at least 4 KiB there and under /usr/share/doc, up to 25 MB).

Written as one uncompressed JSON Lines file (`{"id", "text"}`), which every peer reads, and the same lines cut in
two files for the peers that parallelize by file (datatrove's tasks, dolma's processes). The files are rebuilt only when missing.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

# gcide copies, gcide records a copy (0: all), code bytes, prose bytes
SIZES = {"tiny": (1, 5000, 0, 0), "small": (1, 0, 0, 0), "real": (7, 0, 30 << 20, 25 << 20)}
PROSE_SUFFIXES = (".md", ".rst", ".txt")
PROSE_MIN_BYTES = 4096


def corpus_size() -> str:
    """The size asked for by PACKCLI_BENCH_PEERS_SIZE (small or real)."""
    size = os.environ.get("PACKCLI_BENCH_PEERS_SIZE", "small")
    if size not in SIZES:
        raise SystemExit(f"PACKCLI_BENCH_PEERS_SIZE={size}: expected one of {', '.join(SIZES)}")
    return size


def build(gcide: Path, scratch: Path, size: str) -> tuple[Path, Path]:
    """The corpus file and the folder holding its two halves, built under SCRATCH when missing."""
    out = scratch / f"corpus-{size}.jsonl"
    halves = scratch / f"corpus-{size}-halves"
    if not out.exists():
        copies, limit, code_bytes, prose_bytes = SIZES[size]
        partial = out.with_suffix(".partial")
        scratch.mkdir(parents=True, exist_ok=True)  # a fresh clone has no build/ yet
        with partial.open("w", encoding="utf-8") as handle:
            for record in _records(gcide, copies, limit, code_bytes, prose_bytes):
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        partial.replace(out)
    if not halves.exists():
        _halve(out, halves)
    return out, halves


def describe(corpus: Path) -> str:
    """Documents and bytes of the corpus, for the bench's header."""
    with corpus.open("rb") as handle:
        documents = sum(1 for _ in handle)
    return f"{corpus.name}: {documents:,} documents, {corpus.stat().st_size / 1e6:,.0f} MB of JSON Lines"


def _records(gcide: Path, copies: int, limit: int, code_bytes: int, prose_bytes: int) -> Iterator[dict[str, str]]:
    for copy in range(copies):
        with gzip.open(gcide, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle):
                if limit and number == limit:
                    break
                record = json.loads(line)
                yield {"id": f"gcide-{copy}-{record['id']}", "text": record["text"]}
    packages = Path(sysconfig.get_paths()["purelib"])
    yield from _files("code", sorted(packages.rglob("*.py")), code_bytes, 1)
    prose = [p for root in (packages, Path("/usr/share/doc")) for p in sorted(root.rglob("*")) if _is_prose(p)]
    yield from _files("prose", prose, prose_bytes, PROSE_MIN_BYTES)


def _is_prose(path: Path) -> bool:
    return path.suffix in PROSE_SUFFIXES and path.is_file() and path.stat().st_size >= PROSE_MIN_BYTES


def _files(kind: str, paths: list[Path], budget: int, least: int) -> Iterator[dict[str, str]]:
    """Each readable UTF-8 file of at least LEAST bytes as a document, until BUDGET bytes of text are taken."""
    taken = 0
    for path in paths:
        if taken >= budget:
            return
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) >= least:
            taken += len(text)
            yield {"id": f"{kind}:{path}", "text": text}


def _halve(corpus: Path, halves: Path) -> None:
    staging = halves.with_name(halves.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    half = corpus.stat().st_size // 2
    with corpus.open("rb") as source:
        first = (staging / "part-0.jsonl").open("wb")
        second = (staging / "part-1.jsonl").open("wb")
        for line in source:
            (first if source.tell() <= half else second).write(line)
        first.close()
        second.close()
    staging.replace(halves)


if __name__ == "__main__":
    built, _ = build(Path(sys.argv[1]), Path(sys.argv[2]), corpus_size())
    print(describe(built))
