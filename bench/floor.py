"""The floor for `packcli pack`: read the same JSONL with the same reader and tokenize every text with the same
tokenizer on all cores (taking each document's ids), nothing else. Usage: floor.py CORPUS [TOKENIZER]."""

from __future__ import annotations

import sys
from pathlib import Path

from packcli.records import ReadCounts
from packcli.sources import read_texts
from packcli.tokenize import load_tokenizer


def main() -> None:
    tokenizer = load_tokenizer(sys.argv[2] if len(sys.argv) > 2 else None).tokenizer
    tokens = 0
    for batch in read_texts(Path(sys.argv[1]), "text", ReadCounts(), False, print):
        encodings = tokenizer.encode_batch_fast(batch.texts, add_special_tokens=False)
        tokens += sum(len(encoding.ids) for encoding in encodings)
    print(tokens)


if __name__ == "__main__":
    main()
