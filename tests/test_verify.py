"""verify: an intact output passes; each kind of damage makes it exit 1 naming the damage."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLE
from typer.testing import CliRunner

from packcli.cli import app
from packcli.options import PackOptions
from packcli.pipeline import pack_corpus
from packcli.report.verify import verify_output

runner = CliRunner()


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify") / "packed"
    pack_corpus([str(SAMPLE)], PackOptions(max_len=512, shard_size=400_000), out)
    return out


def edit_manifest(change: Callable[[dict], None]) -> Callable[[Path], None]:  # type: ignore[type-arg]
    def apply(out: Path) -> None:
        manifest = json.loads((out / "manifest.json").read_text())
        change(manifest)
        (out / "manifest.json").write_text(json.dumps(manifest))

    return apply


def flip_byte(out: Path) -> None:
    path = out / "shard-00001.arrow"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(out: Path) -> None:
    path = out / "shard-00000.arrow"
    path.write_bytes(path.read_bytes()[:1000])


DAMAGE = {
    "flipped byte": (flip_byte, "shard-00001.arrow: sha256 differs"),
    "truncated shard": (truncate, "shard-00000.arrow: 1000 bytes, the manifest says"),
    "missing shard": (lambda out: (out / "shard-00002.arrow").unlink(), "shard-00002.arrow: missing"),
    "edited totals": (
        edit_manifest(lambda m: m["totals"].update(tokens=m["totals"]["tokens"] + 1)),
        "totals.tokens",
    ),
    "wrong row count": (
        edit_manifest(lambda m: m["shards"][0].update(rows=m["shards"][0]["rows"] + 3)),
        "rows, the manifest says",
    ),
    "path outside": (
        edit_manifest(lambda m: m["shards"][0].update(file="../../etc/passwd")),
        "leaves the output directory",
    ),
    "listed twice": (edit_manifest(lambda m: m["shards"].append(dict(m["shards"][0]))), "listed twice"),
    "unlisted shard": (edit_manifest(lambda m: m["shards"].pop()), "not listed in the manifest"),
}


def test_intact_output_passes(packed: Path) -> None:
    report = verify_output(packed)
    assert report.ok, report.problems
    assert report.shards >= 3 and report.rows > 0
    result = runner.invoke(app, ["verify", str(packed)])
    assert result.exit_code == 0 and "OK" in result.stdout


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damage_is_named(packed: Path, tmp_path: Path, kind: str) -> None:
    damage, expected = DAMAGE[kind]
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    damage(copy)
    result = runner.invoke(app, ["verify", str(copy)])
    assert result.exit_code == 1, result.stdout
    assert expected in result.stderr, result.stderr
    assert json.loads(runner.invoke(app, ["verify", str(copy), "--json"]).stdout)["ok"] is False


def test_unknown_format_version_names_both(packed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    edit_manifest(lambda m: m.update(format_version=2))(copy)
    result = runner.invoke(app, ["verify", str(copy)])
    assert result.exit_code == 1
    assert "format version 2 is not supported" in result.stderr and "reads format version 1" in result.stderr


def test_row_level_damage_is_found(tmp_path: Path) -> None:
    """A shard rewritten with bad positions and an out-of-vocabulary id (checksums updated to match)."""
    import hashlib

    import pyarrow as pa

    from packcli.write.shards import read_shard

    out = tmp_path / "out"
    pack_corpus([str(SAMPLE)], PackOptions(max_len=512), out)
    path = out / "shard-00000.arrow"
    table = read_shard(path)
    rows = table.to_pylist()
    rows[0]["position_ids"][5] += 1
    rows[1]["input_ids"][0] = 99_999_999
    rows[2]["cu_seqlens"][-1] -= 1
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=table.schema))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"][0].update(bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))
    problems = " | ".join(verify_output(out).problems)
    assert "id outside the vocabulary" in problems
    assert "cu_seqlens does not start at 0" in problems
