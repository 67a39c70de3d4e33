"""Publishing an output: one run at a time builds it in a staging directory of its own beside the output, then
swaps it into place whole. The manifest, written last, is the commit point.

Invariants:

- Only packcli's own work is replaced: an output (a readable manifest, its shards and packcli's temporary files,
  and the cache files ``datasets`` derived from those shards, :data:`DERIVED_CACHE`) or an empty directory. A
  directory holding an input, or any other file, is refused, naming it.
- One writer per output: an exclusive ``fcntl.flock`` on ``.NAME.packcli-lock`` beside it, held for the whole run;
  a second run is refused at once with "in use by pid N".
- An existing output stays in place until the new one is: on Linux the two directories are exchanged by one atomic
  ``renameat2(RENAME_EXCHANGE)``; where that is missing, by two renames in a row. The parent directory is fsynced
  after, so the swap survives a power cut.
- Nothing is left behind: SIGTERM, SIGHUP and Ctrl-C (through the handler the CLI's ``main`` installs,
  :mod:`packcli.util.signals`) unwind and remove the staging directory, and wait while the output is swapped; what
  a run killed outright leaves (``kill -9``, power loss, a library caller's default SIGTERM) the next run removes,
  under the lock.
- An output is never the filesystem root, a mount point or the process's current directory: none can be swapped
  into place whole (the current directory would be left behind, removed, as the shell's).
- A symlinked output (``--out`` linking to scratch storage) is written through: the output lands in the link's
  target and the link stays a link.
- A resumable publication (partitioned runs) stages in one directory per output, ``.NAME.packcli-resume``, that a
  failed, interrupted or killed run leaves in place: the rerun finds the partitions committed there and decides
  what to reuse (:mod:`packcli.run.parts`). Any other run that takes the lock removes it, saying so with its size:
  the parts of a run it will not resume outlive no later run on the output.

Usage::

    with Publication(out, fingerprint, overwrite, inputs=files) as publication:
        if not publication.up_to_date:
            build_into(publication.staging)   # shards, then manifest.json last
            publication.commit()              # staging -> out; without it, the staging is removed on exit
"""

from __future__ import annotations

import ctypes
import errno
import glob
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from packcli.errors import PackcliError
from packcli.format.manifest import EXPORT_NAME, MANIFEST_NAME, SHARD_FILE, read_manifest, shard_path
from packcli.format.sidecars import SIDECAR_FILE, entry_files
from packcli.util.locks import FileLock
from packcli.util.signals import Interrupted, signals_held

__all__ = [
    "DERIVED_CACHE",
    "FULL_DISK",
    "OWN_FILE",
    "RUN_RECORD",
    "Existing",
    "Publication",
    "directory_names",
    "existing_output",
    "has_size",
    "in_use",
    "out_of_room",
    "parts_fingerprint",
    "parts_removed",
    "remove_dead_runs",
    "staging_family",
    "up_to_date",
]

# Files a packcli output may hold besides its manifest and listed shards: what an interrupted write leaves.
OWN_FILE = re.compile(
    rf"(manifest\.json|tokens|{SHARD_FILE.pattern}|{SIDECAR_FILE.pattern})\.tmp(\.mask)?|{SHARD_FILE.pattern}"
    rf"|{SIDECAR_FILE.pattern}"
)
# What ``datasets`` writes beside the files of a Dataset it maps or filters (``cache-FINGERPRINT[_RANK_of_N].arrow``,
# FINGERPRINT being the 16 hex digits of its hashes): results derived from the shards that ``packcli.pack()`` returns
# memory-mapped. Stale once the output is replaced, so they go with it when they are plain files; no other file,
# and no directory or link of such a name, is ever replaced.
DERIVED_CACHE = re.compile(r"cache-[0-9a-f]{16}(_\d{5}_of_\d{5})?\.arrow")
RUN_RECORD = "run.json"  # a parts area's run record (packcli.run.parts)
STAGING = "staging"  # a one-run staging directory is .NAME.packcli-staging-PID-RANDOM
_ONE_RUN_STAGING = re.compile(rf"(\..+\.packcli-{STAGING})-\d+-[0-9a-f]+")
# Hidden siblings of an output that only a run of packcli makes (the lock file aside): removed once dead.
_DEBRIS = (f"{STAGING}-*", "old-*", "partial", "old")
# Errors of a write that ran out of room: the disk or quota is full, or a file reached its size limit.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

Existing = Literal["absent", "same", "other"]


class Publication:
    """One run's claim on an output directory: the lock, its staging area, and the final swap into place.

    Args:
        out: the output directory as given (it may be a symbolic link, which is written through).
        fingerprint: the run identity; an output with the same one and intact shards is up to date.
        overwrite: replace an existing packcli output of another fingerprint.
        inputs: the files and directories the run reads; none may lie inside ``out``, nor ``out`` inside them.
        resumable: stage in ``.NAME.packcli-resume``, kept (not emptied) when the run starts and when it fails.
        existing: what ``out`` holds (default :func:`existing_output`; an export passes its own, which knows its
            files and refuses another export itself, saying what differs).
        current: whether the output of this fingerprint at a path is current (default: it is); one that is not is
            replaced without ``overwrite``, being this run's own (``pack --tokenizer-backend hf`` on an output
            another backend encoded).
        warn: told of the resume area of another run it removes.
    """

    def __init__(
        self,
        out: Path,
        fingerprint: str,
        overwrite: bool,
        inputs: Sequence[Path] = (),
        resumable: bool = False,
        existing: Callable[[Path, str, Path], Existing] | None = None,
        current: Callable[[Path], bool] = lambda out: True,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.out = out
        self.target = out.resolve()  # where the output lives: through any link
        self.fingerprint = fingerprint
        self.overwrite = overwrite
        self.inputs = list(inputs)
        self.resumable = resumable
        self.existing = existing or existing_output
        self.current = current
        self.warn = warn
        self.staging = self._sibling("resume" if resumable else f"{STAGING}-{os.getpid()}-{secrets.token_hex(4)}")
        self.up_to_date = False
        self._lock = FileLock(self._sibling("lock"))
        self._committed = False
        self._staged = False

    def _sibling(self, kind: str) -> Path:
        return _sibling(self.target, kind)

    def __enter__(self) -> Publication:
        if self.target.parent == self.target:
            raise PackcliError("cannot write an output over the filesystem root; choose another --out", self.out)
        if self.target == _current_directory():
            raise PackcliError(
                "is the current directory, which the new output would replace whole (this shell would be left in "
                "the old, removed one); choose a directory inside it as --out (packed, say)",
                self.out,
            )
        if _is_mount_point(self.target):
            raise PackcliError(
                "is a mount point: packcli swaps a new output directory into place whole, which a mount point "
                "cannot be; choose a directory inside it as --out",
                self.out,
            )
        _check_no_file_above(self.target)
        _check_inputs(self.out, self.target, self.inputs)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _plain(exc, "cannot create the directory that holds the output") from None
        try:
            locked = self._lock.acquire(wait=False)
        except OSError as exc:
            raise PackcliError(
                f"cannot create or lock the output's lock file ({self._lock.path.name}) beside it: "
                f"{exc.strerror or exc}",
                self.out,
            ) from None
        if not locked:
            holder = self._lock.holder()
            raise in_use(f"pid {holder}" if holder else "another process", self.out)
        try:
            with signals_held():
                _remove_debris(self.target)
                if not self.resumable:  # a partitioned run's parts area sorts out what it may reuse
                    _remove_resume_area(self.target, self.warn)
            existing = self.existing(self.target, self.fingerprint, self.out)
            self.up_to_date = up_to_date(existing, self.overwrite, self.out) and self.current(self.target)
            if self.up_to_date:
                return self
            self.staging.mkdir(exist_ok=self.resumable)
            self._staged = True
        except BaseException as error:
            self._close(error)
            raise
        return self

    def commit(self) -> None:
        """Swap the staged output (manifest written) into place; the previous output, if any, is then removed."""
        self._refuse_unlisted()
        with signals_held():
            try:
                _fsync_directory(self.staging)
                old = self._sibling(f"old-{os.getpid()}-{secrets.token_hex(4)}")
                retired = _swap_into_place(self.staging, self.target, old)
                self._committed = True
                _fsync_directory(self.target.parent)
                if retired is not None:
                    _remove(retired)
            except OSError as exc:
                raise _plain(exc, "cannot move the new output into place") from None

    def _what_an_interruption_left(self) -> str:
        """What Ctrl-C left of this publication, in words: the output complete, the resume area kept, or nothing."""
        if self._committed:
            return f"interrupted after {self.out} was published: the output is complete"
        if self.resumable and self._staged:
            return f"interrupted; {_kept(self.staging)}: rerun the same command to resume"
        return "interrupted; no output was written" + (f" ({self.out} is as it was)" if self.target.exists() else "")

    def _refuse_unlisted(self) -> None:
        """Publish only what the staged manifest lists: a file beside it was written by no part of this run (a
        process of another run writing here), and the output would not verify. An export, which lists its files in
        its own record, is not a pack output and is not checked here."""
        if not (self.staging / MANIFEST_NAME).is_file():
            return
        shards = read_manifest(self.staging)["shards"]
        listed = {MANIFEST_NAME, *(str(item["file"]) for shard in shards for item in entry_files(shard))}
        foreign = sorted(path.name for path in self.staging.iterdir() if path.name not in listed)
        if foreign:
            raise PackcliError(
                f"not publishing {self.out}: {len(foreign)} file(s) in its staging directory are not in "
                f"its manifest ({foreign[0]}...): another process wrote there; rerun to pack again",
                self.staging,
            )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._close(error)
        if isinstance(error, Interrupted) and str(error) == str(Interrupted()):
            raise Interrupted(self._what_an_interruption_left()) from None
        full = out_of_room(error, self.out, self.target.exists(), self.staging if self.resumable else None)
        if full is not None:
            raise full from None

    def _close(self, error: BaseException | None) -> None:
        """Remove the staging unless committed (or resumable) and unlock (removing the lock file), signals held."""
        with signals_held():
            if self._staged and not self._committed and not self.resumable:
                _remove(self.staging)
            self._lock.release(remove=True)


def remove_dead_runs(
    out: Path, finished: Callable[[Path], bool], warn: Callable[[str], None] = lambda message: None
) -> None:
    """Remove what killed runs left beside the output directory ``out``, unless a live run holds its lock: their
    debris, and the resume area: silently where ``finished(area)`` says the run that committed the output left it (a
    kill between the swap and the removal leaves the replaced output there), else saying so with its size. For a run
    that finds its output up to date and so takes no publication; one that cannot take the lock (a live run, a
    directory it may not write) leaves everything."""
    target = out.resolve()
    lock = FileLock(_sibling(target, "lock"))
    try:
        if not lock.acquire(wait=False):
            return
    except OSError:
        return
    try:
        with signals_held():
            _remove_debris(target)
            resume = _sibling(target, "resume")
            if resume.is_dir() and not resume.is_symlink() and finished(resume):
                _remove(resume)
            _remove_resume_area(target, warn)
    finally:
        lock.release(remove=True)


def _remove_resume_area(target: Path, warn: Callable[[str], None]) -> None:
    """Remove the resume area beside the output ``target`` (the caller holds its lock), saying so with its size."""
    area = _sibling(target, "resume")
    if not os.path.lexists(area):
        return
    files = [path for path in area.rglob("*") if path.is_file() and not path.is_symlink()] if area.is_dir() else []
    warn(parts_removed(area, len(files), sum(path.stat().st_size for path in files)))
    _remove(area)


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


def _sibling(target: Path, kind: str) -> Path:
    """A hidden sibling of the output directory ``target`` that packcli makes: its lock, staging, resume area."""
    return target.parent / f".{target.name}.packcli-{kind}"


def _remove_debris(target: Path) -> None:
    """Remove what dead runs left beside the output ``target`` (the caller holds its lock: no live run owns any)."""
    for pattern in _DEBRIS:
        for path in target.parent.glob(f".{glob.escape(target.name)}.packcli-{pattern}"):
            _remove(path)


def out_of_room(error: BaseException | None, out: Path, earlier: bool, parts: Path | None) -> PackcliError | None:
    """A write that ran out of room (``FULL_DISK``) as one line naming the output ``out``: nothing published, the
    ``earlier`` output intact, and where a partitioned run keeps the ``parts`` it committed; None for any other
    error."""
    if not (isinstance(error, OSError) and error.errno in FULL_DISK):
        return None
    return PackcliError(
        f"cannot write {out}: {error.strerror or error}; nothing was published"
        + (", the earlier output is intact" if earlier else "")
        + (f"; {_kept(parts)}: free space, then rerun the same command to resume" if parts is not None else "")
    )


def _kept(parts: Path) -> str:
    return f"the partitions committed so far are kept in {parts}"


def up_to_date(existing: Existing, overwrite: bool, shown: Path) -> bool:
    """Whether a run may skip its work (the same output is there); it may write over "other" only with
    ``overwrite``.

    Raises:
        PackcliError: another packcli output is there and ``overwrite`` is off.
    """
    if existing == "other" and not overwrite:
        raise PackcliError(
            "holds another packcli output (other inputs, tokenizer or options, or this run's output with a shard "
            "missing or not its listed size); pass --overwrite to replace it",
            shown,
        )
    return existing == "same"


def in_use(holder: str, shown: Path) -> PackcliError:
    """The refusal of a second run on an output ``holder`` is writing."""
    return PackcliError(
        f"in use by {holder}: another packcli run is writing this output; wait for it to finish or choose another "
        "--out",
        shown,
    )


def existing_output(target: Path, fingerprint: str, shown: Path | None = None) -> Existing:
    """What ``target`` holds: "absent" (nothing, or an empty directory), "same" (a complete output of this
    fingerprint) or "other" (another packcli output, which ``--overwrite`` may replace).

    Raises:
        PackcliError: ``target`` is not a directory, or is an export, or holds a file that is not part of a packcli
            output (named, as ``shown``): such a directory is never replaced. ``datasets``' cache files derived from
            the shards (:data:`DERIVED_CACHE`) do not stop a replacement: they are removed with the old output.
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
                "with --overwrite; choose another --out",
                shown,
            ) from None
        stranger = next((name for name in names if not OWN_FILE.fullmatch(name)), names[0])
        why = f"no {MANIFEST_NAME}" if MANIFEST_NAME not in names else f"its manifest is unusable: {exc.message}"
        raise PackcliError(
            f"holds {stranger!r} but is not a packcli output ({why}); packcli replaces only its own outputs or an "
            "empty directory: choose another --out, or remove it yourself",
            shown,
        ) from None
    files = [item for shard in manifest["shards"] for item in entry_files(shard)]  # shards and sidecars
    listed = {MANIFEST_NAME, *(item["file"] for item in files)}
    intact = manifest["fingerprint"] == fingerprint and all(
        has_size(shard_path(target, item["file"]), item["bytes"]) for item in files
    )
    if intact:
        return "same"
    foreign = next(
        (
            name
            for name in names
            if name not in listed and not (OWN_FILE.fullmatch(name) or _derived_cache(target / name))
        ),
        None,
    )
    if foreign is not None:
        raise PackcliError(
            f"holds {foreign!r}, which is not part of the packcli output there: packcli replaces only its own "
            "outputs; move that file away or choose another --out",
            shown,
        )
    return "other"


def _derived_cache(path: Path) -> bool:
    """Whether ``path`` is a cache file ``datasets`` wrote: a plain file (not a link) named as :data:`DERIVED_CACHE`."""
    return DERIVED_CACHE.fullmatch(path.name) is not None and path.is_file() and not path.is_symlink()


def directory_names(target: Path, shown: Path) -> list[str]:
    """The names ``target`` holds, sorted; none when it does not exist.

    Raises:
        PackcliError: ``target`` exists and is not a directory (named as ``shown``).
    """
    if not target.exists():
        return []
    if not target.is_dir():
        raise PackcliError("exists and is not a directory; choose another --out", shown)
    return sorted(path.name for path in target.iterdir())


def has_size(path: Path, size: int) -> bool:
    """Whether ``path`` is a file of ``size`` bytes (a listed file of an output or export, intact as listed)."""
    return path.is_file() and path.stat().st_size == size


def _current_directory() -> Path | None:
    """This process's working directory, resolved; None where it was removed."""
    try:
        return Path.cwd().resolve()
    except OSError:
        return None


def _is_mount_point(path: Path) -> bool:
    """Whether ``path`` is a mount point: another device, or (a bind mount of the same file system, which
    ``os.path.ismount`` cannot tell) listed in ``/proc/self/mountinfo`` where the system has one."""
    if os.path.ismount(path):
        return True
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    points = {line.split(" ")[4] for line in lines if line.count(" ") >= 4}
    escaped = str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    return escaped in points


def _check_no_file_above(target: Path) -> None:
    """Refuse an output under a path that exists and is not a directory (a file in the way of its parents).

    Raises:
        PackcliError: naming that path.
    """
    for above in reversed(target.parents):
        if above.exists() and not above.is_dir():
            raise PackcliError("exists and is not a directory; choose another --out", above)


def _check_inputs(out: Path, target: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output that would cover an input: an input inside it, or it inside an input directory."""
    for path in inputs:
        resolved = path.resolve()
        if resolved.is_relative_to(target):
            raise PackcliError(
                f"the input {path} is or lies inside the output directory: packcli never writes over its "
                "inputs; choose another --out",
                out,
            )
        if path.is_dir() and target.is_relative_to(resolved):
            raise PackcliError(
                f"the output directory lies inside the input directory {path}, whose files it would mix with; "
                "choose an --out outside it",
                out,
            )


def staging_family(staging: Path) -> Path:
    """What every run's staging directory for one output has in common: a one-run staging directory without its
    run's pid and random part, any other path as it is. Node-local scratch named by it is found by the next run on
    the output after a kill -9 (which removes nothing)."""
    match = _ONE_RUN_STAGING.fullmatch(staging.name)
    return staging.with_name(match.group(1)) if match else staging


def _swap_into_place(staging: Path, target: Path, old: Path) -> Path | None:
    """Put ``staging`` at ``target``; returns the directory now holding what was there before (to remove), if any.
    ``old`` is where that goes when the system cannot exchange two directories in one step."""
    if not target.exists():
        os.replace(staging, target)
        return None
    if _exchange(staging, target):
        return staging
    os.replace(target, old)
    os.replace(staging, target)
    return old


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Atomically exchange two paths (Linux ``renameat2``); False where the system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a directory tree; absent is fine."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _plain(exc: OSError, what: str) -> PackcliError:
    """An OS error as one plain line naming the file (no ``[Errno N]``)."""
    return PackcliError(f"{what}: {exc.strerror or exc}", exc.filename)
