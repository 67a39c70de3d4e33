"""Advisory file locks (``fcntl.flock``) that name their holder: one writer per output, one cache update at a time.

An exclusive holder writes its pid into the lock file, so a refused run can say who holds it. A lock dies with its
process (the kernel drops it), so a killed run never leaves a lock that blocks forever. A holder may delete the lock
file as it releases it (``release(remove=True)``): a waiter that then gets the lock on the deleted file sees that
the path no longer names the file it locked and starts again, so two runs can never both hold the lock of a path.
write/publish takes the output lock with it, encode/cache the cache lock, loader/local_copy a cached copy's. A lock
is its process's alone: a forked child (a partition worker) holds none of its parent's, so a killed run's lock is
free as soon as the run is gone, not once its last worker is.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["FileLock"]

_held: set[int] = set()  # the descriptors of the locks this process holds


def _leave_locks_to_parent() -> None:
    """In a forked child: each inherited lock descriptor is pointed at /dev/null, which drops the child's share of
    its parent's lock while the descriptor stays a valid one (closed by nobody else in the meantime)."""
    if not _held:
        return
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd in _held:
        os.dup2(devnull, fd)
    os.close(devnull)
    _held.clear()


os.register_at_fork(after_in_child=_leave_locks_to_parent)


class FileLock:
    """A lock on ``path`` (created if absent). Not re-entrant; one instance per acquisition.

    Args:
        path: the lock file; its directory must exist.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, shared: bool = False, wait: bool = True) -> bool:
        """Take the lock (exclusive unless ``shared``); returns False when ``wait`` is off and another holds it.

        Raises:
            OSError: the lock file cannot be created or opened (an unwritable directory).
        """
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)  # the previous holder removed the file as it released: lock the path's new file
        self._fd = fd
        _held.add(fd)
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def holder(self) -> int | None:
        """The pid the current exclusive holder wrote, if it can be read (a lock being taken may not have it yet)."""
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def release(self, remove: bool = False) -> None:
        """Let go of the lock; with ``remove`` (exclusive holders only) delete the lock file first."""
        if self._fd is None:
            return
        if remove:
            self.path.unlink(missing_ok=True)
        _held.discard(self._fd)
        os.close(self._fd)  # closing the last descriptor releases the flock
        self._fd = None

    @property
    def held(self) -> bool:
        """Whether this instance holds the lock."""
        return self._fd is not None
