"""``ObjectLock``: one writer per output URL, through a lock object that is created only if absent (S3's
conditional ``PutObject`` with ``If-None-Match: *``), so of two runs that start together exactly one gets it.

Invariants: the lock object names its holder (host, pid, run) and the time of its last heartbeat, rewritten every
``HEARTBEAT_S`` while held; a lock is stale (and taken over) when its holder's process is gone from this host, or its
heartbeat is older than ``STALE_S`` (a holder on another host that died). A lock object whose body cannot be read
(damaged, not a holder, or a read error) names no holder to ask, so only its age can say its run is dead: it is
held until the store's own modification time of it is older than ``STALE_S`` (a live holder rewrites it every
``HEARTBEAT_S``). Never is a lock taken over for what its body fails to say. Releasing removes it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

from packcli.errors import PackcliError
from packcli.storage.objects import create_object, exists, object_info, read_object, remove_objects, write_object

__all__ = ["HEARTBEAT_S", "STALE_S", "ObjectLock"]

HEARTBEAT_S = 60.0
STALE_S = 600.0


class ObjectLock:
    """The lock object at ``url``; ``run`` names the holder's run in it."""

    def __init__(self, url: str, run: str) -> None:
        self.url = url
        self.run = run
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.seen: dict[str, Any] | None = None  # the live holder that made ``acquire`` fail, as read then

    def _body(self) -> bytes:
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "run": self.run, "heartbeat": time.time()}
        return json.dumps(holder, sort_keys=True).encode()

    def acquire(self) -> bool:
        """Take the lock; False when a live run holds it. A stale lock is removed and taken over once."""
        for _ in range(2):
            if create_object(self.url, self._body()):
                self._beat = threading.Thread(target=self._heartbeat, name="packcli-lock-heartbeat", daemon=True)
                self._beat.start()
                return True
            holder = self._live_holder()
            if holder is not None:
                self.seen = holder  # not read again: it may finish and release in between
                return False
            remove_objects([self.url])
        return False

    def _live_holder(self) -> dict[str, Any] | None:
        """Who holds the lock while its run may be alive (host, pid, run, heartbeat; for a lock that cannot be read,
        ``unreadable`` and its ``age`` in seconds); None when it is gone or stale, to be taken over.

        Raises:
            PackcliError: the store cannot say whether the lock object exists.
        """
        try:
            written = object_info(self.url).mtime_ns / 1e9
        except PackcliError:
            if not exists(self.url):
                return None  # released meanwhile
            return {"unreadable": True, "age": 0.0}  # there, but not even its age can be read: held
        try:
            content = json.loads(read_object(self.url))
        except (PackcliError, ValueError):
            if not exists(self.url):
                return None  # released between its facts and its body
            content = None
        if _is_holder(content):
            return None if _stale(content) else content
        age = time.time() - written
        return None if age > STALE_S else {"unreadable": True, "age": age}

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            write_object(self.url, self._body())

    def release(self) -> None:
        """Stop the heartbeat and remove the lock object."""
        if self._beat is None:
            return
        self._stop.set()
        self._beat.join()
        self._beat = None
        remove_objects([self.url])


def _is_holder(content: Any) -> bool:
    """Whether a lock object's body names a holder: its host, pid and heartbeat, as :meth:`ObjectLock._body` writes."""
    return (
        isinstance(content, dict)
        and isinstance(content.get("host"), str)
        and isinstance(content.get("pid"), int)
        and isinstance(content.get("heartbeat"), (int, float))
    )


def _stale(holder: dict[str, Any]) -> bool:
    if time.time() - float(holder["heartbeat"]) > STALE_S:
        return True
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False
