"""``ObjectLock``: one writer per output URL, through a lock object naming its run by a token, alive by its heartbeat.

Invariants: the lock is created only if absent (``If-None-Match: *``); its body names the holder and its heartbeat,
renewed every tenth of :func:`stale_seconds` only while the object is the version this run last wrote (``If-Match``).
It is stale once its heartbeat (for a body naming none: its modification time) is older than :func:`stale_seconds`,
and taken over only by a conditional write on the version read stale: of the runs that read it so, one gets it. A
failed renewal is retried at the next beat; a lock not renewed in time or taken by another is lost (``on_lost`` once,
:meth:`ObjectLock.check` raises). Release removes it only while it is this run's version.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from packcli.errors import PackcliError
from packcli.storage.objects import create_object, object_info, remove_object_if, replace_object
from packcli.storage.urls import UrlPath

__all__ = ["STALE_S", "STALE_VARIABLE", "ObjectLock", "stale_seconds"]

STALE_S = 600.0  # how long a lock lives without a heartbeat, unless STALE_VARIABLE says otherwise
STALE_VARIABLE = "PACKCLI_LOCK_STALE_S"
_BEATS = 10  # heartbeats a lock gets within its stale time: as many chances to renew it
_ATTEMPTS = 5  # looks at a lock that changes while a run tries to take it
_LOST = "lost the output's lock {url}: {why}; this run published nothing"


def stale_seconds() -> float:
    """How long an output URL's lock lives without a heartbeat: ``PACKCLI_LOCK_STALE_S`` seconds (PackcliError if not
    a positive number), else 600."""
    named = os.environ.get(STALE_VARIABLE)
    if not named:
        return STALE_S
    seconds = 0.0
    with suppress(ValueError):
        seconds = float(named)
    if not 0 < seconds < float("inf"):
        raise PackcliError(f"{STALE_VARIABLE}={named} is not a positive number of seconds; unset it for 600")
    return seconds


class ObjectLock:
    """The lock object at ``url``, naming the holder's ``run``; ``warn`` is told of a failed renewal that is retried,
    ``on_lost`` called once (from the heartbeat's thread) when the lock is lost."""

    def __init__(
        self,
        url: str,
        run: str,
        warn: Callable[[str], None] = lambda message: None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.url = url
        self._object = UrlPath(url)
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
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "run": self.run, "token": self.token}
        return json.dumps({**holder, "heartbeat": time.time()}, sort_keys=True).encode()

    def acquire(self) -> bool:
        """Take the lock; False when a live run holds it (``seen`` says who).

        Raises:
            PackcliError: the store takes no conditional write packcli makes, or refused a request.
        """
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
        """The lock's version tag and its live holder (its body; for one that cannot be read, ``unreadable`` and its
        ``age``), None for a stale one; None when no lock is there or it changed while read. The version is read
        before the body, so a takeover on a stale body cannot write over a newer, live lock."""
        try:
            facts = object_info(self.url)
        except PackcliError:
            if not self._object.exists():
                return None  # released meanwhile
            return "", {"unreadable": True, "age": 0.0}  # there, but not even its age can be read: held
        try:
            content = json.loads(self._object.read_bytes())
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
            return not self._object.exists()

    def _heartbeat(self) -> None:
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
            if not self._stop.is_set():
                self.lost = _LOST.format(url=self.url, why=why)
                self._stop.set()
                self._on_lost()

    def check(self) -> None:
        """Raise a PackcliError unless the lock is still this run's (before a commit): lost, or naming another token."""
        if self.lost is None and self._named_token() != self.token:
            self.lost = _LOST.format(url=self.url, why="another run took it over")
        if self.lost is not None:
            raise PackcliError(self.lost)

    def _named_token(self) -> str | None:
        """The token the lock object names now; None when it names none or is gone."""
        try:
            content = json.loads(self._object.read_bytes())
        except ValueError:
            return None
        except PackcliError:
            if self._object.exists():
                raise
            return None
        token = content.get("token") if isinstance(content, dict) else None
        return token if isinstance(token, str) else None

    def release(self) -> None:
        """Stop the heartbeat and remove the lock, only while it is the version this run last wrote."""
        if self._beat is None:
            return
        with self._ending:
            self._stop.set()
        self._beat.join()
        self._beat = None
        if self.lost is None:
            remove_object_if(self.url, self._tag)


def _is_holder(content: Any) -> bool:
    """Whether a lock's body names a holder (a token; from an earlier packcli, a host) and its heartbeat."""
    return (
        isinstance(content, dict)
        and (isinstance(content.get("token"), str) or isinstance(content.get("host"), str))
        and type(content.get("heartbeat")) in (int, float)  # not a bool
    )
