"""Whether an output's files are intact against its manifest: the one check that every reader and writer of an
output makes, at the depth it needs, with one wording per kind of damage.

1. Names and sizes (:func:`file_damage`, no byte read): the files a manifest lists, its shards and their sidecars
   (:func:`~packcli.format.sidecars.entry_files`), against the files present, a mapping of name -> size that the
   caller supplies (a directory's listing, or one listing of a store's objects): a listed file leaving the output,
   listed twice, a shard listed out of the order packcli writes shards in, missing or of another size; a shard or
   sidecar file present but unlisted. What ``pack``'s up-to-date check, a rerun's reuse of a part in a store, a
   gate and ``verify`` start from.
2. Counted rows and tokens (:func:`count_damage`, :func:`total_damage`): a shard's counts against its entry, the
   totals against the shards'. :mod:`packcli.format.listing` checks the names of depth 1 and these from the record
   batches (no token read, and each shard's metadata): what ``stats`` and the loader check on open.
3. Everything (``packcli verify``, :mod:`packcli.report.verify`): depth 1, then every byte hashed (a hash that
   differs is :class:`Damage` ``sha256``), every row checked and counted (depth 2 on what it counted).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packcli.errors import PackcliError
from packcli.format.manifest import SHARD_FILE, shard_path
from packcli.format.sidecars import SIDECAR_FILE, entry_files

__all__ = [
    "Damage",
    "count_damage",
    "directory_sizes",
    "file_damage",
    "listed_files",
    "name_damage",
    "size_damage",
    "total_damage",
]

Kind = Literal["outside", "twice", "order", "missing", "size", "sha256", "unlisted", "link"]


@dataclass(frozen=True)
class Damage:
    """One thing wrong with one file of an output: ``file`` as the manifest names it (or as present, when
    ``unlisted``); ``shard``, the shard entry it belongs to; ``listed`` and ``found``, its sizes (kind ``size``)."""

    file: str
    kind: Kind
    shard: str = ""
    listed: object = None
    found: int = 0

    @property
    def problem(self) -> str:
        """What is wrong, in the one wording of its kind (without the file's name)."""
        if self.kind == "size":
            return f"{self.found} bytes, the manifest says {self.listed}"
        if self.kind == "missing" and self.shard not in ("", self.file):
            return f"missing (a sidecar of {self.shard})"
        if self.kind == "unlisted":
            return f"{'sidecar' if SIDECAR_FILE.fullmatch(self.file) else 'shard'} file not listed in the manifest"
        return {
            "outside": "its path leaves the output directory",
            "twice": "listed twice in the manifest",
            "order": "listed out of the order packcli writes shards in (a reordered manifest renumbers every row)",
            "missing": "missing",
            "sha256": "sha256 differs from the manifest (the file was changed or damaged)",
            "link": "a symbolic link, not a file packcli wrote",
        }[self.kind]

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}"


def listed_files(manifest: dict[str, Any], sidecars: bool = True) -> list[dict[str, Any]]:
    """Every file a manifest lists, each ``{"file", "bytes", "sha256"}``: each shard, then (with ``sidecars``) its
    sidecars."""
    return [item for _, item in _owned(manifest, sidecars)]


def name_damage(manifest: dict[str, Any], names: Iterable[str]) -> list[Damage]:
    """What is wrong with the names alone, ``names`` being those present: a listed file whose path leaves the
    output or that is listed again, a shard listed before one packcli wrote earlier (row numbers, a loader's resume
    state and ``show --row`` follow the listing), a shard or sidecar file present (at the top) that no entry lists."""
    damage, seen, last = [], set(), (-1, -1)
    for shard, item in _owned(manifest):
        name = item["file"]
        if not _inside(name):
            damage.append(Damage(str(name), "outside", shard))
        elif name in seen:
            damage.append(Damage(name, "twice", shard))
        elif name == shard and (place := _place(name)) is not None:
            if place < last:
                damage.append(Damage(name, "order", shard))
            last = max(last, place)
        seen.add(name)
    unlisted = (name for name in sorted(names) if SHARD_FILE.fullmatch(name) or SIDECAR_FILE.fullmatch(name))
    return [*damage, *(Damage(name, "unlisted") for name in unlisted if name not in seen)]


def size_damage(manifest: dict[str, Any], present: Mapping[str, int], sidecars: bool = True) -> list[Damage]:
    """The listed files (each once; with ``sidecars``, theirs too) missing from ``present`` (name -> size) or of
    another size there."""
    damage, seen = [], set()
    for shard, item in _owned(manifest, sidecars):
        name = item["file"]
        if not _inside(name) or name in seen:
            continue
        seen.add(name)
        if name not in present:
            damage.append(Damage(name, "missing", shard))
        elif present[name] != item.get("bytes"):  # a sidecar entry is not validated with the manifest
            damage.append(Damage(name, "size", shard, item.get("bytes"), present[name]))
    return damage


def file_damage(manifest: dict[str, Any], present: Mapping[str, int]) -> list[Damage]:
    """Depth 1: :func:`name_damage` then :func:`size_damage`, shards and sidecars."""
    return [*name_damage(manifest, present), *size_damage(manifest, present)]


def count_damage(file: str, entry: Mapping[str, Any], counted: Mapping[str, int]) -> list[tuple[str, str]]:
    """Depth 2: a shard's counts (``rows``, ``documents``, ``tokens``, as read from its record batches) against its
    entry, where it has the key: (the key, what differs) for each that differs."""
    return [
        (key, f"{file}: holds {value} {key}, the manifest says {entry[key]}")
        for key, value in counted.items()
        if entry.get(key, value) != value
    ]


def total_damage(totals: Mapping[str, Any], summed: Mapping[str, int]) -> list[tuple[str, str]]:
    """Depth 2: the manifest's totals against the shards' counts summed (``sequences``, ``documents``,
    ``tokens``): (the key, what differs) for each that differs."""
    return [
        (f"totals.{key}", f"totals.{key} is {totals[key]}, the shards hold {value}")
        for key, value in summed.items()
        if totals[key] != value
    ]


def directory_sizes(directory: Path) -> dict[str, int]:
    """The plain files of a local directory (a link to one followed) by name, with their sizes: what depth 1 takes
    as present (none where the directory is absent)."""
    try:
        with os.scandir(directory) as entries:
            return {entry.name: entry.stat().st_size for entry in entries if entry.is_file()}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def _owned(manifest: dict[str, Any], sidecars: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """Each listed file with the name of the shard whose entry lists it."""
    return [
        (shard["file"], item) for shard in manifest["shards"] for item in entry_files(shard)[: None if sidecars else 1]
    ]


def _place(name: str) -> tuple[int, int] | None:
    """A shard file's place in the order packcli lists shards (its partition, then its number; a store's run prefix
    aside), or None for a name packcli does not give."""
    found = SHARD_FILE.fullmatch(name.rsplit("/", 1)[-1])
    return None if found is None else (int(found.group(1) or -1), int(found.group(2)))


def _inside(name: object) -> bool:
    """Whether a listed name stays inside the output (:func:`~packcli.format.manifest.shard_path`)."""
    try:
        shard_path(Path(), name)
    except PackcliError:
        return False
    return True
