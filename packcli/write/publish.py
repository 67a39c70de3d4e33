"""Publishing an output: build it in a staging directory, then move it into place whole. The manifest, written
last, is the commit point; an interrupted run never leaves an output that looks complete, and an existing output
stays intact until the new one is in place.

Usage::

    with Publication(out, fingerprint, overwrite) as publication:
        if not publication.up_to_date:
            build_into(publication.staging)   # shards, then manifest.json last
            publication.commit()              # staging -> out; without it, the staging is removed on exit

A resumable publication (partitioned runs) has one staging directory per output, ``.OUT.packcli-resume``, that
survives a failed or killed run: the rerun finds the partitions committed in it and decides what to reuse.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import TracebackType

from packcli.errors import PackcliError
from packcli.write.manifest import read_manifest, shard_path

__all__ = ["Publication", "existing_output"]


class Publication:
    """One run's claim on an output directory: its staging area, and the final move into place.

    Args:
        out: the output directory.
        fingerprint: the run's fingerprint (an output with the same one is up to date).
        overwrite: replace an existing output with another fingerprint.
        resumable: keep the staging directory when the run fails (its contents are the caller's to judge).
    """

    def __init__(self, out: Path, fingerprint: str, overwrite: bool, resumable: bool = False) -> None:
        self.out = out
        self.fingerprint = fingerprint
        self.overwrite = overwrite
        self.resumable = resumable
        self.staging = out.parent / f".{out.name}.packcli-{'resume' if resumable else 'partial'}"
        self.up_to_date = False
        self._committed = False

    def __enter__(self) -> Publication:
        existing = existing_output(self.out, self.fingerprint)
        if existing == "same":
            self.up_to_date = True
            return self
        if existing == "other" and not self.overwrite:
            raise PackcliError("holds another output or other files; pass --overwrite to replace it", self.out)
        if not self.resumable:
            shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True, exist_ok=self.resumable)
        return self

    def commit(self) -> None:
        """Move the staged output (manifest written) into place, replacing an earlier output."""
        _move_into_place(self.staging, self.out)
        self._committed = True

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if not self._committed and not self.up_to_date and not self.resumable:
            shutil.rmtree(self.staging, ignore_errors=True)


def existing_output(out: Path, fingerprint: str) -> str:
    """ "absent" (nothing, or an empty directory), "same" (complete output, same fingerprint) or "other"."""
    if not out.exists():
        return "absent"
    if not out.is_dir():
        raise PackcliError("exists and is not a directory", out)
    if not any(out.iterdir()):
        return "absent"
    try:
        manifest = read_manifest(out)
    except PackcliError:
        return "other"
    if manifest.get("fingerprint") != fingerprint:
        return "other"
    for shard in manifest.get("shards", []):
        path = shard_path(out, shard.get("file"))
        if not path.is_file() or path.stat().st_size != shard.get("bytes"):
            return "other"
    return "same"


def _move_into_place(staging: Path, out: Path) -> None:
    if out.exists():
        old = out.parent / f".{out.name}.packcli-old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old)
    else:
        os.replace(staging, out)
