"""Shared fixtures: no network, the real corpora and tokenizers in ../shared (skipped, saying why, without them), and
one tiny real corpus with its common outputs, each packed once per test session.

The session outputs (``packed_text``, ``packed_rows``, ``packed_sft``) are read-only: a test
that changes an output copies it first (``shutil.copytree(packed_text, tmp_path / "out")``). They are packed through
the real CLI in this process, with the bundled GPT-2 tokenizer, so a test that only reads an output pays nothing for
it; a test whose subject is the pack itself (its options, its process, its failures) packs ``tiny_corpus``, not the
much larger demo sample (``SAMPLE``), unless the size is what it tests.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
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
TINY_DOCUMENT_CHARS = 12_000  # the tiny corpus takes the sample's modules up to this size ...
TINY_DOCUMENTS = 60  # ... this many of them, in the sample's order
ROWS_MAX_LEN = 96  # the max_len of the ``packed_rows`` output
PROGRESS_PREFIX = "packcli: "  # how a progress line starts (packcli.cli.progress)


@pytest.fixture(autouse=True, scope="session")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Any attempt to reach the network fails loudly; the loopback (a server a test starts on 127.0.0.1) is fine.
    For the whole session: module and session fixtures, set up before a test's own, run offline too, with a
    tokenization cache of the session's (never the user's ``~/.cache/packcli``)."""
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

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("PACKCLI_CACHE", str(tmp_path_factory.mktemp("packcli-cache")))
        patch.setattr(socket.socket, "connect", connect)
        patch.setattr(socket, "create_connection", create_connection)
        yield


@pytest.fixture(autouse=True)
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test its own tokenization cache: what one test caches, no other reuses."""
    monkeypatch.setenv("PACKCLI_CACHE", str(tmp_path / "packcli-cache"))


@pytest.fixture(autouse=True, scope="session")
def torch_threads_at_a_workers_share() -> Iterator[None]:
    """Under pytest-xdist (``make test``: two workers on two cores), torch's intra-op threads in a worker are its
    share of the cores, not all of them: pools that each span every core only spin against each other (ten Trainer
    steps of a tiny Llama on the loaded 2-core machine: 6.1 s of CPU with torch's two threads, 3.1 s with one).
    Nothing is imported here: a run that collected no torch test has no torch to set."""
    torch = sys.modules.get("torch")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if torch is None or workers < 2:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def shared_path(relative: str) -> Path:
    """A file under ../shared, or skip the test saying what is missing."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"needs {path} (the shared developer corpora and tokenizers, present in CI, not in a clone)")
    return path


def as_packed_before_split_pieces(out: Path) -> None:
    """Make an output what pack wrote before ``split_pieces`` existed: no ``split_pieces``, and shards without the
    ``packcli.eos_id`` metadata (written only since), their sizes and checksums in the manifest fixed."""
    import pyarrow as pa

    manifest = json.loads((out / "manifest.json").read_text())
    for shard in manifest["shards"]:
        shard.pop("split_pieces", None)
        for sidecar in shard.pop("sidecars", {}).values():
            (out / sidecar["file"]).unlink()
        path = out / shard["file"]
        table = pa.ipc.open_stream(path.read_bytes()).read_all()  # in memory: the file is rewritten below
        metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"packcli.eos_id"}
        with pa.ipc.new_stream(str(path), table.schema.with_metadata(metadata)) as writer:
            writer.write_table(table.replace_schema_metadata(metadata))
        shard.update(bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))


def listed_split_pieces(out: Path, shard: dict[str, Any]) -> list[list[int]]:
    """A shard entry's pieces of split documents as ``[row, index, document, piece]`` lists, read with pyarrow alone
    from its ``split_pieces`` sidecar (docs/format.md); none when it has no sidecar."""
    import pyarrow as pa

    sidecar = shard.get("sidecars", {}).get("split_pieces")
    if sidecar is None:
        return []
    table = pa.ipc.open_stream((out / sidecar["file"]).read_bytes()).read_all()
    return [list(entry) for entry in zip(*(table.column(name).to_pylist() for name in ("row", "index", "document", "piece")))]  # fmt: skip


def listed_files(manifest: dict[str, Any]) -> list[str]:
    """Every file a manifest lists: each shard's, then its sidecars' (docs/format.md), as the manifest names them."""
    return [
        name
        for shard in manifest["shards"]
        for name in [shard["file"], *(sidecar["file"] for sidecar in shard.get("sidecars", {}).values())]
    ]


def rewrite_split_pieces(
    out: Path,
    shard: dict[str, Any],
    entries: list[list[int]],
    digests: list[int],
    first_supervised: list[int] | None = None,
) -> None:
    """Rewrite a shard's ``split_pieces`` sidecar with ``entries`` (``[row, index, document, piece]``),
    ``digests`` and a ``first_supervised`` column (None: none, as sidecars written before it), its size and sha256
    fixed in ``shard`` (the manifest entry, written back by the caller): an edit that checksums alone cannot tell."""
    import pyarrow as pa

    sidecar = shard["sidecars"]["split_pieces"]
    kinds = {"row": pa.int32(), "index": pa.int32(), "document": pa.int64(), "piece": pa.int32()}
    columns = {name: pa.array([entry[k] for entry in entries], kind) for k, (name, kind) in enumerate(kinds.items())}
    table = pa.table({**columns, "digest": pa.array(digests, pa.int64())})
    if first_supervised is not None:
        table = table.append_column("first_supervised", pa.array(first_supervised, pa.int8()))
    with pa.ipc.new_stream(str(out / sidecar["file"]), table.schema) as writer:
        writer.write_table(table)
    data = (out / sidecar["file"]).read_bytes()
    sidecar.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def write_jsonl(path: Path, records: list[Any], compress: bool = False) -> Path:
    """Write records as JSON Lines (gzipped when ``compress``)."""
    data = "".join(json.dumps(record) + "\n" for record in records).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def error_line(stderr: str) -> str:
    """The one ``error:`` line of a failed command's stderr, wherever progress lines put it: asserts it is the last
    line and that nothing but progress lines (``packcli: ...``) precedes it, so a slow machine or
    ``PACKCLI_PROGRESS_INTERVAL=0`` never breaks a test of what a failure says."""
    lines = [line for line in stderr.splitlines() if not line.startswith(PROGRESS_PREFIX)]
    assert len(lines) == 1 and lines[0].startswith("error: ") and stderr.endswith(lines[0] + "\n"), stderr
    return lines[0]


def run_writing_no_file_over(limit: int, tmpdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m packcli ARGS`` in a process whose ``$TMPDIR`` is ``tmpdir`` (created) and which can write no file
    past ``limit`` bytes (``RLIMIT_FSIZE``: a larger write fails with "File too large"), so a local copy of an output
    bigger than that fails it."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    tmpdir.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "packcli", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=environment, preexec_fn=limited, timeout=300, check=False
    )


def sample_lines(count: int) -> bytes:
    """The first ``count`` lines of the bundled sample, as JSON Lines bytes: small, real text (long documents)."""
    return b"".join(gzip.decompress(SAMPLE.read_bytes()).splitlines(keepends=True)[:count])


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


def documented_names(doc: str, heading: str) -> set[str]:
    """The names written in backticks in one section of a doc (``docs/DOC``, from ``heading`` to the next heading of
    the same or a higher level; code blocks left out), split at spaces, dots, commas, ``=`` and parentheses: what a
    ``--json`` key must be among."""
    text = (REPO / "docs" / doc).read_text(encoding="utf-8")
    level = heading.split(" ")[0]
    section = text[text.index(heading + "\n") + len(heading) :]
    ends = [section.find(f"\n{'#' * depth} ") for depth in range(1, len(level) + 1)]
    section = re.sub(
        r"```.*?```", "", section[: min([end for end in ends if end >= 0], default=len(section))], flags=re.S
    )
    return {name for quoted in re.findall(r"`([^`]+)`", section) for name in re.split(r"[ .,=()]+", quoted) if name}


def json_keys(value: Any) -> set[str]:
    """Every key of a JSON value, at any depth."""
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in json_keys(item)}
    if isinstance(value, list):
        return {key for item in value for key in json_keys(item)}
    return set()


def _pack_once(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str) -> Path:
    """Pack through the CLI into a directory of its own; a session fixture's output, checked complete."""
    from typer.testing import CliRunner

    from packcli.cli import app

    out = tmp_path_factory.mktemp(name) / "packed"
    environment = dict(os.environ)  # the command sets tokenizer variables: none of them outlives the fixture
    os.environ["PACKCLI_CACHE"] = str(out.parent / "packcli-cache")  # no tokenization cache from outside the session
    try:
        result = CliRunner().invoke(app, ["pack", *args, "--out", str(out), "--quiet"])
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny real corpus: the demo sample's first 60 modules of at most 12,000 characters, as plain JSON Lines
    with their ``id`` and ``text`` (173,356 characters; 75,322 GPT-2 tokens, 29 documents over 512 tokens and 14
    over 2,048), a twentieth of the sample's tokens. Read-only."""
    records = [record for record in read_jsonl(SAMPLE) if len(record["text"]) <= TINY_DOCUMENT_CHARS]
    return write_jsonl(tmp_path_factory.mktemp("tiny") / "tiny.jsonl", records[:TINY_DOCUMENTS])


@pytest.fixture(scope="session")
def packed_text(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """``tiny_corpus`` packed with the defaults (bfd, split, shuffled rows) at ``--max-len 512 --shard-size 100KB``:
    several shards, split documents, rows of several documents. Read-only: copy it to change it."""
    return _pack_once(tmp_path_factory, "packed-text", str(tiny_corpus), "--max-len", "512", "--shard-size", "100KB")


@pytest.fixture(scope="session")
def packed_rows(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """``tiny_corpus`` packed at ``--max-len 96`` (the loader's tests: rows short enough for a tiny model, many of
    them holding several documents), in two shards. Read-only."""
    return _pack_once(
        tmp_path_factory, "packed-rows", str(tiny_corpus), "--max-len", str(ROWS_MAX_LEN), "--shard-size", "500KB"
    )


@pytest.fixture(scope="session")
def packed_sft(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """Prompt/response records made from ``tiny_corpus`` (prompt: a module's first 200 characters, response: the
    next 500) packed at ``--max-len 128`` (overflow drop, the fine-tuning default): a ``labels`` column. Read-only."""
    records = [{"prompt": r["text"][:200], "response": r["text"][200:700]} for r in read_jsonl(tiny_corpus)]
    corpus = write_jsonl(tmp_path_factory.mktemp("sft") / "sft.jsonl", records)
    args = ["--prompt-field", "prompt", "--response-field", "response", "--max-len", "128"]
    return _pack_once(tmp_path_factory, "packed-sft", str(corpus), *args)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``), the tests that start a local Ray run on one
    worker, one after another: two Ray clusters at once would only compete for the same cores and memory. So do the
    packaging tests, which share one build and one fresh virtualenv per worker that runs them (a module fixture).

    xdist sends the tests whose node ids end in the same ``@group`` to one worker; its own hook (on each worker)
    writes that suffix into ``item._nodeid``, which pytest 9.2 no longer reads (a node id is ``str(item._id)``), so
    every group was spread over both workers and the release built on each. Where its suffix is missing after the
    other hooks, it is written here the way pytest reads it."""
    for item in items:
        for marker in ("ray", "packaging"):
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.xdist_group(marker))
    yield
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")) for mark in item.iter_markers("xdist_group")}  # fmt: skip
        suffix = "@" + "_".join(sorted(groups))
        if groups and not item.nodeid.endswith(suffix):
            from _pytest.nodeid import NodeId  # pytest 9.2's node ids

            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]
