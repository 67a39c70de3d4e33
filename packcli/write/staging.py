"""The hidden siblings a run makes beside an output (its lock, staging directory and resume area), and the removal
of what dead runs and other runs left there: shared by the local and the remote publication."""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from packcli.errors import PackcliError

__all__ = [
    "FULL_DISK",
    "RUN_RECORD",
    "STAGING",
    "out_of_room",
    "parts_fingerprint",
    "parts_kept",
    "parts_removed",
    "remove_debris",
    "remove_path",
    "remove_resume_area",
    "resolved_out",
    "sibling",
    "staging_family",
]

RUN_RECORD = "run.json"  # a parts area's run record (packcli.run.parts)
STAGING = "staging"  # a one-run staging directory is .NAME.packcli-staging-PID-RANDOM
_ONE_RUN_STAGING = re.compile(rf"(\..+\.packcli-{STAGING})-\d+-[0-9a-f]+")
# Hidden siblings of an output that only a run of packcli makes (the lock file aside): removed once dead.
_DEBRIS = (f"{STAGING}-*", "old-*", "partial", "old")
# Errors of a write that ran out of room: the disk or quota is full, or a file reached its size limit.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def resolved_out(out: Path) -> Path:
    """Where the output directory ``out`` lives, through any link: its siblings go beside that.

    Raises:
        PackcliError: naming ``out``, where a loop of links (a -> b -> a) stands on its path, which Python's
            ``resolve`` reports as a RuntimeError (an OSError from 3.13).
    """
    try:
        return out.resolve()
    except (RuntimeError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise
        raise PackcliError("a loop of symbolic links; choose another --out", out) from None


def sibling(target: Path, kind: str) -> Path:
    """A hidden sibling of the output directory ``target`` that packcli makes: its lock, staging, resume area."""
    return target.parent / f".{target.name}.packcli-{kind}"


def remove_debris(target: Path) -> None:
    """Remove what dead runs left beside the output ``target`` (the caller holds its lock: no live run owns any)."""
    for pattern in _DEBRIS:
        for path in target.parent.glob(f".{glob.escape(target.name)}.packcli-{pattern}"):
            remove_path(path)


def remove_resume_area(target: Path, warn: Callable[[str], None]) -> None:
    """Remove the resume area beside the output ``target`` (the caller holds its lock), saying so with its size."""
    area = sibling(target, "resume")
    if not os.path.lexists(area):
        return
    files = [path for path in area.rglob("*") if path.is_file() and not path.is_symlink()] if area.is_dir() else []
    warn(parts_removed(area, len(files), sum(path.stat().st_size for path in files)))
    remove_path(area)


def parts_removed(area: Path, files: int, size: int) -> str:
    """The warning of a run that removes the parts ``area`` (a directory, or a prefix in a store) of another run."""
    return (
        f"removing {area} ({files:,} file(s), {size:,} bytes): the parts of an unfinished run of other inputs or "
        "options, which this run does not resume"
    )


def parts_fingerprint(area: Path) -> str | None:
    """The fingerprint the run record of the parts ``area`` (a directory, or a prefix in a store) names; None when
    it has none (gone, or unreadable)."""
    try:
        record = json.loads((area / RUN_RECORD).read_text(encoding="utf-8"))
    except (PackcliError, OSError, ValueError):
        return None
    fingerprint = record.get("fingerprint") if isinstance(record, dict) else None
    return fingerprint if isinstance(fingerprint, str) else None


def out_of_room(error: BaseException | None, out: Path, earlier: bool, parts: Path | None) -> PackcliError | None:
    """A write that ran out of room (``FULL_DISK``) as one line naming the output ``out``: nothing published, the
    ``earlier`` output intact, and where a partitioned run keeps the ``parts`` it committed; None for any other
    error."""
    if not (isinstance(error, OSError) and error.errno in FULL_DISK):
        return None
    return PackcliError(
        f"cannot write {out}: {error.strerror or error}; nothing was published"
        + (", the earlier output is intact" if earlier else "")
        + (f"; {parts_kept(parts)}: free space, then rerun the same command to resume" if parts is not None else "")
    )


def parts_kept(parts: Path) -> str:
    """Where a partitioned run keeps the ``parts`` it committed, in words (for a failed or interrupted run)."""
    return f"the partitions committed so far are kept in {parts}"


def staging_family(staging: Path) -> Path:
    """What every run's staging directory for one output has in common: a one-run staging directory without its
    run's pid and random part, any other path as it is. Node-local scratch named by it is found by the next run on
    the output after a kill -9 (which removes nothing)."""
    match = _ONE_RUN_STAGING.fullmatch(staging.name)
    return staging.with_name(match.group(1)) if match else staging


def remove_path(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a directory tree; absent is fine."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
