"""Publishing an output directory: under a lock beside it (``.NAME.packcli-lock``), a run builds the output in a
staging directory of its own, then swaps it into place whole (one ``renameat2(RENAME_EXCHANGE)`` where the system
has it, else two renames); the manifest, written last, is the commit point.

Only packcli's own work or an empty directory is replaced; signals unwind and remove the staging directory, and what
a killed run left the next run removes. A resumable publication (partitioned runs) stages in
``.NAME.packcli-resume``, which a failed run leaves for its rerun to resume (:mod:`packcli.run.parts`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from packcli.errors import PackcliError
from packcli.format.integrity import listed_files
from packcli.format.manifest import MANIFEST_NAME, read_manifest
from packcli.util.locks import FileLock
from packcli.util.signals import Interrupted, signals_held
from packcli.write.staging import (
    STAGING,
    Existing,
    existing_output,
    in_use,
    out_of_room,
    parts_fingerprint,
    parts_kept,
    remove_debris,
    remove_parts_area,
    remove_path,
    resolved_out,
    sibling,
    up_to_date,
)

__all__ = ["Claim", "Publication", "check_target", "lock_refusal", "remove_dead_runs"]

_NO_DIRECTORY = "cannot create the directory that holds the output"
_RENAME_EXCHANGE = 2  # renameat2's flag and its "relative to the working directory"
_AT_FDCWD = -100


class Claim:
    """What a run's claim on an output holds, on a disk or in a store: unless ``up_to_date``, build into ``staging``
    (manifest last), then ``commit``.

    Args:
        out: the output as given (a directory, a symbolic link written through, or a URL).
        fingerprint: the run identity; an output with the same one and intact shards is up to date.
        inputs: what the run reads; none may lie inside ``out``, nor ``out`` inside them.
        resumable: a partitioned run's, whose parts a failed run leaves for its rerun to resume.
        current: whether the output of this fingerprint at a path is current; one that is not is replaced without
            ``overwrite`` (``pack --tokenizer-backend hf`` on an output another backend encoded).
        warn: told of the parts of another run it removes.
    """

    def __init__(
        self,
        out: Path,
        fingerprint: str,
        overwrite: bool,
        inputs: Sequence[Path] = (),
        resumable: bool = False,
        current: Callable[[Path], bool] = lambda out: True,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.out, self.fingerprint, self.overwrite, self.inputs = out, fingerprint, overwrite, list(inputs)
        self.resumable, self.current, self.warn = resumable, current, warn
        self.up_to_date = False
        self._committed = False


class Publication(Claim):
    """One run's claim on an output directory (a resumable one stages in ``.NAME.packcli-resume``, kept when the run
    starts and when it fails); without a commit, the staging is removed on exit. ``existing``: what ``out`` holds
    (an export passes its own, which knows its files)."""

    def __init__(
        self, *args: Any, existing: Callable[[Path, str, Path], Existing] = existing_output, **claim: Any
    ) -> None:
        super().__init__(*args, **claim)
        self.target = resolved_out(self.out)  # where the output lives: through any link
        self.existing = existing
        one_run = f"{STAGING}-{os.getpid()}-{secrets.token_hex(4)}"
        self.staging = sibling(self.target, "resume" if self.resumable else one_run)
        self._lock = FileLock(sibling(self.target, "lock"))
        self._staged = False

    def __enter__(self) -> Publication:
        check_target(self.out, self.target, self.inputs)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _plain(exc, _NO_DIRECTORY) from None
        locked = False
        refusal = lock_refusal(self.out)  # asked before the lock file is touched: nothing written where it cannot be
        if refusal is None:
            try:
                locked = self._lock.acquire(wait=False)
            except OSError as exc:  # what the system did not say beforehand (a file system that refuses root)
                refusal = _no_lock(self.out, self._lock.path, str(exc.strerror or exc))
        if refusal is not None:  # no lock: an up-to-date output is only read, as a reader reads it
            if self._up_to_date_as_read():
                return self
            raise refusal
        if not locked:
            holder = self._lock.holder()
            raise in_use(f"pid {holder}" if holder else "another process", self.out)
        try:
            with signals_held():  # a partitioned run's parts area sorts out what it may reuse of its resume area
                remove_debris(self.target, None if self.resumable else self.warn)
            existing = self.existing(self.target, self.fingerprint, self.out)
            self.up_to_date = up_to_date(existing, self.overwrite, self.out) and self.current(self.target)
            if not self.up_to_date:
                try:
                    self.staging.mkdir(exist_ok=self.resumable)
                except FileExistsError:  # only a resume area's name can be taken: a file there, not its directory
                    raise PackcliError(
                        "exists and is not a directory (packcli keeps a partitioned run's parts there); move it away "
                        "or choose another --out",
                        self.staging,
                    ) from None
                self._staged = True
        except BaseException:
            self._close()
            raise
        return self

    def _up_to_date_as_read(self) -> bool:
        """Whether the output is up to date, checked as a reader (``stats``, the loader) checks it, with no lock:
        none can be made beside it (a read-only file system, a directory this user may not write), and an up-to-date
        run writes nothing; a writer elsewhere swaps a whole output into place, so one whole output is seen. A
        directory that is not packcli's is refused for that, the more useful reason."""
        existing = self.existing(self.target, self.fingerprint, self.out)
        self.up_to_date = existing == "same" and self.current(self.target)
        return self.up_to_date

    def commit(self) -> None:
        """Swap the staged output (manifest written) into place, then remove the previous one (what of it cannot be
        removed is named in a warning). Only what the staged manifest lists is published: another file there was
        written by another run's process, and the output would not verify (an export lists its files in its own
        record, and is not checked here)."""
        if (self.staging / MANIFEST_NAME).is_file():
            listed = {MANIFEST_NAME, *(item["file"] for item in listed_files(read_manifest(self.staging)))}
            foreign = sorted(path.name for path in self.staging.iterdir() if path.name not in listed)
            if foreign:
                raise PackcliError(
                    f"not publishing {self.out}: {len(foreign)} file(s) in its staging directory are not in "
                    f"its manifest ({foreign[0]}...): another process wrote there; rerun to pack again",
                    self.staging,
                )
        with signals_held():
            try:
                _fsync_directory(self.staging)
                retired = _swap_into_place(self.staging, self.target)
                self._committed = True
                _sync_parent(self.target.parent)
                if retired is not None:
                    remove_path(retired)
            except OSError as exc:
                raise _plain(exc, "cannot move the new output into place") from None
        if retired is not None and os.path.lexists(retired):  # it held a file that may not be removed
            self.warn(
                f"the previous output could not be removed whole: what is left of it is in {retired}; the new "
                "output is complete, remove that yourself"
            )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._close()
        if isinstance(error, Interrupted) and str(error) == str(Interrupted()):  # say what Ctrl-C left
            if self._committed:
                left = f"interrupted after {self.out} was published: the output is complete"
            elif self.resumable and self._staged:
                left = f"interrupted; {parts_kept(self.staging)}: rerun the same command to resume"
            else:
                left = "interrupted; no output was written" + (
                    f" ({self.out} is as it was)" if self.target.exists() else ""
                )
            raise Interrupted(left) from None
        out_of_room(error, self.out, self.target.exists(), self.staging if self.resumable else None)

    def _close(self) -> None:
        """Remove the staging unless committed (or resumable) and unlock (removing the lock file), signals held."""
        with signals_held():
            if self._staged and not self._committed and not self.resumable:
                remove_path(self.staging)
            self._lock.release(remove=True)


def lock_refusal(out: Path) -> PackcliError | None:
    """Why a run could not take the lock beside the output directory ``out``, as the run says it, found without
    writing anything (``pack --dry-run``): the directory that would hold the lock, or the first one that is missing
    on its way, cannot be made or written there (a read-only file system, a directory this user may not write).
    None where the system raises no such objection."""
    target = resolved_out(out)
    place, missing = target.parent, None
    while not place.exists():
        place, missing = place.parent, place
    lock = sibling(target, "lock")
    if os.access(place, os.W_OK | os.X_OK) and (missing is not None or _openable(lock)):
        return None
    reason = os.strerror(errno.EROFS if os.statvfs(place).f_flag & os.ST_RDONLY else errno.EACCES)
    if missing is not None:  # as Path.mkdir(parents=True) says it: the first directory it cannot make
        return PackcliError(f"{_NO_DIRECTORY}: {reason}", missing)
    return _no_lock(out, lock, reason)


def _openable(lock: Path) -> bool:
    """Whether the lock file, if a killed run left one, can be opened for reading and writing, as a run opens it."""
    return not os.path.lexists(lock) or os.access(lock, os.R_OK | os.W_OK)


def _no_lock(out: Path, lock: Path, reason: str) -> PackcliError:
    """The refusal of a run that cannot make or lock its lock file beside ``out``, naming the --out it was given."""
    return PackcliError(f"cannot create or lock the output's lock file ({lock.name}) beside it: {reason}", out)


def remove_dead_runs(out: Path, fingerprint: str, warn: Callable[[str], None] = lambda message: None) -> None:
    """Remove what killed runs left beside the up-to-date output directory ``out`` unless a live run holds its lock:
    their debris, and the resume area, silently where the run of ``fingerprint`` left it (killed between the swap
    and the removal) or its record is gone, else saying so. One that cannot take the lock leaves everything."""
    target = resolved_out(out)
    lock = FileLock(sibling(target, "lock"))
    try:
        if not lock.acquire(wait=False):
            return
    except OSError:
        return
    try:
        with signals_held():
            resume = sibling(target, "resume")
            if resume.is_dir() and not resume.is_symlink() and parts_fingerprint(resume) in (None, fingerprint):
                remove_parts_area(resume)
            remove_debris(target, warn)
    finally:
        lock.release(remove=True)


def check_target(out: Path, target: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output that cannot be swapped into place whole (the root, the current directory, a mount point,
    a path under a file) or that would cover an input: an input inside it, or it inside an input directory."""
    if target.parent == target:
        raise PackcliError("cannot write an output over the filesystem root; choose another --out", out)
    try:
        current = Path.cwd().resolve()
    except OSError:  # the working directory was removed
        current = None
    if target == current:
        raise PackcliError(
            "is the current directory, which the new output would replace whole (this shell would be left in "
            "the old, removed one); choose a directory inside it as --out (packed, say)",
            out,
        )
    if _is_mount_point(target):
        raise PackcliError(
            "is a mount point: packcli swaps a new output directory into place whole, which a mount point "
            "cannot be; choose a directory inside it as --out",
            out,
        )
    for above in reversed(target.parents):
        if above.exists() and not above.is_dir():
            raise PackcliError("exists and is not a directory; choose another --out", above)
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


def _is_mount_point(path: Path) -> bool:
    """Whether ``path`` is a mount point: another device, or listed in ``/proc/self/mountinfo`` (a bind mount of
    the same file system, which ``os.path.ismount`` cannot tell)."""
    if os.path.ismount(path):
        return True
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    points = {line.split(" ")[4] for line in lines if line.count(" ") >= 4}
    escaped = str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    return escaped in points


def _swap_into_place(staging: Path, target: Path) -> Path | None:
    """Put ``staging`` at ``target``, with the mode of the directory it replaces, by one atomic exchange (Linux
    ``renameat2``) where the system and file system can, else two renames; returns the directory now holding what
    was there (to remove), if any."""
    if not target.exists():
        os.replace(staging, target)
        return None
    os.chmod(staging, stat.S_IMODE(target.stat().st_mode))  # the directory keeps the mode its owner gave it
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(staging), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE) == 0:
            return staging
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), str(target))
    old = sibling(target, f"old-{os.getpid()}-{secrets.token_hex(4)}")
    os.replace(target, old)
    os.replace(staging, target)
    return old


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sync_parent(path: Path) -> None:
    """Flush the swap in the directory that holds the output to disk, where this user may read that directory: one
    that may only be written and entered cannot be opened to sync, and the swap stands all the same."""
    with contextlib.suppress(PermissionError):
        _fsync_directory(path)


def _plain(exc: OSError, what: str) -> PackcliError:
    """An OS error as one plain line naming the file (no ``[Errno N]``)."""
    return PackcliError(f"{what}: {exc.strerror or exc}", exc.filename)
