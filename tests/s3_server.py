"""``s3_server``: moto's standalone S3 server, a real process on 127.0.0.1 (a free port), one per test session.

The processes under test reach it as any S3-compatible store: ``AWS_ENDPOINT_URL`` and dummy credentials are set
in the environment for the session (subprocesses inherit them) and restored after; the server is stopped at the end
and waited for, so no process outlives the session. ``bucket()`` makes a fresh, empty bucket for one test;
``recorded()`` gives the requests the server answered meanwhile (moto's own request recorder, to a file of the
session's temporary directory, where requests answered at once may share a line).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "packcli-test-key",
    "AWS_SECRET_ACCESS_KEY": "packcli-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
_START_S = 60


@dataclass(frozen=True)
class S3Server:
    """The running server: its endpoint and the environment that points a process at it."""

    endpoint: str
    environment: dict[str, str]

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)

    def bucket(self) -> str:
        """A new empty bucket; its URL (``s3://NAME``)."""
        name = f"packcli-{uuid.uuid4().hex[:16]}"
        self.filesystem().mkdir(name)
        return f"s3://{name}"

    @contextmanager
    def recorded(self) -> Iterator[list[tuple[str, str]]]:
        """The requests the server answers inside the block, filled in at its end: (method, ``bucket/key``) in
        order. Tests run one at a time against the server, so none of another test's requests is among them."""
        found: list[tuple[str, str]] = []
        self._recorder("reset-recording")
        self._recorder("start-recording")
        try:
            yield found
        finally:
            self._recorder("stop-recording")
            text, position, decoder = self._recorder("download-recording"), 0, json.JSONDecoder()
            while text[position:].strip():  # concurrent requests may land on one line, one entry after another
                entry, position = decoder.raw_decode(text, len(text) - len(text[position:].lstrip()))
                found.append((entry["method"], unquote(urlsplit(entry["url"]).path).lstrip("/")))

    def _recorder(self, action: str) -> str:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/recorder/{action}", data=b"", timeout=30) as answer:
            return str(answer.read().decode())


def object_keys(fs: Any, url: str) -> list[str]:
    """The keys below ``url``, relative to it, sorted."""
    prefix = url.removeprefix("s3://") + "/"
    return sorted(name.removeprefix(prefix) for name in fs.find(url))


def put_output(server: S3Server, local: Path) -> str:
    """A copy of the local output ``local`` in a fresh bucket of ``server``; its URL."""
    url = f"{server.bucket()}/packed"
    server.filesystem().put(f"{local}/", url, recursive=True)
    return url


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_up(endpoint: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto's S3 server exited at start with code {process.returncode}")
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's S3 server did not answer on {endpoint} within {_START_S} s")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="needs moto[server] (the dev extra)")
    pytest.importorskip("s3fs", reason="needs s3fs (the cloud extra)")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    recording = Path(tmp_path_factory.mktemp("moto")) / "requests.jsonl"
    server_environment = {**os.environ, "MOTO_RECORDER_FILEPATH": str(recording)}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_environment)
    environment = {"AWS_ENDPOINT_URL": endpoint, **CREDENTIALS}
    saved = {name: os.environ.get(name) for name in environment}
    try:
        _wait_until_up(endpoint, process)
        os.environ.update(environment)
        yield S3Server(endpoint, environment)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
