"""verify's check of the shards' sidecar files (:mod:`packcli.format.sidecars`): each one a shard entry names is
inside the output, present, and of the size and sha256 listed; no sidecar file lies there unlisted. The source
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
from packcli.format.manifest import shard_path
from packcli.format.shards import file_buffer
from packcli.format.sidecars import SIDECAR_FILE, SIDECARS, SOURCES, entry_files, read_sources, read_split_pieces

__all__ = ["sidecar_problems", "source_problems"]


def sidecar_problems(out: Path, manifest: dict[str, Any]) -> list[str]:
    """What is wrong with the sidecar files of ``out`` against ``manifest``, one line each (empty when nothing)."""
    problems: list[str] = []
    listed: set[str] = set()
    for number, entry in enumerate(manifest["shards"]):
        sidecars = entry.get(SIDECARS, {})
        items = entry_files(entry)[1:]
        if not isinstance(sidecars, dict) or len(items) != len(sidecars):
            problems.append(f"manifest: shards[{number}].sidecars is not an object of {{file, bytes, sha256}} entries")
        for item in items:
            try:
                path = shard_path(out, item["file"])
            except PackcliError as exc:
                problems.append(exc.message)
                continue
            listed.add(path.name)
            if not path.is_file():
                problems.append(f"{path.name}: missing (a sidecar of {entry['file']})")
                continue
            data = file_buffer(path)  # memory-mapped; from a URL read into memory (one sidecar), never to disk
            if data.size != item.get("bytes"):
                problems.append(f"{path.name}: {data.size} bytes, the manifest says {item.get('bytes')}")
            elif hashlib.sha256(data).hexdigest() != item.get("sha256"):
                problems.append(f"{path.name}: sha256 differs from the manifest (the file was changed or damaged)")
    for path in sorted(out.iterdir()):
        if SIDECAR_FILE.fullmatch(path.name) and path.name not in listed:
            problems.append(f"{path.name}: sidecar file not listed in the manifest")
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
