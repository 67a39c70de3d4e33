"""The parts of a run, what a rerun may reuse of them, and their merge. A part is one job's shards and its
``manifest.json`` (with the run's facts in a ``part`` block), written last: a part without one is not done. A rerun
of the run the run record names reuses every committed part that checks out; anything else goes::

    .OUT.packcli-resume/                                   s3://bucket/OUT/packcli-run-.../
        run.json                                           run.json
        part-00000/manifest.json                           part-00000/manifest.json
        part-00000/part-00000-shard-00000.arrow ...        part-00000-shard-00000.arrow ...
        part-00001/tokens

On a disk a part is an output of its own (``packcli verify``-able) whose shards the merge moves into the output; in
a store it is built on node-local scratch and its shards uploaded where the output lists them (a rerun there trusts
their listed sizes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from packcli.encode.backends import takes_tokens
from packcli.errors import PackcliError
from packcli.format.integrity import listed_files, size_damage
from packcli.format.listing import REPACK, check_intact
from packcli.format.manifest import MANIFEST_NAME, validate_manifest
from packcli.read.inputs import InputFile
from packcli.storage.objects import remove_objects, upload_files, write_object
from packcli.storage.urls import UrlPath, file_sizes
from packcli.util.files import canonical_json, write_json
from packcli.util.scratch import part_scratch, remove_part_scratch
from packcli.write.staging import RUN_RECORD, remove_path, staging_family

__all__ = ["PartsArea", "input_facts", "part_name"]

_READERS = 16  # part manifests read at once
_OF_PART = re.compile(r"part-(\d+)(?:[/-]|$)")  # the partition a file (or empty directory) of the area belongs to


def part_name(partition: int) -> str:
    """The directory of one part: ``part-00003``."""
    return f"part-{partition:05d}"


class PartsArea:
    """The parts of one run under ``root``: a local directory, or a run prefix in a store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.remote = isinstance(root, UrlPath)
        self._read: dict[int, dict[str, Any]] = {}  # committed parts' manifests read so far (a store's cost requests)

    def part(self, partition: int) -> Path:
        """Where a part's manifest is committed."""
        return self.root / part_name(partition)

    @property
    def _owner(self) -> Path:
        """What names the parts' node-local directories: the output in a store, else the area's family."""
        return self.root.parent if self.remote else staging_family(self.root.resolve())

    def _scratch(self, partition: int) -> Path:
        """A part's node-local directory: one name per output and partition, whichever run stages it."""
        return part_scratch(self._owner, part_name(partition))

    def build_path(self, partition: int) -> Path:
        """Where a running part writes its shards: its own directory, or in a store its scratch (uploaded on commit)."""
        return self._scratch(partition) if self.remote else self.part(partition)

    def work_path(self, partition: int) -> Path:
        """Where a running part keeps its token store: its node-local scratch in a store or with ``$PACKCLI_SCRATCH``
        (a cluster whose staging is on shared storage), else its own directory."""
        local = self.remote or bool(os.environ.get("PACKCLI_SCRATCH"))
        return (self._scratch(partition) if local else self.part(partition)) / "tokens"

    def clear(self, partition: int) -> None:
        """Remove a part: its files and scratch; in a store only its manifest (a job lists nothing): the next attempt
        writes its shards over, and the commit or the next resume removes what no manifest lists."""
        self._read.pop(partition, None)
        if self.remote:
            remove_objects([f"{self.part(partition)}/{MANIFEST_NAME}"])
        else:
            remove_path(self.part(partition))
        shutil.rmtree(self._scratch(partition), ignore_errors=True)

    def commit(self, partition: int, manifest: dict[str, Any]) -> None:
        """Commit a built part: its manifest, written atomically (in a store, after uploading its shards)."""
        if self.remote:
            built = self.build_path(partition)
            upload_files({str(built / item["file"]): f"{self.root}/{item['file']}" for item in listed_files(manifest)})
        self._write(self.part(partition) / MANIFEST_NAME, manifest)
        shutil.rmtree(self._scratch(partition), ignore_errors=True)

    def read(self, partition: int) -> dict[str, Any] | None:
        """A committed part's manifest (read once: it changes only when cleared), or None."""
        self._read_parts([partition])
        return self._read.get(partition)

    def _read_parts(self, partitions: list[int]) -> None:
        """Read the manifests of ``partitions`` not read yet, several at once; a damaged one reads as none."""
        wanted = [k for k in partitions if k not in self._read]
        paths = [self.part(k) / MANIFEST_NAME for k in wanted]
        with ThreadPoolExecutor(_READERS) as pool:
            for partition, manifest in zip(wanted, pool.map(_read_json, paths)):
                if isinstance(manifest, dict) and isinstance(manifest.get("part"), dict):
                    self._read[partition] = manifest

    def resume(
        self, run: dict[str, Any], partitions: int, warn: Callable[[str], None], requested: str = "auto"
    ) -> list[int]:
        """Claim the area for ``run`` (its facts and inputs); returns the committed partitions reused. Another run's
        parts are removed, and a part that does not check out or whose tokens ``--tokenizer-backend requested`` does
        not take is packed again, each with a warning saying why."""
        earlier = _read_json(self.root / RUN_RECORD)
        if earlier == run and not self.remote:
            self._regather(partitions)
        files = _files(self.root)  # one listing, with each file's size
        remove_part_scratch(self._owner)  # what a killed run left in node-local scratch, whatever its partitions
        if earlier != run:
            committed = self._committed(files, partitions) if earlier is not None else []
            if committed:
                warn(
                    f"not reusing the {len(committed)} committed partition(s) in {self.root} "
                    f"({sum(files.values()):,} bytes, removed): they belong to another run "
                    f"({_difference(earlier or {}, run)}); packing every partition"
                )
            _remove_files(self.root, list(files))
            self._read.clear()
            self._write(self.root / RUN_RECORD, run)
            return []
        committed = self._committed(files, partitions)
        unfinished = set(range(partitions)) - set(committed)
        for partition in sorted(unfinished):  # committed once, but its manifest no longer reads as a part's
            if f"{part_name(partition)}/{MANIFEST_NAME}" in files:
                warn(f"partition {partition} is packed again: its manifest cannot be read as a part's")
        # what an unfinished part left goes silently; then files no committed part lists, said
        left = {name for name in files if (match := _OF_PART.match(name)) and int(match[1]) in unfinished}
        _remove_files(self.root, [name for name in files if name in left])
        self._remove_unlisted(committed, [name for name in files if name not in left], warn)
        reused = []
        for partition in committed:
            manifest = self._read[partition]
            encoded_by = manifest.get("tokenizer", {}).get("backend")
            problem = self._check(partition, manifest, run, files) or (
                None
                if takes_tokens(requested, encoded_by)
                else f"{encoded_by} encoded it, and this run takes only --tokenizer-backend {requested}'s tokens"
            )
            if problem is None:
                reused.append(partition)
            else:
                warn(f"partition {partition} is packed again: {problem}")
                self.clear(partition)
        return reused

    def _committed(self, files: dict[str, int], partitions: int) -> list[int]:
        """The partitions whose manifest the listing ``files`` holds and reads as a part's."""
        listed = [k for k in range(partitions) if f"{part_name(k)}/{MANIFEST_NAME}" in files]
        self._read_parts(listed)
        return [k for k in listed if k in self._read]

    def _write(self, path: Path, value: dict[str, Any]) -> None:
        """Write ``value`` as canonical JSON, whole: one PUT in a store, atomically on a disk."""
        if self.remote:
            write_object(str(path), canonical_json(value).encode())
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, value)

    def _check(
        self, partition: int, manifest: dict[str, Any], run: dict[str, Any], files: dict[str, int]
    ) -> str | None:
        """Why a committed part cannot be reused, or None: its facts are the run's, its shards as listed (in a
        store, their sizes in the listing ``files``; on a disk, every byte: ``check_intact``)."""
        if manifest["part"].get("partition") != partition:
            return f"its manifest is for partition {manifest['part'].get('partition')}"
        for key, value in manifest["part"].items():
            if key in run and value != run[key]:
                return f"its manifest's {key} is not this run's"
        if self.remote:
            damage = size_damage(manifest, files)
            return str(damage[0]) if damage else None
        try:  # on a disk, every byte: a manifest edited to other totals is not reused
            check_intact(self.part(partition), manifest)
        except PackcliError as exc:
            return f"it is damaged ({exc.message.removesuffix(f': {REPACK}')})"
        return None

    def _remove_unlisted(self, committed: list[int], files: list[str], warn: Callable[[str], None]) -> None:
        """Remove every file of ``files`` that no committed part's manifest lists: this run wrote none of them."""
        listed = {RUN_RECORD}
        for partition in committed:
            manifest = self._read[partition]
            shards = "" if self.remote else f"{part_name(partition)}/"
            listed.add(f"{part_name(partition)}/{MANIFEST_NAME}")
            listed.update(f"{shards}{item['file']}" for item in listed_files(manifest))
        stray = [name for name in files if name not in listed]
        if stray:
            warn(f"removing {len(stray)} file(s) no committed partition wrote from {self.root}: {stray[0]}")
        _remove_files(self.root, stray)

    def gather(self, into: Path, manifests: list[dict[str, Any]]) -> None:
        """Move the parts' shards into the output being built in ``into`` (in a store they are there already)."""
        if self.remote:
            return
        for manifest in manifests:
            partition = int(manifest["part"]["partition"])
            for item in listed_files(manifest):
                os.replace(self.part(partition) / str(item["file"]), into / str(item["file"]))

    def remove_records(self) -> None:
        """On a disk, remove the run record and the parts once their shards are gathered (in a store, the
        publication's commit removes them)."""
        for path in self.root.iterdir():
            if path.name == RUN_RECORD or (path.is_dir() and path.name.startswith("part-")):
                remove_path(path)

    def _regather(self, partitions: int) -> None:
        """Put back into their parts the shards that an interrupted merge had moved out."""
        self._read_parts(list(range(partitions)))
        for partition, manifest in self._read.items():
            for item in listed_files(manifest):
                name = str(item["file"])
                moved, home = self.root / name, self.part(partition) / name
                if not home.exists() and moved.is_file() and not moved.is_symlink():
                    os.replace(moved, home)


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` by its path relative to it, sorted, with its size: in a store from one listing; in
    a local directory its links (never followed) and empty directories too, of size 0."""
    if isinstance(root, UrlPath):
        return file_sizes(root)
    if not root.is_dir():
        return {}
    found = (path for path in root.rglob("*") if path.is_symlink() or not path.is_dir() or not any(path.iterdir()))
    return {
        str(path.relative_to(root)): 0 if path.is_symlink() or path.is_dir() else path.stat().st_size
        for path in sorted(found)
    }


def _remove_files(root: Path, names: list[str]) -> None:
    """Remove ``names`` under ``root`` (in a store, by one batch call), then the local directories left empty."""
    if isinstance(root, UrlPath):
        remove_objects([f"{root}/{name}" for name in names])
        return
    for name in names:
        remove_path(root / name)
    for directory in sorted({(root / name).parent for name in names}, reverse=True):
        if directory != root and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def _difference(earlier: dict[str, Any], run: dict[str, Any]) -> str:
    """What differs between two runs, in words: the inputs first (a changed input changes the plan too)."""
    if earlier.get("inputs") != run.get("inputs"):  # naming up to three files of each kind
        before = {str(entry[0]): entry[1:] for entry in earlier.get("inputs") or []}
        after = {str(entry[0]): entry[1:] for entry in run.get("inputs") or []}
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
    if earlier.get("plan_hash") != run.get("plan_hash"):
        return f"its partition plan differs: {earlier.get('partitions')} partitions then, {run.get('partitions')} now"
    then, now = earlier.get("options", {}), run.get("options", {})
    changed = sorted(key for key in set(then) | set(now) if then.get(key) != now.get(key))
    if changed:
        return f"options differ: {', '.join(changed)}"
    if earlier.get("tokenizer") != run.get("tokenizer"):
        return "the tokenizer differs"
    return "its fingerprint differs"


def _read_json(path: Path) -> Any:
    """The JSON file at ``path`` (a part's manifest, checked), or None for none or a damaged one."""
    try:
        value = json.loads(path.read_bytes())
        if isinstance(value, dict) and isinstance(value.get("part"), dict):
            validate_manifest(value, path)
        return value
    except (OSError, ValueError, PackcliError):
        return None


def input_facts(inputs: list[InputFile]) -> list[list[Any]]:
    """The inputs as the run record keeps them (path, size, mtime or ETag): a changed input voids every part."""
    return [[str(item.path), item.size, item.version] for item in inputs]
