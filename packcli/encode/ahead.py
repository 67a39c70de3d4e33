"""Read ahead: run an iterator in a thread of its own and hand its items over, in order, through a bounded queue.

Tokenizing a corpus has three kinds of work: reading and parsing the records (Python, pyarrow), encoding (the
tokenizer, which releases the GIL) and storing the ids (numpy). Run in one thread, reading and storing take turns
while the encoding thread waits; with reading in a thread of its own, parsing the next batches overlaps with both,
so a pack keeps two cores busy. The queue holds at most ``depth`` items, so memory stays bounded whatever the
corpus' size.

The thread is owned: an exception it raises (a bad record, a damaged file) is raised again in the consumer as it
was, naming its file and line, once the items before it are taken; and leaving the consumer's ``with`` block (the
end of the run, an error in the consumer, Ctrl-C) stops the thread and waits for it, so no thread outlives the run.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["ReadAhead"]

_Item = TypeVar("_Item")


class _End:
    """The producer's last entry: its iterator is exhausted, or ``error`` ended it."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class ReadAhead(Generic[_Item]):
    """The items of ``produce()``, made in a thread named ``name`` at most ``depth`` items ahead of the consumer.

    Use as a context manager and iterate it once, in the thread that entered it.
    """

    def __init__(self, produce: Callable[[], Iterator[_Item]], depth: int, name: str) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self._produce = produce
        self._depth = depth
        self._entries: deque[_Item | _End] = deque()
        self._changed = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> ReadAhead[_Item]:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the producer (after the step it is in: a read, a parse) and wait for its thread to end."""
        with self._changed:
            self._stopped = True
            self._entries.clear()
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def __iter__(self) -> Iterator[_Item]:
        while True:
            with self._changed:
                while not self._entries:
                    self._changed.wait()
                entry = self._entries.popleft()
                self._changed.notify_all()
            if isinstance(entry, _End):
                if entry.error is not None:
                    raise entry.error
                return
            yield entry

    def _run(self) -> None:
        items = self._produce()
        try:
            for item in items:
                if not self._put(item):
                    return
            self._put(_End())
        except BaseException as exc:  # handed to the consumer, which raises it
            self._put(_End(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a generator's cleanup (its open files) runs here, in its own thread

    def _put(self, entry: _Item | _End) -> bool:
        """Queue ``entry`` once there is room; False when the consumer has stopped the producer."""
        with self._changed:
            while len(self._entries) >= self._depth and not self._stopped:
                self._changed.wait()
            if self._stopped:
                return False
            self._entries.append(entry)
            self._changed.notify_all()
            return True
