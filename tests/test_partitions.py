"""Partitioned runs on the local engine: the plan, the merged output, resume after a kill, refusals and errors."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, error_line, read_jsonl, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from test_processes import descendants, survivors
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import UsageError
from packcli.format.shards import read_shard
from packcli.options import PackOptions
from packcli.report.verify import verify_output
from packcli.run.driver import pack_corpus
from packcli.run.parts import PartsArea
from packcli.run.plan import plan_partitions
from packcli.util.locks import FileLock

runner = CliRunner()
TEXTS = [record["text"] for record in read_jsonl(SAMPLE)]


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def files_of(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def documents(out: Path) -> Counter[tuple[int, ...]]:
    """Every packed document (piece) of an output, as a multiset."""
    found: Counter[tuple[int, ...]] = Counter()
    for shard in json.loads((out / "manifest.json").read_text())["shards"]:
        table = read_shard(out / shard["file"])
        for ids, cu in zip(table.column("input_ids").to_pylist(), table.column("cu_seqlens").to_pylist()):
            found.update(tuple(ids[a:b]) for a, b in zip(cu, cu[1:]))
    return found


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 documents of the sample corpus as plain JSON Lines (2 MB): cut by byte ranges."""
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "sample.jsonl", [{"text": text} for text in TEXTS[:120]])


@pytest.fixture(scope="module")
def reference(plain: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run: 4 partitions on 2 workers."""
    out = tmp_path_factory.mktemp("reference") / "out"
    result = invoke("pack", str(plain), "--max-len", "512", "--partitions", "4", "--workers", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_plan_cuts_plain_json_lines_at_line_starts_and_mixes_every_file(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": text} for text in TEXTS[:60]])
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": text} for text in TEXTS[60:120]])
    c = write_jsonl(tmp_path / "c.jsonl.gz", [{"text": text} for text in TEXTS[120:]], compress=True)
    plan = plan_partitions([a, b, c], 4)
    assert len(plan) == 4 and plan == plan_partitions([a, b, c], 4)
    assert plan.digest != plan_partitions([a, b, c], 3).digest
    for path in (a, b):  # every line is owned by one partition: the spans tile the file, each starts a line
        data = path.read_bytes()
        spans = sorted(s.span for part in plan.partitions for s in part if s.path == path and s.span is not None)
        assert [start for start, _ in spans] == [0, *(end for _, end in spans[:-1])] and spans[-1][1] == len(data)
        assert all(start == 0 or data[start - 1 : start] == b"\n" for start, _ in spans)
        assert all(any(s.path == path for s in part) for part in plan.partitions)  # a mixture of every big file
    assert [s.span for part in plan.partitions for s in part if s.path == c] == [None]  # compressed: whole


def test_plan_cuts_parquet_by_row_groups_and_arrow_by_record_batches(tmp_path: Path) -> None:
    table = pa.table({"text": TEXTS[:80]})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=20)
    with pa.OSFile(str(tmp_path / "b.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=16):
            writer.write_batch(batch)
    plan = plan_partitions([tmp_path / "a.parquet", tmp_path / "b.arrow"], 2)
    groups = [s.span for part in plan.partitions for s in part if s.path.name == "a.parquet"]
    batches = [s.span for part in plan.partitions for s in part if s.path.name == "b.arrow"]
    assert sorted(groups) == [(0, 2), (2, 4)] and sorted(batches)[0][0] == 0 and sorted(batches)[-1][1] == 5


def test_more_partitions_than_the_inputs_allow_is_one_line_and_no_output(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl.gz", [{"text": text} for text in TEXTS[:5]], compress=True)
    with pytest.raises(UsageError, match="ask for --partitions 1,"):
        plan_partitions([corpus], 2)
    result = invoke("pack", str(corpus), "--partitions", "2", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and error_line(result.stderr) and "ask for --partitions 1," in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl.gz"]


def named_count(message: str) -> int:
    """The partition count a refusal tells the user to ask for."""
    found = re.search(r"can be cut into: \D*(\d+)", message)
    assert found is not None, message
    return int(found.group(1))


def test_the_count_a_refusal_names_is_one_the_planner_accepts(tmp_path: Path) -> None:
    """Four lines, the first 278 bytes and the others under 61: 6 partitions fill 4, yet 4 fill only 3. The refusal
    names a count that works (3, whichever count above it was asked for), and here, where the rule is exact, one
    more is refused."""
    lengths = [2000, 40, 20, 40]
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": TEXTS[i][:n]} for i, n in enumerate(lengths)])
    refused = invoke("pack", str(corpus), "--partitions", "6", "--out", str(tmp_path / "out"))
    assert refused.exit_code == 2 and error_line(refused.stderr), refused.stderr
    count = named_count(refused.stderr)
    assert count == 3
    for asked in (4, 5, 7, 9):
        with pytest.raises(UsageError) as again:
            plan_partitions([corpus], asked)
        assert named_count(str(again.value)) == count
    packed = invoke("pack", str(corpus), "--partitions", str(count), "--out", str(tmp_path / "out"), "--json")
    assert packed.exit_code == 0, packed.stderr
    assert json.loads(packed.stdout)["partitions"] == count and verify_output(tmp_path / "out").ok
    one_more = invoke("pack", str(corpus), "--partitions", str(count + 1), "--out", str(tmp_path / "more"))
    assert one_more.exit_code == 2 and named_count(one_more.stderr) == count


def test_inputs_holding_no_bytes_or_rows_are_one_partition_and_say_no_documents(tmp_path: Path) -> None:
    """An empty JSON Lines file and a Parquet file of no row group cut into no piece; one partition must still take
    them, as the plain run does (no documents, exit 1), never ask for --partitions 0."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    rowless = tmp_path / "rowless.parquet"
    pq.ParquetWriter(rowless, pa.schema([("text", pa.string())])).close()
    for corpus in (empty, rowless):
        assert len(plan_partitions([corpus], 1)) == 1
        result = invoke("pack", str(corpus), "--partitions", "1", "--out", str(tmp_path / "out"))
        assert result.exit_code == 1 and "no documents" in result.stderr, result.stderr
        assert not (tmp_path / "out").exists()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([20, 40, 400, 2000]), min_size=1, max_size=8), st.integers(2, 8))
def test_a_refusal_names_a_count_the_planner_accepts(lengths: list[int], asked: int) -> None:
    """Whatever lines and count: a refused count names a smaller one that plan_partitions accepts."""
    with tempfile.TemporaryDirectory() as directory:
        corpus = write_jsonl(Path(directory) / "c.jsonl", [{"text": TEXTS[i][:n]} for i, n in enumerate(lengths)])
        try:
            plan_partitions([corpus], asked)
        except UsageError as refusal:
            count = named_count(str(refusal))
            assert count < asked and len(plan_partitions([corpus], count)) == count


def test_every_input_format_partitioned_packs_the_same_documents(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"text": text} for text in TEXTS[:30]])
    write_jsonl(tmp_path / "b.jsonl.gz", [{"text": text} for text in TEXTS[30:45]], compress=True)
    pq.write_table(pa.table({"text": TEXTS[45:75]}), tmp_path / "c.parquet", row_group_size=10)
    table = pa.table({"text": TEXTS[75:100]})
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=10):
            writer.write_batch(batch)
    inputs = [str(tmp_path / name) for name in ("a.jsonl", "b.jsonl.gz", "c.parquet", "d.arrow")]
    single = pack_corpus(inputs, PackOptions(max_len=1024), tmp_path / "single")
    parted = pack_corpus(inputs, PackOptions(max_len=1024, partitions=3, workers=2), tmp_path / "parted")
    for key in ("input_documents", "input_tokens", "tokens", "documents", "split_documents"):
        assert parted.manifest["totals"][key] == single.manifest["totals"][key], key
    assert documents(tmp_path / "parted") == documents(tmp_path / "single")
    assert parted.manifest["partitions"] == {"count": 3, "plan_hash": parted.manifest["partitions"]["plan_hash"]}


def test_a_one_mebibyte_line_across_a_cut_is_read_once(tmp_path: Path) -> None:
    long_text = ""
    while len(long_text) < 2**20:
        long_text += " ".join(TEXTS)
    records = (
        [{"text": text} for text in TEXTS[:10]] + [{"text": long_text[: 2**20]}] + [{"text": t} for t in TEXTS[10:20]]
    )
    corpus = write_jsonl(tmp_path / "long.jsonl", records)
    data = corpus.read_bytes()
    line_start = sum(len(line) + 1 for line in data.split(b"\n")[:10])
    line_end = data.index(b"\n", line_start) + 1
    assert line_end - line_start > 2**20
    assert line_start < len(data) // 2 < line_end  # the cut of 2 partitions falls inside the long line
    plan = plan_partitions([corpus], 2)
    assert [part[0].span for part in plan.partitions] == [(0, line_end), (line_end, len(data))]
    single = pack_corpus([str(corpus)], PackOptions(max_len=4096), tmp_path / "single")
    parted = pack_corpus([str(corpus)], PackOptions(max_len=4096, partitions=2, workers=2), tmp_path / "parted")
    assert parted.manifest["totals"]["input_documents"] == len(records)
    assert parted.manifest["totals"]["input_tokens"] == single.manifest["totals"]["input_tokens"]
    assert documents(tmp_path / "parted") == documents(tmp_path / "single")


@pytest.mark.xdist_group("partitions-reference")  # under make test: ``reference`` built once
def test_worker_counts_give_identical_bytes_and_the_merged_output_verifies(
    plain: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = tmp_path / "one"
    monkeypatch.setenv("PACKCLI_SCRATCH", str(tmp_path / "scratch"))  # token stores there: same bytes, none left
    (tmp_path / "scratch").mkdir()
    result = invoke(
        "pack", str(plain), "--max-len", "512", "--partitions", "4", "--workers", "1", "--out", str(one),
        "--tokenizer-backend", "hf",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ones, references = files_of(one), files_of(reference)
    manifests = [json.loads(files.pop("manifest.json")) for files in (ones, references)]
    assert [manifest["tokenizer"].pop("backend") for manifest in manifests] == ["hf", "gigatoken"]  # workers ran it
    assert [manifest["tokenizer"].pop("backend_version") for manifest in manifests][1] == version("gigatoken")
    assert ones == references and manifests[0] == manifests[1] and not list((tmp_path / "scratch").iterdir())
    shards = [f"part-0000{k}-shard-00000.arrow" for k in range(4)]
    assert sorted(name for name in files_of(reference) if ".arrow." not in name) == ["manifest.json", *shards]
    assert {f"{shard}.sources" for shard in shards} <= set(files_of(reference))  # each shard's source index
    report = verify_output(reference)
    assert report.ok, report.problems
    single = pack_corpus([str(plain)], PackOptions(max_len=512), tmp_path / "single").manifest["totals"]
    totals = json.loads((reference / "manifest.json").read_text())["totals"]
    assert totals["input_tokens"] == totals["tokens"] == single["tokens"] and totals["documents"] == single["documents"]
    assert single["sequences"] <= totals["sequences"] <= single["sequences"] * 1.01
    assert documents(reference) == documents(tmp_path / "single")
    stats = invoke("stats", str(reference), "--json")
    assert stats.exit_code == 0 and json.loads(stats.stdout)["sequences"] == totals["sequences"]
    from datasets import Dataset

    assert len(Dataset.from_file(str(reference / "part-00002-shard-00000.arrow"))) > 0
    pytest.importorskip("torch", reason="the loader needs the torch extra")
    from packcli.torch import PackedDataset

    rows = list(PackedDataset(reference, shuffle=False))
    assert len(rows) == totals["sequences"] and sum(len(row["input_ids"]) for row in rows) == totals["tokens"]


@pytest.mark.xdist_group("partitions-reference")  # under make test: ``reference`` built once
def test_resume_after_a_kill_ends_identical_and_refuses_other_runs_parts(
    plain: Path, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    staging = tmp_path / ".out.packcli-resume"
    command = [sys.executable, "-m", "packcli", "pack", str(plain), "--max-len", "512", "--partitions", "4"]
    process = subprocess.Popen([*command, "--workers", "1", "--out", str(out), "--quiet"], start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(staging.glob("part-*/manifest.json")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    committed = len(list(staging.glob("part-*/manifest.json")))
    assert 1 <= committed < 4 and not out.exists()
    shutil.copytree(staging, tmp_path / ".other.packcli-resume")
    shutil.copytree(staging, tmp_path / ".damaged.packcli-resume")

    resumed = invoke("pack", str(plain), "--max-len", "512", "--partitions", "4", "--out", str(out), "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["partitions_reused"] == committed
    assert files_of(out) == files_of(reference) and not staging.exists()

    other = invoke(
        "pack", str(plain), "--max-len", "512", "--partitions", "3", "--out", str(tmp_path / "other"), "--json"
    )
    assert other.exit_code == 0 and json.loads(other.stdout)["partitions_reused"] == 0
    assert "its partition plan differs: 4 partitions then, 3 now" in other.stderr

    shard = sorted((tmp_path / ".damaged.packcli-resume").glob("part-00000/part-00000-shard-*.arrow"))[0]
    data = bytearray(shard.read_bytes())
    data[-100] ^= 0xFF
    shard.write_bytes(bytes(data))
    damaged = invoke(
        "pack", str(plain), "--max-len", "512", "--partitions", "4", "--out", str(tmp_path / "damaged"), "--json"
    )
    assert damaged.exit_code == 0 and json.loads(damaged.stdout)["partitions_reused"] == committed - 1
    assert "partition 0 is packed again" in damaged.stderr and "sha256" in damaged.stderr
    assert files_of(tmp_path / "damaged") == files_of(reference)


def test_a_failing_partition_names_partition_file_and_line_and_keeps_the_others(tmp_path: Path) -> None:
    lines = [json.dumps({"text": text}) for text in TEXTS[:80]]
    lines[75] = '{"text": "an unterminated string}'
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    # --quiet: a run past the progress interval (5 s, a loaded machine) would add progress lines before the error
    result = invoke("pack", str(corpus), "--partitions", "4", "--workers", "1", "--out", str(out), "--quiet")
    assert result.exit_code == 1 and error_line(result.stderr)
    assert (
        error_line(result.stderr).startswith(f"error: {corpus}:76: invalid JSON")
        and "partition 3 of 4" in result.stderr
    )
    assert not out.exists()
    staging = tmp_path / ".out.packcli-resume"
    assert f"the 3 partition(s) committed are kept in {staging} and reused by a rerun with the same inputs and " in (
        result.stderr
    )
    committed = sorted(path.parent.name for path in staging.glob("part-*/manifest.json"))
    assert committed == ["part-00000", "part-00001", "part-00002"]
    verified = invoke("verify", str(staging / "part-00001"), "--json")  # a committed part is an output of its own
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"], verified.output
    stats = invoke("stats", str(staging / "part-00001"), "--json")
    assert stats.exit_code == 0, stats.output
    for k in (0, 20, 40, 60):  # a bad record in every partition: none is committed, and none is said to be kept
        lines[k] = "{"
    corpus.write_text("\n".join(lines) + "\n")
    result = invoke("pack", str(corpus), "--partitions", "4", "--out", str(tmp_path / "none"), "--quiet")
    assert result.exit_code == 1 and error_line(result.stderr)
    assert result.stderr.endswith("(partition 0 of 4; no partition was committed)\n"), result.stderr


def failed_partitioned_run(tmp_path: Path) -> tuple[PartsArea, dict[str, object]]:
    """The resume area of a 4-partition run whose last partition failed (a bad line), and its run record."""
    lines = [json.dumps({"text": text}) for text in TEXTS[:80]]
    lines[75] = '{"text": "an unterminated string}'
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    result = invoke("pack", str(corpus), "--partitions", "4", "--workers", "1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    area = PartsArea(tmp_path / ".out.packcli-resume")
    return area, json.loads((area.root / "run.json").read_text())


def test_parts_whose_shards_an_interrupted_merge_moved_out_are_still_reused(tmp_path: Path) -> None:
    """The merge moves the parts' shards into the output being built before it publishes; a Ctrl-C or kill -9 then
    must not cost the committed parts (the Ctrl-C message says they are kept)."""
    area, run = failed_partitioned_run(tmp_path)
    committed = [k for k in range(4) if area.read(k) is not None]
    assert committed == [0, 1, 2]
    moved = [area.part(k) / str(shard["file"]) for k in committed for shard in (area.read(k) or {})["shards"]]
    for path in moved:  # as the merge leaves them: in the output being built, beside the parts' manifests
        path.replace(area.root / path.name)
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append) == committed
    assert warnings == [] and all(path.is_file() for path in moved)


def test_an_explicit_hf_run_packs_again_the_partitions_another_backend_encoded(tmp_path: Path) -> None:
    """The committed parts of a default run were encoded by gigatoken: a rerun with --tokenizer-backend hf, which
    takes only Hugging Face's tokens, packs them again, saying why; a default rerun reuses them."""
    area, run = failed_partitioned_run(tmp_path)
    assert {str((area.read(k) or {})["tokenizer"]["backend"]) for k in range(3)} == {"gigatoken"}
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append, "hf") == []
    assert warnings[0] == (
        "partition 0 is packed again: gigatoken encoded it, and this run takes only --tokenizer-backend hf's tokens"
    )
    (tmp_path / "again").mkdir()
    area, run = failed_partitioned_run(tmp_path / "again")
    assert PartsArea(area.root).resume(run, 4, warnings.append, "auto") == [0, 1, 2]


@pytest.mark.xdist_group("partitions-reference")  # under make test: ``reference`` built once
def test_an_up_to_date_rerun_removes_the_output_a_killed_run_retired_and_another_runs_parts(
    plain: Path, reference: Path, tmp_path: Path
) -> None:
    """kill -9 between the swap and the removal of what it replaced leaves the previous output (with the cache files
    ``datasets`` wrote beside it) in ``.out.packcli-resume``: a whole output's bytes, hidden. The rerun finds the
    output up to date and must remove it, under the lock; a live run's area it leaves. Another run's parts it
    removes too, saying so with their size: no resume area outlives a later run on the output."""
    out, area, lock = tmp_path / "out", tmp_path / ".out.packcli-resume", tmp_path / ".out.packcli-lock"
    shutil.copytree(reference, out)
    shutil.copytree(reference, area)  # the retired output, as the exchange left it
    (area / "cache-0123456789abcdef.arrow").write_bytes(b"derived")
    lock.write_text("4242\n")  # the dead run's lock file
    args = ["pack", str(plain), "--max-len", "512", "--partitions", "4", "--out", str(out), "--json"]

    holder = FileLock(lock)
    assert holder.acquire(wait=False)  # a live run holds the output: what is beside it is its own
    try:
        held = invoke(*args)
    finally:
        holder.release()
    assert held.exit_code == 0 and json.loads(held.stdout)["status"] == "up-to-date", held.output
    assert area.is_dir()

    rerun = invoke(*args)
    assert rerun.exit_code == 0 and json.loads(rerun.stdout)["status"] == "up-to-date", rerun.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert files_of(out) == files_of(reference)

    other = json.dumps({"fingerprint": "another run's", "partitions": 4})  # a killed run of other options
    (area / "part-00000").mkdir(parents=True)
    (area / "run.json").write_text(other)
    again = invoke(*args)
    assert again.exit_code == 0 and json.loads(again.stdout)["status"] == "up-to-date", again.output
    said = f"warning: removing {area} (1 file(s), {len(other):,} bytes): the parts of an unfinished run of other"
    assert said in again.stderr, again.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


def test_a_part_whose_manifest_was_edited_is_packed_again(tmp_path: Path) -> None:
    area, run = failed_partitioned_run(tmp_path)
    edited = area.part(1) / "manifest.json"
    manifest = json.loads(edited.read_text())
    manifest["totals"]["tokens"] += 5  # its shards unchanged: their sizes and sha256 still as listed
    edited.write_text(json.dumps(manifest))
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append) == [0, 2]
    assert len(warnings) == 1 and warnings[0] == (
        "partition 1 is packed again: it is damaged (manifest key 'totals.tokens': totals.tokens is "
        f"{manifest['totals']['tokens']}, the shards hold {manifest['totals']['tokens'] - 5})"
    )


def test_a_part_whose_manifest_cannot_be_read_is_packed_again_saying_so(tmp_path: Path) -> None:
    """A committed part whose manifest.json was cut short is packed again like any damaged part: with a warning
    naming the partition, not silently as if it had never been committed."""
    area, run = failed_partitioned_run(tmp_path)
    manifest = area.part(1) / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:100])
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append) == [0, 2]
    assert any(warning.startswith("partition 1 is packed again: its manifest") for warning in warnings), warnings


def test_a_part_whose_rows_were_edited_with_its_listing_is_packed_again(tmp_path: Path) -> None:
    """A part whose shard holds an id outside the vocabulary, its manifest's size and sha256 rewritten to match, is
    not reused: a rerun never publishes an output that verify rejects."""
    area, run = failed_partitioned_run(tmp_path)
    listing = json.loads((area.part(1) / "manifest.json").read_text())
    entry = listing["shards"][0]
    shard = area.part(1) / entry["file"]
    first = read_shard(shard).column("input_ids")[0].values.to_numpy()[:8].astype("<i4").tobytes()
    data = bytearray(shard.read_bytes())
    at = data.find(first)
    assert at >= 0
    data[at : at + 4] = (10**6).to_bytes(4, "little")  # beyond GPT-2's 50,257 ids
    shard.write_bytes(bytes(data))
    entry["sha256"], entry["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    (area.part(1) / "manifest.json").write_text(json.dumps(listing))
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append) == [0, 2]
    said = "partition 1 is packed again: it is damaged (part-00001-shard-00000.arrow: row 0 with an id outside"
    assert any(warning.startswith(said) for warning in warnings), warnings


def test_a_part_whose_shard_is_a_link_is_packed_again(tmp_path: Path) -> None:
    """A committed part whose shard was replaced by a symbolic link, even to an identical copy, is not reused: the
    merge would move the link into the output, which would then point outside itself."""
    area, run = failed_partitioned_run(tmp_path)
    shard = area.part(1) / str((area.read(1) or {})["shards"][0]["file"])
    copy = tmp_path / "elsewhere.arrow"
    shutil.copyfile(shard, copy)
    shard.unlink()
    shard.symlink_to(copy)
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append) == [0, 2]
    said = f"partition 1 is packed again: it is damaged ({shard.name}: a symbolic link, not a file packcli wrote)"
    assert said in warnings, warnings
    assert copy.is_file()


def test_a_part_numbered_otherwise_and_a_linked_directory_do_not_stop_a_resume(tmp_path: Path) -> None:
    area, run = failed_partitioned_run(tmp_path)
    renumbered = area.part(1) / "manifest.json"
    manifest = json.loads(renumbered.read_text())
    manifest["part"]["partition"] = 2
    renumbered.write_text(json.dumps(manifest))
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("not packcli's")
    (area.root / "linked").symlink_to(precious, target_is_directory=True)
    warnings: list[str] = []
    assert PartsArea(area.root).resume(run, 4, warnings.append) == [0, 2]
    assert any("removing 1 file(s)" in warning and "linked" in warning for warning in warnings), warnings
    assert "partition 1 is packed again: its manifest is for partition 2" in warnings
    assert not (area.root / "linked").is_symlink() and (precious / "keep.txt").is_file()


def test_a_partition_count_beyond_what_the_bytes_can_hold_is_refused_at_once(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS[:20]))
    result = invoke("pack", str(corpus), "--partitions", "99999999999", "--out", str(tmp_path / "out"), "--dry-run")
    assert result.exit_code == 2, result.output
    assert "partitions are more than these inputs can be cut into" in result.stderr
    assert "record(s); ask for fewer partitions" in result.stderr and error_line(result.stderr)


def test_a_partition_size_too_small_for_the_inputs_is_refused_naming_that_option(tmp_path: Path) -> None:
    """``--partition-size 1`` was refused as if the user had asked for a partition count: "ask for fewer
    partitions". The message names the size given and the count it made, and what to ask for instead."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS[:20]))
    size = corpus.stat().st_size
    result = invoke("pack", str(corpus), "--partition-size", "1", "--out", str(tmp_path / "out"), "--dry-run")
    assert result.exit_code == 2, result.output
    assert error_line(result.stderr).startswith(
        f"error: --partition-size 1 cuts these inputs' {size:,} bytes into {size:,} partitions, more than they can "
        "be cut into: their bytes hold at most"
    )
    # no size named: the bound counts records of 3 bytes, which the file's lines are not, so that size failed again
    assert error_line(result.stderr).endswith("record(s); ask for a larger --partition-size")
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(corpus.read_bytes()))  # one piece, whatever its size
    result = invoke("pack", str(packed), "--partition-size", "100B", "--out", str(tmp_path / "out"), "--dry-run")
    count = -(-packed.stat().st_size // 100)
    assert result.exit_code == 2, result.output
    assert error_line(result.stderr).startswith(
        f"error: --partition-size 100 cuts these inputs' {packed.stat().st_size:,} bytes into {count} partitions, "
        "more than they can be cut into: ask for a larger --partition-size, or --partitions 1, which they can"
    )


def test_a_count_many_times_the_lines_is_refused_without_a_cut_per_partition(tmp_path: Path) -> None:
    """Two lines of 4 MiB: their bytes could hold 2.8 million records, so 2.5 million partitions pass the first
    bound; the plan then scans once per line start, not once per partition (a scan per partition ran past the
    60 s limit here), and names a count that works."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "x" * (4 << 20)}, {"text": "y" * (4 << 20)}])
    script = (
        "import sys; from pathlib import Path; from packcli.run.plan import plan_partitions\n"
        "try:\n    plan_partitions([Path(sys.argv[1])], 2_500_000)\nexcept Exception as exc:\n    print(exc)"
    )
    done = subprocess.run([sys.executable, "-c", script, str(corpus)], capture_output=True, text=True, timeout=60)
    assert "ask for --partitions 2," in done.stdout, done.stdout + done.stderr


def test_partition_options_are_checked() -> None:
    with pytest.raises(UsageError, match="not both"):
        PackOptions(partitions=2, partition_size=10)
    with pytest.raises(UsageError, match="--engine ray runs partitions"):
        PackOptions(engine="ray")
    assert PackOptions(partitions=4, workers=3).output_relevant() == PackOptions().output_relevant()


def test_partition_size_sets_the_partition_count(plain: Path, tmp_path: Path) -> None:
    result = invoke(
        "pack", str(plain), "--partition-size", "700kB", "--max-len", "512", "--out", str(tmp_path / "o"), "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["partitions"] == -(-plain.stat().st_size // 700_000) > 1


@pytest.mark.parametrize(("signum", "delay"), [(signal.SIGTERM, 0.0), (signal.SIGTERM, 0.3), (signal.SIGHUP, 0.3)])
def test_a_signal_stops_the_partition_workers_too(tmp_path: Path, signum: int, delay: float) -> None:
    corpus = tmp_path / "big.jsonl"  # partitions that take seconds: the signal comes while workers start or work
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()) * 3)
    command = [sys.executable, "-m", "packcli", "pack", str(corpus), "--partitions", "2", "--workers", "2"]
    with subprocess.Popen(
        [*command, "--out", str(tmp_path / "out"), "--quiet"],
        preexec_fn=lambda: [signal.signal(number, signal.SIG_DFL) for number in (signal.SIGTERM, signal.SIGHUP)],
        stderr=subprocess.DEVNULL,
    ) as process:
        deadline = time.monotonic() + 120
        while len(descendants(process.pid)) < 3 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the resource tracker and two workers
        time.sleep(delay)
        workers = descendants(process.pid)
        assert process.poll() is None and len(workers) >= 3
        process.send_signal(signum)
        assert process.wait(timeout=120) == -signum
    assert not survivors(workers), "worker processes outlived the run"
    resumed = invoke("pack", str(corpus), "--partitions", "2", "--out", str(tmp_path / "out"))
    assert resumed.exit_code == 0, resumed.output
    assert verify_output(tmp_path / "out").ok


def test_a_bom_at_a_cut_is_a_bad_line_in_one_process_and_in_partitions(tmp_path: Path) -> None:
    """Only a file's first byte may carry a BOM: `cat a.jsonl b.jsonl` where b starts with one, cut right there."""
    line = json.dumps({"text": " ".join(TEXTS[0].split()[:20])}).encode() + b"\n"
    corpus = tmp_path / "cat.jsonl"
    corpus.write_bytes(line * 21 + b"\xef\xbb\xbf" + line * 19)
    assert [part[0].span for part in plan_partitions([corpus], 2).partitions][1][0] == 21 * len(line)
    outputs = []
    for extra in ([], ["--partitions", "2", "--workers", "1"]):
        failed = invoke("pack", str(corpus), "--max-len", "128", "--out", str(tmp_path / "f"), *extra)
        assert failed.exit_code == 1 and error_line(failed.stderr).startswith(f"error: {corpus}:22: "), failed.stderr
        assert "BOM" in failed.stderr
        out = tmp_path / f"skip{len(extra)}"
        skipped = invoke("pack", str(corpus), "--max-len", "128", "--skip-bad-records", "--out", str(out), *extra)
        assert skipped.exit_code == 0, skipped.output
        outputs.append(json.loads((out / "manifest.json").read_text())["totals"])
    assert [(t["input_documents"], t["bad_records"]) for t in outputs] == [(39, 1), (39, 1)]


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_chat_template_travels_with_the_jobs_not_as_the_drivers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import packcli.run.driver as driver

    chats = [
        {
            "messages": [
                {"role": "user", "content": TEXTS[k][:300]},
                {"role": "assistant", "content": TEXTS[k + 1][:600]},
            ]
        }
        for k in range(0, 40, 2)
    ]
    corpus = write_jsonl(tmp_path / "chat.jsonl", chats)
    template = tmp_path / "template.jinja"
    template.write_text(CHAT_TEMPLATE)
    args = [str(corpus), "--messages-field", "messages", "--chat-template", str(template), "--max-len", "512"]
    args += ["--partitions", "2", "--workers", "1"]
    present = invoke("pack", *args, "--out", str(tmp_path / "present"))
    assert present.exit_code == 0, present.output

    set_up = driver.set_up

    def set_up_then_remove_the_template(*given: object, **named: object) -> object:
        setup = set_up(*given, **named)  # type: ignore[arg-type]
        template.unlink()  # read by the driver; a worker on another node would not find it
        return setup

    monkeypatch.setattr(driver, "set_up", set_up_then_remove_the_template)
    removed = invoke("pack", *args, "--out", str(tmp_path / "removed"))
    assert removed.exit_code == 0, removed.output
    assert not template.exists()
    assert files_of(tmp_path / "removed") == files_of(tmp_path / "present")


@pytest.mark.xdist_group("partitions-reference")  # under make test: ``reference`` built once
def test_a_partitioned_run_without_position_ids_merges_the_same_rows_less_that_column(
    plain: Path, reference: Path, tmp_path: Path
) -> None:
    """``--no-position-ids`` with partitions: every part and the merge agree on the columns; the merged output holds
    the reference run's rows less ``position_ids``, and verifies."""
    out = tmp_path / "lean"
    args = ["--max-len", "512", "--partitions", "4", "--workers", "2", "--no-position-ids", "--out", str(out)]
    result = invoke("pack", str(plain), *args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["columns"] == ["input_ids", "cu_seqlens"] and verify_output(out).ok

    def rows_of(packed: Path) -> pa.Table:
        shards = json.loads((packed / "manifest.json").read_text())["shards"]
        return pa.concat_tables([read_shard(packed / shard["file"]) for shard in shards])

    assert rows_of(out).equals(rows_of(reference).drop_columns(["position_ids"]))


def test_one_partition_says_nothing_of_packing_partitions_apart(tmp_path: Path) -> None:
    """Rows of one document each (every document over half of max_len) sit far above the lower bound: with two
    partitions the run warns that packing them apart may cost that; with one there is nothing apart to blame."""
    corpus = write_jsonl(tmp_path / "wide.jsonl", [{"text": f"{k} " + "word " * 36} for k in range(8)])
    for partitions, warned in (("1", False), ("2", True)):
        out = tmp_path / f"out{partitions}"
        result = invoke("pack", str(corpus), "--max-len", "64", "--partitions", partitions, "--out", str(out))
        assert result.exit_code == 0, result.output
        assert ("partitions apart" in result.stderr) is warned, result.stderr
