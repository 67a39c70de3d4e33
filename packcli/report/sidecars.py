"""verify's check of the shards' sidecar files (:mod:`packcli.format.sidecars`) as files: each one a shard entry
names is inside the output, present, and of the size and sha256 listed; no sidecar file lies there unlisted. What
they hold is checked against the shards by their own checks (:mod:`packcli.report.splits`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packcli.errors import PackcliError
from packcli.format.manifest import shard_path
from packcli.format.sidecars import SIDECAR_FILE, SIDECARS, entry_files
from packcli.util.files import file_sha256

__all__ = ["sidecar_problems"]


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
            elif path.stat().st_size != item.get("bytes"):
                problems.append(f"{path.name}: {path.stat().st_size} bytes, the manifest says {item.get('bytes')}")
            elif file_sha256(path) != item.get("sha256"):
                problems.append(f"{path.name}: sha256 differs from the manifest (the file was changed or damaged)")
    for path in sorted(out.iterdir()):
        if SIDECAR_FILE.fullmatch(path.name) and path.name not in listed:
            problems.append(f"{path.name}: sidecar file not listed in the manifest")
    return problems
