"""Shared fixtures: no network, the real corpora and tokenizers in ../shared (skipped, saying why, without them)."""

from __future__ import annotations

import gzip
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# No per-example deadline: CI machines are shared and slow examples are not failures.
settings.register_profile("packcli", deadline=None)
settings.load_profile("packcli")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PACKCLI_SHARED", REPO.parent / "shared"))
SAMPLE = REPO / "examples" / "sample.jsonl.gz"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Any attempt to reach the network fails loudly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PACKCLI_CACHE", str(tmp_path / "packcli-cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise RuntimeError(f"network access attempted in a test: {address}")
        real_connect(self, address)  # local (Unix) sockets: DataLoader workers share tensors through them

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("network access attempted in a test")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def shared_path(relative: str) -> Path:
    """A file under ../shared, or skip the test saying what is missing."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"needs {path} (the shared developer corpora and tokenizers, present in CI, not in a clone)")
    return path


def write_jsonl(path: Path, records: list[Any], compress: bool = False) -> Path:
    """Write records as JSON Lines (gzipped when ``compress``)."""
    data = "".join(json.dumps(record) + "\n" for record in records).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read (possibly gzipped) JSON Lines."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def output_rows(out: Path) -> list[dict[str, list[int]]]:
    """Every row of a packed output, shard by shard in the manifest's order, read with pyarrow alone (the format
    as docs/format.md states it, not packcli's own reader): one dict of column name -> list of ints per row."""
    import pyarrow as pa

    rows: list[dict[str, list[int]]] = []
    for shard in json.loads((out / "manifest.json").read_text())["shards"]:
        with pa.OSFile(str(out / shard["file"])) as source:
            rows.extend(pa.ipc.open_stream(source).read_all().to_pylist())
    return rows
