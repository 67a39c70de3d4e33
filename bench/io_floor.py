"""The I/O floor for `packcli pack`: read and parse the same JSON Lines as floor.py does (pyarrow, the whole file,
every text taken into Python), then write as many bytes as the pack's shards hold, in 8 MiB pieces, each hashed
with sha256 and the file flushed to disk at the end, as shards are; no tokenizer. Usage: io_floor.py CORPUS BYTES
OUT_FILE."""

from __future__ import annotations

import hashlib
import os
import sys

import pyarrow as pa
import pyarrow.json as pa_json

PIECE = 8 << 20
BLOCK_BYTES = 16 << 20  # pyarrow reads in blocks of whole lines: room for the real corpus' longest (2.4 MB)


def read_texts(path: str) -> list[str]:
    """Every record's ``text``, read by pyarrow's multi-threaded reader (both floors read this way). A read that
    fails ends the process at once, saying why: a normal exit then crashes or hangs for good in pyarrow's thread
    pool, whose other blocks' tasks still run (pyarrow 26: exit 139, or a process left waiting)."""
    stream = pa.input_stream(path, compression="gzip" if path.endswith(".gz") else None)
    read = pa_json.ReadOptions(block_size=BLOCK_BYTES)
    parse = pa_json.ParseOptions(explicit_schema=pa.schema([("text", pa.string())]), unexpected_field_behavior="ignore")
    try:
        return list(pa_json.read_json(stream, read, parse).column("text").to_pylist())
    except Exception as exc:
        print(f"error: {path}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(1)


def main() -> None:
    path, size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    texts = read_texts(path)
    data = "".join(texts[:1000]).encode()  # some real bytes to write, repeated
    piece = (data * (PIECE // max(len(data), 1) + 1))[:PIECE]
    digest = hashlib.sha256()
    with open(out, "wb") as handle:
        left = size
        while left > 0:
            chunk = piece[: min(left, PIECE)]
            digest.update(chunk)
            handle.write(chunk)
            left -= len(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    print(len(texts), digest.hexdigest())


if __name__ == "__main__":
    main()
