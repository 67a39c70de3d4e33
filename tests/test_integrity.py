"""The one check of whether an output is intact (:mod:`packcli.format.integrity`): the files a manifest lists,
shards and sidecars, against the files present, one wording per kind of damage; and the callers that trust an
output on its names and sizes (pack's up-to-date check in a store, a gate) count a missing sidecar as damage, as
pack's local up-to-date check and verify do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import error_line, sample_lines
from s3_server import S3Server
from typer.testing import CliRunner

from packcli.cli import app
from packcli.format.integrity import directory_sizes, file_damage
from packcli.format.manifest import read_manifest
from packcli.format.sidecars import entry_files

runner = CliRunner()


def test_an_intact_output_has_no_damage(packed_text: Path) -> None:
    manifest = read_manifest(packed_text)
    assert all(len(entry_files(shard)) > 1 for shard in manifest["shards"])  # sidecars to check, too
    assert file_damage(manifest, directory_sizes(packed_text)) == []


def test_each_kind_of_damage_is_said_one_way(packed_text: Path) -> None:
    manifest, present = read_manifest(packed_text), directory_sizes(packed_text)
    shards = manifest["shards"]
    first, second, last = shards[0], shards[1]["file"], shards[-1]
    sidecar = entry_files(first)[1]["file"]
    present[first["file"]] = 1000
    del present[sidecar]
    again, outside = {**shards[1], "sidecars": {}}, {**shards[0], "file": "../x.arrow", "sidecars": {}}
    edited = {**manifest, "shards": [*shards[:-1], again, outside]}  # the last one left out
    unlisted = [f"{item['file']}: {'shard' if item is last else 'sidecar'} file" for item in entry_files(last)]
    assert [str(damage) for damage in file_damage(edited, present)] == [
        f"{second}: listed twice in the manifest",
        "../x.arrow: its path leaves the output directory",
        *(f"{name} not listed in the manifest" for name in unlisted),
        f"{first['file']}: 1000 bytes, the manifest says {first['bytes']}",
        f"{sidecar}: missing (a sidecar of {first['file']})",
    ]


def test_a_gate_counts_a_missing_sidecar_as_damage(packed_text: Path, tmp_path: Path) -> None:
    """A gate trusted an output whose shards were there at their sizes; a sidecar gone is damage, as verify says."""
    copy = tmp_path / "copy"
    shutil.copytree(packed_text, copy)
    shard = read_manifest(copy)["shards"][0]
    sidecar = entry_files(shard)[1]["file"]
    (copy / sidecar).unlink()
    result = runner.invoke(app, ["stats", str(copy), "--min-efficiency", "0"])
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr).startswith(f"error: {copy}: fails verify's checks: {sidecar}: missing (a sidecar")


def test_an_output_url_missing_a_sidecar_is_not_up_to_date(s3_server: S3Server, tmp_path: Path) -> None:
    """pack's up-to-date check of an output URL took it as up to date with every shard there; with a sidecar gone it
    is damaged, as a local output is: replaced only with --overwrite."""
    corpus = tmp_path / "slice.jsonl"
    corpus.write_bytes(sample_lines(20))
    fs, out = s3_server.filesystem(), f"{s3_server.bucket()}/packed"
    args = ["pack", str(corpus), "--max-len", "256", "--out", out, "--quiet", "--json"]
    assert runner.invoke(app, args).exit_code == 0
    manifest = json.loads(fs.cat(f"{out}/manifest.json"))
    fs.rm(f"{out}/{entry_files(manifest['shards'][0])[1]['file']}")
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "holds another packcli output" in refused.stderr, refused.output
    replaced = runner.invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0 and json.loads(replaced.stdout)["status"] == "packed", replaced.output
    assert runner.invoke(app, ["verify", out]).exit_code == 0


def _list_the_first_shard_twice(manifest: dict[str, object]) -> bytes:
    """The manifest with the second shard's entry naming the first shard's files (the second's left unlisted)."""
    shards = manifest["shards"]
    assert isinstance(shards, list) and len(shards) > 1
    return json.dumps({**manifest, "shards": [shards[0], shards[0], *shards[2:]]}).encode()


def test_an_output_listing_a_shard_twice_or_holding_an_unlisted_one_is_not_up_to_date(tmp_path: Path) -> None:
    """pack's up-to-date check took an output as up to date on its listed files' sizes alone: a manifest listing a
    shard twice (another left out) or its shards in another order, or a shard file no entry lists, passed it, though stats, the loader and verify
    refuse that output. Each is damage, as a gate says: the run refuses it, --overwrite replaces it."""
    packed = tmp_path / "packed"
    args = [*_pack_args(tmp_path), "--out"]
    assert runner.invoke(app, [*args, str(packed)]).exit_code == 0
    manifest = read_manifest(packed)
    for damage in ("twice", "reordered", "unlisted"):
        out = tmp_path / damage
        shutil.copytree(packed, out)
        if damage == "twice":
            (out / "manifest.json").write_bytes(_list_the_first_shard_twice(manifest))
        elif damage == "reordered":  # the same files, listed in another order: every row renumbered
            first, second, *rest = manifest["shards"]
            (out / "manifest.json").write_text(json.dumps({**manifest, "shards": [second, first, *rest]}))
        else:
            shutil.copy(out / manifest["shards"][0]["file"], out / "shard-09999.arrow")
        for dry in ([], ["--dry-run"]):
            refused = runner.invoke(app, [*args, str(out), *dry])
            said = error_line(refused.stderr)
            assert refused.exit_code == 1 and "listed twice or out of order, or not listed" in said, (damage, dry)
        replaced = runner.invoke(app, [*args, str(out), "--overwrite"])
        assert replaced.exit_code == 0 and json.loads(replaced.stdout)["status"] == "packed", replaced.output
        assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


def _pack_args(tmp_path: Path) -> list[str]:
    """pack's arguments, less --out, for a corpus of several shards."""
    corpus = tmp_path / "slice.jsonl"
    corpus.write_bytes(sample_lines(6))
    return ["pack", str(corpus), "--max-len", "256", "--shard-size", "20KB", "--quiet", "--json"]


def test_an_output_url_listing_a_shard_twice_is_not_up_to_date(s3_server: S3Server, tmp_path: Path) -> None:
    fs, out = s3_server.filesystem(), f"{s3_server.bucket()}/packed"
    args = [*_pack_args(tmp_path), "--out", out]
    assert runner.invoke(app, args).exit_code == 0
    fs.pipe_file(f"{out}/manifest.json", _list_the_first_shard_twice(json.loads(fs.cat(f"{out}/manifest.json"))))
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "holds another packcli output" in refused.stderr, refused.output
    replaced = runner.invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0 and json.loads(replaced.stdout)["status"] == "packed", replaced.output
    assert runner.invoke(app, ["verify", out]).exit_code == 0


def test_a_shard_entry_whose_sidecars_are_not_entries_is_named_by_its_manifest_key(
    packed_text: Path, tmp_path: Path
) -> None:
    """verify and export met a ``sidecars`` that is not an object of file entries with 'unexpected AttributeError':
    the manifest's validation names the key, as it does for a shard's own keys."""
    manifest = read_manifest(packed_text)
    for key, sidecars, at in (("list", [1], "sidecars"), ("entry", {"sources": {"file": "x"}}, "sidecars.sources")):
        copy = tmp_path / key
        shutil.copytree(packed_text, copy)
        edited = {**manifest, "shards": [{**manifest["shards"][0], "sidecars": sidecars}, *manifest["shards"][1:]]}
        (copy / "manifest.json").write_text(json.dumps(edited))
        for command in (["verify", str(copy)], ["export", str(copy), "--to", "megatron", "--out", str(tmp_path / "e")]):
            result = runner.invoke(app, command)
            assert result.exit_code == 1, result.output
            assert f"manifest key 'shards[0].{at}" in error_line(result.stderr), result.stderr
