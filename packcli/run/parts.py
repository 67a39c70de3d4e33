"""The parts of a partitioned run in its staging directory, and what a rerun may reuse of them.

Each partition writes its shards beside the others' and then its completion record, last and atomically: a
partition without a record is not done, whatever files it left. The run record says which run the parts belong to.
A rerun of the same run (same fingerprint) reuses every committed partition whose shards still have the sizes and
sha256 of its record; the parts of another run are removed, saying why they cannot be reused. Layout::

    .OUT.packcli-resume/
        part-00000-shard-00000.arrow ...   the shards, named as they will be in the output
        .parts/run.json                    the run's facts (fingerprint, plan hash, options, ...) and its inputs
        .parts/part-00000.json             partition 0's completion record: the facts, totals, shards with sha256
        .parts/part-00001.tokens           partition 1's token store while it runs (or in $PACKCLI_SCRATCH)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packcli.util.files import file_sha256, write_json

__all__ = ["PartsArea", "part_prefix"]

PARTS = ".parts"
RUN_RECORD = "run.json"
SCRATCH_VARIABLE = "PACKCLI_SCRATCH"


def part_prefix(partition: int) -> str:
    """The shard name prefix of one partition: its shards are ``part-00003-shard-00000.arrow`` and on."""
    return f"part-{partition:05d}-shard"


class PartsArea:
    """The parts of one run in its staging directory."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.directory = staging / PARTS

    def work_path(self, partition: int) -> Path:
        """Where a running partition keeps its token store: ``$PACKCLI_SCRATCH`` (a node-local directory, for a
        cluster whose staging is on shared storage), else beside the parts."""
        name = f"part-{partition:05d}.tokens"
        scratch = os.environ.get(SCRATCH_VARIABLE)
        if not scratch:
            return self.directory / name
        run = hashlib.sha256(str(self.staging.resolve()).encode()).hexdigest()[:16]  # one name per output
        return Path(scratch) / f"packcli-{run}-{name}"

    def record_path(self, partition: int) -> Path:
        """A partition's completion record."""
        return self.directory / f"part-{partition:05d}.json"

    def clear(self, partition: int) -> None:
        """Remove a partition's record, shards and token store."""
        self.record_path(partition).unlink(missing_ok=True)
        shards = self.staging.glob(part_prefix(partition) + "-*")
        work = self.work_path(partition)
        for path in [*shards, *work.parent.glob(work.name + "*")]:
            path.unlink(missing_ok=True)

    def commit(self, partition: int, record: dict[str, Any]) -> None:
        """Write a partition's completion record, atomically: the partition is done once it exists."""
        write_json(self.record_path(partition), record)

    def read(self, partition: int) -> dict[str, Any] | None:
        """A partition's completion record, or None when the partition is not committed."""
        try:
            record = json.loads(self.record_path(partition).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def resume(self, run: dict[str, Any], partitions: int, warn: Callable[[str], None]) -> list[int]:
        """Claim the staging directory for ``run`` (its facts and inputs); returns the committed partitions reused.

        The parts of another run are removed (with a warning naming what differs); a committed partition whose
        record or shards do not check out is packed again (with a warning saying why).
        """
        earlier = _read_json(self.directory / RUN_RECORD)
        if earlier != run:
            committed = sorted(self.directory.glob("part-*.json")) if earlier is not None else []
            if committed:
                warn(
                    f"not reusing the {len(committed)} committed partition(s) in {self.staging}: they belong to "
                    f"another run ({_difference(earlier or {}, run)}); packing every partition"
                )
            for path in list(self.staging.iterdir()):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            self.directory.mkdir()
            write_json(self.directory / RUN_RECORD, run)
            return []
        reused = []
        for partition in range(partitions):
            record = self.read(partition)
            problem = None if record is None else _check_record(self.staging, record, run)
            if record is not None and problem is None:
                reused.append(partition)
                continue
            if problem is not None:
                warn(f"partition {partition} is packed again: {problem}")
            self.clear(partition)
        self._remove_unrecorded(reused, warn)
        return reused

    def _remove_unrecorded(self, reused: list[int], warn: Callable[[str], None]) -> None:
        """Remove every file that no reused partition's record lists: this run wrote none of them."""
        recorded = {str(shard["file"]) for k in reused for shard in (self.read(k) or {}).get("shards", [])}
        stray = sorted(path for path in self.staging.iterdir() if path.name != PARTS and path.name not in recorded)
        if stray:
            warn(f"removing {len(stray)} file(s) no committed partition wrote from {self.staging}: {stray[0].name}")
        for path in stray:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()

    def finish(self) -> None:
        """Remove the records and the run record (the merged manifest replaces them)."""
        shutil.rmtree(self.directory)


def _check_record(staging: Path, record: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Why a committed partition cannot be reused, or None: its facts are the run's, its shards as recorded."""
    for key, value in record.items():
        if key in run and value != run[key]:
            return f"its record's {key} is not this run's"
    for shard in record.get("shards", []):
        path = staging / str(shard.get("file"))
        if not path.is_file() or path.stat().st_size != shard.get("bytes"):
            return f"{path.name} is missing or not {shard.get('bytes')} bytes as recorded"
        if file_sha256(path) != shard.get("sha256"):
            return f"{path.name} does not have the sha256 recorded"
    return None


def _difference(earlier: dict[str, Any], run: dict[str, Any]) -> str:
    """What differs between two runs, in words: the inputs first (a changed input changes the plan too)."""
    if earlier.get("inputs") != run.get("inputs"):
        return _inputs_difference(earlier.get("inputs") or [], run.get("inputs") or [])
    if earlier.get("plan_hash") != run.get("plan_hash"):
        return f"its partition plan differs: {earlier.get('partitions')} partitions then, {run.get('partitions')} now"
    changed = sorted(
        key
        for key in set(earlier.get("options", {})) | set(run.get("options", {}))
        if earlier.get("options", {}).get(key) != run.get("options", {}).get(key)
    )
    if changed:
        return f"options differ: {', '.join(changed)}"
    if earlier.get("tokenizer") != run.get("tokenizer"):
        return "the tokenizer differs"
    return "its fingerprint differs"


def _inputs_difference(earlier: list[list[Any]], now: list[list[Any]]) -> str:
    """Which input files were added, removed or changed (size or mtime), naming up to three of each."""
    before = {str(entry[0]): entry[1:] for entry in earlier}
    after = {str(entry[0]): entry[1:] for entry in now}
    kinds = (
        ("added", [path for path in after if path not in before]),
        ("removed", [path for path in before if path not in after]),
        ("changed", [path for path in after if path in before and after[path] != before[path]]),
    )
    said = [
        f"{len(paths)} {kind}: {', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''}"
        for kind, paths in kinds
        if paths
    ]
    return f"the inputs changed ({'; '.join(said) or 'their order'})"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
