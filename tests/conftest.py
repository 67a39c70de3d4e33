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
from s3_server import s3_server  # noqa: F401 (the fixture, shared by every test module)

# No per-example deadline: CI machines are shared and slow examples are not failures.
settings.register_profile("packcli", deadline=None)
settings.load_profile("packcli")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PACKCLI_SHARED", REPO.parent / "shared"))
SAMPLE = REPO / "examples" / "sample.jsonl.gz"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Any attempt to reach the network fails loudly; the loopback (a server a test starts on 127.0.0.1) is fine."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PACKCLI_CACHE", str(tmp_path / "packcli-cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise RuntimeError(f"network access attempted in a test: {address}")
        real_connect(self, address)  # local (Unix) sockets: DataLoader workers share tensors through them

    real_create_connection = socket.create_connection

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        if address[0] not in LOOPBACK:
            raise RuntimeError(f"network access attempted in a test: {address}")
        return real_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "create_connection", create_connection)
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
