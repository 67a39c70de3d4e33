"""manifest.json: written atomically, read with a version check, shard names kept inside the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packcli.errors import PackcliError
from packcli.write.manifest import FORMAT_VERSION, dumps, read_manifest, shard_path, write_manifest


def test_write_then_read_is_canonical_and_leaves_no_temporary(tmp_path: Path) -> None:
    manifest = {"format_version": FORMAT_VERSION, "b": 1, "a": [2, 1]}
    write_manifest(tmp_path, manifest)
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    assert (tmp_path / "manifest.json").read_text() == dumps(manifest)
    assert list(json.loads(dumps(manifest))) == ["a", "b", "format_version"]  # sorted keys
    assert read_manifest(tmp_path) == manifest


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "no manifest.json: not a packcli output"),
        ("{broken", "unreadable manifest"),
        ("[1]", "not a JSON object"),
        (json.dumps({"format_version": FORMAT_VERSION + 1}), "format version 2 is not supported"),
        (json.dumps({}), "format version None is not supported"),
    ],
)
def test_unreadable_manifests_are_refused(tmp_path: Path, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(PackcliError, match=message):
        read_manifest(tmp_path)


@pytest.mark.parametrize("name", ["../x.arrow", "/etc/passwd", "sub/shard.arrow", "..", "", 7])
def test_shard_paths_stay_inside_the_output(tmp_path: Path, name: object) -> None:
    with pytest.raises(PackcliError, match="leaves the output directory"):
        shard_path(tmp_path, name)
    assert shard_path(tmp_path, "shard-00000.arrow") == tmp_path / "shard-00000.arrow"
