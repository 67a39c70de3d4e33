"""The output contract as properties of whole runs: random pre-tokenized corpora (``--ids-field``, no tokenizer, so
each example packs in milliseconds) under random options, packed in-process through the CLI, read back with pyarrow
alone, and checked against what docs/format.md and docs/cli.md promise: every token kept or counted, rows within
max_len, position_ids restarting at every cu_seqlens entry, labels -100 at every document start, mixing quotas met
within a document, and ``verify`` passing."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import error_line, output_rows, write_jsonl
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()
IGNORE = -100
EOS = 999_999  # outside every source's id range: a token names its source (id // SOURCE_IDS)
SOURCE_IDS = 1000

Piece = tuple[tuple[int, ...], tuple[int, ...] | None]  # (ids, labels or None)


@dataclass(frozen=True)
class Run:
    """One random pack: per source its records (ids, labels or None) and file format, and the options."""

    sources: list[list[tuple[list[int], list[int] | None]]]
    formats: list[str]
    labelled: bool
    max_len: int
    overflow: str
    strategy: str
    window: int | None
    shuffle: bool
    shard_size: str
    eos: bool
    seed: int
    weights: list[float] | None
    target_tokens: int | None

    def documents(self, source: int) -> list[tuple[list[int], list[int] | None]]:
        """The source's documents as packcli sees them: EOS appended (its label is the EOS where the document's
        last token takes loss), empty records left out: those of no token, or no label after the first (always
        -100)."""
        out = []
        for ids, labels in self.sources[source]:
            if not ids:
                continue
            if self.eos:
                labels = None if labels is None else [*labels, EOS if labels[-1] != IGNORE else IGNORE]
                ids = [*ids, EOS]
            if labels is None or any(label != IGNORE for label in labels[1:]):
                out.append((ids, labels))
        return out

    def pieces(self, ids: list[int], labels: list[int] | None) -> list[Piece]:
        """A document after --overflow, each piece with -100 at its first label."""
        m = self.max_len
        if len(ids) <= m:
            cuts = [(0, len(ids))]
        elif self.overflow == "split":
            cuts = [(a, min(a + m, len(ids))) for a in range(0, len(ids), m)]
        elif self.overflow == "truncate":
            cuts = [(0, m)]
        else:
            cuts = []
        return [(tuple(ids[a:b]), None if labels is None else (IGNORE, *labels[a + 1 : b])) for a, b in cuts]

    def drawn_length(self, ids: list[int]) -> int:
        """The tokens a document puts into the output after --overflow (what mixing draws by)."""
        if len(ids) <= self.max_len or self.overflow == "split":
            return len(ids)
        return self.max_len if self.overflow == "truncate" else 0


@st.composite
def runs(draw: st.DrawFn) -> Run:
    labelled = draw(st.booleans())
    count = draw(st.integers(1, 3))
    sources = []
    for source in range(count):
        records = []
        for _ in range(draw(st.integers(1, 8))):
            ids = draw(st.lists(st.integers(source * SOURCE_IDS, (source + 1) * SOURCE_IDS - 1), max_size=30))
            labels = None
            if labelled:
                supervised = draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
                labels = [token if keep else IGNORE for token, keep in zip(ids, supervised)]
            records.append((ids, labels))
        sources.append(records)
    weights = None
    if draw(st.booleans()):
        weights = draw(st.lists(st.sampled_from([0.0, 1e-9, 0.5, 1.0, 3.0, 1e9]), min_size=count, max_size=count))
        if not any(weights):
            weights[0] = 1.0
    return Run(
        sources=sources,
        formats=draw(st.lists(st.sampled_from(["jsonl", "jsonl.gz", "parquet"]), min_size=count, max_size=count)),
        labelled=labelled,
        max_len=draw(st.integers(1, 24)),
        overflow=draw(st.sampled_from(["split", "truncate", "drop"])),
        strategy=draw(st.sampled_from(["bfd", "ffd", "greedy"])),
        window=draw(st.none() | st.integers(1, 5)),
        shuffle=draw(st.booleans()),
        shard_size=draw(st.sampled_from(["100", "2000", "512MiB"])),
        eos=draw(st.booleans()),
        seed=draw(st.integers(0, 3)),
        weights=weights,
        target_tokens=draw(st.none() | st.integers(1, 300)) if weights is not None else None,
    )


def write_source(directory: Path, index: int, run: Run) -> Path:
    records = [{"ids": ids, **({"labels": labels} if labels is not None else {})} for ids, labels in run.sources[index]]
    fmt = run.formats[index]
    path = directory / f"source{index}.{fmt}"
    if fmt == "parquet":
        columns = {"ids": pa.array([r["ids"] for r in records], type=pa.list_(pa.int64()))}
        if run.labelled:
            columns["labels"] = pa.array([r["labels"] for r in records], type=pa.list_(pa.int64()))
        pq.write_table(pa.table(columns), path)
        return path
    return write_jsonl(path, records, compress=fmt.endswith(".gz"))


def arguments(run: Run, inputs: list[Path], out: Path) -> list[str]:
    args = ["pack", *map(str, inputs), "--ids-field", "ids", "--max-len", str(run.max_len)]
    args += ["--overflow", run.overflow, "--strategy", run.strategy, "--shard-size", run.shard_size]
    args += ["--seed", str(run.seed), "--out", str(out), "--json", "--quiet"]
    args += ["--labels-field", "labels"] if run.labelled else []
    args += ["--eos-id", str(EOS)] if run.eos else []
    args += ["--window", str(run.window)] if run.window else []
    args += [] if run.shuffle else ["--no-shuffle"]
    if run.weights is not None:
        args += ["--weights", ",".join(f"{weight:g}" for weight in run.weights)]
    if run.target_tokens is not None:
        args += ["--target-tokens", str(run.target_tokens)]
    return args


def quotas(run: Run, totals: list[int]) -> list[int]:
    """Each source's token quota as docs/cli.md states it (Mixing sources)."""
    assert run.weights is not None
    weights = run.weights
    if run.target_tokens is not None:
        return [round(weight * run.target_tokens / sum(weights)) for weight in weights]
    limit = min((k for k, weight in enumerate(weights) if weight > 0), key=lambda k: totals[k] / weights[k])
    return [
        totals[limit] if k == limit else round(totals[limit] * weight / weights[limit])
        for k, weight in enumerate(weights)
    ]


def check_rows(out: Path, run: Run) -> list[Piece]:
    """The format invariants of every row; returns the documents (pieces) in row order."""
    pieces: list[Piece] = []
    for row in output_rows(out):
        ids, positions, cu = row["input_ids"], row["position_ids"], row["cu_seqlens"]
        labels = row.get("labels")
        assert ("labels" in row) == run.labelled
        assert 1 <= len(ids) <= run.max_len and len(positions) == len(ids)
        assert cu[0] == 0 and cu[-1] == len(ids) and all(a < b for a, b in zip(cu, cu[1:]))
        for a, b in zip(cu, cu[1:]):
            assert positions[a:b] == list(range(b - a))
            if labels is not None:
                assert labels[a] == IGNORE  # no document is trained to follow the one before it
            pieces.append((tuple(ids[a:b]), None if labels is None else tuple(labels[a:b])))
    return pieces


def check_totals(totals: dict[str, int], pieces: list[Piece], run: Run) -> None:
    assert totals["input_tokens"] == totals["tokens"] + totals["truncated_tokens"] + totals["dropped_tokens"]
    assert totals["documents"] == len(pieces) and totals["tokens"] == sum(len(ids) for ids, _ in pieces)
    assert totals["bad_records"] == 0
    if run.labelled:
        supervised = [sum(label != IGNORE for label in labels or ()) for _, labels in pieces]
        assert totals["supervised_tokens"] == sum(supervised)
    else:
        assert "supervised_tokens" not in totals


def check_plain(run: Run, result_code: int, stderr: str, out: Path) -> None:
    """No mixing: the output holds exactly the input's documents after --overflow, each counted."""
    documents = [document for source in range(len(run.sources)) for document in run.documents(source)]
    expected = [piece for ids, labels in documents for piece in run.pieces(ids, labels)]
    if not expected:
        why = f"every document is longer than --max-len {run.max_len}" if documents else "no documents"
        assert result_code == 1 and error_line(stderr) and why in stderr, stderr
        assert error_line(stderr) and not out.exists()
        return
    assert result_code == 0, stderr
    pieces = check_rows(out, run)
    assert Counter(pieces) == Counter(expected)
    if run.strategy == "greedy" and not run.shuffle:
        assert pieces == expected  # greedy in packing order keeps the input order end to end
    totals = json.loads((out / "manifest.json").read_text())["totals"]
    check_totals(totals, pieces, run)
    too_long = [len(ids) - run.max_len for ids, _ in documents if len(ids) > run.max_len]
    assert totals["input_documents"] == len(documents)
    assert totals["input_tokens"] == sum(len(ids) for ids, _ in documents)
    assert totals["empty_documents"] == sum(map(len, run.sources)) - len(documents)
    assert totals["split_documents"] == (len(too_long) if run.overflow == "split" else 0)
    assert totals["truncated_documents"] == (len(too_long) if run.overflow == "truncate" else 0)
    assert totals["truncated_tokens"] == (sum(too_long) if run.overflow == "truncate" else 0)
    assert totals["dropped_documents"] == (len(too_long) if run.overflow == "drop" else 0)


def check_mixed(run: Run, result_code: int, stderr: str, out: Path) -> None:
    """Mixing: every output document is one of its source's, and each source meets its quota within one of its
    documents without going over (the limiting source, without a budget, exactly)."""
    assert run.weights is not None
    lengths = [[run.drawn_length(ids) for ids, _ in run.documents(k)] for k in range(len(run.sources))]
    totals_by_source = [sum(source) for source in lengths]
    usable = [w == 0 or total > 0 for w, total in zip(run.weights, totals_by_source)]
    if not all(usable):
        assert result_code == 1 and error_line(stderr), stderr
        return
    quota = quotas(run, totals_by_source)
    if all(w == 0 or q < min(n for n in source if n) for w, q, source in zip(run.weights, quota, lengths)):
        # nothing drawn, or what was drawn is longer than max_len and dropped: one line saying which
        why = ("no documents", "every document is longer than")
        assert result_code == 1 and any(words in stderr for words in why) and error_line(stderr), stderr
        return
    assert result_code == 0, stderr
    pieces = check_rows(out, run)
    allowed = {piece for k in range(len(run.sources)) for doc in run.documents(k) for piece in run.pieces(*doc)}
    assert set(pieces) <= allowed
    manifest = json.loads((out / "manifest.json").read_text())
    check_totals(manifest["totals"], pieces, run)
    sources = manifest["sources"]
    assert sum(source["output_tokens"] for source in sources) == manifest["totals"]["tokens"]
    assert sum(source["output_documents"] for source in sources) == manifest["totals"]["documents"]
    named: Counter[int | None] = Counter()  # tokens per source; None: a split's last piece holding the EOS alone
    for ids, _ in pieces:
        named[next((token // SOURCE_IDS for token in ids if token != EOS), None)] += len(ids)
    for k, (weight, q, source) in enumerate(zip(run.weights, quota, sources)):
        tokens = source["output_tokens"]
        assert named[k] <= tokens <= named[k] + named[None]
        if weight == 0:
            assert tokens == 0
        else:
            assert 0 <= q - tokens < max(lengths[k]) or tokens == q


@given(run=runs())
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_pack_keeps_or_counts_every_token_and_keeps_the_format(run: Run) -> None:
    directory = Path(tempfile.mkdtemp(prefix="packcli-contract-"))  # fresh per example: a replay may reuse names
    try:
        inputs = [write_source(directory, k, run) for k in range(len(run.sources))]
        out = directory / "out"
        result = runner.invoke(app, arguments(run, inputs, out))
        event(f"{'mixed' if run.weights else 'plain'} exit {result.exit_code}")
        if run.weights is None:
            check_plain(run, result.exit_code, result.stderr, out)
        else:
            check_mixed(run, result.exit_code, result.stderr, out)
        if result.exit_code == 0:
            verified = runner.invoke(app, ["verify", str(out), "--json"])
            assert verified.exit_code == 0, verified.stdout
    finally:
        shutil.rmtree(directory)


@st.composite
def line_files(draw: st.DrawFn) -> list[list[list[int]]]:
    """1 to 3 files of 6 to 30 records each, token ids of random counts (so lines of random lengths, a few of them
    long), some records empty but not all."""
    files = []
    for _ in range(draw(st.integers(1, 3))):
        longest = draw(st.sampled_from([5, 40, 400]))
        files.append(draw(st.lists(st.lists(st.integers(0, 50_000), max_size=longest), min_size=6, max_size=30)))
    if not any(ids for records in files for ids in records):
        files[0][0] = [1]
    return files


def documents_of(out: Path) -> Counter[tuple[int, ...]]:
    """Every packed document (piece) of an output, as token tuples cut at cu_seqlens."""
    return Counter(
        tuple(row["input_ids"][a:b])
        for row in output_rows(out)
        for a, b in zip(row["cu_seqlens"], row["cu_seqlens"][1:])
    )


@given(files=line_files(), partitions=st.integers(1, 4), blank=st.booleans(), max_len=st.integers(8, 300))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_partitioned_run_packs_the_documents_of_one_process(
    files: list[list[list[int]]], partitions: int, blank: bool, max_len: int
) -> None:
    """Partitions cut plain JSON Lines at line starts, by bytes: a BOM before the first file's first line, CRLF line
    ends, blank lines and lines of very different lengths must neither lose, repeat nor cut a record."""
    directory = Path(tempfile.mkdtemp(prefix="packcli-partitions-"))
    try:
        inputs = []
        for k, records in enumerate(files):
            lines = [
                json.dumps({"ids": ids, "n": n}) + "\r\n" + ("\r\n" if blank and n % 3 == 0 else "")
                for n, ids in enumerate(records)
            ]
            path = directory / f"part{k}.jsonl"
            path.write_bytes(("\ufeff" if k == 0 else "").encode() + "".join(lines).encode())
            inputs.append(str(path))
        common = [*inputs, "--ids-field", "ids", "--eos-id", str(EOS), "--max-len", str(max_len), "--json", "--quiet"]
        single = runner.invoke(app, ["pack", *common, "--out", str(directory / "single")])
        assert single.exit_code == 0, single.stderr
        parted = runner.invoke(
            app,
            ["pack", *common, "--partitions", str(partitions), "--workers", "1", "--out", str(directory / "parted")],
        )
        refused = parted.exit_code == 2 and "more than these inputs can be cut into" in parted.stderr
        event("refused: too few lines" if refused else f"{partitions} partitions")
        if refused:
            return  # too few lines for so many partitions: refused in one line, before any output (tested elsewhere)
        assert parted.exit_code == 0, parted.stderr
        expected: Counter[tuple[int, ...]] = Counter()
        for records in files:
            for ids in records:
                document = [*ids, EOS] if ids else []
                expected.update(tuple(document[a : a + max_len]) for a in range(0, len(document), max_len))
        assert documents_of(directory / "parted") == documents_of(directory / "single") == expected
        totals = [json.loads(result.stdout) for result in (single, parted)]
        for key in ("input_documents", "input_tokens", "documents", "tokens", "split_documents", "empty_documents"):
            assert totals[0][key] == totals[1][key], key
        assert totals[1]["partitions"] == partitions
        assert runner.invoke(app, ["verify", str(directory / "parted")]).exit_code == 0
    finally:
        shutil.rmtree(directory)


def shard_bytes(out: Path) -> list[bytes]:
    return [(out / shard["file"]).read_bytes() for shard in json.loads((out / "manifest.json").read_text())["shards"]]


@given(run=runs(), other_seed=st.integers(4, 2**70))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_same_run_gives_the_same_bytes_and_another_seed_the_same_documents(run: Run, other_seed: int) -> None:
    """Every strategy, overflow policy, window and mixing: the same inputs and options twice give byte-identical
    shards and the same manifest totals and sources; another seed (a huge one too), unmixed, the same documents as a
    multiset, in the same rows."""
    directory = Path(tempfile.mkdtemp(prefix="packcli-determinism-"))
    try:
        inputs = [write_source(directory, k, run) for k in range(len(run.sources))]
        results = [runner.invoke(app, arguments(run, inputs, directory / name)) for name in ("a", "b")]
        assert results[0].exit_code == results[1].exit_code and results[0].stderr == results[1].stderr
        event(f"exit {results[0].exit_code}")
        if results[0].exit_code != 0:
            return
        assert shard_bytes(directory / "a") == shard_bytes(directory / "b")
        manifests = [json.loads((directory / name / "manifest.json").read_text()) for name in ("a", "b")]
        for key in ("fingerprint", "totals", "sources", "shards"):
            assert manifests[0].get(key) == manifests[1].get(key), key
        if run.weights is None:
            reseeded = Run(**{**run.__dict__, "seed": other_seed})
            other = runner.invoke(app, arguments(reseeded, inputs, directory / "c"))
            assert other.exit_code == 0, other.stderr
            rows = [Counter(tuple(row["input_ids"]) for row in output_rows(directory / name)) for name in ("a", "c")]
            assert rows[0] == rows[1]
    finally:
        shutil.rmtree(directory)
