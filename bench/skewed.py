"""Build the skewed corpus: the documents of gcide and the CPython standard library, plus five huge documents of
0.6-1.4 MB (CPython files concatenated), mixed in a seeded random order. It has the shape of code, legal text and
book corpora: many short documents and a few whose encoding alone outlasts a whole batch of the others.
Usage: skewed.py OUT.jsonl (nothing large is committed: the benchmark builds it into a temporary directory)."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

from common import SHARED

HUGE_MB = (0.6, 0.8, 1.0, 1.2, 1.4)  # text sizes of the five huge documents
SEED = 0


def huge_documents(code_lines: list[bytes]) -> list[bytes]:
    """Five JSON lines, each CPython files concatenated (in file order) until the text reaches its size."""
    texts = [json.loads(line)["text"] for line in code_lines]
    documents, at = [], 0
    for k, megabytes in enumerate(HUGE_MB):
        parts: list[str] = []
        size = 0
        while size < megabytes * 1e6:
            parts.append(texts[at % len(texts)])
            size += len(parts[-1].encode())
            at += 1
        record = {"id": f"skewed/huge-{k}", "text": "\n".join(parts)}
        documents.append(json.dumps(record).encode() + b"\n")
    return documents


def build_skewed(shared_data: Path, out: Path) -> Path:
    """Write the skewed corpus to ``out`` (JSON Lines) from the corpora in ``shared_data``; return ``out``."""
    with gzip.open(shared_data / "gcide.jsonl.gz", "rb") as short:
        lines = [line for line in short if line.strip()]
    code = [line for line in (shared_data / "cpython_stdlib.jsonl").read_bytes().splitlines(keepends=True) if line]
    lines += code + huge_documents(code)
    random.Random(SEED).shuffle(lines)
    out.write_bytes(b"".join(lines))
    return out


if __name__ == "__main__":
    build_skewed(SHARED / "data", Path(sys.argv[1]))
