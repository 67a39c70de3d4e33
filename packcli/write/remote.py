"""Publishing to an output URL, where there is no rename: ``RemotePublication`` has ``Publication``'s interface.

Under the output's lock object, a run removes what dead runs left (other runs' parts said with their size) and
refuses a prefix holding what packcli did not write. A plain run stages in local scratch and ``commit`` uploads its
shards under its run prefix ``packcli-run-<time>-<random>/`` (a partitioned run's parts are there already), checks
the lock still names this run, then writes ``manifest.json`` (one PUT, the commit), which names the shards by their
paths under the output, and removes the previous output. A killed run leaves at most its run prefix and its lock
object, which the next run removes, resumes or takes over; a run whose lock is lost publishes nothing.
"""

from __future__ import annotations

import _thread
import json
import re
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from packcli.errors import PackcliError
from packcli.format.integrity import file_damage, listed_files
from packcli.format.manifest import MANIFEST_NAME, RUN_DIRECTORY, RUN_PREFIX, SHARD_FILE, read_manifest
from packcli.format.sidecars import SIDECAR_FILE
from packcli.storage.inputs import RESUME_PREFIX
from packcli.storage.lock import ObjectLock, stale_seconds
from packcli.storage.objects import filesystem, is_file, object_sizes, remove_objects, upload_files, write_object
from packcli.storage.urls import UrlPath, file_sizes
from packcli.util.files import canonical_json
from packcli.util.scratch import remove_part_scratch, scratch_directory, scratch_key
from packcli.util.signals import Interrupted
from packcli.write.publish import Claim, remove_dead_runs
from packcli.write.staging import (
    RUN_RECORD,
    Existing,
    existing_output,
    in_use,
    out_of_room,
    parts_removed,
    resolved_out,
    up_to_date,
)

__all__ = ["RemotePublication", "output_state", "remove_leftovers"]

LOCK_NAME = ".packcli-lock"
# what a run writes under its run prefix: its shards and their sidecars, and a partitioned run's record and part
# manifests (another tool's objects there are not its own)
_RUN_OBJECT = re.compile(
    rf"{RUN_DIRECTORY.pattern}/(?:{SHARD_FILE.pattern}|{SIDECAR_FILE.pattern}|{RUN_RECORD}|part-\d+/{MANIFEST_NAME})"
)
# a parts area's run record, under a run prefix or an earlier packcli's resume prefix
_RUN_RECORD = re.compile(rf"(?:{RUN_DIRECTORY.pattern}|{RESUME_PREFIX})/{re.escape(RUN_RECORD)}")


class RemotePublication(Claim):
    """One run's claim on an output URL: the lock object, a local staging directory, the upload and the commit. A
    resumable (partitioned) run's parts are under its run prefix, and ``warn`` is told of a lock renewal that failed
    and is retried too."""

    def __init__(self, *args: Any, **claim: Any) -> None:
        super().__init__(*args, **claim)
        self._earlier = False  # an output was there when the run began
        self.run = f"{RUN_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
        self._staged = f"packcli-upload-{scratch_key(self.out)}-"  # this output's staging directories, one a run
        self.staging = scratch_directory() / f"{self._staged}{self.run}"
        # a lost lock stops the run as Ctrl-C would, and __exit__ says why
        self._lock = ObjectLock(f"{self.out}/{LOCK_NAME}", self.run, self.warn, on_lost=_thread.interrupt_main)

    def __enter__(self) -> RemotePublication:
        for path in self.inputs:
            if str(path) == str(self.out) or str(path).startswith(f"{self.out}/"):
                raise PackcliError(
                    f"the input {path} lies inside the output: packcli never writes over its inputs; "
                    "choose another --out",
                    self.out,
                )
        filesystem(str(self.out))  # a missing library is said of the output URL, not of its lock object
        try:
            acquired = self._lock.acquire()
        except PackcliError as exc:
            exc.path = self.out  # a missing bucket too
            raise
        if not acquired:
            raise in_use(_holder_words(self._lock.seen or {}, self._lock.url), self.out)
        try:
            for dead in scratch_directory().glob(f"{self._staged}*"):  # the lock is ours: their runs are over
                shutil.rmtree(dead, ignore_errors=True)
            existing, resumed = _remove_dead(self.out, self.fingerprint, self.warn, self.resumable)
            if resumed is None:  # the parts of runs that none will resume: their node-local scratch goes too
                remove_part_scratch(self.out)
            self.run = resumed or self.run  # a partitioned run resumes the parts under its latest run prefix
            self._earlier = existing != "absent"
            self.up_to_date = up_to_date(existing, self.overwrite, self.out) and self.current(self.out)
            if not self.up_to_date:
                self.staging.mkdir(parents=True)
        except BaseException:
            self._release()
            raise
        return self

    @property
    def parts(self) -> Path:
        """Where the run's parts go (:mod:`packcli.run.parts`): a partitioned run's under its run prefix, a plain
        run's in the local staging directory."""
        return self.out / self.run if self.resumable else self.staging

    def commit(self) -> None:
        """Put a plain run's shards under the run prefix (a partitioned run's are there), then write the manifest
        (the commit), then remove the previous output and the parts' records."""
        manifest = json.loads((self.staging / MANIFEST_NAME).read_text(encoding="utf-8"))
        items = listed_files(manifest)  # shards and sidecars
        if not self.resumable:
            upload_files({str(self.staging / item["file"]): f"{self.out}/{self.run}/{item['file']}" for item in items})
        for item in items:
            item["file"] = f"{self.run}/{item['file']}"
        listed = {f"{self.out}/{item['file']}" for item in items}
        previous = [f"{self.out}/{name}" for name in file_sizes(self.out) if _RUN_OBJECT.fullmatch(name)]
        self._lock.check()
        write_object(f"{self.out}/{MANIFEST_NAME}", canonical_json(manifest).encode())
        self._committed = True
        remove_objects([url for url in previous if url not in listed])

    def _release(self) -> None:
        """Release the lock; one lost before the commit (which stopped the run with an interruption) ends the run
        with a PackcliError saying why."""
        try:
            self._lock.release()
        except (KeyboardInterrupt, Interrupted):
            if self._lock.lost is None:
                raise
        if self._lock.lost is not None and not (self._committed or self.up_to_date):
            raise PackcliError(self._lock.lost) from None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        try:
            if not (self._committed or self.up_to_date or self.resumable):  # a partitioned run's parts stay
                remove_objects(list(object_sizes(f"{self.out}/{self.run}")))
        finally:
            self._release()
        out_of_room(error, self.out, self._earlier, self.parts if self.resumable else None)


def remove_leftovers(out: Path, fingerprint: str, warn: Callable[[str], None] = lambda message: None) -> None:
    """Remove what dead runs left at an up-to-date output (a partitioned run that finds it so takes no
    publication), unless a live run holds its lock: under an output URL, what :func:`remote_output` names (other
    runs' parts said, with their size), writing nothing where one listing shows no parts; beside a directory,
    :func:`~packcli.write.publish.remove_dead_runs`."""
    if not isinstance(out, UrlPath):
        remove_dead_runs(out, fingerprint, warn)
        return
    if not any(_RUN_RECORD.fullmatch(name) for name in file_sizes(out)):
        return
    lock = ObjectLock(f"{out}/{LOCK_NAME}", f"{RUN_PREFIX}cleanup-{secrets.token_hex(4)}")
    if not lock.acquire():
        return  # a live run's: what is there is its own
    try:
        _remove_dead(out, fingerprint, warn)
    finally:
        lock.release()


def _remove_dead(
    out: Path, fingerprint: str, warn: Callable[[str], None], resumable: bool = False
) -> tuple[Existing, str | None]:
    """What the output URL ``out`` holds (its lock held), once dead runs' objects and other runs' parts (each area
    said) are removed in one batch call; a resumable run keeps the parts under the latest run prefix, returned."""
    found = remote_output(out, fingerprint)
    resumed = max((area for area in found.parts if area.startswith(RUN_PREFIX)), default=None) if resumable else None
    parts = {area: sizes for area, sizes in found.parts.items() if area != resumed}
    for area, sizes in sorted(parts.items()):
        warn(parts_removed(out / area, len(sizes), sum(sizes.values())))
    remove_objects([*found.debris, *(url for sizes in parts.values() for url in sorted(sizes))])
    return found.existing, resumed


def _holder_words(holder: dict[str, Any], url: str) -> str:
    """Who holds an output's lock, in words."""
    if not holder:
        return "another run"
    if holder.get("unreadable"):
        written = f"a run whose lock object {url} cannot be read (written {holder['age']:.0f} s ago"
    else:
        beat = max(0.0, time.time() - float(holder["heartbeat"]))
        written = f"pid {holder.get('pid')} on {holder.get('host')} (its last heartbeat {beat:.0f} s ago"
    return f"{written}; taken over once {stale_seconds():.0f} s old)"


def output_state(out: Path, fingerprint: str) -> Existing:
    """What ``out``, a directory or an output URL, holds before a run claims it."""
    if isinstance(out, UrlPath):
        return remote_output(out, fingerprint).existing
    return existing_output(resolved_out(out), fingerprint, out)


class Found(NamedTuple):
    """What an output URL holds: its output, the objects of dead runs, and the parts of unfinished runs by their area
    (a run prefix, or an earlier packcli's ``packcli-resume``), each object's URL with its size."""

    existing: Existing
    debris: list[str]
    parts: dict[str, dict[str, int]]


def remote_output(out: Path, fingerprint: str) -> Found:
    """What the output URL ``out`` holds, from one listing (and its manifest). Dead runs' objects are what run
    prefixes hold that no manifest lists, but unfinished runs' parts (a prefix holding a run record) and strangers.

    Raises:
        PackcliError: ``out`` is an object itself, or holds an object that is not part of a packcli output, or an
            unusable manifest.
    """
    if is_file(str(out)):  # its key would be the prefix's too: a store allows both, a reader sees only one
        raise PackcliError(
            "is an object, not a prefix: an output URL names a prefix to write the output under; choose another --out",
            out,
        )
    sizes = file_sizes(out)
    own = (RUN_PREFIX, f"{RESUME_PREFIX}/")
    foreign = [name for name in sizes if name not in (MANIFEST_NAME, LOCK_NAME) and not name.startswith(own)]
    runs = [name for name in sizes if name.startswith(own)]
    strangers = [name for name in runs if not (_RUN_OBJECT.fullmatch(name) or name.startswith(own[1]))]
    manifest = None
    if MANIFEST_NAME in sizes:
        try:
            manifest = read_manifest(out)
        except PackcliError as exc:
            raise PackcliError(
                f"its manifest is unusable ({exc.message}); packcli replaces only its own outputs: choose another "
                "--out, or remove it yourself",
                out,
            ) from None
    if foreign:
        raise _not_packcli(foreign[0], out)
    listed = {item["file"] for item in listed_files(manifest)} if manifest else set()
    live = {name.split("/", 1)[0] for name in listed}
    areas = {name.split("/", 1)[0] for name in runs if _RUN_RECORD.fullmatch(name)} - live
    parts: dict[str, dict[str, int]] = {area: {} for area in areas}
    debris = []
    for name in runs:
        area = name.split("/", 1)[0]
        if area in areas:
            parts[area][f"{out}/{name}"] = sizes[name]
        elif name not in listed and name not in strangers:
            debris.append(f"{out}/{name}")
    intact = manifest is not None and manifest["fingerprint"] == fingerprint and not file_damage(manifest, sizes)
    if strangers and not intact:  # an up-to-date output leaves them; a run that replaces it would remove them
        raise _not_packcli(strangers[0], out)
    return Found("same" if intact else "absent" if manifest is None else "other", debris, parts)


def _not_packcli(name: str, out: Path) -> PackcliError:
    """The refusal of an output URL holding ``name``, an object packcli did not write."""
    return PackcliError(
        f"holds {name!r}, which is not part of a packcli output: packcli replaces only its own outputs or an empty "
        "prefix; choose another --out, or remove it yourself",
        out,
    )
