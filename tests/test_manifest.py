"""manifest.json: written atomically, read with a version check and validated once, so that `verify`, `stats` and
the loader answer a damaged manifest with one line naming the key; shard names kept inside the output."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE, error_line, read_jsonl, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import PackcliError
from packcli.format.columns import FORMAT_VERSION
from packcli.format.manifest import (
    SHARD,
    TOKENIZER,
    TOP,
    TOTALS,
    output_manifest,
    part_facts,
    part_manifest,
    read_manifest,
    run_keys,
    shard_path,
    tokenizer_entry,
    validate_manifest,
    write_manifest,
)
from packcli.options import PackOptions
from packcli.run.driver import pack_corpus
from packcli.util.files import canonical_json

runner = CliRunner()


@pytest.fixture(scope="module")
def sft_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small fine-tuning output of chats: its manifest has every key a manifest can have (labels included)."""
    tmp = tmp_path_factory.mktemp("manifest")
    records = [
        {
            "messages": [
                {"role": "user", "content": r["text"][:300]},
                {"role": "assistant", "content": r["text"][300:900]},
            ]
        }
        for r in read_jsonl(SAMPLE)[:30]
    ]
    corpus = write_jsonl(tmp / "sft.jsonl", records)
    options = PackOptions(max_len=256, messages_field="messages", overflow="truncate", tools_field="functions")  # type: ignore[arg-type]
    pack_corpus([str(corpus)], options, tmp / "out")
    return tmp / "out"


def test_write_then_read_is_canonical_and_leaves_no_temporary(sft_output: Path, tmp_path: Path) -> None:
    manifest = json.loads((sft_output / "manifest.json").read_text())
    write_manifest(tmp_path, manifest)
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    assert (tmp_path / "manifest.json").read_text() == canonical_json(manifest)
    assert list(json.loads(canonical_json({"b": 1, "a": 2}))) == ["a", "b"]  # sorted keys
    assert read_manifest(tmp_path) == manifest


def test_an_output_manifest_is_built_from_its_parts_as_the_readers_check_it(tmp_path: Path) -> None:
    """format/ builds a part's and an output's manifest from plain values: each passes the key tables, the output's
    sums its parts' totals, lists their shards in partition order and names every backend that encoded; the
    ``part`` block's tokenizer leaves out the name (the path as spelled), a pre-tokenized run's names its EOS."""
    described = {"name": "gpt2", "sha256": "s", "config_sha256": None, "vocab_size": 50257, "eos_id": 0, "bos_id": None}
    options = PackOptions(max_len=8).output_relevant()
    partitions = {"count": 2, "plan_hash": "p"}
    run = run_keys("f", options, tokenizer_entry(described, True, None, None), False, True, partitions)
    facts = part_facts(run, "p", 2, options)
    zero = dict.fromkeys(("dropped_documents", "truncated_tokens", "split_documents", "bad_records"), 0)

    def part(k: int, backend: str) -> dict[str, Any]:
        shard = {"file": f"part-0000{k}-shard-00000.arrow", "rows": 1, "tokens": 3 + k, "bytes": 9, "sha256": "x"}
        totals = {"documents": 1, "tokens": 3 + k, "sequences": 1, **zero}
        built = part_manifest(run, {**facts, "partition": k}, {"backend": backend}, totals, [shard], None)
        validate_manifest(built, tmp_path / f"part-{k}")
        return built

    parts = [part(0, "hf"), part(1, "fastokens")]
    assert parts[0]["part"]["tokenizer"] == {key: value for key, value in run["tokenizer"].items() if key != "name"}
    write_manifest(tmp_path, output_manifest(run, [("a.jsonl", 5)], parts, 2))
    manifest = read_manifest(tmp_path)
    assert manifest["totals"] == {"documents": 2, "tokens": 7, "sequences": 2, **zero, "unread_files": 2}
    assert [shard["file"] for shard in manifest["shards"]] == [
        shard["file"] for part in parts for shard in part["shards"]
    ]
    assert manifest["tokenizer"]["backend"] == "fastokens+hf" and manifest["tokenizer"]["ran"] is True
    assert manifest["inputs"] == [{"path": "a.jsonl", "bytes": 5}] and manifest["partitions"] == partitions
    assert manifest["columns"] == ["input_ids", "position_ids", "cu_seqlens"] and "part" not in manifest
    unknown = dict.fromkeys(("name", "sha256", "config_sha256", "vocab_size"))
    assert tokenizer_entry(None, False, 2, None) == {**unknown, "eos_id": 2, "bos_id": None, "ran": False}


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "no manifest.json: not a packcli output"),
        ("{broken", "unreadable manifest"),
        (json.dumps({"packcli_version": "9.0.0", "format_version": FORMAT_VERSION + 1}), "format version 2 is not "),
        (json.dumps({"packcli_version": "0.4.0"}), "format version None is not supported"),
        (json.dumps({"packcli_version": "0.4.0", "format_version": True}), "format version True is not supported"),
        # JSON naming no packcli_version is another tool's, shards beside it or not ({} said "format version None")
        ("[1]", "is not a packcli output: its manifest.json names no packcli_version"),
        (json.dumps({}), "is not a packcli output: its manifest.json names no packcli_version"),
    ],
)
def test_unreadable_manifests_are_refused(tmp_path: Path, content: str | None, message: str) -> None:
    """A damaged output: its shards beside a manifest that cannot be read (JSON that names no packcli_version is
    another tool's, not packcli's damaged one, with shards beside it or not: tests/test_sources.py)."""
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
        (tmp_path / "shard-00000.arrow").write_bytes(b"")
    with pytest.raises(PackcliError, match=message):
        read_manifest(tmp_path)


@pytest.mark.parametrize("name", ["../x.arrow", "/etc/passwd", "sub/shard.arrow", "..", "", 7])
def test_shard_paths_stay_inside_the_output(tmp_path: Path, name: object) -> None:
    with pytest.raises(PackcliError, match="leaves the output directory"):
        shard_path(tmp_path, name)
    assert shard_path(tmp_path, "shard-00000.arrow") == tmp_path / "shard-00000.arrow"


def key_paths(manifest: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every key the validator knows, as found in a real manifest: top level, tokenizer, totals, first shard."""
    paths: list[tuple[str, ...]] = [(key,) for key in TOP]
    paths += [("tokenizer", key) for key in TOKENIZER]
    paths += [("totals", key) for key in TOTALS]
    paths += [("shards", "0", key) for key in SHARD]
    assert all(path[-1] in _find(manifest, path[:-1]) for path in paths)  # the fixture has every key
    return paths


def _find(manifest: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = manifest
    for step in path:
        node = node[int(step)] if isinstance(node, list) else node[step]
    return node  # type: ignore[no-any-return]


def _required(path: tuple[str, ...]) -> bool:
    block = {(): TOP, ("tokenizer",): TOKENIZER, ("totals",): TOTALS, ("shards", "0"): SHARD}[path[:-1]]
    return block[path[-1]][1]


def _loader_error(out: Path) -> str | None:
    """The one-line error of the loader on ``out``, or None when it loads and yields a row."""
    from packcli.torch import PackedDataset

    try:
        next(iter(PackedDataset(out, shuffle=False)))
    except PackcliError as exc:
        return str(exc)
    return None


def test_every_key_removed_in_turn_is_named_by_verify_stats_and_the_loader(sft_output: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    manifest = json.loads((sft_output / "manifest.json").read_text())
    for path in key_paths(manifest):
        if path == ("packcli_version",):  # without it, another tool's manifest: tests/test_sources.py
            continue
        damaged = copy.deepcopy(manifest)
        del _find(damaged, path[:-1])[path[-1]]
        out = tmp_path / "-".join(path)
        shutil.copytree(sft_output, out)
        (out / "manifest.json").write_text(json.dumps(damaged))
        name = ".".join(path).replace(".0.", "[0].")
        for command in (["verify", str(out)], ["stats", str(out), "--json"]):
            result = runner.invoke(app, command)
            assert "unexpected" not in result.stderr and "Traceback" not in result.stderr, (name, result.stderr)
            if _required(path):
                assert result.exit_code == 1 and f"manifest key '{name}' is missing" in result.stderr, (name, command)
                assert error_line(result.stderr), result.stderr  # one line
            elif name == "tokenizer.eos_id" and command[0] == "verify":  # readers need no EOS id; verify's checks do
                assert result.exit_code == 1 and "tokenizer.eos_id is null or missing" in result.stderr, result.stderr
            else:
                assert result.exit_code == 0, (name, command, result.stderr)
        error = _loader_error(out)
        assert (error is not None and f"'{name}' is missing" in error) if _required(path) else error is None, name


@pytest.mark.parametrize(
    "path,value,expected",
    [
        (("max_len",), "256", 'must be an integer >= 1 (below 2**63), not "256"'),
        (("max_len",), 0, "must be an integer >= 1"),
        (("totals", "tokens"), -1, "'totals.tokens' must be an integer >= 0"),
        (("totals", "documents"), 1.5, "'totals.documents' must be an integer >= 0"),
        (("totals",), [], "'totals' must be an object"),
        (("shards",), {}, "'shards' must be a list"),
        (("shards", "0"), 3, "'shards[0]' must be an object"),
        (("shards", "0", "rows"), True, "'shards[0].rows' must be an integer >= 0"),
        (("tokenizer", "vocab_size"), "50257", "'tokenizer.vocab_size' must be an integer >= 1 or null"),
        (("tokenizer", "eos_id"), -5, "'tokenizer.eos_id' must be a token id or null"),
        (("columns",), ["input_ids", 3], "'columns' must be a list of strings"),
        (("options",), None, "'options' must be an object"),
        # each passed verify, stats, show and export (show crashed on the count: an OverflowError)
        (("shards", "0", "rows"), 2**70, "'shards[0].rows' must be an integer >= 0 (below 2**63)"),
        (("options", "overflow"), "explode", '\'options.overflow\' must be "split", "truncate" or "drop"'),
        (("options", "eos"), "yes", "'options.eos' must be true or false"),
        (("options", "seed"), "x", "'options.seed' must be an integer"),
        (("partitions",), "junk", "'partitions' must be an object"),
        (("partitions",), {"count": "3", "plan_hash": "ab"}, "'partitions.count' must be an integer >= 1"),
        (("partitions",), {"count": 3}, "'partitions.plan_hash' is missing"),
    ],
)
def test_wrong_types_are_named(
    sft_output: Path, tmp_path: Path, path: tuple[str, ...], value: object, expected: str
) -> None:
    manifest = json.loads((sft_output / "manifest.json").read_text())
    node: Any = _find(manifest, path[:-1])
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PackcliError, match="manifest key") as raised:
        read_manifest(tmp_path)
    assert expected in str(raised.value)
