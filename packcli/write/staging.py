"""What lies at and beside an output: what it holds (whether a run may skip it, replace it or must refuse it), the
hidden siblings a run makes (lock, staging directory, resume area) and the removal of what dead runs left there.
Shared by the local and the remote publication and an export's record."""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from packcli.errors import PackcliError, option
from packcli.format.integrity import directory_sizes, file_damage, listed_files
from packcli.format.manifest import EXPORT_NAME, FOREIGN_MANIFEST, MANIFEST_NAME, SHARD_FILE, read_manifest
from packcli.format.sidecars import SIDECAR_FILE
from packcli.util.scratch import remove_part_scratch

__all__ = [
    "FULL_DISK",
    "RUN_RECORD",
    "STAGING",
    "Existing",
    "directory_names",
    "existing_output",
    "in_use",
    "out_of_room",
    "parts_fingerprint",
    "parts_kept",
    "parts_removed",
    "remove_debris",
    "remove_parts_area",
    "remove_path",
    "resolved_out",
    "sibling",
    "staging_family",
    "up_to_date",
]

Existing = Literal["absent", "same", "other"]
# Files a packcli output may hold besides its manifest and listed shards: what an interrupted write leaves.
_OWN_FILE = re.compile(
    rf"(manifest\.json|tokens|{SHARD_FILE.pattern}|{SIDECAR_FILE.pattern})\.tmp(\.mask)?|{SHARD_FILE.pattern}"
    rf"|{SIDECAR_FILE.pattern}"
)
# What ``datasets`` writes beside the shards of a Dataset it maps or filters (``cache-FINGERPRINT[_RANK_of_N].arrow``)
# from the shards ``packcli.pack()`` returns: stale once the output is replaced, so they go with it when plain files.
_DERIVED_CACHE = re.compile(r"cache-[0-9a-f]{16}(_\d{5}_of_\d{5})?\.arrow")
RUN_RECORD = "run.json"  # a parts area's run record (packcli.run.parts)
STAGING = "staging"  # a one-run staging directory is .NAME.packcli-staging-PID-RANDOM
_ONE_RUN_STAGING = re.compile(rf"(\..+\.packcli-{STAGING})-\d+-[0-9a-f]+")
# Hidden siblings of an output that only a run of packcli makes (the lock file aside): removed once dead.
_DEBRIS = (f"{STAGING}-*", "old-*", "partial", "old")
# Errors of a write that ran out of room: the disk or quota is full, or a file reached its size limit.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def up_to_date(existing: Existing, overwrite: bool, shown: Path) -> bool:
    """Whether a run may skip its work (the same output is there).

    Raises:
        PackcliError: another packcli output is there and ``overwrite`` is off.
    """
    if existing == "other" and not overwrite:
        raise PackcliError(
            "holds another packcli output (other inputs, tokenizer, options or packcli version, or this run's "
            "output with a shard missing, not its listed size, listed twice or out of order, or not listed); "
            f"pass {option('overwrite', True)} to replace it",
            shown,
        )
    return existing == "same"


def in_use(holder: str, shown: Path) -> PackcliError:
    """The refusal of a second run on an output ``holder`` is writing."""
    return PackcliError(
        f"in use by {holder}: another packcli run is writing this output; wait for it to finish or choose another "
        f"{option('out')}",
        shown,
    )


def existing_output(target: Path, fingerprint: str, shown: Path | None = None) -> Existing:
    """What ``target`` holds: "absent" (nothing, or an empty directory), "same" (a complete output of this
    fingerprint) or "other" (another packcli output, which ``--overwrite`` may replace).

    Raises:
        PackcliError: ``target`` is not a directory, or is an export, or holds a file that is not part of a packcli
            output (named, as ``shown``) other than ``datasets``' cache files, which go with the old output.
    """
    shown = shown or target
    names = directory_names(target, shown)
    if not names:
        return "absent"
    try:
        manifest = read_manifest(target)
    except PackcliError as exc:
        if EXPORT_NAME in names and MANIFEST_NAME not in names:
            raise PackcliError(
                f"is a packcli export ({EXPORT_NAME}), not an output of packcli pack: pack never replaces one, even "
                f"with {option('overwrite', True)}; choose another {option('out')}",
                shown,
            ) from None
        stranger = next((name for name in names if not _OWN_FILE.fullmatch(name)), names[0])
        why = f"no {MANIFEST_NAME}" if MANIFEST_NAME not in names else f"its manifest is unusable: {exc.message}"
        if exc.message.endswith(FOREIGN_MANIFEST):  # said once: "not a packcli output" is the sentence's own
            why = FOREIGN_MANIFEST
        raise PackcliError(
            f"holds {stranger!r} but is not a packcli output ({why}); packcli replaces only its own outputs or an "
            f"empty directory: choose another {option('out')}, or remove it yourself",
            shown,
        ) from None
    if manifest["fingerprint"] == fingerprint and not file_damage(manifest, directory_sizes(target)):
        return "same"
    listed = {MANIFEST_NAME, *(item["file"] for item in listed_files(manifest))}
    for name in names:
        path = target / name
        derived = _DERIVED_CACHE.fullmatch(name) and path.is_file() and not path.is_symlink()  # a plain file, no link
        if name in listed or _OWN_FILE.fullmatch(name) or derived:
            continue
        raise PackcliError(
            f"holds {name!r}, which is not part of the packcli output there: packcli replaces only its own "
            f"outputs; move that file away or choose another {option('out')}",
            shown,
        )
    return "other"


def directory_names(target: Path, shown: Path) -> list[str]:
    """The names ``target`` holds, sorted; none when it does not exist, a PackcliError naming ``shown`` when it is
    not a directory or cannot be reached."""
    try:
        if not target.exists():
            return []
    except PermissionError as exc:  # a directory on its way this user may not enter
        raise PackcliError(f"cannot be read ({exc.strerror})", shown) from None
    if not target.is_dir():
        raise PackcliError(f"exists and is not a directory; choose another {option('out')}", shown)
    return sorted(path.name for path in target.iterdir())


def resolved_out(out: Path) -> Path:
    """Where the output directory ``out`` lives, through any link: its siblings go beside that. A loop of links
    on its path (a RuntimeError before Python 3.13, an OSError after) is a PackcliError."""
    try:
        return out.resolve()
    except (RuntimeError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise
        raise PackcliError("a loop of symbolic links; choose another --out", out) from None


def sibling(target: Path, kind: str) -> Path:
    """A hidden sibling of the output directory ``target`` that packcli makes: its lock, staging, resume area."""
    return target.parent / f".{target.name}.packcli-{kind}"


def remove_debris(target: Path, warn: Callable[[str], None] | None) -> None:
    """Remove what dead runs left beside the output ``target`` (the caller holds its lock: no live run owns any)
    and, given ``warn``, the resume area of another run, saying so with its size."""
    for pattern in _DEBRIS:
        for path in target.parent.glob(f".{glob.escape(target.name)}.packcli-{pattern}"):
            remove_path(path)
    remove_part_scratch(sibling(target, STAGING))  # a killed one-run staging's token store (the family's name)
    area = sibling(target, "resume")
    if warn is None or not os.path.lexists(area):
        return
    files = [path for path in area.rglob("*") if path.is_file() and not path.is_symlink()] if area.is_dir() else []
    warn(parts_removed(area, len(files), sum(path.stat().st_size for path in files)))
    remove_parts_area(area)


def remove_parts_area(area: Path) -> None:
    """Remove a partitioned run's parts ``area`` beside an output, and its parts' node-local scratch (their token
    stores under ``$PACKCLI_SCRATCH``), which no run will resume once the area is gone."""
    remove_part_scratch(staging_family(area.resolve()))
    remove_path(area)


def parts_removed(area: Path, files: int, size: int) -> str:
    """The warning of a run that removes the parts ``area`` (a directory, or a prefix in a store) of another run."""
    return (
        f"removing {area} ({files:,} file(s), {size:,} bytes): the parts of an unfinished run of other inputs or "
        "options, which this run does not resume"
    )


def parts_fingerprint(area: Path) -> str | None:
    """The fingerprint the run record of the parts ``area`` (a directory or a prefix) names; None without one."""
    try:
        record = json.loads((area / RUN_RECORD).read_text(encoding="utf-8"))
    except (PackcliError, OSError, ValueError):
        return None
    fingerprint = record.get("fingerprint") if isinstance(record, dict) else None
    return fingerprint if isinstance(fingerprint, str) else None


def out_of_room(error: BaseException | None, out: Path, earlier: bool, parts: Path | None) -> None:
    """Raise a write that ran out of room (``FULL_DISK``) as one line naming the output ``out``: nothing published,
    the ``earlier`` output intact, and where a partitioned run keeps its ``parts``; any other error is left be."""
    if isinstance(error, OSError) and error.errno in FULL_DISK:
        raise PackcliError(
            f"cannot write {out}: {error.strerror or error}; nothing was published"
            + (", the earlier output is intact" if earlier else "")
            + (f"; {parts_kept(parts)}: free space, then rerun the same command to resume" if parts is not None else "")
        ) from None


def parts_kept(parts: Path) -> str:
    """Where a partitioned run keeps the ``parts`` it committed, in words (for a failed or interrupted run)."""
    return f"the partitions committed so far are kept in {parts}"


def staging_family(staging: Path) -> Path:
    """A one-run staging directory without its run's pid and random part (any other path as it is): node-local
    scratch named by it is found by the next run on the output after a kill -9."""
    match = _ONE_RUN_STAGING.fullmatch(staging.name)
    return staging.with_name(match.group(1)) if match else staging


def remove_path(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a directory tree; absent is fine."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
