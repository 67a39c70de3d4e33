"""Inputs from an S3-protocol store (moto's server on 127.0.0.1): an object, a prefix, a glob; the same bytes as
the pack of the same files on disk; the fingerprint from the objects' facts; errors naming the URL."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import error_line, sample_lines, write_jsonl
from s3_server import S3Server
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import PackcliError
from packcli.read.inputs import InputFile, find_inputs
from packcli.run.parts import input_facts
from packcli.run.sources import group_inputs
from packcli.storage import UrlPath, location, objects
from packcli.storage.lock import ObjectLock
from packcli.storage.objects import READ_BLOCK, open_object

runner = CliRunner()


def pack(*args: str) -> Any:
    return runner.invoke(app, ["pack", *args, "--max-len", "512", "--quiet", "--json"])


def without_inputs(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest less what names the inputs: their paths, the fingerprint and a partition plan's hash (both
    hash the paths), the files found beside them, and each shard's source index (it names each document's input)."""
    kept = {key: value for key, value in manifest.items() if key not in ("inputs", "fingerprint")}
    kept["shards"] = [
        {**shard, "sidecars": {kind: item for kind, item in shard.get("sidecars", {}).items() if kind != "sources"}}
        for shard in kept["shards"]
    ]
    if "partitions" in kept:
        kept["partitions"] = {key: value for key, value in kept["partitions"].items() if key != "plan_hash"}
    return {**kept, "totals": {key: value for key, value in kept["totals"].items() if key != "unread_files"}}


def same_output(first: Path, second: Path) -> None:
    """Byte-identical shards, and manifests equal but for the recorded inputs (and so the fingerprint)."""
    one, two = (json.loads((out / "manifest.json").read_text()) for out in (first, second))
    assert without_inputs(one) == without_inputs(two)
    assert one["shards"] and all(
        (first / shard["file"]).read_bytes() == (second / shard["file"]).read_bytes() for shard in one["shards"]
    )


def test_location_keeps_paths_and_carries_urls(tmp_path: Path) -> None:
    assert location(str(tmp_path)) == tmp_path and type(location(str(tmp_path))) is not UrlPath
    assert location(f"file://{tmp_path}") == tmp_path
    url = location("s3://bucket/dir/corpus.jsonl.gz")
    assert isinstance(url, UrlPath) and str(url) == "s3://bucket/dir/corpus.jsonl.gz"
    assert url.name == "corpus.jsonl.gz" and str(url.parent / "other.jsonl") == "s3://bucket/dir/other.jsonl"
    with pytest.raises(TypeError, match="needs a local path"):
        open(url, "rb")  # noqa: SIM115 (never opens a local file by mistake)


@pytest.fixture(scope="module")
def sample_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 20 lines (long documents) of the bundled sample, still gzipped: small, real text."""
    path = tmp_path_factory.mktemp("corpus") / "sample.jsonl.gz"
    path.write_bytes(gzip.compress(sample_lines(20), mtime=0))
    return path


def test_pack_an_object_a_prefix_and_a_glob_as_from_disk(
    s3_server: S3Server, sample_slice: Path, tmp_path: Path
) -> None:
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    fs.put_file(str(sample_slice), f"{bucket}/corpus/a/sample.jsonl.gz")
    fs.pipe_file(f"{bucket}/corpus/notes.txt", b"not a corpus")
    local = pack(str(sample_slice), "--out", str(tmp_path / "local"))
    assert local.exit_code == 0, local.stderr
    for name, spec in [
        ("object", f"{bucket}/corpus/a/sample.jsonl.gz"),
        ("prefix", f"{bucket}/corpus/"),
        ("glob", f"{bucket}/corpus/*/*.jsonl.gz"),
    ]:
        result = pack(spec, "--out", str(tmp_path / name))
        assert result.exit_code == 0, result.stderr
        same_output(tmp_path / "local", tmp_path / name)
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["inputs"] == [
            {"path": f"{bucket}/corpus/a/sample.jsonl.gz", "bytes": sample_slice.stat().st_size}
        ]
        assert manifest["totals"]["unread_files"] == (1 if name == "prefix" else 0)


def test_fingerprint_follows_the_objects_facts(s3_server: S3Server, tmp_path: Path) -> None:
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    records = [{"text": f"document number {index} " * 20} for index in range(50)]
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    fs.put_file(str(corpus), f"{bucket}/c.jsonl")
    url, out = f"{bucket}/c.jsonl", str(tmp_path / "out")
    first = json.loads(pack(url, "--out", out).stdout)
    assert json.loads(pack(url, "--out", out).stdout)["status"] == "up-to-date"
    fs.put_file(str(write_jsonl(corpus, records[:-1])), f"{bucket}/c.jsonl")  # changed: another ETag and size
    changed = json.loads(pack(url, "--out", out, "--overwrite").stdout)
    assert changed["status"] == "packed" and changed["fingerprint"] != first["fingerprint"]
    assert changed["documents"] == first["documents"] - 1


def test_an_object_is_an_input_file_with_its_etag_for_mtime(s3_server: S3Server, tmp_path: Path) -> None:
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "a short document"}] * 3)
    fs.put_file(str(corpus), f"{bucket}/c.jsonl")
    item = InputFile.of(location(f"{bucket}/c.jsonl"))
    etag = fs.info(f"{bucket}/c.jsonl")["ETag"].strip('"')
    assert (item.name, item.size, item.etag, item.version) == (f"{bucket}/c.jsonl", corpus.stat().st_size, etag, etag)
    assert input_facts([item]) == [[f"{bucket}/c.jsonl", corpus.stat().st_size, etag]]  # what a resume compares
    local = InputFile.of(corpus)
    assert local.etag is None and local.version == corpus.stat().st_mtime_ns


def test_errors_name_the_url_and_never_a_secret(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = s3_server.bucket()
    missing = pack(f"{bucket}/absent.jsonl", "--out", str(tmp_path / "o"))
    assert missing.exit_code == 1
    assert error_line(missing.stderr) == f"error: {bucket}/absent.jsonl: no such object or prefix"
    with_key = pack("s3://key:s3cr3t@bucket/c.jsonl", "--out", str(tmp_path / "o"))
    assert with_key.exit_code == 2 and "s3cr3t" not in with_key.stderr and "credentials in a URL" in with_key.stderr


def test_partitions_read_their_byte_ranges_from_the_store(s3_server: S3Server, tmp_path: Path) -> None:
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    records = [{"text": f"line {index}: " + "lorem ipsum dolor " * (index % 7 + 1)} for index in range(300)]
    corpus = write_jsonl(tmp_path / "plain.jsonl", records)
    fs.put_file(str(corpus), f"{bucket}/plain.jsonl")
    args = ["--partitions", "3", "--workers", "1"]
    here = pack(str(corpus), *args, "--out", str(tmp_path / "local"))
    there = pack(f"{bucket}/plain.jsonl", *args, "--out", str(tmp_path / "remote"))
    assert here.exit_code == 0 and there.exit_code == 0, there.stderr
    assert json.loads(there.stdout)["partitions"] == 3
    same_output(tmp_path / "local", tmp_path / "remote")


def test_reads_and_writes_are_retried_by_the_store_library_then_named(s3_server: S3Server, tmp_path: Path) -> None:
    """A read whose body the network cuts short, a write or an upload the store asks to slow down, are mended by the
    store library's own retries (s3fs asks for the range again, botocore sends the PUT again); a read that fails on
    every attempt is one line naming the URL."""
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    data = bytes(range(256)) * 100
    url = f"{bucket}/blob.bin"
    fs.pipe_file(url, data)
    with s3_server.cut_reads() as proxy:
        proxy.cuts = 2
        with open_object(url) as stream:
            assert stream.read() == data and proxy.cuts == 0
        proxy.busy = 1
        objects.write_object(f"{bucket}/written.bin", data)
        assert proxy.busy == 0 and fs.cat_file(f"{bucket}/written.bin") == data
        (tmp_path / "up.bin").write_bytes(data[::-1])
        proxy.busy = 1
        objects.upload_files({str(tmp_path / "up.bin"): f"{bucket}/uploaded.bin"})
        assert proxy.busy == 0 and fs.cat_file(f"{bucket}/uploaded.bin") == data[::-1]
        proxy.cuts = 1000  # every attempt the library makes
        with pytest.raises(PackcliError) as caught:
            open_object(url).read()
    assert caught.value.path == url and caught.value.message.startswith("cannot read: "), caught.value.message


def test_a_stream_fetches_read_block_bytes_a_request(s3_server: S3Server) -> None:
    """Small reads of a stream are served from one ``READ_BLOCK`` fetched at once (the memory a stream holds), and
    reading the rest of it whole is one request, not one for each 8 KiB."""
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    url, size = f"{bucket}/blob.bin", READ_BLOCK * 5 // 2
    fs.pipe_file(url, bytes(size))
    with s3_server.recorded() as requests, open_object(url) as stream:
        assert sum(len(block) for block in iter(lambda: stream.read(1 << 20), b"")) == size
    assert [method for method, _ in requests].count("GET") == 3
    with s3_server.recorded() as requests, open_object(url) as stream:
        assert len(stream.read(100)) == 100 and len(stream.read()) == size - 100
    assert [method for method, _ in requests].count("GET") == 2


def test_listings_and_facts_come_from_the_store_each_time(s3_server: S3Server) -> None:
    """Another process may write between two looks at a prefix: each listing and each object's facts are the
    store's answer then, never a cache of an earlier one."""
    bucket, other = s3_server.bucket(), s3_server.filesystem()
    first, second = f"{bucket}/p/a.bin", f"{bucket}/p/b.bin"

    def children(url: str) -> list[str]:
        return [str(path) for path in UrlPath(url).iterdir()]

    other.pipe_file(first, b"1")
    assert objects.object_sizes(f"{bucket}/p") == {first: 1} and children(f"{bucket}/p") == [first]
    assert objects.object_info(first).size == 1
    other.pipe_file(first, b"333")
    other.pipe_file(second, b"22")
    assert objects.object_sizes(f"{bucket}/p") == {first: 3, second: 2}
    assert children(f"{bucket}/p") == [first, second] and objects.object_info(first).size == 3
    assert objects.glob_objects(f"{bucket}/p/*.bin") == [first, second]


def test_an_object_removed_after_it_was_opened_is_named_and_a_released_lock_is_free(s3_server: S3Server) -> None:
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    fs.pipe_file(f"{bucket}/gone.bin", b"x" * 1000)
    stream = open_object(f"{bucket}/gone.bin")
    fs.rm_file(f"{bucket}/gone.bin")
    with pytest.raises(PackcliError) as caught:  # once the store's raw "The specified key does not exist"
        stream.read()
    assert (caught.value.path, caught.value.message) == (f"{bucket}/gone.bin", "cannot read: no such object or prefix")
    holder = ObjectLock(f"{bucket}/out.lock", "first")
    assert holder.acquire()
    second = ObjectLock(f"{bucket}/out.lock", "second")
    assert not second.acquire() and second.seen is not None and second.seen["run"] == "first"
    holder.release()
    assert second.acquire()  # the holder released: a lock that is gone is free, never "in use"
    second.release()


@pytest.mark.parametrize("change", ["rewritten", "removed"])
def test_an_input_changed_while_a_run_reads_it_is_named_and_nothing_is_published(
    s3_server: S3Server, tmp_path: Path, change: str
) -> None:
    """The object is rewritten (its lines in another order: the same size, cuts no longer at line starts) or removed
    once the run has planned its partitions (its run record written): the run says so in one line, naming it,
    instead of a bad record on a line it never had or an output mixing two versions; the rerun packs it as it is."""
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    lines = sample_lines(40).splitlines(keepends=True)
    url, out = f"{bucket}/corpus.jsonl", tmp_path / "out"
    fs.pipe_file(url, b"".join(lines))
    record = tmp_path / ".out.packcli-resume" / "run.json"

    def change_once_planned() -> None:
        deadline = time.monotonic() + 120
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        if change == "removed":
            fs.rm_file(url)
        else:
            fs.pipe_file(url, b"".join(reversed(lines)))

    changer = threading.Thread(target=change_once_planned)
    changer.start()
    args = [url, "--max-len", "512", "--partitions", "4", "--workers", "2", "--out", str(out)]
    run = subprocess.run([sys.executable, "-m", "packcli", "pack", *args], capture_output=True, text=True, timeout=300)
    changer.join()
    assert run.returncode == 1, run.stderr
    said = "was removed" if change == "removed" else "changed (ETag "
    assert error_line(run.stderr).startswith(f"error: {url}: {said}"), run.stderr
    assert "while this run read it; nothing was published" in run.stderr and not out.exists()
    if change == "rewritten":
        rerun = pack(*args)
        assert rerun.exit_code == 0, rerun.output
        assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


def test_a_local_input_changed_or_removed_after_it_was_described_says_how(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "one"}, {"text": "two"}])
    described = InputFile.of(corpus)
    assert described.change() is None
    corpus.write_bytes(corpus.read_bytes()[::-1])  # the same size, other bytes, a later modification time
    os.utime(corpus, ns=(described.mtime_ns + 10**9, described.mtime_ns + 10**9))
    assert described.change() == "changed"
    corpus.write_bytes(b"{}\n")
    assert described.change() == f"changed ({described.size:,} bytes then, 3 now)"
    corpus.unlink()
    assert described.change() == "was removed"


def test_the_check_for_a_changed_object_costs_one_request(s3_server: S3Server) -> None:
    """Describing an object again once a run has read it is one request to the store, as the docs say (it was two:
    whether it exists, then its facts), and still tells a removed object from a rewritten one."""
    from packcli.storage.objects import filesystem

    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    url = f"{bucket}/corpus.jsonl"
    fs.pipe_file(url, b'{"text": "one"}\n')
    described = InputFile.of(location(url))
    requests: list[str] = []
    filesystem(url)[0].s3.meta.events.register("before-call.s3", lambda model, **_: requests.append(model.name))
    assert described.change() is None and requests == ["HeadObject"]
    fs.pipe_file(url, b'{"text": "two"}\n')
    assert (described.change() or "").startswith("changed (ETag ")
    fs.rm_file(url)
    assert described.change() == "was removed"


def test_objects_are_described_several_at_a_time_in_their_order(s3_server: S3Server) -> None:
    """Describing each object is one request; a corpus of thousands of objects in a store far away would wait for
    each in turn. Setup and the check before publishing describe them several at a time (requests in flight
    together, counted on the client), and give them back in the inputs' order."""
    import threading

    from packcli.read.inputs import describe_inputs, input_changes
    from packcli.storage.objects import filesystem

    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    urls = [f"{bucket}/part-{k:02}.jsonl" for k in range(24)]
    for k, url in enumerate(urls):
        fs.pipe_file(url, b'{"text": "one"}\n' * (k + 1))
    in_flight, most, lock = [0], [0], threading.Lock()

    def sent(**_: object) -> None:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])

    def answered(**_: object) -> None:
        with lock:
            in_flight[0] -= 1

    events = filesystem(urls[0])[0].s3.meta.events
    events.register("before-send.s3.HeadObject", sent)
    events.register("needs-retry.s3.HeadObject", answered)
    described = describe_inputs([location(url) for url in urls])
    assert [item.size for item in described] == [16 * (k + 1) for k in range(24)]
    assert most[0] > 1, "one request at a time"
    most[0] = 0
    assert input_changes(described) == [None] * 24 and most[0] > 1


def test_a_key_holding_glob_or_query_characters_names_that_object(s3_server: S3Server) -> None:
    """An object whose key holds ``[1]`` or ``?`` is read when named, as a local file of that name is: not the
    other object its name matches as a pattern (``d[1].jsonl`` matches ``d1.jsonl``), nor refused as credentials.
    A pattern still matches, and a query of ``key=value`` pairs (how a signature travels) is still refused."""
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    for key in ("d[1].jsonl", "d1.jsonl", "q?.jsonl"):
        fs.pipe_file(f"{bucket}/{key}", b'{"text": "one"}\n')

    def found(spec: str) -> list[str]:
        return [str(path) for path in find_inputs([spec]).files]

    assert found(f"{bucket}/d[1].jsonl") == [f"{bucket}/d[1].jsonl"]
    assert found(f"{bucket}/q?.jsonl") == [f"{bucket}/q?.jsonl"]
    assert found(f"{bucket}/d?.jsonl") == [f"{bucket}/d1.jsonl"]
    assert found(f"{bucket}/[dq]*") == [f"{bucket}/d1.jsonl", f"{bucket}/d[1].jsonl", f"{bucket}/q?.jsonl"]
    signed = pack(f"{bucket}/d1.jsonl?X-Amz-Signature=s3cr3t", "--out", "unused")
    assert signed.exit_code == 2 and "s3cr3t" not in signed.stderr and "credentials in a URL" in signed.stderr


def test_every_object_under_a_prefix_or_glob_is_read_each_once(s3_server: S3Server, tmp_path: Path) -> None:
    """Objects have no inode: each is its own input, however many a prefix, a glob or several URLs name; the one
    named twice is read once, also by another name of its protocol (``s3a://`` for ``s3://``)."""
    bucket, fs = s3_server.bucket(), s3_server.filesystem()
    for name in ("a", "b", "c"):
        fs.pipe_file(f"{bucket}/corpus/{name}.jsonl", f'{{"text": "document {name}"}}\n'.encode())
    keys = [f"{bucket}/corpus/{name}.jsonl" for name in ("a", "b", "c")]
    assert [str(path) for path in find_inputs([f"{bucket}/corpus/"]).files] == keys
    assert [str(path) for path in find_inputs([f"{bucket}/corpus/*.jsonl", keys[1]]).files] == keys
    alias = keys[0].replace("s3://", "s3a://", 1)  # the same store by another of its protocol's names
    assert [str(path) for path in find_inputs([keys[0], alias]).files] == keys[:1]
    packed = pack(f"{bucket}/corpus", "--out", str(tmp_path / "out"))
    assert packed.exit_code == 0, packed.output
    assert json.loads(packed.stdout)["documents"] == 3
    sources = group_inputs([keys[0], f"{bucket}/corpus/[bc].jsonl"], [1.0, 1.0], lambda message: None)
    assert [[str(path) for path in source.files] for source in sources] == [keys[:1], keys[1:]]  # two sources
