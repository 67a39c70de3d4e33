"""``s3_server``: moto's standalone S3 server, a real process on 127.0.0.1 (a free port), one per test session.

The processes under test reach it as any S3-compatible store: ``AWS_ENDPOINT_URL`` and dummy credentials are set
in the environment for the session (subprocesses inherit them) and restored after; the server is stopped at the end
and waited for, so no process outlives the session. ``bucket()`` makes a fresh, empty bucket for one test;
``recorded()`` gives the requests the server answered meanwhile (moto's own request recorder, to a file of the
session's temporary directory, where requests answered at once may share a line). ``cut_reads()`` puts a proxy in
front of it that fails reads as a network does, for the store library's retries to mend.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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

    @contextmanager
    def cut_reads(self) -> Iterator[CuttingProxy]:
        """Inside the block, this process reaches the server through a :class:`CuttingProxy` (a fresh
        s3fs client, whose endpoint is the proxy's, then again the server's after it)."""
        import s3fs

        host, port = self.endpoint.removeprefix("http://").split(":")
        proxy = CuttingProxy(("127.0.0.1", 0), _Forward)
        proxy.upstream = (host, int(port))
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.server_address[1]}"
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            yield proxy
        finally:
            os.environ["AWS_ENDPOINT_URL"] = self.endpoint
            s3fs.S3FileSystem.clear_instance_cache()
            proxy.shutdown()
            proxy.server_close()

    def _recorder(self, action: str) -> str:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/recorder/{action}", data=b"", timeout=30) as answer:
            return str(answer.read().decode())


class CuttingProxy(ThreadingHTTPServer):
    """A proxy to the S3 server that sends the next ``cuts`` answers to a ranged GET half their body, then closes the
    connection (as a reset does part way), and answers the next ``busy`` PUTs 503 "slow down" unsent: transient
    failures, which another request mends."""

    upstream: tuple[str, int]
    cuts = 0
    busy = 0


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CuttingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.command == "PUT" and self.server.busy > 0:
            self.server.busy -= 1
            refusal = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(refusal)))
            self.end_headers()
            self.wfile.write(refusal)
            return
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        upstream.request(self.command, self.path, body, dict(self.headers))
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        cut = self.command == "GET" and "Range" in self.headers and self.server.cuts > 0
        self.server.cuts -= cut
        self.send_response(answer.status)
        kept = ("transfer-encoding", "connection") + (() if self.command == "HEAD" else ("content-length",))
        for name, value in answer.getheaders():
            if name.lower() not in kept:
                self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if cut else data)
        self.close_connection = cut

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = forward


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
