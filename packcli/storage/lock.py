"""``ObjectLock``: one writer per output URL, through a lock object that names its run by a token of its own and
lives by its heartbeat.

Invariants:

- The lock object is created only if absent (S3's ``If-None-Match: *``): of two runs that start together, one
  gets it.
- Its body names the holder (its run, a token unique to this acquisition, and for people its host and pid) and the
  time of its last heartbeat. The holder rewrites it every tenth of :func:`stale_seconds`, each time only if the
  object is still the version it last wrote (``If-Match`` its ETag): it never writes over a lock another run took.
- A lock lives by its heartbeat alone (a pid says nothing across hosts or containers): it is stale once its
  heartbeat is older than :func:`stale_seconds`; one whose body names no holder, once the store's modification time
  of it is that old. A stale lock is taken over only by a conditional write on the version read stale, so of the
  runs that read it stale exactly one gets it; never by removing it and creating another.
- A renewal that fails is retried at the next beat (with a warning); a lock that cannot be renewed before it would
  turn stale, or that another run took, is lost: the heartbeat calls ``on_lost`` once (the publication stops the
  run) and :meth:`ObjectLock.check` raises one line naming it.
- Release removes the lock only while it is the version this run last wrote (a conditional removal).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from packcli.errors import PackcliError
from packcli.storage.objects import (
    create_object,
    exists,
    object_info,
    read_object,
    remove_object_if,
    replace_object,
    require_conditional_writes,
)

__all__ = ["STALE_S", "STALE_VARIABLE", "ObjectLock", "stale_seconds"]

STALE_S = 600.0  # how long a lock lives without a heartbeat, unless STALE_VARIABLE says otherwise
STALE_VARIABLE = "PACKCLI_LOCK_STALE_S"
_BEATS = 10  # heartbeats a lock gets within its stale time: as many chances to renew it
_ATTEMPTS = 5  # looks at a lock that changes while a run tries to take it


def stale_seconds() -> float:
    """How long an output URL's lock lives without a heartbeat: ``PACKCLI_LOCK_STALE_S`` seconds, else 600.

    Raises:
        PackcliError: the variable is not a positive number.
    """
    named = os.environ.get(STALE_VARIABLE)
    if not named:
        return STALE_S
    try:
        seconds = float(named)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        raise PackcliError(f"{STALE_VARIABLE}={named} is not a positive number of seconds; unset it for 600")
    return seconds


class ObjectLock:
    """The lock object at ``url``; ``run`` names the holder's run in it.

    Args:
        url: the lock object.
        run: the holder's run, as its lock names it.
        warn: told of a renewal that failed and is retried.
        on_lost: called (from the heartbeat's thread, once) when the lock is lost.
    """

    def __init__(
        self,
        url: str,
        run: str,
        warn: Callable[[str], None] = lambda message: None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.url = url
        self.run = run
        self.token = secrets.token_hex(16)
        self.seen: dict[str, Any] | None = None  # the live holder that made ``acquire`` fail, as read then
        self.lost: str | None = None  # why the lock is no longer this run's
        self._warn = warn
        self._on_lost = on_lost
        self._stale = stale_seconds()
        self._tag = ""  # the version of the lock object this run last wrote
        self._stop = threading.Event()
        self._ending = threading.Lock()  # a loss is reported only while the lock is held, never after release
        self._beat: threading.Thread | None = None

    def _body(self) -> bytes:
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "run": self.run,
            "token": self.token,
            "heartbeat": time.time(),
        }
        return json.dumps(holder, sort_keys=True).encode()

    def acquire(self) -> bool:
        """Take the lock; False when a live run holds it (``seen`` says who). A stale lock is taken over by a
        conditional write on the version read stale: of the runs that read it so, one gets it.

        Raises:
            PackcliError: the store takes no conditional write packcli makes, or refused a request.
        """
        require_conditional_writes(self.url)
        for _ in range(_ATTEMPTS):
            tag = create_object(self.url, self._body())
            if tag is None:
                found = self._holder()
                if found is None:
                    continue  # released meanwhile: create it
                version, holder = found
                if holder is not None:
                    self.seen = holder  # not read again: it may finish and release in between
                    return False
                tag = replace_object(self.url, self._body(), version)
                if tag is None:
                    continue  # another run wrote it first: look again
            self._tag = tag
            self._beat = threading.Thread(target=self._heartbeat, name="packcli-lock-heartbeat", daemon=True)
            self._beat.start()
            return True
        return False

    def _holder(self) -> tuple[str, dict[str, Any] | None] | None:
        """The lock's version tag and who holds it while it lives (host, pid, run, token, heartbeat; for a lock
        that cannot be read, ``unreadable`` and its ``age`` in seconds), the holder None when it is stale; None
        when no lock is there, or it changed while read. The version is read before the body: a stale body is never
        paired with a newer version, so a takeover on it cannot write over a live lock."""
        try:
            facts = object_info(self.url)
        except PackcliError:
            if not exists(self.url):
                return None  # released meanwhile
            return "", {"unreadable": True, "age": 0.0}  # there, but not even its age can be read: held
        try:
            content = json.loads(read_object(self.url))
        except (PackcliError, ValueError):
            if self._changed_from(facts.etag):
                return None  # released or rewritten while its body was read: look again
            content = None
        if _is_holder(content):
            return facts.etag or "", None if time.time() - float(content["heartbeat"]) > self._stale else content
        age = time.time() - facts.mtime_ns / 1e9
        return facts.etag or "", None if age > self._stale else {"unreadable": True, "age": age}

    def _changed_from(self, tag: str | None) -> bool:
        """Whether the lock object is gone, or no longer at version ``tag``."""
        try:
            return object_info(self.url).etag != tag
        except PackcliError:
            return not exists(self.url)

    def _heartbeat(self) -> None:
        """Renew the lock every beat, only while it is this run's version; retry a failure while the lock lives."""
        interval = self._stale / _BEATS
        renewed = time.monotonic()
        while not self._stop.wait(interval):
            try:
                tag = replace_object(self.url, self._body(), self._tag)
            except PackcliError as exc:
                unrenewed = time.monotonic() - renewed
                if unrenewed + interval < self._stale:
                    self._warn(f"cannot renew the lock {self.url} ({exc.message}); retrying in {interval:g} s")
                    continue
                self._lose(f"not renewed for {unrenewed:.0f} s ({exc.message}): another run may take it now")
                return
            if tag is None:
                self._lose("another run took it over")
                return
            self._tag, renewed = tag, time.monotonic()

    def _lose(self, why: str) -> None:
        with self._ending:
            if self._stop.is_set():
                return
            self.lost = self._lost_because(why)
            self._stop.set()
            self._on_lost()

    def _lost_because(self, why: str) -> str:
        return f"lost the output's lock {self.url}: {why}; this run published nothing"

    def check(self) -> None:
        """Confirm the lock is still this run's (before a commit).

        Raises:
            PackcliError: the heartbeat lost it, or the lock object names another run's token (or is gone).
        """
        if self.lost is None and self._named_token() != self.token:
            self.lost = self._lost_because("another run took it over")
        if self.lost is not None:
            raise PackcliError(self.lost)

    def _named_token(self) -> str | None:
        """The token the lock object names now; None when it names none or is gone."""
        try:
            content = json.loads(read_object(self.url))
        except ValueError:
            return None
        except PackcliError:
            if exists(self.url):
                raise
            return None
        token = content.get("token") if isinstance(content, dict) else None
        return token if isinstance(token, str) else None

    def release(self) -> None:
        """Stop the heartbeat and remove the lock object, only while it is the version this run last wrote."""
        if self._beat is None:
            return
        with self._ending:
            self._stop.set()
        self._beat.join()
        self._beat = None
        if self.lost is None:
            remove_object_if(self.url, self._tag)


def _is_holder(content: Any) -> bool:
    """Whether a lock object's body names a holder and its heartbeat, as :meth:`ObjectLock._body` writes (or an
    earlier packcli: a host and pid)."""
    return (
        isinstance(content, dict)
        and (isinstance(content.get("token"), str) or isinstance(content.get("host"), str))
        and isinstance(content.get("heartbeat"), (int, float))
        and not isinstance(content.get("heartbeat"), bool)
    )
