"""verify's check of the shards' sidecar files (:mod:`packcli.format.sidecars`): beyond the names and sizes
(:mod:`packcli.format.integrity`), each one a shard entry names has the sha256 listed. The source
index (``sources``) holds one entry per document of its shard, every shard has one when any has, each entry piece
k of n (k < n) of a record numbered from 1, and its split pieces are those the ``split_pieces`` sidecar lists; the
split pieces themselves are checked against the shards by :mod:`packcli.report.splits`. In an output at a URL
the sidecars are read from the store as the shards are (one at a time into memory, nothing copied to disk).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError
from packcli.format.integrity import Damage
from packcli.format.manifest import shard_path
from packcli.format.shards import file_buffer
from packcli.format.sidecars import SIDECARS, SOURCES, entry_files, read_sources, read_split_pieces

__all__ = ["sidecar_problems", "source_problems"]


def sidecar_problems(out: Path, manifest: dict[str, Any], unread: set[str]) -> list[str]:
    """What is wrong with the sidecar entries of ``manifest`` and the bytes of the sidecar files of ``out``, one line
    each (empty when nothing); their names and sizes are checked with the shards' (:mod:`packcli.format.integrity`),
    and the files in ``unread`` (missing, of another size, or outside the output) are not read."""
    problems: list[str] = []
    for number, entry in enumerate(manifest["shards"]):
        sidecars = entry.get(SIDECARS, {})
        items = entry_files(entry)[1:]
        if not isinstance(sidecars, dict) or len(items) != len(sidecars):
            problems.append(f"manifest: shards[{number}].sidecars is not an object of {{file, bytes, sha256}} entries")
        for item in items:
            data = None if item["file"] in unread else file_buffer(shard_path(out, item["file"]))
            if data is not None and hashlib.sha256(data).hexdigest() != item.get("sha256"):
                problems.append(str(Damage(item["file"], "sha256")))
    return problems


def source_problems(out: Path, manifest: dict[str, Any]) -> list[str]:
    """What is wrong with the shards' source indexes, one line each (none for an output packed before them)."""
    shards = manifest["shards"]
    having = [SOURCES in (shard.get(SIDECARS) or {}) for shard in shards]
    if not any(having):
        return []
    problems = []
    if not all(having):
        lacking = shards[having.index(False)]["file"]
        problems.append(
            f"sources: {having.count(False)} shard(s) have no source index, the others have (first: {lacking})"
        )
    for shard in shards:
        try:
            sources = read_sources(out, shard)
            split = read_split_pieces(out, shard)
        except PackcliError as exc:
            problems.append(f"{Path(exc.path or '').name}: {exc.message}")
            continue
        if sources is None:
            continue
        name, documents = shard["file"], shard.get("documents")
        if documents is not None and len(sources.record) != documents:
            problems.append(f"sources of {name}: {len(sources.record)} entries, the shard holds {documents} documents")
        wrong = (sources.record < 1) | (sources.piece < 0) | (sources.piece >= sources.pieces)
        if wrong.any():
            k = int(wrong.argmax())
            first = f"entry {k}: record {sources.record[k]}, piece {sources.piece[k]} of {sources.pieces[k]}"
            problems.append(
                f"sources of {name}: {int(wrong.sum())} entries not piece k of n (k < n) of a record numbered "
                f"from 1 (first: {first})"
            )
        listed = 0 if split is None else len(split.entries)
        if int((sources.pieces > 1).sum()) != listed:
            problems.append(
                f"sources of {name}: {int((sources.pieces > 1).sum())} pieces of split documents, its split_pieces "
                f"list {listed}"
            )
    return problems
