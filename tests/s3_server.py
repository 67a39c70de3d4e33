"""``s3_server``: moto's standalone S3 server, a real process on 127.0.0.1 (a free port), one per test session.

The processes under test reach it as any S3-compatible store: ``AWS_ENDPOINT_URL`` and dummy credentials are set
in the environment for the session (subprocesses inherit them) and restored after; the server is stopped at the end
and waited for, so no process outlives the session. ``bucket()`` makes a fresh, empty bucket for one test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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


def object_keys(fs: Any, url: str) -> list[str]:
    """The keys below ``url``, relative to it, sorted."""
    prefix = url.removeprefix("s3://") + "/"
    return sorted(name.removeprefix(prefix) for name in fs.find(url))


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
def s3_server() -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="needs moto[server] (the dev extra)")
    pytest.importorskip("s3fs", reason="needs s3fs (the cloud extra)")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
