"""The tokenization cache through the real CLI: concurrent `stats` runs, a run killed mid-way, the size bound with
least-recently-used eviction, and a cache directory that cannot be used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE, error_line, read_jsonl, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode import backends as backends_module
from packcli.encode.tokenizer import LoadedTokenizer

runner = CliRunner()


@pytest.fixture(scope="module")
def records() -> list[dict[str, str]]:
    return read_jsonl(SAMPLE)


def cache_dir() -> Path:
    return Path(os.environ["PACKCLI_CACHE"])  # a fresh one per test (conftest)


def entries() -> list[str]:
    return sorted(path.name for path in cache_dir().iterdir() if path.is_dir() and not path.name.startswith("."))


def temporaries() -> list[str]:
    return sorted(path.name for path in cache_dir().glob(".tmp-*"))


def stats(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "packcli", "stats", *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def counted(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    """Each fast backend that auto opens appends the tokenizer's name to ``opened``."""
    for name, opener in list(backends_module.FAST_BACKENDS.items()):

        def counting(loaded: LoadedTokenizer, markup: bool, opener: Any = opener) -> Any:
            opened.append(loaded.name)
            return opener(loaded, markup)

        monkeypatch.setitem(backends_module.FAST_BACKENDS, name, counting)


def test_two_stats_at_once_both_work_and_leave_one_entry(
    tmp_path: Path, records: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:150])
    runs = [stats(str(corpus), "--max-len", "512") for _ in range(2)]
    outcomes = [run.communicate() for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [stderr for _, stderr in outcomes]
    first, second = (json.loads(stdout) for stdout, _ in outcomes)
    assert first == second and first["tokens"] > 0
    assert len(entries()) == 1 and temporaries() == []
    taken: list[str] = []  # the fast backends the pack waits for
    counted(monkeypatch, taken)
    packed = runner.invoke(app, ["pack", str(corpus), "--max-len", "512", "--out", str(tmp_path / "o"), "--json"])
    assert packed.exit_code == 0 and json.loads(packed.stdout)["tokenized_from_cache"] is True
    assert taken == []  # the tokens came from the cache: no tokenizer runs, none is waited for
    assert entries() == []  # pack consumed it
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["tokenizer"]["backend"] == "gigatoken"


def test_a_killed_stats_leaves_a_temporary_that_the_next_update_removes(
    tmp_path: Path, records: list[dict[str, str]]
) -> None:
    copies = []
    for k in range(4):  # enough text that tokenizing takes seconds
        (tmp_path / f"copy{k}.jsonl.gz").write_bytes(SAMPLE.read_bytes())
        copies.append(str(tmp_path / f"copy{k}.jsonl.gz"))
    run = stats(*copies)
    for _ in range(1200):
        if (cache_dir().is_dir() and temporaries()) or run.poll() is not None:
            break
        time.sleep(0.05)
    assert run.poll() is None, run.communicate()
    run.kill()
    run.communicate()
    assert len(temporaries()) == 1
    small = write_jsonl(tmp_path / "small.jsonl", records[:20])
    assert runner.invoke(app, ["stats", str(small), "--json"]).exit_code == 0
    assert temporaries() == [] and len(entries()) == 1


def entry_size(name: str) -> int:
    return sum(path.stat().st_size for path in (cache_dir() / name).iterdir())


def test_the_size_bound_evicts_the_least_recently_used(
    tmp_path: Path, records: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # c holds b's records under another name: another entry of the same size.
    corpora = [write_jsonl(tmp_path / f"{name}.jsonl", records[k * 40 : (k + 1) * 40]) for k, name in enumerate("ab")]
    corpora.append(write_jsonl(tmp_path / "c.jsonl", records[40:80]))

    def run_stats(corpus: Path) -> str:
        result = runner.invoke(app, ["stats", str(corpus), "--json"])
        assert result.exit_code == 0, result.stderr
        return Path(json.loads(result.stdout)["tokenization_cache"]).name

    a, b = run_stats(corpora[0]), run_stats(corpora[1])
    assert entries() == sorted([a, b])
    time.sleep(0.01)
    assert run_stats(corpora[0]) == a  # a cache hit: `a` is now the most recently used
    # Room for two of the three entries: adding `c` evicts `b`, the least recently used.
    limit = entry_size(a) + entry_size(b) + 1000
    monkeypatch.setenv("PACKCLI_CACHE_MAX", str(limit))
    c = run_stats(corpora[2])
    assert entries() == sorted([a, c])
    assert entry_size(a) + entry_size(c) <= limit
    monkeypatch.setenv("PACKCLI_CACHE_MAX", "1")  # smaller than any entry: only the newest stays
    assert run_stats(corpora[1]) == b and entries() == [b]


def test_an_unusable_cache_is_one_line_naming_the_variable(
    tmp_path: Path, records: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:20])
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PACKCLI_CACHE", str(blocker / "cache"))
    result = runner.invoke(app, ["stats", str(corpus)])
    assert result.exit_code == 1
    assert error_line(result.stderr) and "PACKCLI_CACHE" in result.stderr and "[Errno" not in result.stderr
    packed = runner.invoke(app, ["pack", str(corpus), "--out", str(tmp_path / "o"), "--quiet"])
    assert packed.exit_code == 0, packed.stderr  # pack needs no cache
    monkeypatch.setenv("PACKCLI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PACKCLI_CACHE_MAX", "lots")
    result = runner.invoke(app, ["stats", str(corpus)])
    assert result.exit_code == 2 and "PACKCLI_CACHE_MAX" in result.stderr


def backend_of(out: Path) -> str:
    return str(json.loads((out / "manifest.json").read_text())["tokenizer"]["backend"])


def test_an_explicit_hf_takes_only_hugging_faces_tokens_from_the_cache(
    tmp_path: Path, records: list[dict[str, str]]
) -> None:
    """`stats` with the default backend leaves gigatoken's tokens: `pack --tokenizer-backend hf` tokenizes again with
    Hugging Face (the manifest says so, and the shards are the same). `stats --tokenizer-backend hf` puts Hugging
    Face's tokens in place of gigatoken's, which both backends then take."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:60])
    assert runner.invoke(app, ["stats", str(corpus), "--max-len", "512", "--json"]).exit_code == 0
    packed = {}
    for backend in ("hf", "auto"):
        out = tmp_path / backend
        args = ["pack", str(corpus), "--max-len", "512", "--out", str(out), "--tokenizer-backend", backend, "--json"]
        packed[backend] = runner.invoke(app, args)
        assert packed[backend].exit_code == 0, packed[backend].stderr
    assert [json.loads(packed[b].stdout)["tokenized_from_cache"] for b in ("hf", "auto")] == [False, True]
    assert [backend_of(tmp_path / b) for b in ("hf", "auto")] == ["hf", "gigatoken"]
    shards = sorted(path.name for path in (tmp_path / "hf").glob("shard-*.arrow"))
    assert shards and all((tmp_path / "hf" / f).read_bytes() == (tmp_path / "auto" / f).read_bytes() for f in shards)
    assert entries() == []  # the auto pack consumed gigatoken's entry
    for backend in ("auto", "hf"):  # Hugging Face's tokens replace gigatoken'
        stats = runner.invoke(app, ["stats", str(corpus), "--max-len", "512", "--tokenizer-backend", backend])
        assert stats.exit_code == 0, stats.stderr
    assert len(entries()) == 1
    again = ["pack", str(corpus), "--max-len", "512", "--out", str(tmp_path / "again"), "--tokenizer-backend", "hf"]
    result = runner.invoke(app, [*again, "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["tokenized_from_cache"] is True
    assert backend_of(tmp_path / "again") == "hf"


@pytest.mark.parametrize("requested", ["auto", "hf"])
def test_an_entry_fastokens_encoded_is_taken_by_auto_after_the_default_changed(
    tmp_path: Path, records: list[dict[str, str]], requested: str
) -> None:
    """An entry that an earlier packcli left, encoded by fastokens (then the default): the cache is keyed by the
    tokenizer's identity, not by the backend, so auto takes it (the tokens are Hugging Face's whatever the fast
    backend), and the manifest names the backend that encoded them; an explicit hf tokenizes again."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:40])
    assert runner.invoke(app, ["stats", str(corpus), "--max-len", "512"]).exit_code == 0
    (entry,) = entries()
    recorded = cache_dir() / entry / "backend.json"
    assert json.loads(recorded.read_text())["backend"] == "gigatoken"
    recorded.write_text(json.dumps({"backend": "fastokens", "backend_version": "0.3.5"}, sort_keys=True))
    args = ["pack", str(corpus), "--max-len", "512", "--tokenizer-backend", requested, "--json"]
    packed = runner.invoke(app, [*args, "--out", str(tmp_path / "from-cache")])
    assert packed.exit_code == 0, packed.stderr
    assert json.loads(packed.stdout)["tokenized_from_cache"] is (requested == "auto")
    assert backend_of(tmp_path / "from-cache") == ("fastokens" if requested == "auto" else "hf")
    fresh = runner.invoke(app, [*args, "--out", str(tmp_path / "fresh")])
    assert fresh.exit_code == 0 and json.loads(fresh.stdout)["tokenized_from_cache"] is False
    shards = sorted(path.name for path in (tmp_path / "fresh").glob("shard-*"))
    assert shards == sorted(path.name for path in (tmp_path / "from-cache").glob("shard-*")) and shards
    assert all((tmp_path / "fresh" / f).read_bytes() == (tmp_path / "from-cache" / f).read_bytes() for f in shards)


def test_a_stats_served_from_the_cache_builds_no_fast_backend(
    tmp_path: Path, records: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second `stats` of a corpus (another --max-len, the documented workflow) takes its tokens from the cache:
    it waits for no build of the fast backend's tokenizer (Tekken: about 2 CPU s), as `pack` from the cache does."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:40])
    built: list[str] = []
    counted(monkeypatch, built)
    for max_len in ("512", "1024"):
        result = runner.invoke(app, ["stats", str(corpus), "--max-len", max_len, "--json"])
        assert result.exit_code == 0, result.stderr
    assert len(built) == 1 and len(entries()) == 1


def test_an_entry_written_before_records_were_numbered_is_replaced_not_served(
    tmp_path: Path, records: list[dict[str, str]]
) -> None:
    """An entry of a packcli that kept no record numbers (no ``records.npy``) cannot give a source index: the next
    stats replaces it (it used to stay, and saving over it failed), and the pack after it uses the new one."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:40])
    first = stats(str(corpus), "--max-len", "512")
    first.communicate()
    assert first.returncode == 0
    (entry,) = entries()
    (cache_dir() / entry / "records.npy").unlink()
    again = stats(str(corpus), "--max-len", "512")
    _, stderr = again.communicate()
    assert again.returncode == 0, stderr
    assert (cache_dir() / entry / "records.npy").is_file()
    packed = runner.invoke(app, ["pack", str(corpus), "--max-len", "512", "--out", str(tmp_path / "o"), "--json"])
    assert packed.exit_code == 0 and json.loads(packed.stdout)["tokenized_from_cache"] is True
    assert runner.invoke(app, ["show", str(tmp_path / "o"), "--source", "corpus.jsonl:40"]).exit_code == 0


def test_an_entry_that_counted_other_things_is_replaced_not_served(
    tmp_path: Path, records: list[dict[str, str]]
) -> None:
    """An entry whose counts lack one this packcli keeps (``records_with_tools`` came later) would give a manifest a
    made-up 0: the next stats tokenizes again and replaces it, and the pack after it uses the new one."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records[:40])
    assert runner.invoke(app, ["stats", str(corpus), "--max-len", "512", "--json"]).exit_code == 0
    (entry,) = entries()
    counts_file = cache_dir() / entry / "counts.json"
    counts = json.loads(counts_file.read_text())
    del counts["records_with_tools"]
    counts_file.write_text(json.dumps(counts))
    assert runner.invoke(app, ["stats", str(corpus), "--max-len", "512", "--json"]).exit_code == 0
    assert "records_with_tools" in json.loads(counts_file.read_text())
    packed = runner.invoke(app, ["pack", str(corpus), "--max-len", "512", "--out", str(tmp_path / "o"), "--json"])
    assert packed.exit_code == 0 and json.loads(packed.stdout)["tokenized_from_cache"] is True
