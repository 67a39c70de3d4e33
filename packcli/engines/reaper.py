"""Nothing an engine starts outlives its run: a watcher process ends the run's descendants once the run's process is
gone, also after ``kill -9``, which no handler in the run can catch (an OOM killer, a scheduler's timeout).

The watcher is a small process of its own session (so a signal to the run's process group leaves it alive to clean
up). It keeps a snapshot of the run's descendants (worker processes, a local Ray's daemons and the agents those
start) and reads a pipe from the run: "done" ends it quietly; the pipe closing without "done" means the run died,
and every process of the last snapshot that is still the same process (same start time) is killed. Linux only
(it reads /proc); elsewhere :func:`reaping_descendants` does nothing.

Run as ``python -m packcli.engines.reaper PID``: it imports only the standard library and packcli.util.signals.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from packcli.util.signals import signals_held

__all__ = ["die_with_parent", "ignoring_ctrl_c", "reaping_descendants"]

SNAPSHOT_INTERVAL_S = 0.25
DONE = b"done\n"


@contextmanager
def reaping_descendants() -> Iterator[None]:
    """While in the block, a watcher kills this process's descendants if this process dies; leaving the block
    (normally or by an exception) ends the watcher without killing anything: the engine stops its own workers."""
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        yield
        return
    watcher = subprocess.Popen(
        [sys.executable, "-m", "packcli.engines.reaper", str(os.getpid())],
        stdin=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    assert watcher.stdin is not None
    try:
        yield
    finally:
        try:
            watcher.stdin.write(DONE)
            watcher.stdin.close()
        except OSError:  # the watcher is gone already: nothing left to tell it
            pass
        watcher.wait()


@contextmanager
def ignoring_ctrl_c() -> Iterator[None]:
    """Block SIGINT while starting worker processes: they inherit the signal mask, so a Ctrl-C to the terminal's
    whole process group never reaches them (no tracebacks from their imports; the engine stops them itself). This
    process still gets it, through another thread, but its handler holds it until the block ends, so a worker is
    never left half started (its start data unsent)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with signals_held():
            yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def die_with_parent(parent: int) -> None:
    """In a worker process: end it once ``parent``, the process that started it, is gone (it is no longer this
    process's parent), checked by a daemon thread every SNAPSHOT_INTERVAL_S; a second guard beside the reaper,
    which its own death would disarm. ``parent`` is given, not read here: a worker whose driver died while it
    started has another parent already, and ends at once."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(SNAPSHOT_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="packcli-parent-watch", daemon=True).start()


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), which tells it from a later process with the same pid;
    None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def _descendants(pid: int) -> dict[int, str]:
    """Every living process below ``pid``, with its start time."""
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                pids = [int(child) for child in children.read_text().split()]
            except OSError:
                continue
            for child in pids:
                started = _start_time(child)
                if started is not None and child not in found:
                    found[child] = started
                    frontier.append(child)
    return found


def _watch(run: int) -> None:
    """Snapshot ``run``'s descendants until the pipe on stdin says done (return) or closes (kill them)."""
    snapshot: dict[int, str] = {}
    while True:
        readable, _, _ = select.select([sys.stdin.buffer], [], [], SNAPSHOT_INTERVAL_S)
        if readable:
            if os.read(sys.stdin.fileno(), len(DONE)).startswith(DONE[:1]):
                return
            break  # end of file: the run is gone without saying done
        if _start_time(run) is None:
            break
        snapshot = {pid: started for pid, started in _descendants(run).items() if pid != os.getpid()}
    for pid, started in snapshot.items():
        if _start_time(pid) == started:
            with suppress(OSError):  # gone meanwhile
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the run is the run's to handle
    _watch(int(sys.argv[1]))
